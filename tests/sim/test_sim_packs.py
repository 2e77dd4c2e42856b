"""Fused packs, timeouts and out-of-memory retries in the simulator: the executor seats members
where the controller's Launch says (``core.packs.PackBook`` decides, with the sim's pack policy),
and the fused performance model."""
from __future__ import annotations

import pytest

from hypersack.placement import GPU, Cluster, Node
from hypersack.core.packs import PackBook
from hypersack.core.trial import Launch, PackCapped, ResultReported, Stop
from hypersack.errors import ConfigError
from hypersack.sim.curves import CurveParams, ParametricCurves
from hypersack.sim.executor import SimExecutor
from hypersack.sim.packs import SimFusion, SimPackPolicy
from hypersack.sim.perf import FUSED_PRESETS, FusedModel, PerfModel, PerfParams, ProfileTable, WorkloadKeys
from hypersack.sim.run import simulate
from hypersack.sim.scenario import scenario_from_dict

from executor_helpers import ack_reports
from sim_helpers import drain

SPEEDUP = [[1, 0.5], [2, 1.5], [4, 2.0]]


def _perf(fusion: SimFusion | None = None, **params) -> PerfModel:
    table = ProfileTable.from_list([
        {"arch": "A100", "batch_size": 64, "step_time_s": 10, "utilization": 60, "memory_gb": 4, "cpus": 2},
        {"arch": "A100", "batch_size": 128, "step_time_s": 8, "utilization": 90, "memory_gb": 30, "cpus": 2}])
    defaults = {"startup_s": 2.0, "checkpoint_s": 0.0, "restore_s": 1.0, "interference": 0.1,
                "saturation": {"A100": 1.0}, "fused": SPEEDUP}
    return PerfModel(table, WorkloadKeys(batch_size_key="bs"), PerfParams.from_dict({**defaults, **params}),
                     ["A100"], steps_for=lambda c: 3, fusion=fusion)


def _executor(fusion: SimFusion | None = SimFusion("fused", 8), gpus: int = 2, **kw) -> SimExecutor:
    cluster = Cluster([Node("n0", 16, tuple(GPU(str(i), "A100", 40, oversubscription=2) for i in range(gpus)))])
    return SimExecutor(cluster, _perf(fusion), ParametricCurves("accuracy", CurveParams(), noise=0.01),
                       steps_for=lambda c: 3, **kw)


def _launch(trial_id: int, gpu: str | None = "0", bs: int = 64, pack: int | None = 1,
            seat: int | None = None, attempt: int = 1):
    """A Launch as the controller makes one: ``pack`` and ``seat`` (default: the trial id) say
    where a member runs; ``pack`` None: a plain trial."""
    devices = (("n0", gpu),) if gpu is not None else ()
    if pack is not None and seat is None:
        seat = trial_id
    return Launch(trial_id, {"bs": bs, "lr": 0.01}, seed=trial_id, attempt=attempt, devices=devices,
                  pack=pack, seat=seat)


def _reports(events, trial_id):
    return [t for t, e in events if isinstance(e, ResultReported) and e.trial_id == trial_id]


# ---- the fused model ------------------------------------------------------------------------

def test_the_fused_model_interpolates_the_measured_speedups_and_holds_the_last():
    model = FusedModel(((1, 0.5), (3, 1.5), (5, 2.5)))
    assert [model.speedup(k) for k in (1, 2, 3, 4, 5, 9)] == [0.5, 1.0, 1.5, 2.0, 2.5, 2.5]
    assert model.step_time(10.0, 3) == pytest.approx(10.0 * 3 / 1.5)


def test_the_default_fused_model_is_the_measured_mlp_table():
    mlp = FusedModel()
    assert mlp.points == FUSED_PRESETS["mlp_cpu"]
    assert mlp.speedup(1) == pytest.approx(637 / 1821)
    assert mlp.speedup(32) == pytest.approx(6829 / 1821)
    assert FusedModel.of("cnn_cpu").speedup(64) == pytest.approx(483 / 426)


@pytest.mark.parametrize("bad", ["gpu", [], [[2, 1.0]], [[1, 1.0], [1, 2.0]], [[1, 0]], [[1, 1.0, 3]]])
def test_a_bad_fused_table_is_a_clear_error(bad):
    with pytest.raises(ConfigError, match="perf.fused"):
        PerfParams.from_dict({"fused": bad})


# ---- packs on the executor: it obeys the Launch -----------------------------------------------

def test_members_on_one_device_share_one_pack_and_step_at_speedup_over_k():
    ex = _executor()
    ex.submit(_launch(0))
    ex.submit(_launch(1))
    assert [p.members for p in ex.packs.packs] == [{0: 0, 1: 1}]
    events = drain(ex)
    # one process of demand min(100, 1.5/2 * 120) = 90 <= 100: f_gpu 1; members at 1.5 / 2
    assert _reports(events, 0) == pytest.approx([12 / 0.75, 12 / 0.75 + 10 / 0.75, 12 / 0.75 + 20 / 0.75])
    assert _reports(events, 1) == _reports(events, 0)


