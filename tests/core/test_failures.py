"""Failing trials stop a study once ``max_failures`` in a row failed the same way (issue 27)."""
from __future__ import annotations

import pytest

from hypersack.core.controller import Budget, Controller
from hypersack.core.failures import FailureStreak, failure_kind
from hypersack.core.trial import (FailureCause, ResultReported, Stop, StopReason, TrialFailed,
                                  TrialFinished, TrialState)
from controller_helpers import on_slots
from test_controller import OBJ, Scripted


def test_kinds_blank_numbers_and_drop_config_dependent_failures():
    assert failure_kind("KeyError: 'los' at step 3") == failure_kind("KeyError: 'los' at step 12")
    assert failure_kind("ValueError: bad\nTraceback ...") == "ValueError: bad"
    assert failure_kind("KeyError: 'a'") != failure_kind("ValueError: 'a'")
    for config_dependent in ["metric 'loss' is nan at step 3", "timed out after 30 s (x)",
                             "no device can run this trial: too big",
                             "RuntimeError: CUDA out of memory (gave up after 2 retries)"]:
        assert failure_kind(config_dependent) is None


def test_a_streak_trips_at_max_failures_of_one_kind_only():
    streak = FailureStreak(3)
    assert not streak.ended(0, "KeyError: 'x'", failed=True)
    assert not streak.ended(1, "KeyError: 'x'", failed=True)
    assert not streak.ended(2, "ValueError: y", failed=True)     # another kind: a new streak
    assert not streak.ended(3, "ValueError: y", failed=True)
    assert not streak.ended(4, None, failed=False)               # a success: a new streak
    assert [streak.ended(t, "ValueError: y", failed=True) for t in (5, 6, 7)] == [False, False,
                                                                                   True]
    assert "3 trials in a row" in streak.message("ValueError: y") and "5, 6, 7" in \
        streak.message("ValueError: y")


def test_none_never_trips():
    streak = FailureStreak(None)
    assert not any(streak.ended(t, "KeyError: 'x'", failed=True) for t in range(100))


def make(trials, max_failures, slots=1):
    return Controller(Scripted(), OBJ, Budget(trials=trials),
                               max_failures=max_failures, options=on_slots(slots))


def fail(c, trial_id, reason="KeyError: 'los'", now=1.0):
    return c.handle(TrialFailed(trial_id, reason, "Traceback...", FailureCause.ERROR), now)


def test_the_controller_stops_the_study_after_max_failures_same_failures():
    c = make(trials=40, max_failures=3, slots=2)
    c.launches(0.0)                                       # trials 0 and 1
    assert fail(c, 0) == []
    assert [l.trial_id for l in c.launches(1.0)] == [2]
    assert fail(c, 1) == []
    c.launches(1.0)                                       # trial 3
    commands = fail(c, 2)                                 # the third in a row
    assert c.failure_stop is not None and "trials 0, 1, 2" in c.failure_stop
    assert "KeyError: 'los'" in c.failure_stop
    assert commands == [Stop(3, StopReason.INTERRUPTED)]  # the running one stops, resumable
    assert c.launches(2.0) == []
    c.handle(TrialFinished(3), 2.0)
    assert c.done(2.0) and c.trials[3].state is TrialState.PENDING
    assert len(c.trials) == 4                             # not 40 trials failed one by one


def test_a_missing_objective_at_the_first_report_counts_as_a_failure_of_one_kind():
    c = make(trials=10, max_failures=2)
    for trial_id in (0, 1):
        c.launches(float(trial_id))
        out = c.handle(ResultReported(trial_id, 1, {"los": 0.5}), float(trial_id))
        assert Stop(trial_id, StopReason.FAILED) in out
    assert c.failure_stop is not None and "'acc' is missing" in c.failure_stop
    assert c.interrupted


@pytest.mark.parametrize("metrics", [{"acc": float("nan")}])
def test_bad_metric_values_depend_on_the_config_and_never_stop_the_study(metrics):
    c = make(trials=4, max_failures=2)
    for trial_id in range(4):
        c.launches(float(trial_id))
        c.handle(ResultReported(trial_id, 1, metrics), float(trial_id))
    assert c.failure_stop is None and all(t.state is TrialState.FAILED for t in c.trials.values())
    assert len(c.trials) == 4


def test_a_complete_trial_between_failures_resets_the_streak():
    c = make(trials=6, max_failures=2)
    c.launches(0.0)
    fail(c, 0)
    c.launches(1.0)
    c.handle(ResultReported(1, 1, {"acc": 0.5}), 1.0)
    c.handle(TrialFinished(1), 1.0)
    c.launches(2.0)
    fail(c, 2)
    assert c.failure_stop is None and not c.interrupted
