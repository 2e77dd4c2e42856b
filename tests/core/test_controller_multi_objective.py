"""The controller in a multi-objective study, driven with scripted events: every objective's
value kept, the algorithm told what its objective asks for, a trial missing one failed."""
from __future__ import annotations

from hypersack.core.algorithms import Algorithm, Suggestion
from hypersack.core.controller import Budget, Controller
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.core.trial import ResultReported, TrialFinished, TrialState

from controller_helpers import on_slots

TWO = Objective.parse([("loss", "min"), ("lat", "min")])
SPACE = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0}})


class Recording(Algorithm):
    """Proposes {"x": trial_id}; records what ``on_complete`` is told."""

    def __init__(self, objective):
        super().__init__(SPACE, objective)
        self.completed: list[tuple] = []

    def suggest(self, trial_id):
        return Suggestion({"x": float(trial_id)})

    def on_complete(self, trial_id, value, state):
        self.completed.append((trial_id, value, state))


def _run(algorithm_objective, reports, study_objective=TWO):
    """One trial with ``reports`` (metrics per step from 1), then finished: its record and
    what the algorithm was told."""
    algorithm = Recording(algorithm_objective)
    c = Controller(algorithm, study_objective, Budget(trials=1), options=on_slots(1))
    c.launches(0.0)
    for step, metrics in enumerate(reports, start=1):
        c.handle(ResultReported(0, step, metrics), float(step))
    c.handle(TrialFinished(0), 9.0)
    return c.trials[0], algorithm.completed


def test_every_objective_of_the_last_report_is_kept_and_told_as_a_tuple():
    record, told = _run(TWO, [{"loss": 3.0, "lat": 9.0}, {"loss": 2.0, "lat": 8.0, "acc": 1.0}])
    assert record.state is TrialState.COMPLETE
    assert record.values == [2.0, 8.0] and record.value == 2.0
    assert told == [(0, (2.0, 8.0), "complete")]


def test_a_last_report_without_an_objective_fails_the_trial_naming_it():
    record, told = _run(TWO, [{"loss": 3.0, "lat": 9.0}, {"loss": 2.0}])
    assert record.state is TrialState.FAILED
    assert "'lat' is missing from the trial's last report (step 2" in record.error
    assert record.values == [3.0, 9.0]                   # the last report that held them all
    assert told == [(0, None, "failed")]


def test_a_first_report_without_an_objective_fails_at_once():
    record, _ = _run(TWO, [{"loss": 3.0}])
    assert record.state is TrialState.FAILED and record.last_step is None
    assert "'lat' is missing from the trial's first report" in record.error


def test_an_algorithm_ranking_by_one_objective_is_told_that_objectives_value():
    _, told = _run(TWO.part("lat"), [{"loss": 3.0, "lat": 9.0}])
    assert told == [(0, 9.0, "complete")]                # rank_by: lat, not the first (loss)
    _, told = _run(TWO.part("loss"), [{"loss": 3.0, "lat": 9.0}])
    assert told == [(0, 3.0, "complete")]


def test_a_single_objective_study_keeps_no_values_and_tells_a_number():
    one = Objective("loss", "min")
    record, told = _run(one, [{"loss": 3.0, "lat": 9.0}], study_objective=one)
    assert record.values is None and told == [(0, 3.0, "complete")]