def test_the_same_launches_unfused_share_the_device_by_the_sharing_formula():
    ex = _executor(fusion=None)
    ex.submit(_launch(0, pack=None))
    ex.submit(_launch(1, pack=None))
    assert ex.packs is None
    events = drain(ex)
    assert _reports(events, 0)[0] == pytest.approx(12 / ((100 / 120) / 1.1))


def test_packs_count_once_among_the_processes_of_a_device():
    ex = _executor()
    ex.submit(_launch(0, pack=1))
    ex.submit(_launch(1, pack=2))            # another pack named: another process
    assert len(ex.packs.packs) == 2
    events = drain(ex)
    # two packs of 1: each demands 0.5 * 60 = 30; f_gpu = 1 / (1 + 0.1); members at 0.5
    assert _reports(events, 0)[0] == pytest.approx(12 / (0.5 / 1.1))


def test_the_executor_seats_members_where_their_launches_say_and_decides_nothing():
    ex = _executor(fusion=SimFusion("fused", 2))
    for t, (pack, seat) in enumerate([(5, 1), (5, 0), (5, 7), (9, 0)]):
        ex.submit(_launch(t, pack=pack, seat=seat))     # pack 5 past max_members: obeyed
    assert [(p.pack_id, p.device, p.members) for p in ex.packs.packs] == [
        (5, ("n0", "0"), {0: 1, 1: 0, 2: 7}), (9, ("n0", "0"), {3: 0})]
    assert ex.packs.started == 2 and ex.packs.largest == 3


def test_a_member_leaving_reprices_the_members_left():
    ex = _executor()
    ex.submit(_launch(0))
    ex.submit(_launch(1))
    out = drain(ex, until=lambda ev: any(isinstance(e, ResultReported) for _, e in ev))
    t1 = out[-1][0]
    ex.submit(Stop(1, "pruned"))
    ack_reports(ex, [e for _, e in out])
    rest = drain(ex)
    assert _reports(rest, 0)[0] == pytest.approx(t1 + 10 / 0.5)     # a pack of 1 now


def test_an_emptied_pack_takes_a_launch_of_the_same_turn_and_ends_at_the_next_poll():
    ex = _executor()
    ex.submit(_launch(0))
    drain(ex, until=lambda ev: any(isinstance(e, ResultReported) for _, e in ev))
    ex.submit(Stop(0, "paused"))                  # ends at once (waiting for its ack)
    ex.submit(_launch(1, seat=0))                 # the same turn: joins the empty pack
    assert [(p.pack_id, p.members) for p in ex.packs.packs] == [(1, {1: 0})]
    ex.submit(Stop(1, "paused"))                  # mid-step: ends at its next report
    drain(ex)
    assert ex.running() == 0 and len(ex.packs.packs) == 1     # empty, until the next poll
    assert ex.poll() == [PackCapped(1, 0)]        # ended: the controller's book drops it
    assert ex.packs.packs == [] and ex.packs.on == {}


def test_an_unplaced_member_runs_where_its_pack_runs_else_on_the_first_idle_device():
    ex = _executor()
    ex.submit(_launch(0, gpu="1"))
    ex.submit(_launch(1, gpu=None))               # pack 1 runs on device 1
    assert [(p.device, p.members) for p in ex.packs.packs] == [(("n0", "1"), {0: 0, 1: 1})]
    ex.submit(_launch(2, gpu=None, pack=2))       # pack 2 runs nowhere: the first idle device
    assert ex.packs.packs[-1].device == ("n0", "0")


def test_auto_and_separate_modes_follow_the_core_rule():
    assert SimFusion("auto").fuses({"bs": 64}) and SimFusion("fused").fuses({})
    assert not SimFusion("separate").fuses({"bs": 64})
    assert not SimFusion("fused").fuses({"bs": 64}, pack_size=1)
    with pytest.raises(ConfigError, match="execution"):
        SimFusion("sometimes")


def test_auto_decides_from_the_scenarios_speeds_as_a_local_study_does():
    """``execution: auto`` in the simulator is ``core.packs.choose_fusion`` over the scenario's
    fused model at the planned width (was: every trial fused): fused where a pack of 8 makes
    3x a model's steps alone, separate where it makes 1.05x (below the 1.1 margin)."""
    fast = SimFusion("auto", 8)
    choice = fast.decide(FusedModel(((1, 0.5), (8, 3.0))), trials=32)
    assert fast.fuses({"bs": 64}) and choice.fused and choice.probe.width == 8
    slow = SimFusion("auto", 8)
    assert not slow.decide(FusedModel(((1, 0.5), (8, 1.05))), trials=32).fused
    assert not slow.fuses({"bs": 64}) and "-> separate" in slow.choice.reason
    narrow = SimFusion("auto", 8)
    narrow.decide(FusedModel(((1, 0.5), (4, 1.05), (8, 3.0))), trials=4)   # width 4: 1.05x
    assert not narrow.fuses({"bs": 64})


