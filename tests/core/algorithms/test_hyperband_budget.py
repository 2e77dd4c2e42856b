"""Hyperband and BOHB use the whole budget (issue 41, item 2): without ``repeat`` iterations go
on until the study's ``n_trials`` or time budget ends; ``repeat`` caps them; the progress view
says which iteration and bracket runs."""
from __future__ import annotations

import pytest

from hypersack.core.algorithms import BOHB, Hyperband
from hypersack.core.controller import Budget, Controller
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.core.trial import ResultReported, TrialFinished, TrialState
from hypersack.runtime.loop.progress import summary

from controller_helpers import on_slots

OBJ = Objective("loss", "min")
SPACE = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0}})
ONE_ITERATION = 9 + 5 + 3          # R = 9, eta = 3: brackets of 9, 5 and 3 configs


def _hyperband(**kw):
    return Hyperband(SPACE, OBJ, min_t=1, max_t=9, reduction_factor=3, seed=1, **kw)


def _bohb(**kw):
    pytest.importorskip("optuna")
    return BOHB(SPACE, OBJ, min_t=1, max_t=9, reduction_factor=3, seed=1, **kw)


def _run(controller: Controller, tick: float = 0.0) -> tuple[Controller, list[str]]:
    """Drive ``controller`` to its end, one step of one trial per report (loss from x and the
    step; the clock moves ``tick`` per report); the progress lines seen on the way."""
    running: dict[int, int] = {}
    now, notes = 0.0, []
    for _ in range(100_000):
        for launch in controller.launches(now):
            running[launch.trial_id] = (controller.trials[launch.trial_id].last_step or 0) + 1
        if not running:
            break
        trial_id, step = next(iter(running.items()))
        x = controller.trials[trial_id].config["x"]
        commands = controller.handle(ResultReported(trial_id, step, {"loss": x + 1 / step}), now)
        if commands or step == 9:
            del running[trial_id]
            controller.handle(TrialFinished(trial_id), now)
        else:
            running[trial_id] = step + 1
        notes.append(summary("s", controller))
        now += tick
    assert controller.done(now)
    controller.finalize(now)
    return controller, notes


@pytest.mark.parametrize("build", [_hyperband, _bohb], ids=["hyperband", "bohb"])
def test_without_repeat_a_study_runs_every_trial_of_its_budget(build):
    c, notes = _run(Controller(build(), OBJ, Budget(trials=60), options=on_slots(2)))
    assert len(c.trials) == 60 > 3 * ONE_ITERATION
    iterations = {r.info.get("iteration") for r in c.trials.values()}
    assert iterations == {0, 1, 2, 3}
    # every iteration ends with configs trained to max_t (the last one, cut by the budget,
    # through the controller's end-game)
    complete = [r for r in c.trials.values() if r.state is TrialState.COMPLETE]
    assert {r.info["iteration"] for r in complete} == {0, 1, 2, 3}
    assert all(r.last_step == 9 for r in complete)
    assert any("iteration 3, bracket 2 of 3" in line for line in notes)
    assert not c.algorithm.exhausted


def test_without_repeat_a_time_budget_keeps_starting_iterations():
    c, _ = _run(Controller(_hyperband(), OBJ, Budget(time_s=400.0), options=on_slots(2)),
                tick=1.0)
    assert len(c.trials) > 2 * ONE_ITERATION


def test_repeat_caps_the_iterations():
    c, notes = _run(Controller(_hyperband(repeat=2), OBJ, Budget(trials=60), options=on_slots(2)))
    assert len(c.trials) == 2 * ONE_ITERATION and c.algorithm.exhausted
    assert "iteration 2 of 2, bracket 3 of 3" in notes[-1]
    with_one, _ = _run(Controller(_hyperband(repeat=1), OBJ, Budget(trials=60), options=on_slots(2)))
    assert len(with_one.trials) == ONE_ITERATION


def test_the_position_names_the_newest_bracket_and_how_many_are_open():
    alg = _hyperband()
    assert alg.position() is None and alg.progress_note() is None
    for t in range(ONE_ITERATION + 1):
        alg.suggest(t)
    assert alg.position() == {"iteration": 2, "bracket": 1, "brackets": 3, "iterations": None,
                              "open": 4}
    assert alg.progress_note() == "iteration 2, bracket 1 of 3 (4 brackets open)"


def test_a_state_saved_whole_with_every_bracket_made_fills_the_earliest_bracket_first():
    alg = _hyperband(repeat=1)
    for t in range(5):
        alg.suggest(t)
    state = alg.state_dict()
    empty = {"created": 0, "trials": {}, "queue": [], "closed": [False] * 2, "records": [{}, {}]}
    state["brackets"] += [empty, {**empty, "closed": [False], "records": [{}]}]  # older code
    again = _hyperband(repeat=1)
    again.load_state_dict(state)
    assert again.suggest(5).info["bracket"] == 0
