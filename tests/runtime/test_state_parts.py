"""An algorithm state kept in parts (ASHA): each commit stores only the parts that changed, and
a driver killed mid-study resumes from the store with the identical algorithm state."""
from __future__ import annotations

import json
import random

import pytest

from hypersack.core.algorithms import make_algorithm
from hypersack.core.algorithms.base import StateParts
from hypersack.core.controller import Budget, Controller
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.core.trial import (Cancel, Launch, ResultReported, Stop, TrialFinished,
                                  TrialStarted)
from hypersack.runtime.loop.run import run_loop
from hypersack.runtime.storage.sqlite import Storage

from controller_helpers import on_slots

SPACE = SearchSpace({"lr": {"type": "float", "low": 0.01, "high": 1.0, "log": True}})
OBJ = Objective("loss", "min")
ASHA = {"type": "asha", "min_t": 1, "max_t": 9, "reduction_factor": 3, "mode": "pause"}


class _Killed(Exception):
    """The driver process dies (nothing after it is written)."""


class _Steps:
    """Runs every launched trial one step per poll (loss from its id and step, a little noise
    from ``seed``), ends it after ``max_t`` steps or when told to stop; "dies" at poll
    ``kill_at``, keeping the algorithm's state as it stood (every turn before was committed)."""

    def __init__(self, controller: Controller, kill_at: int, seed: int):
        self.controller, self.kill_at, self.rng = controller, kill_at, random.Random(seed)
        self.step: dict[int, int] = {}
        self.out: list = []
        self.polls = 0
        self.at_kill: dict | None = None

    def start(self) -> None:
        pass

    def submit(self, command) -> None:
        if isinstance(command, Launch):
            self.step[command.trial_id] = 0
            self.out.append(TrialStarted(command.trial_id, "cpu"))
        elif isinstance(command, (Stop, Cancel)) and command.trial_id in self.step:
            del self.step[command.trial_id]
            self.out.append(TrialFinished(command.trial_id))

    def poll(self, timeout: float) -> list:
        self.polls += 1
        if self.polls == self.kill_at:
            self.at_kill = json.loads(json.dumps(self.controller.algorithm.state_dict()))
            raise _Killed
        out, self.out = self.out, []
        for trial, step in list(self.step.items()):
            if self.rng.random() < 0.3:
                continue                       # reports interleave unevenly
            step += 1
            self.step[trial] = step
            out.append(ResultReported(trial, step, {"loss": (trial % 7) / (step + 1)},
                                      f"ck-{trial}-{step}"))
            if step >= 9:
                del self.step[trial]
                out.append(TrialFinished(trial))
        return out

    def acknowledge(self, trial_ids, free_below) -> None:
        pass

    def shutdown(self, kill: bool = False) -> None:
        pass


def _controller() -> Controller:
    return Controller(make_algorithm(ASHA, SPACE, OBJ, 3), OBJ, Budget(trials=40), options=on_slots(6))


def test_a_killed_driver_resumes_asha_from_the_store_with_the_identical_state(tmp_path):
    for kill_at, seed in ((12, 0), (30, 1)):
        controller = _controller()
        executor = _Steps(controller, kill_at, seed)
        path = tmp_path / f"s{kill_at}.db"
        with Storage(path, durability="process") as store:
            row = store.create_study("s", {})
            try:
                run_loop(controller, executor, store, row, group_window_s=0.0)
            except _Killed:
                pass
            else:
                raise AssertionError("the driver was not killed")
        with Storage(path) as store:
            stored = store.get_study("s").controller_state
            assert "trials" not in stored["algorithm"] and "records" not in stored["algorithm"]
            raw = store.connection.execute("SELECT controller_state FROM studies").fetchone()[0]
            assert json.loads(raw)["algorithm"]["parts"] == {}    # the parts are rows of their own
            resumed = _controller()
            resumed.restore(store.load_trials(row.study_id), stored["algorithm"])
        assert resumed.algorithm.state_dict() == executor.at_kill
        assert len(executor.at_kill["trials"]) > 6          # several trials were decided


def test_each_commit_carries_only_the_parts_that_changed(tmp_path):
    alg = make_algorithm({**ASHA, "mode": "stop"}, SPACE, OBJ, 0)      # no promotions
    with Storage(tmp_path / "s.db", durability="process") as store:
        sid = store.create_study("s", {}).study_id
        for t in range(60):
            alg.suggest(t)
            alg.on_result(t, 1, {"loss": -t})           # later trials better: all go on
        first = alg.state_delta()
        assert isinstance(first["parts"], StateParts) and len(first["parts"]) == 60
        store.save_batch(sid, [], [], {"algorithm": first, "elapsed_s": 1.0})
        assert alg.state_delta()["parts"] == {}          # nothing changed since
        alg.on_result(59, 3, {"loss": -99})
        alg.on_complete(58, 1.0, "complete")
        delta = alg.state_delta()
        assert set(delta["parts"]) == {"t58", "t59"}
        assert delta["parts"]["t59"] == [2, "running", [59.0, 99.0]]   # signed: larger is better
        store.save_batch(sid, [], [], lambda: {"algorithm": delta, "elapsed_s": 2.0})
        state = store.get_study("s").controller_state
        assert state["elapsed_s"] == 2.0 and len(state["algorithm"]["parts"]) == 60
        again = make_algorithm({**ASHA, "mode": "stop"}, SPACE, OBJ, 0)
        again.load_state_dict(state["algorithm"])
        assert again.state_dict() == json.loads(json.dumps(alg.state_dict()))
        assert len(again.state_delta()["parts"]) == 60   # after a load every part is due again
        store.delete_study("s")
        assert store.connection.execute("SELECT COUNT(*) FROM state_parts").fetchone() == (0,)