def test_a_launch_without_a_pack_runs_outside_any_pack():
    ex = _executor()
    ex.submit(_launch(0, pack=None))
    ex.submit(_launch(1, pack=4, seat=0))
    assert [p.members for p in ex.packs.packs] == [{1: 0}]


# ---- packs in the controller: the sim's pack policy ---------------------------------------------

def _book(max_members: int = 8, gpus: int = 2, memory_gb: float = 40) -> PackBook:
    cluster = Cluster([Node("n0", 16, tuple(GPU(str(i), "A100", memory_gb) for i in range(gpus)))])
    ex = SimExecutor(cluster, _perf(SimFusion("fused", max_members)),
                     ParametricCurves("accuracy", CurveParams()), steps_for=lambda c: 3)
    return PackBook(SimPackPolicy(SimFusion("fused", max_members), ex.perf, ex.gpu))


def test_a_new_pack_is_capped_by_the_memory_free_when_it_starts():
    book = _book()
    book.join(0, {"bs": 128}, None, ("n0", "0"), [])   # 30 GB members on 40 GB: floor(36 / 30)
    assert book.packs[0].cap == 1
    book.join(1, {"bs": 64}, None, ("n0", "1"), [])    # 4 GB members: floor(36 / 4) = 9 > 8
    assert book.packs[1].cap == 8
    book.join(2, {"bs": 64}, None, ("n0", "0"), [{"bs": 128}])   # 10 GB left: floor(9 / 4)
    assert book.packs[2].cap == 2
    assert _book(16, memory_gb=20).join(0, {"bs": 64}, None, ("n0", "0"), []).new
    big = _book(16, memory_gb=20)
    big.join(0, {"bs": 64}, None, ("n0", "0"), [])
    assert big.packs[0].cap == 4                       # floor(0.9 * 20 / 4)


def test_a_full_pack_sends_the_next_member_to_a_new_pack_on_the_device():
    book = _book(max_members=2)
    seats = [book.join(t, {"bs": 64}, None, ("n0", "0"), []) for t in range(3)]
    assert [(s.pack, s.seat) for s in seats] == [(1, 0), (1, 1), (2, 0)]


def test_a_simulated_study_launches_members_as_the_controller_seats_them(monkeypatch):
    d = _mini(execution="fused", pack={"max_members": 3}, budget={"trials": 8})
    d["perf"]["fused"] = SPEEDUP
    seen = []
    submit = SimExecutor.submit

    def spy(self, command):
        submit(self, command)
        if isinstance(command, Launch):
            pack = self.packs.of.get(command.trial_id)
            seen.append((command.pack, command.seat, pack.pack_id if pack else None,
                         pack.members.get(command.trial_id) if pack else None))
    monkeypatch.setattr(SimExecutor, "submit", spy)
    result = simulate(scenario_from_dict(d))
    assert seen and all(c[0] is not None and c[:2] == c[2:] for c in seen)
    assert result.largest_pack == 3


# ---- timeouts -------------------------------------------------------------------------------

def test_the_clock_stops_at_a_trials_timeout_deadline_with_no_event():
    ex = _executor(fusion=None, trial_timeout_s=5.0)
    ex.submit(_launch(0, pack=None))
    ex.poll()                                     # TrialStarted at 0
    assert ex.poll() == [] and 5.0 < ex.clock.now < 5.0 + 1e-9
    assert ex.running() == 1                      # the executor decides nothing


def _mini(**study) -> dict:
    from tests.sim.conftest import BASE
    import copy
    d = copy.deepcopy(BASE)
    d["study"].update(study)
    return d


def test_a_simulated_study_times_trials_out_on_time():
    result = simulate(scenario_from_dict(_mini(trial_timeout_s=15.0, budget={"trials": 3})))
    records = result.controller.trials.values()
    assert {r.state.value for r in records} == {"failed"}
    assert all("timed out after 15 s" in r.error for r in records)
    assert all(r.finished_at - r.started_at == pytest.approx(15.0) for r in records)


# ---- out of memory --------------------------------------------------------------------------

