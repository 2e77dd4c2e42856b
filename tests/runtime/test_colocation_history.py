"""What the runtime learns from co-located trials (``oversubscription: auto``): profiles taken
alone are kept, shared ones become co-location measurements in the job history, and the next
study on that architecture starts from them; loader workers count as the trial's cores."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hypersack.core.oversubscription import Colocation
from hypersack.core.spec import StudySpec
from hypersack.core.trial import TrialProfiled, TrialRecord, TrialState
from hypersack.runtime.devices.slots import default_slots
from hypersack.runtime.devices.machine import prepare_machine
from hypersack.runtime.devices.job_history import ProfileStore, profile_key
from hypersack.runtime.devices.profiler import Profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))


def _spec(**extra) -> StudySpec:
    return StudySpec.from_dict({"name": "s", "objective": {"metric": "score", "mode": "max"},
                                "space": {"width": {"type": "categorical", "choices": [16]},
                                          "x": {"type": "float", "low": 0.0, "high": 1.0}},
                                "budget": {"trials": 4}, **extra})


def _profiled(trial_id: int, seconds: float, util: float = 40.0) -> TrialProfiled:
    profile = Profile(time_per_iter_s=seconds, peak_memory_gb=1.0, gpu_util_percent=util,
                      data_time_fraction=0.1, iters_measured=3, device_arch="cpu")
    return TrialProfiled(trial_id, profile.to_dict())


def _running(trial_id: int, device: str = "cpu0", **config) -> TrialRecord:
    return TrialRecord(trial_id, {"width": 16, "x": 0.1 * trial_id, **config}, seed=0,
                       state=TrialState.RUNNING, devices=[("local", device)])


def test_a_shared_profile_is_a_colocation_measurement_not_the_jobs_demand(tmp_path):
    key = profile_key("t", {"width": 16}, ["width"], "cpu")
    with prepare_machine(_spec(), tmp_path / "runs", tmp_path / "s.db", trainable_name="t",
                         slots=default_slots(2, gpus=[])) as machine:
        (observe,) = machine.observers
        alone = _running(0)
        machine.demand(alone)
        observe(_profiled(0, 0.1))                                  # alone: the job's profile
        alone.state = TrialState.COMPLETE
        pair = [_running(1), _running(2)]
        assert [machine.demand(r).demand("cpu").compute for r in pair] == [40.0, 40.0]
        observe(_profiled(1, 0.3, util=95.0))                       # beside trial 2
        elsewhere = _running(3, device="cpu1")
        machine.demand(elsewhere)
        observe(_profiled(3, 0.5))                                  # alone on its own device
    with ProfileStore(tmp_path / "s.db") as store:
        assert store.colocations("cpu") == [Colocation(80.0, pytest.approx(3.0))]
        assert store.corunners(key) == 0
        assert store.get(key).time_per_iter_s == 0.5               # alone again: replaced
        assert store.get(key).gpu_util_percent == 40.0             # never the shared 95%


def test_without_an_alone_profile_nothing_is_measured_and_the_shared_one_is_kept(tmp_path):
    key = profile_key("t", {"width": 16}, ["width"], "cpu")
    with prepare_machine(_spec(), tmp_path / "runs", tmp_path / "s.db", trainable_name="t",
                         slots=default_slots(2, gpus=[])) as machine:
        (observe,) = machine.observers
        pair = [_running(1), _running(2)]
        for r in pair:
            machine.demand(r)
        observe(_profiled(1, 0.3))
    with ProfileStore(tmp_path / "s.db") as store:
        assert store.colocations("cpu") == []
        assert store.corunners(key) == 1 and store.get(key).time_per_iter_s == 0.3


def test_colocations_are_kept_per_architecture_and_signature(tmp_path):
    with ProfileStore(tmp_path / "h.db") as store:
        store.record_colocation("H100", "a", Colocation(200, 1.0))
        store.record_colocation("H100", "b", Colocation(300, 1.5))
        store.record_colocation("A100", "a", Colocation(100, 1.0))
        assert store.colocations("H100") == [Colocation(200, 1.0), Colocation(300, 1.5)]
        assert store.colocations("H100", ["b"]) == [Colocation(300, 1.5)]
        assert store.colocations("H100", ["zzz"]) == store.colocations("H100")
        for i in range(70):
            store.record_colocation("A100", "a", Colocation(100 + i, 1.0))
        assert len(store.colocations("A100")) == 64
        assert store.colocations("A100")[-1] == Colocation(169, 1.0)


@pytest.mark.parametrize("mode, ratio", [(None, 2.0), ("auto", 2.0), ("paper", 1.0), (3, 3.0)])
def test_the_next_study_starts_from_what_the_history_learned(tmp_path, mode, ratio):
    with ProfileStore(tmp_path / "s.db") as store:
        store.record_colocation("gpu", "sig", Colocation(320, 1.6))      # capacity 200%
    extra = {} if mode is None else {"oversubscription": mode}
    with prepare_machine(_spec(**extra), tmp_path / "runs", tmp_path / "s.db",
                         trainable_name="t", slots=default_slots(1, gpus=[0])) as machine:
        assert {g.oversubscription for _, g in machine.cluster.gpus()} == {ratio}
        if ratio == 2.0:
            assert "capacity 200%" in machine.ratios["gpu"].reason
        else:
            assert machine.ratios == {}


def test_loader_workers_count_as_the_trials_cores(tmp_path):
    spec = _spec(resources={"cpus": 2})
    with prepare_machine(spec, tmp_path / "runs", tmp_path / "s.db", trainable_name="t",
                         slots=default_slots(2, gpus=[])) as machine:
        assert machine.demand(_running(0)).cpus == 2                              # declared
        assert machine.demand(_running(1, data="pipeline")).cpus == 3             # 1 + 2 loaders
        assert machine.demand(_running(2, data="pipeline", cpus=6)).cpus == 6
        assert machine.demand(_running(3, data="pipeline", cpus=1)).cpus == 2    # declared wins
        assert machine.demand(_running(4, data="nonsense")).cpus == 2            # fails itself


@pytest.mark.parametrize("util, mode", [(95.0, "exclusive"), (40.0, "co-located")])
def test_execution_auto_runs_a_trial_that_fills_the_gpu_alone(tmp_path, util, mode):
    spec = _spec(execution="auto", oversubscription=2)
    with prepare_machine(spec, tmp_path / "runs", tmp_path / "s.db", trainable_name="t",
                         slots=default_slots(2, gpus=[])) as machine:
        (observe,) = machine.observers
        first = _running(0)
        assert machine.demand(first).compute == 100.0                 # declared, not profiled
        (before,) = machine.execution.values()
        assert before.mode == "co-located" and "not profiled" in before.reason
        observe(_profiled(0, 0.1, util=util))
        job = machine.demand(_running(1))
        (after,) = machine.execution.values()
        assert after.mode == mode
        capacity = 100.0 * 2          # the whole device: 100% x the ratio 2
        expected = capacity if mode == "exclusive" else util
        assert job.demand("cpu").compute == expected


def test_execution_separate_keeps_the_profiled_demand(tmp_path):
    with prepare_machine(_spec(), tmp_path / "runs", tmp_path / "s.db", trainable_name="t",
                         slots=default_slots(2, gpus=[])) as machine:
        (observe,) = machine.observers
        machine.demand(_running(0))
        observe(_profiled(0, 0.1, util=95.0))
        assert machine.demand(_running(1)).demand("cpu").compute == 95.0
        assert machine.execution == {}


def test_a_profile_of_the_same_model_does_not_hide_its_running_siblings(tmp_path):
    """Three trials of one model share a device; the first profile refreshes the model's
    demand, and the next profile must still see the other two as co-runners (not as alone)."""
    key = profile_key("t", {"width": 16}, ["width"], "cpu")
    with prepare_machine(_spec(), tmp_path / "runs", tmp_path / "s.db", trainable_name="t",
                         slots=default_slots(2, gpus=[])) as machine:
        (observe,) = machine.observers
        alone = _running(0, device="cpu1")
        machine.demand(alone)
        observe(_profiled(0, 0.1))
        alone.state = TrialState.COMPLETE
        trio = [_running(i) for i in (1, 2, 3)]
        for r in trio:
            machine.demand(r)
        observe(_profiled(1, 0.3))
        observe(_profiled(2, 0.3))
    with ProfileStore(tmp_path / "s.db") as store:
        assert store.colocations("cpu") == [Colocation(120.0, pytest.approx(3.0))] * 2
        assert store.get(key).time_per_iter_s == 0.1 and store.corunners(key) == 0


def _gpu_profiled(trial_id: int, seconds: float, util: float = 40.0) -> TrialProfiled:
    profile = Profile(time_per_iter_s=seconds, peak_memory_gb=1.0, gpu_util_percent=util,
                      data_time_fraction=0.1, iters_measured=3, device_arch="gpu")
    return TrialProfiled(trial_id, profile.to_dict())


def test_auto_learns_during_the_run_and_rescales_later_demands(tmp_path):
    """Start from the prior (no history: the paper's 2 for an unknown GPU); four trials of 40%
    each 1.6x slower say the capacity is 160 / 1.6 = 100%: r = 1, so demands placed from then
    on are scaled by 2 / 1 on the inventory built at r = 2 (that run keeps its inventory)."""
    with prepare_machine(_spec(oversubscription="auto"), tmp_path / "runs", tmp_path / "s.db",
                         trainable_name="t", slots=default_slots(1, gpus=[0])) as machine:
        (observe,) = machine.observers
        assert machine.ratios["gpu"].ratio == 2.0
        first = _running(0, device="gpu0")
        machine.demand(first)
        observe(_gpu_profiled(0, 0.1))                                 # alone: 40%
        first.state = TrialState.COMPLETE
        four = [_running(i, device="gpu0") for i in (1, 2, 3, 4)]
        assert [machine.demand(r).demand("gpu").compute for r in four] == [40.0] * 4
        observe(_gpu_profiled(1, 0.16))
        assert machine.ratios["gpu"].ratio == pytest.approx(1.0)
        assert "capacity 100%" in machine.ratios["gpu"].reason
        assert machine.demand(_running(5, device="gpu0")).demand("gpu").compute == \
            pytest.approx(80.0)
        assert machine.demand(four[1]).demand("gpu").compute == pytest.approx(80.0)


def test_fixed_ratios_do_not_learn_during_the_run(tmp_path):
    with prepare_machine(_spec(oversubscription=2), tmp_path / "runs", tmp_path / "s.db",
                         trainable_name="t", slots=default_slots(1, gpus=[0])) as machine:
        (observe,) = machine.observers
        first = _running(0, device="gpu0")
        machine.demand(first)
        observe(_gpu_profiled(0, 0.1))
        first.state = TrialState.COMPLETE
        four = [_running(i, device="gpu0") for i in (1, 2, 3, 4)]
        for r in four:
            machine.demand(r)
        observe(_gpu_profiled(1, 0.16))
        assert machine.demand(_running(5, device="gpu0")).demand("gpu").compute == 40.0
    with ProfileStore(tmp_path / "s.db") as store:
        assert len(store.colocations("gpu")) == 1          # measured all the same


def test_siblings_stay_co_runners_after_their_models_first_profile(tmp_path):
    """No alone profile yet: the first shared profile is stored (and refreshes the model's
    demand); a sibling's profile after it must still count the others, not pass as alone."""
    key = profile_key("t", {"width": 16}, ["width"], "cpu")
    with prepare_machine(_spec(), tmp_path / "runs", tmp_path / "s.db", trainable_name="t",
                         slots=default_slots(2, gpus=[])) as machine:
        (observe,) = machine.observers
        for r in [_running(i) for i in (1, 2, 3)]:
            machine.demand(r)
        observe(_profiled(1, 0.3))
        observe(_profiled(2, 0.3))
    with ProfileStore(tmp_path / "s.db") as store:
        assert store.corunners(key) == 2


def test_decisions_are_kept_with_the_study_and_reach_the_report(tmp_path):
    """What auto chose and why, one line each, in the study's file; the report's payload and
    page carry them (``extra.decisions``)."""
    from report_store import fill_store

    from hypersack.report.data import from_storage, payload
    from hypersack.runtime.devices.job_history import read_decisions
    from hypersack.runtime.storage.sqlite import Storage
    db = tmp_path / "s.db"
    fill_store(db, name="s")
    with ProfileStore(db) as store:
        store.record_colocation("gpu", "sig", Colocation(320, 1.6))
    with prepare_machine(_spec(execution="auto"), tmp_path / "runs", db, trainable_name="t",
                         slots=default_slots(1, gpus=[0])) as machine:
        (observe,) = machine.observers
        machine.demand(_running(0, device="gpu0"))
        observe(_gpu_profiled(0, 0.1, util=95.0))
        machine.demand(_running(1, device="gpu0"))
    with Storage(db, readonly=True) as store:
        noted = read_decisions(store.connection, "s")
        assert read_decisions(store.connection, "other") == []
        p = payload(from_storage(store, "s"))
    kinds = {(d["kind"], d["subject"]): d["reason"] for d in noted}
    assert "capacity 200%" in kinds[("oversubscription", "gpu")]
    assert kinds[("execution", "batch_size=None, width=16")].endswith("-> exclusive")
    assert "fills the GPU alone" in kinds[("execution", "batch_size=None, width=16")]
    assert p["extra"]["decisions"] == noted


def test_a_ray_run_places_on_the_inventory_auto_scaled(tmp_path, monkeypatch):
    """On Ray, ``oversubscription: auto`` scales the inventory the agents found (the driver's
    half, ``prepare_driver``) and the controller places on that scaled inventory, not on the
    executor's r = 1 (a bug found in stop 32: the Ray path handed over the unscaled cluster)."""
    import contextlib
    from types import SimpleNamespace

    import hypersack
    import hypersack.study as study_module
    from hypersack.placement import GPU, Cluster, Node
    from hypersack.runtime.executors import ray as ray_module
    found = Cluster([Node("n0", 16, (GPU("gpu0", "H100", 80.0),))])

    @contextlib.contextmanager
    def agents(*args, **kwargs):
        yield SimpleNamespace(inventory=lambda: found)
    handed: dict = {}

    def assemble(spec, algorithm, executor, store, row, **kwargs):
        handed.update(kwargs)
        return "assembly"
    monkeypatch.setattr(ray_module, "ray_executor", agents)
    monkeypatch.setattr(study_module, "assemble", assemble)
    study = hypersack.Study(name="ray-auto", trainable="tests.trainables:quadratic",
                            space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
                            objective=("loss", "min"), n_trials=1, oversubscription="auto")
    with study._assembled_on_ray(tmp_path / "s.db", None, SimpleNamespace(key="t"), None, None,
                                 False, tmp_path, lambda i: tmp_path, "none", None) as (done, _):
        assert done == "assembly"
    (_, gpu), = handed["inventory"].gpus()
    assert gpu.oversubscription == 2.5                # the paper's H100 ratio: no history yet
    assert found.nodes[0].gpus[0].oversubscription == 1.0