def test_a_study_stored_whole_by_an_older_driver_resumes_and_is_then_stored_in_parts(tmp_path):
    old = make_algorithm(ASHA, SPACE, OBJ, 0)
    for t in range(12):
        old.suggest(t)
        old.on_result(t, 3, {"loss": t % 5})
    whole = json.loads(json.dumps(old.state_dict()))      # the former format: one blob
    with Storage(tmp_path / "s.db") as store:
        sid = store.create_study("s", {}).study_id
        store.save_batch(sid, [], [], {"algorithm": whole, "elapsed_s": 1.0})
        new = make_algorithm(ASHA, SPACE, OBJ, 0)
        new.load_state_dict(store.get_study("s").controller_state["algorithm"])
        store.save_batch(sid, [], [], {"algorithm": new.state_delta(), "elapsed_s": 2.0})
        later = make_algorithm(ASHA, SPACE, OBJ, 0)
        later.load_state_dict(store.get_study("s").controller_state["algorithm"])
    assert later.state_dict() == whole


# ---- every multi-fidelity algorithm in parts (issue 41) -------------------------------------

HYPERBAND = {"type": "hyperband", "min_t": 1, "max_t": 9, "reduction_factor": 3}
MODELS = {"hyperband": HYPERBAND, "bohb": {**HYPERBAND, "type": "bohb"},
          "asha-tpe": {**ASHA, "sampler": "tpe"},
          "asha-tpe-no-agreement": {**ASHA, "sampler": "tpe", "agreement": None},
          "asha-tpe-skip": {**ASHA, "sampler": "tpe", "skip_disagreeing": 0.3},
          "hyperband-tpe": {**HYPERBAND, "sampler": "tpe"},
          "pack_hyperband": {**HYPERBAND, "type": "pack_hyperband", "max_pack": 3}}


def _needs(spec: dict) -> None:
    if spec["type"] == "bohb" or "sampler" in spec:
        pytest.importorskip("optuna")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_killed_driver_resumes_every_multi_fidelity_algorithm_from_its_parts(tmp_path, name):
    spec = MODELS[name]
    _needs(spec)
    controller = Controller(make_algorithm(spec, SPACE, OBJ, 3), OBJ, Budget(trials=40),
                            options=on_slots(6))
    executor = _Steps(controller, 25, 2)          # the study takes 43-59 polls
    path = tmp_path / "s.db"
    with Storage(path, durability="process") as store:
        row = store.create_study("s", {})
        with pytest.raises(_Killed):
            run_loop(controller, executor, store, row, group_window_s=0.0)
    with Storage(path) as store:
        raw = store.connection.execute("SELECT controller_state FROM studies").fetchone()[0]
        parts = store.connection.execute("SELECT COUNT(*) FROM state_parts").fetchone()[0]
        stored = store.get_study("s").controller_state
        resumed = Controller(make_algorithm(spec, SPACE, OBJ, 3), OBJ, Budget(trials=40),
                             options=on_slots(6))
        resumed.restore(store.load_trials(row.study_id), stored["algorithm"])
    assert resumed.algorithm.state_dict() == executor.at_kill
    assert json.loads(raw)["algorithm"]["parts"] == {} and parts > 20
    assert len(raw) < 2500                   # the row holds no trial's state, only the head


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_commit_of_a_multi_fidelity_algorithm_carries_what_changed(name):
    spec = MODELS[name]
    _needs(spec)
    alg = make_algorithm(spec, SPACE, OBJ, 0)
    for t in range(9):
        alg.suggest(t)
        alg.on_result(t, 1, {"loss": 1.0 + t})
    first = alg.state_delta()
    assert isinstance(first["parts"], StateParts) and len(first["parts"]) >= 9
    assert alg.state_delta()["parts"] == {}            # nothing changed since
    trial = alg.suggest(9)
    resumed = trial.resume if trial.resume is not None else 9
    alg.on_result(resumed, 3, {"loss": 0.5})
    delta = alg.state_delta()["parts"]
    agreeing = name in ("asha-tpe", "asha-tpe-skip")  # agreement (by default): + one "o" part
    most = 8 if agreeing else 6                      # per result observed
    assert 1 <= len(delta) <= most and f"t{resumed}" in delta
    assert len(json.dumps(delta)) < 1500
