"""Fused packs inside real studies: ``execution: fused | separate | auto``, load and free, crashes."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import hypersack
from hypersack.core.spec import StudySpec
from hypersack.errors import ConfigError
from hypersack.runtime.devices.slots import default_slots
from hypersack.runtime.devices.machine import member_demand
from hypersack.runtime.executors.packs import plan_execution
from hypersack.runtime.storage.sqlite import Storage

_HEADER = re.compile(r"pack (\d+) \(pid (\d+)\), with members \[([0-9, ]*)\]")


def _needs_torch():
    pytest.importorskip("torch")
    if importlib.util.find_spec("sklearn") is None:  # the digits data file, not the package
        pytest.skip("scikit-learn is not installed")


def _trial_dir(store_path: Path, study: str, trial_id: int) -> Path:
    with Storage(store_path, readonly=True) as store:
        return store.trial_dir(store.get_study(study), trial_id)


def _committed_checkpoint(store_path: Path, study: str, trial_id: int) -> Path | None:
    """The checkpoint file the store names for the trial (None before its first durable one)."""
    with Storage(store_path, readonly=True) as store:
        row = store.get_study(study)
        trial = {t.trial_id: t for t in store.load_trials(row.study_id)}.get(trial_id)
        if trial is None or trial.checkpoint is None:
            return None
        return store.trial_dir(row, trial_id) / trial.checkpoint


def _joins(store_path: Path, study: str, trial_id: int) -> list[tuple[int, int, list[int]]]:
    """(pack id, pid, members already there) for each time the trial was loaded into a pack."""
    log = (_trial_dir(store_path, study, trial_id) / "trial.log").read_text()
    return [(int(a), int(b), [int(x) for x in c.split(",") if x.strip()])
            for a, b, c in _HEADER.findall(log)]


def _seeds(store_path: Path, study: str) -> dict[int, int]:
    with Storage(store_path) as store:
        return {t.trial_id: t.seed for t in store.load_trials(store.get_study(study).study_id)}


class _Collect:
    """A MemberSource of given members, recording the last metrics of each."""

    def __init__(self, members):
        self.members, self.last = list(members), {}

    def next_member(self):
        return self.members.pop(0) if self.members else None

    def checkpoint(self, trial_id, state):
        pass

    def report(self, trial_id, step, metrics):
        self.last[trial_id] = (step, dict(metrics))
        return False

    def finished(self, trial_id):
        pass

    def failed(self, trial_id, error):
        raise error


@pytest.fixture(scope="module")
def crashed_study(tmp_path_factory):
    """One fused study, shared by the tests below: four trials of ``fused_tasks:SMALL`` (two
    epochs, batch 16: members' epochs end on the same iterations) on one CPU device, packs of
    two. The first pack process kills itself at its third member evaluation: after both of its
    members' epoch-1 reports were stored and acknowledged, before any epoch-2 report (see
    ``fused_tasks.DIE_AFTER_VAR``: no timer, no race)."""
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("fused")
    store_path = folder / "study.db"
    space = {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
             "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
             "hidden": 8, "batch_size": 16, "epochs": 2}
    study = hypersack.Study(name="fused", space=space, objective=("loss", "min"), n_trials=4,
                            storage=store_path, execution="fused", pack={"max_members": 2})
    from fused_tasks import DIE_AFTER_VAR
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DIE_AFTER_VAR, f"3:{folder / 'pack-died'}")
        run = study.run("fused_tasks:SMALL", progress=False, slots=default_slots(1, gpus=[]))
    assert (folder / "pack-died").exists()
    return store_path, study, run


@pytest.mark.slow
def test_a_fused_study_completes_with_members_sharing_pack_processes(crashed_study):
    store_path, study, run = crashed_study
    assert run.status == "complete"
    status = study.status()
    assert status["complete"] == 4
    joins = {t: _joins(store_path, "fused", t) for t in range(4)}
    assert joins[1][0][:2] == joins[0][0][:2] and joins[1][0][2] == [0]   # 1 joined 0's pack
    assert joins[3][0][:2] == joins[2][0][:2]
    packs = {join[:2] for js in joins.values() for join in js}
    assert len(packs) < sum(len(js) for js in joins.values())
    for t in range(4):
        assert [r["step"] for r in study.results(t)] == [1, 2]     # each step stored once
        assert _committed_checkpoint(store_path, "fused", t).exists()


@pytest.mark.slow
def test_a_killed_pack_process_retries_its_members_from_their_checkpoints(crashed_study):
    store_path, study, _ = crashed_study
    trials = {t["trial_id"]: t for t in study.status()["trials"]}
    assert [trials[t]["attempts"] for t in range(4)] == [2, 2, 1, 1]  # both members died with it
    for t in (0, 1):
        (_, first_pid, _), (_, second_pid, _) = _joins(store_path, "fused", t)
        assert first_pid != second_pid
        # The retry loaded the epoch-1 checkpoint: it wrote one checkpoint (epoch 2), not two.
        assert _committed_checkpoint(store_path, "fused", t).name.startswith("checkpoint-a2-1")


@pytest.mark.slow
def test_a_pack_process_that_stops_is_found_silent_killed_and_its_members_retried(tmp_path,
                                                                                  capsys):
    """The pack stops itself (SIGSTOP) at its first member evaluation: its heartbeat stops
    with it, its members are judged not responding, the process is killed, and they retry in
    a new pack from their last checkpoints."""
    pytest.importorskip("torch")
    space = {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
             "hidden": 8, "batch_size": 16, "epochs": 2}
    study = hypersack.Study(name="stops", space=space, objective=("loss", "min"), n_trials=2,
                            storage=tmp_path / "study.db", execution="fused",
                            pack={"max_members": 2}, heartbeat_timeout_s=3,
                            trial_timeout_s=120)      # a failure here fails, never hangs
    from fused_tasks import STOP_AFTER_VAR
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(STOP_AFTER_VAR, f"1:{tmp_path / 'pack-stopped'}")
        run = study.run("fused_tasks:SMALL", progress="lines", slots=default_slots(1, gpus=[]))
    assert (tmp_path / "pack-stopped").exists() and run.status == "complete"
    trials = study.status()["trials"]
    assert [t["state"] for t in trials] == ["complete"] * 2
    assert [t["attempts"] for t in trials] == [2, 2]
    assert "not responding (no heartbeat for" in capsys.readouterr().out


@pytest.mark.slow
def test_each_trial_of_a_fused_study_trains_as_in_an_in_process_pack(crashed_study):
    """Configs, seeds and resumed members reach the pack processes intact: every trial ends
    where the same members end in one pack run in this process."""
    from fused_tasks import SMALL
    from hypersack.fusion import Member, run_pack
    store_path, study, _ = crashed_study
    trials = study.status()["trials"]
    seeds = _seeds(store_path, "fused")
    source = _Collect(Member(t["trial_id"], t["config"], seeds[t["trial_id"]]) for t in trials)
    run_pack(SMALL, source, "cpu", max_members=4)
    for trial in trials:
        step, alone = source.last[trial["trial_id"]]
        assert step == 2
        assert trial["metrics"]["accuracy"] == pytest.approx(alone["accuracy"], abs=1e-6)
        assert trial["metrics"]["loss"] == pytest.approx(alone["loss"], rel=1e-4, abs=1e-5)


def test_auto_runs_a_trainable_without_a_fusable_task_separately(store_path):
    study = hypersack.Study(name="auto-plain", space={"x": 0.5}, objective=("score", "max"),
                            n_trials=1, storage=store_path, execution="auto")
    study.run("trainables:quick", progress=False, slots=default_slots(1, gpus=[]))
    assert study.status()["complete"] == 1
    assert _joins(store_path, "auto-plain", 0) == []


@pytest.mark.parametrize("field, value", [("execution", "fuse"), ("execution", None),
                                          ("pack", {"max_members": 0}),
                                          ("pack", {"max_members": True}),
                                          ("pack", {"size": 4})])
def test_bad_execution_or_pack_is_a_config_error_naming_the_field(field, value):
    spec = {"name": "s", "space": {"x": 1}, "objective": ["y", "max"], "budget": {"trials": 1},
            field: value}
    with pytest.raises(ConfigError) as info:
        StudySpec.from_dict(spec)
    assert info.value.field.startswith(field)
    with pytest.raises(ConfigError, match="execution"):
        hypersack.Study(space={"x": 1}, objective=("y", "max"), n_trials=1, execution="fuse")


def test_fused_needs_a_fusable_task():
    with pytest.raises(ConfigError, match="needs a fusable task"):
        plan_execution("fused", "trainables:quick", 4)
    with pytest.raises(ConfigError, match="needs a fusable task"):
        plan_execution("fused", lambda config, ctx: None, 4)


def test_execution_and_pack_may_change_on_resume_and_round_trip():
    spec = StudySpec.from_dict({"name": "s", "space": {"x": 1}, "objective": ["y", "max"],
                                "budget": {"trials": 1}, "execution": "auto",
                                "pack": {"max_members": 16}})
    assert StudySpec.from_dict(spec.to_dict()) == spec
    from hypersack.core.spec import RESUMABLE_CHANGES
    assert {"execution", "pack"} <= RESUMABLE_CHANGES


def test_a_member_demands_its_share_of_the_device():
    spec = StudySpec.from_dict({"name": "s", "space": {"x": 1}, "objective": ["y", "max"],
                                "budget": {"trials": 1}, "pack": {"max_members": 16}})
    assert member_demand(spec).compute == pytest.approx(100 / 16)
    spec = StudySpec.from_dict({**spec.to_dict(), "resources": {"compute": 20, "memory_gb": 1.5,
                                                                "cpus": 1}})
    demand = member_demand(spec)
    assert (demand.compute, demand.memory_gb) == (20, 1.5)


def test_the_plan_routes_by_task_acceptance_and_architecture():
    _needs_torch()
    plain, plan = plan_execution("auto", "digits_mlp", 8)
    assert plain == "digits_mlp" and plan is not None
    assert plan.fuses({"hidden": 16, "optimizer": "adagrad"})
    assert not plan.fuses({"optimizer": "lbfgs"})
    assert plan.key({"hidden": 16, "lr": 0.1}) == plan.key({"hidden": 16, "lr": 0.01})
    assert plan.key({"hidden": 16}) != plan.key({"hidden": 32})
    assert plan_execution("separate", "digits_mlp", 8) == ("digits_mlp", None)


def test_the_study_s_pack_conv_reaches_its_pack_plan():
    _needs_torch()
    from hypersack.study import Study
    study = Study(space={"lr": [0.1]}, objective={"metric": "loss", "mode": "min"},
                  trainable="digits_cnn", execution="fused", pack={"conv": "bmm"},
                  storage=":memory:", n_trials=1)
    _, plan, _ = study._prepare(None)
    assert plan is not None and plan.conv == "bmm"
    assert plan_execution("fused", "digits_cnn", 4)[1].conv == "grouped"
def test_the_builtin_keys_known_without_torch_are_the_tasks():
    """``workloads.FUSED_BUILTIN_KEYS`` (what the driver reads instead of importing a built-in
    task) says what each task's ``architecture_keys`` say; the plan loads the task only for a
    verdict."""
    _needs_torch()
    from hypersack.runtime.worker.pack import resolve_reference
    from hypersack.workloads import FUSED_BUILTIN_KEYS, FUSED_BUILTINS
    assert set(FUSED_BUILTIN_KEYS) == set(FUSED_BUILTINS)
    for name, reference in FUSED_BUILTINS.items():
        assert FUSED_BUILTIN_KEYS[name] == tuple(resolve_reference(reference).architecture_keys)
        _, plan = plan_execution("auto", name, 4)
        assert plan.task is None and plan.architecture_keys == FUSED_BUILTIN_KEYS[name]
    _, plan = plan_execution("auto", "builtin:digits_cnn", 4)
    assert plan.fuses({"channels": 8, "optimizer": "adam"}) and plan.task is not None
    assert not plan.fuses({"channels": 8, "optimizer": "lbfgs"})


@pytest.mark.slow
def test_a_fusable_task_named_as_module_task_runs_as_plain_trials_when_separate(store_path):
    """Switching a FusableTask study from ``execution: fused`` to ``separate``: each trial runs
    as a pack of one (was: every trial failed, "... is not callable")."""
    pytest.importorskip("torch")
    space = {"lr": hypersack.Float(0.005, 0.02), "optimizer": "adam", "hidden": 8,
             "batch_size": 16, "epochs": 1}
    study = hypersack.Study(name="task-separate", space=space, objective=("loss", "min"),
                            n_trials=2, storage=store_path, execution="separate")
    study.run("fused_tasks:SMALL", progress=False, slots=default_slots(1, gpus=[]))
    status = study.status()
    assert status["complete"] == 2, [t["error"] for t in status["trials"]]
    assert all(t["last_step"] == 1 for t in status["trials"])
