"""Stays recorded by the controller: opened at launch, closed with why the trial left."""
from __future__ import annotations

from hypersack.core.algorithms.random_search import RandomSearch
from hypersack.core.controller import Budget, Controller
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.core.stays import Stay, StayBook, StayOutcome
from hypersack.core.trial import (DeviceLost, FailureCause, ResultReported, Stop, StopReason,
                                  TrialFailed, TrialFinished, TrialStarted)

from controller_helpers import on_slots, slot


def _controller(n=2, **kw):
    """A controller for ``n`` trials with a device for each."""
    space = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0}})
    objective = Objective("loss", "min")
    return Controller(RandomSearch(space, objective, seed=0), objective, Budget(trials=n),
                               **kw, options=on_slots(n))


def test_a_launch_opens_a_stay_and_finishing_closes_it_finished():
    c = _controller(1)
    (launch,) = c.launches(now=5.0)
    c.handle(TrialStarted(0, "cpu3"), 5.5)          # the placed device is kept
    (opened,) = c.take_stays()
    assert (opened.trial_id, opened.attempt, (opened.node, opened.gpu), opened.start, opened.end) == (
        0, 1, slot(0), 5.0, None)
    c.handle(ResultReported(0, 1, {"loss": 0.3}), 6.0)
    c.handle(TrialFinished(0), 7.0)
    (closed,) = c.take_stays()
    assert closed.key == opened.key and closed.end == 7.0 and closed.outcome is StayOutcome.FINISHED


def _stopped(reason: StopReason) -> StayOutcome | None:
    c = _controller(1)
    c.launches(now=0.0)
    c.take_stays()
    c.handle(ResultReported(0, 1, {"loss": 0.3}), 1.0)
    c.trials[0].stop_reason = reason
    c.handle(TrialFinished(0), 2.0)
    (stay,) = c.take_stays()
    return stay.outcome


def test_the_outcome_says_why_the_trial_left():
    assert _stopped(StopReason.PAUSED) is StayOutcome.PAUSED
    assert _stopped(StopReason.RESIZE) is StayOutcome.RESIZED
    assert _stopped(StopReason.PRUNED) is StayOutcome.PRUNED
    assert _stopped(StopReason.PREEMPTED) is StayOutcome.PREEMPTED
    assert _stopped(StopReason.INTERRUPTED) is StayOutcome.INTERRUPTED
    assert _stopped(StopReason.TIME_BUDGET) is StayOutcome.FINISHED


def _failed(cause: FailureCause, retries=2) -> tuple[StayOutcome | None, int]:
    c = _controller(1, max_retries=retries)
    c.launches(now=0.0)
    c.handle(TrialFailed(0, "boom", cause=cause), 3.0)
    (stay,) = c.take_stays()
    relaunched = c.launches(now=4.0)
    return stay.outcome, len(relaunched)


def test_failures_close_the_stay_failed_lost_or_interrupted():
    assert _failed(FailureCause.ERROR) == (StayOutcome.FAILED, 0)
    assert _failed(FailureCause.WORKER_DIED) == (StayOutcome.FAILED, 1)    # retried: a new stay
    assert _failed(FailureCause.DEVICE_LOST)[0] is StayOutcome.LOST
    assert _failed(FailureCause.DISK_FULL)[0] is StayOutcome.INTERRUPTED


def test_a_retry_is_a_new_stay_with_the_next_attempt():
    c = _controller(1)
    c.launches(now=0.0)
    c.handle(TrialFailed(0, "died", cause=FailureCause.WORKER_DIED), 1.0)
    c.launches(now=2.0)
    stays = c.take_stays()
    assert [(s.attempt, s.outcome) for s in stays] == [(1, StayOutcome.FAILED), (2, None)]


def test_a_bad_metric_and_a_timeout_close_the_stay_failed():
    c = _controller(2, trial_timeout_s=10.0)
    assert len(c.launches(now=0.0)) == 2
    assert c.handle(ResultReported(0, 1, {"loss": float("nan")}), 1.0) == [Stop(0, StopReason.FAILED)]
    c.tick(20.0)
    assert [(s.trial_id, s.end, s.outcome) for s in c.take_stays()] == [
        (0, 1.0, StayOutcome.FAILED), (1, 20.0, StayOutcome.FAILED)]


def test_placed_launches_open_one_stay_per_device_with_the_share():
    book = StayBook()
    book.open(4, 2, [("n0", "gpu0"), ("n1", "gpu3")], 1.0, 25.0, pack=7)
    book.place(4, "ignored")                  # already placed: nothing to fill in
    assert book.take() == [Stay(4, 2, "n0", "gpu0", 1.0, 25.0, 7, 0),
                           Stay(4, 2, "n1", "gpu3", 1.0, 25.0, 7, 1)]
    book.close(4, 0.5, StayOutcome.LOST)      # never ends before it started
    assert [s.end for s in book.take()] == [1.0, 1.0]
    assert book.take() == []


def test_a_device_loss_marks_the_stay_lost_whatever_the_failure_says():
    c = _controller(1)
    c.launches(now=0.0)
    c.handle(DeviceLost(*slot(0)), 1.0)              # the inventory loses the trial's device
    c.handle(TrialFailed(0, "worker died", cause=FailureCause.WORKER_DIED), 1.0)
    assert c.take_stays()[-1].outcome is StayOutcome.LOST


def test_a_stay_round_trips_through_a_dict():
    stay = Stay(1, 2, "n", "g", 1.0, 30.0, {"p": 1}, 1, 2.0, StayOutcome.RESIZED)
    assert Stay.from_dict(stay.to_dict()) == stay