def test_an_out_of_memory_raises_the_models_floor_to_the_device_so_it_runs_alone():
    perf = _perf()
    record = type("R", (), {"trial_id": 3, "config": {"bs": 64}, "resources": 1, "info": {}})()
    assert perf.demand(record).memory_gb == 4
    perf.note_oom({"bs": 64}, {"A100": 40.0})
    assert perf.demand(record).memory_gb == 40.0
    assert perf.demand(type("R", (), {"trial_id": 4, "config": {"bs": 128}, "resources": 1, "info": {}})()).memory_gb == 30
    perf.forget_ooms()
    assert perf.demand(record).memory_gb == 4


def test_an_out_of_memory_in_a_simulated_study_is_retried_alone(monkeypatch):
    scenario = scenario_from_dict(_mini(budget={"trials": 2},
                                        space={"batch_size": {"type": "categorical", "choices": [128]},
                                               "lr": {"type": "float", "low": 0.01, "high": 0.02}}))
    perf = scenario.perf
    honest = perf.memory_gb
    # placement is told 1 GB (not 7) until an OOM raises the floor: both trials go to one GPU of
    # 10 GB, the second runs out of memory, the controller retries it and it runs alone
    monkeypatch.setattr(perf, "memory_gb", lambda config, arch: 1.0 if not perf._floors else honest(config, arch))
    monkeypatch.setattr(perf, "has_memory_floors", lambda: True)
    scenario.cluster = Cluster([Node("n0", 16, (GPU("0", "A100", 10, oversubscription=2),))])
    result = simulate(scenario)
    records = sorted(result.controller.trials.values(), key=lambda r: r.trial_id)
    assert [r.state.value for r in records] == ["complete", "complete"]
    assert result.executor.oom_failures == 1
    assert [r.retries for r in records] == [0, 1]
    retried = [iv for iv in result.executor.timeline.intervals if iv.trial_id == 1]
    first = [iv for iv in result.executor.timeline.intervals if iv.trial_id == 0][0]
    assert retried[-1].start >= first.end          # placed alone: after trial 0 left


# ---- scenarios ------------------------------------------------------------------------------

def test_a_fused_scenario_runs_packs_and_differs_from_its_separate_run():
    d = _mini(execution="fused", pack={"max_members": 4}, budget={"trials": 8})
    d["perf"]["fused"] = SPEEDUP
    fused = simulate(scenario_from_dict(d))
    separate = simulate(scenario_from_dict(d).with_execution("separate"))
    assert fused.largest_pack >= 2 and fused.packs >= 2
    assert fused.packs == fused.executor.packs.started
    assert separate.executor.packs is None and separate.packs == separate.largest_pack == 0
    assert fused.states["complete"] == separate.states["complete"] == 8
    assert fused.makespan_s != pytest.approx(separate.makespan_s)
    assert "perf.fused" in fused.unvalidated and "perf.fused" not in separate.unvalidated


def test_a_fused_study_places_members_at_a_packs_share_of_a_device():
    d = _mini(execution="fused", pack={"max_members": 4}, budget={"trials": 8})
    scenario = scenario_from_dict(d)
    record = type("R", (), {"trial_id": 0, "config": {"lr": 0.01, "batch_size": 64}, "resources": 1, "info": {}})()
    job = scenario.perf.demand(record)
    assert (job.compute, job.memory_gb, job.cpus) == (25.0, 4, 0.5)


def test_bad_fusion_fields_in_a_scenario_are_clear_errors():
    d = _mini(execution="fused")
    d["workload"]["architecture_keys"] = ["width"]
    with pytest.raises(ConfigError, match="workload.architecture_keys"):
        scenario_from_dict(d)
    with pytest.raises(ConfigError, match="execution"):
        scenario_from_dict(_mini(execution="together"))


def test_fused_scenarios_give_the_figures_they_gave_when_executors_routed_members():
    """Pinned on main 4c5c27c, before the controller seated members (``core.packs.PackBook``):
    pack-aware Hyperband's scenario (packs capped by the memory their neighbours leave, emptied
    packs ended, members stopped with their ack freeing seats at once), and a cluster whose
    memory caps every pack at two members."""
    from pathlib import Path
    from hypersack.sim.scenario import load_scenario
    root = Path(__file__).resolve().parents[2]
    phb = simulate(load_scenario(root / "examples" / "sim" / "pack_hyperband_mlp3.yaml"))
    assert (phb.packs, phb.largest_pack, phb.best_trial) == (71, 16, 98)
    assert phb.makespan_s == pytest.approx(2480.905853, abs=1e-5)
    d = _mini(execution="fused", pack={"max_members": 8}, budget={"trials": 16})
    d["perf"]["fused"] = SPEEDUP
    for node in d["cluster"]["nodes"]:
        for gpu in node["gpus"]:
            gpu["memory_gb"] = 10
    tight = simulate(scenario_from_dict(d))
    assert (tight.packs, tight.largest_pack, tight.makespan_s) == (2, 2, pytest.approx(428.0))
