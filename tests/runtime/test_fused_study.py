"""Fused packs inside real studies: ``execution: fused | separate | auto``, load and free, crashes."""
from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

import hypersack
from hypersack.core.algorithms import Algorithm, Decision, Suggestion
from hypersack.core.spec import StudySpec
from hypersack.errors import ConfigError
from hypersack.runtime.devices import default_slots
from hypersack.runtime.machine import member_demand
from hypersack.runtime.pack_worker import plan_execution
from hypersack.runtime.storage import Storage

SPACE = {"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True},
         "batch_size": {"type": "categorical", "choices": [32, 64]},
         "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
         "hidden": 16, "epochs": 2}
_HEADER = re.compile(r"pack (\d+) \(pid (\d+)\), with members \[([0-9, ]*)\]")


def _needs_torch():
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")


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


def test_fused_study_completes_and_each_trial_trains_as_in_an_in_process_pack(store_path):
    _needs_torch()
    from hypersack.fusion import Member, run_pack
    from hypersack.workloads.digits_fused import DIGITS_MLP
    study = hypersack.Study(name="fused", space=SPACE, objective=("accuracy", "max"), n_trials=6,
                            storage=store_path, execution="fused", pack={"max_members": 4})
    assert study.run("digits_mlp", progress=False, slots=default_slots(2, gpus=[])).status == "complete"
    status = study.status()
    assert status["complete"] == 6
    packs = {_joins(store_path, "fused", t["trial_id"])[0][:2] for t in status["trials"]}
    assert 2 <= len(packs) < 6                  # members shared pack processes
    seeds = _seeds(store_path, "fused")
    source = _Collect(Member(t["trial_id"], t["config"], seeds[t["trial_id"]])
                      for t in status["trials"])
    run_pack(DIGITS_MLP, source, "cpu", max_members=6)
    for trial in status["trials"]:
        tid = trial["trial_id"]
        assert [r["step"] for r in study.results(tid)] == [1, 2]
        assert _committed_checkpoint(store_path, "fused", tid).exists()
        step, alone = source.last[tid]
        assert step == 2
        assert trial["metrics"]["accuracy"] == pytest.approx(alone["accuracy"], abs=1e-6)
        assert trial["metrics"]["loss"] == pytest.approx(alone["loss"], rel=1e-4, abs=1e-5)


class _StopFirst(Algorithm):
    """Three trials; trial 0 is stopped at its first report, the others run their epochs."""

    def __init__(self, space, objective):
        super().__init__(space, objective)
        self.made = 0

    @property
    def exhausted(self):
        return self.made >= 3

    def suggest(self, trial_id):
        self.made += 1
        return Suggestion({"lr": 0.005, "hidden": 16, "batch_size": 64,
                           "epochs": [4, 4, 1][trial_id]})

    def on_result(self, trial_id, step, metrics):
        return Decision.STOP if trial_id == 0 else Decision.CONTINUE


def test_a_stopped_member_frees_its_seat_and_a_pending_trial_joins_the_running_pack(store_path):
    _needs_torch()
    space = hypersack.SearchSpace({"lr": 0.005})
    objective = hypersack.Objective.parse(("accuracy", "max"))
    study = hypersack.Study(name="join", space=space, objective=objective, n_trials=3,
                            storage=store_path, execution="fused", pack={"max_members": 2},
                            algorithm=_StopFirst(space, objective))
    study.run("digits_mlp", progress=False, slots=default_slots(1, gpus=[]))
    states = {t["trial_id"]: t["state"] for t in study.status()["trials"]}
    assert states == {0: "pruned", 1: "complete", 2: "complete"}
    assert [r["step"] for r in study.results(0)] == [1]
    (pack0, pid0, _), = _joins(store_path, "join", 0)
    (pack2, pid2, with2), = _joins(store_path, "join", 2)
    assert (pack2, pid2) == (pack0, pid0) and with2 == [1]   # joined while trial 1 still ran


def _kill_first_pack_once(store_path: Path, study: str, done: threading.Event) -> None:
    """SIGKILL the pack process of trial 0 once it has written a checkpoint."""
    while not done.is_set():
        try:
            if _committed_checkpoint(store_path, study, 0) is not None:
                _, pid, _ = _joins(store_path, study, 0)[0]
                os.kill(pid, signal.SIGKILL)
                return
        except (OSError, IndexError, hypersack.errors.HyperSackError):
            pass
        time.sleep(0.05)


def test_a_killed_pack_process_retries_its_members_from_their_checkpoints(store_path):
    _needs_torch()
    space = dict(SPACE, epochs=3, optimizer="adam")
    study = hypersack.Study(name="crash", space=space, objective=("accuracy", "max"), n_trials=2,
                            storage=store_path, execution="fused", pack={"max_members": 2})
    done = threading.Event()
    killer = threading.Thread(target=_kill_first_pack_once, args=(store_path, "crash", done))
    killer.start()
    try:
        study.run("digits_mlp", progress=False, slots=default_slots(1, gpus=[]))
    finally:
        done.set()
        killer.join()
    trials = study.status()["trials"]
    assert [t["state"] for t in trials] == ["complete", "complete"]
    assert all(t["attempts"] == 2 for t in trials)          # both members failed with the pack
    for t in trials:
        steps = [r["step"] for r in study.results(t["trial_id"])]
        assert steps == sorted(set(steps)) and steps[-1] == 3 and steps[0] == 1
        assert len(_joins(store_path, "crash", t["trial_id"])) == 2


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


class _TwoPacks(Algorithm):
    """Four trials of one architecture; the algorithm puts 0 and 1 in pack "a", 2 and 3 in "b"."""

    def __init__(self, space, objective):
        super().__init__(space, objective)
        self.made = 0

    @property
    def exhausted(self):
        return self.made >= 4

    def suggest(self, trial_id):
        self.made += 1
        return Suggestion({"lr": 0.005})

    def trial_info(self, trial_id):
        return {"pack": "a" if trial_id < 2 else "b"}


def test_trials_of_different_algorithm_packs_never_share_a_pack_process(store_path):
    _needs_torch()
    space = hypersack.SearchSpace({"lr": 0.005})
    objective = hypersack.Objective.parse(("accuracy", "max"))
    study = hypersack.Study(name="groups", space=space, objective=objective, n_trials=4,
                            storage=store_path, execution="fused", pack={"max_members": 4},
                            algorithm=_TwoPacks(space, objective))
    study.run("digits_mlp", progress=False, slots=default_slots(1, gpus=[]))
    assert study.status()["complete"] == 4
    packs = {t: _joins(store_path, "groups", t)[0][0] for t in range(4)}
    assert packs[0] == packs[1] and packs[2] == packs[3] and packs[0] != packs[2]
    with Storage(store_path) as store:
        infos = [t.info for t in store.load_trials(store.get_study("groups").study_id)]
    assert [i["pack"] for i in infos] == ["a", "a", "b", "b"]
