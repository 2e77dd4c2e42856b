"""The controller driven directly with scripted events and a fake clock."""
from __future__ import annotations

import json
import math

import pytest

from hypersack.core.algorithms import Algorithm, Decision, GridSearch, RandomSearch, Suggestion
from hypersack.core.controller import Budget, Controller, trial_seed
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.core.trial import (FailureCause, Launch, ResultReported, Stop, StopReason,
                                  TrialFailed,
                                  TrialFinished, TrialRecord, TrialStarted, TrialState)
from hypersack.errors import ConfigError

from controller_helpers import on_slots, slot, slot_gpu, unplaced

OBJ = Objective("acc", "max")
SPACE = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0}})


class Scripted(Algorithm):
    """Proposes {"x": trial_id}; returns scripted decisions; records what it is told."""

    def __init__(self, limit: int | None = None, decisions=None, idle_after: int | None = None):
        super().__init__(SPACE, OBJ)
        self.limit = limit
        self.idle_after = idle_after
        self.decisions = decisions or {}
        self.made = 0
        self.results: list[tuple] = []
        self.completed: list[tuple] = []

    @property
    def exhausted(self) -> bool:
        return self.limit is not None and self.made >= self.limit

    def suggest(self, trial_id):
        if self.exhausted or (self.idle_after is not None and self.made >= self.idle_after):
            return None
        self.made += 1
        return Suggestion({"x": float(trial_id)}, {"made": self.made})

    def on_result(self, trial_id, step, metrics):
        self.results.append((trial_id, step, dict(metrics)))
        return self.decisions.get((trial_id, step), Decision.CONTINUE)

    def on_complete(self, trial_id, value, state):
        self.completed.append((trial_id, value, state))

    def state_dict(self):
        return {"made": self.made}

    def load_state_dict(self, state):
        self.made = int(state["made"])


def make(trials=None, time_s=None, algorithm=None, objective=OBJ, now=0.0, slots=1, **kwargs):
    """A controller placing trials on ``slots`` devices of one trial each."""
    algorithm = algorithm if algorithm is not None else Scripted()
    return Controller(algorithm, objective, Budget(trials=trials, time_s=time_s), now=now,
                               **kwargs, options=on_slots(slots))


def report(c, trial_id, step, now=0.0, **metrics):
    return c.handle(ResultReported(trial_id, step, metrics), now)


def finish(c, trial_id, now=0.0):
    return c.handle(TrialFinished(trial_id), now)


# ---- launching --------------------------------------------------------------------------------

def test_launches_fill_the_free_devices_and_respect_the_trials_budget():
    c = make(trials=5, seed=3, slots=3)
    first = c.launches(0.0)
    assert [unplaced(l) for l in first] == [Launch(0, {"x": 0.0}, trial_seed(3, 0), 1, None),
                                            Launch(1, {"x": 1.0}, trial_seed(3, 1), 1, None),
                                            Launch(2, {"x": 2.0}, trial_seed(3, 2), 1, None)]
    assert sorted(l.devices for l in first) == [(slot(0),), (slot(1),), (slot(2),)]
    assert c.running() == 3 and c.algorithm.made == 3
    assert c.launches(0.5) == []                     # every device is busy: no trial is made
    assert c.algorithm.made == 3
    for t in (0, 1):
        report(c, t, 1, acc=0.5)
        finish(c, t, 1.0)
    more = c.launches(1.0)
    assert [l.trial_id for l in more] == [3, 4]
    assert {l.devices for l in more} == {l.devices for l in first[:2]}   # the freed devices
    finish(c, 2, 1.5)
    assert c.launches(2.0) == []                     # a device is free, the budget is spent
    assert len(c.trials) == 5 and c.running() == 2
    assert c.algorithm.made == 5
    record = c.trials[4]
    assert record.state is TrialState.RUNNING and record.attempts == 1
    assert record.started_at == 1.0 and record.info == {"made": 5}


def test_events_update_the_record():
    c = make(trials=1)
    c.launches(0.0)
    assert c.handle(TrialStarted(0, "cuda:1"), 0.5) == []
    assert c.trials[0].device == "cuda:1"
    assert c.handle(ResultReported(0, 3, {"acc": 0.5}, "ck-a1-1.pkl"), 1.0) == []
    assert (c.trials[0].checkpoint, c.trials[0].checkpoint_step) == ("ck-a1-1.pkl", 3)
    assert c.take_results() == [(0, 3, {"acc": 0.5})]
    assert c.handle(ResultReported(0, 4, {"acc": 0.6}), 1.5) == []   # no checkpoint with it
    assert (c.trials[0].checkpoint, c.trials[0].checkpoint_step) == ("ck-a1-1.pkl", 3)


def test_a_replayed_step_is_acknowledged_but_neither_stored_nor_decided_again():
    alg = Scripted(decisions={(0, 2): Decision.STOP})
    c = make(trials=1, algorithm=alg)
    c.launches(0.0)
    c.handle(ResultReported(0, 1, {"acc": 0.1}, "a1-1"), 1.0)
    c.handle(ResultReported(0, 2, {"acc": 0.2}, "a1-2"), 2.0)
    c.take_results()
    seen = list(alg.results)
    # A restart from the step-1 checkpoint recomputes step 2 and reports it again.
    assert c.handle(ResultReported(0, 2, {"acc": 0.9}, "a2-1"), 3.0) == [Stop(0, "pruned")]
    assert c.take_results() == [] and alg.results == seen
    assert (c.trials[0].value, c.trials[0].checkpoint) == (0.2, "a1-2")


def test_a_full_disk_requeues_the_trial_without_a_retry_and_halts_the_study():
    c = make(trials=3, slots=2)
    c.launches(0.0)
    commands = c.handle(TrialFailed(0, "OSError: [Errno 28] No space left", cause=FailureCause.DISK_FULL), 1.0)
    assert commands == [Stop(1, "interrupted")]
    r = c.trials[0]
    assert r.state is TrialState.PENDING and r.retries == 0
    assert c.interrupted and "disk is full" in c.halt_reason
    assert c.launches(2.0) == []                    # trial 0's device is free: nothing starts


def test_events_for_unknown_or_finished_trials_are_ignored():
    c = make(trials=1)
    assert c.handle(ResultReported(7, 1, {"acc": 1.0}), 0.0) == []
    assert c.handle(TrialFinished(7), 0.0) == []
    c.launches(0.0)
    report(c, 0, 1, acc=0.5)
    finish(c, 0, 2.0)
    assert c.handle(ResultReported(0, 2, {"acc": 0.9}), 3.0) == []
    assert c.handle(TrialFailed(0, "late"), 3.0) == []
    assert c.trials[0].value == 0.5 and c.trials[0].state is TrialState.COMPLETE


# ---- time budget ------------------------------------------------------------------------------

def test_time_budget_stops_new_launches_and_stops_running_trials_once():
    c = make(time_s=10.0, now=100.0, slots=3)
    assert [l.trial_id for l in c.launches(105.0)] == [0, 1, 2]
    assert c.elapsed(105.0) == 5.0
    assert c.tick(109.9) == []
    c.handle(TrialFailed(2, "ValueError: boom"), 109.9)       # its device is free
    assert c.launches(110.0) == []                  # elapsed 10 >= 10: nothing new
    stops = c.tick(110.0)
    assert sorted(stops, key=lambda s: s.trial_id) == [Stop(0, "time budget"), Stop(1, "time budget")]
    assert c.tick(111.0) == [] and c.tick(500.0) == []
    assert not c.done(111.0)
    report(c, 0, 4, 111.0, acc=0.7)
    finish(c, 0, 111.5)
    finish(c, 1, 112.0)                             # never reported acc
    assert c.trials[0].state is TrialState.COMPLETE and c.trials[0].value == 0.7
    assert c.trials[1].state is TrialState.FAILED
    assert c.done(112.0)
    assert c.launches(112.0) == []


def test_trial_crashing_after_the_time_budget_ends_complete_with_its_last_value():
    c = make(time_s=10.0)
    c.launches(0.0)
    report(c, 0, 1, 5.0, acc=0.2)
    assert c.tick(10.0) == [Stop(0, "time budget")]
    c.handle(TrialFailed(0, "worker died", cause=FailureCause.WORKER_DIED), 11.0)
    assert c.launches(11.0) == []                 # nothing starts once the time is spent
    assert c.trials[0].state is TrialState.COMPLETE and c.trials[0].value == 0.2
    assert c.done(11.0)


def test_trial_retried_before_the_time_budget_is_asked_again_to_stop_after_relaunch():
    c = make(time_s=10.0)
    c.launches(0.0)
    report(c, 0, 1, 5.0, acc=0.2)
    c.handle(TrialFailed(0, "worker died", cause=FailureCause.WORKER_DIED), 6.0)
    (relaunch,) = c.launches(6.0)
    assert relaunch.trial_id == 0 and relaunch.attempt == 2
    assert c.tick(10.0) == [Stop(0, "time budget")]
    assert report(c, 0, 2, 10.5, acc=0.3) == [Stop(0, "time budget")]
    finish(c, 0, 11.0)
    assert c.trials[0].state is TrialState.COMPLETE and c.trials[0].value == 0.3
    assert c.done(11.0)


def test_queued_trials_wait_for_a_resume_once_the_time_is_spent():
    c = make(time_s=10.0)
    c.launches(0.0)
    c.handle(TrialFailed(0, "worker died", cause=FailureCause.WORKER_DIED), 10.5)   # before any result
    assert c.launches(11.0) == []
    assert c.trials[0].state is TrialState.PENDING
    assert c.done(11.0)


def test_elapsed_never_runs_backwards():
    c = make(time_s=5.0, now=50.0)
    assert c.elapsed(40.0) == 0.0
    assert c.elapsed(52.5) == 2.5


# ---- results and completion -------------------------------------------------------------------

def test_finished_trial_takes_the_last_reported_objective_value():
    alg = Scripted()
    c = make(trials=1, algorithm=alg)
    c.launches(0.0)
    assert report(c, 0, 1, 1.0, acc=0.5, loss=2.0) == []
    assert report(c, 0, 2, 2.0, acc=0.7, loss=1.0) == []
    assert report(c, 0, 3, 3.0, loss=0.5) == []      # no acc in this one
    assert finish(c, 0, 4.0) == []
    r = c.trials[0]
    assert r.state is TrialState.COMPLETE
    assert r.value == 0.7
    assert r.metrics == {"loss": 0.5} and r.last_step == 3
    assert r.finished_at == 4.0 and r.error is None
    assert alg.results == [(0, 1, {"acc": 0.5, "loss": 2.0}), (0, 2, {"acc": 0.7, "loss": 1.0}),
                           (0, 3, {"loss": 0.5})]
    assert alg.completed == [(0, 0.7, "complete")]


def test_integer_metric_values_are_stored_as_floats():
    c = make(trials=1)
    c.launches(0.0)
    report(c, 0, 1, acc=1)
    finish(c, 0)
    assert c.trials[0].value == 1.0 and type(c.trials[0].value) is float


def test_a_first_report_without_the_objective_fails_the_trial_at_once_naming_it():
    alg = Scripted()
    c = make(trials=1, algorithm=alg)
    c.launches(0.0)
    assert report(c, 0, 1, now=1.0, loss=0.3, f1=0.2) == [Stop(0, StopReason.FAILED)]
    finish(c, 0, 2.0)                       # late news of a trial already failed
    r = c.trials[0]
    assert r.state is TrialState.FAILED and r.value is None
    assert "'acc'" in r.error and "first report" in r.error
    assert "'f1'" in r.error and "'loss'" in r.error
    assert r.finished_at == 1.0
    assert alg.completed == [(0, None, "failed")]


def test_a_later_report_may_leave_the_objective_out():
    c = make(trials=1)
    c.launches(0.0)
    report(c, 0, 1, acc=0.5)
    assert report(c, 0, 2, loss=0.1) == []
    finish(c, 0, 2.0)
    assert c.trials[0].state is TrialState.COMPLETE and c.trials[0].value == 0.5


def test_trial_that_reported_nothing_fails():
    c = make(trials=1)
    c.launches(0.0)
    finish(c, 0, 1.0)
    assert c.trials[0].state is TrialState.FAILED
    assert "'acc'" in c.trials[0].error and "nothing" in c.trials[0].error


@pytest.mark.parametrize("metric, value", [
    ("acc", float("nan")), ("acc", float("inf")), ("loss", float("-inf")), ("acc", None),
    ("acc", "0.5"), ("loss", True),
])
def test_non_finite_or_non_numeric_metric_fails_the_trial_and_stops_it(metric, value):
    alg = Scripted()
    c = make(trials=2, algorithm=alg, slots=2)
    c.launches(0.0)
    report(c, 0, 1, 1.0, acc=0.4)
    metrics = {"acc": 0.5, metric: value}
    commands = c.handle(ResultReported(0, 2, metrics), 3.0)
    assert commands == [Stop(0, "failed")]
    r = c.trials[0]
    assert r.state is TrialState.FAILED
    assert r.metrics == {"acc": 0.4} and r.last_step == 1    # the bad report is not recorded
    assert repr(metric) in r.error and repr(value) in r.error and "step 2" in r.error
    assert r.finished_at == 3.0
    assert alg.completed == [(0, None, "failed")]
    assert (0, 2, metrics) not in alg.results
    # The worker's later news changes nothing.
    assert finish(c, 0, 4.0) == []
    assert c.trials[0].state is TrialState.FAILED
    assert c.trials[1].state is TrialState.RUNNING


# ---- failures and retries ---------------------------------------------------------------------

def test_retryable_failure_relaunches_first_with_checkpoint_then_gives_up():
    alg = Scripted()
    c = make(trials=10, algorithm=alg, max_retries=2, seed=9, slots=2)
    launch, other = c.launches(0.0)
    assert (launch.trial_id, other.trial_id) == (0, 1)
    config, seed, device = launch.config, launch.seed, launch.devices
    c.handle(ResultReported(0, 3, {"acc": 0.3}, "/ck/0/a"), 1.0)
    c.handle(TrialFailed(0, "worker 2 died (signal 9)", cause=FailureCause.WORKER_DIED), 2.0)
    r = c.trials[0]
    assert r.state is TrialState.PENDING and r.retries == 1 and r.error == "worker 2 died (signal 9)"
    assert alg.completed == []
    assert not c.done(2.0)

    # The retry takes the free device before any new trial, from its checkpoint.
    assert c.launches(3.0) == [Launch(0, config, seed, 2, "/ck/0/a", device)]
    assert r.state is TrialState.RUNNING and r.error is None
    assert c.launches(3.5) == [] and len(c.trials) == 2

    c.handle(ResultReported(0, 5, {"acc": 0.4}, "/ck/0/b"), 4.0)
    c.handle(TrialFailed(0, "worker died again", cause=FailureCause.WORKER_DIED), 5.0)
    assert c.launches(6.0) == [Launch(0, config, seed, 3, "/ck/0/b", device)]
    assert r.retries == 2

    c.handle(TrialFailed(0, "worker died a third time", cause=FailureCause.WORKER_DIED), 7.0)
    assert r.state is TrialState.FAILED and r.attempts == 3
    assert r.error.startswith("worker died a third time") and "gave up" in r.error
    assert "2 retries" in r.error
    assert alg.completed == [(0, None, "failed")]
    assert [l.trial_id for l in c.launches(8.0)] == [2]
    assert c.trials[1].state is TrialState.RUNNING and c.trials[1].attempts == 1


def test_zero_retries_means_the_first_worker_death_is_final():
    c = make(trials=3, max_retries=0)
    c.launches(0.0)
    c.handle(TrialFailed(0, "oom-killed", cause=FailureCause.WORKER_DIED), 1.0)
    assert c.trials[0].state is TrialState.FAILED and "gave up" in c.trials[0].error


def test_non_retryable_failure_is_final_and_keeps_the_traceback():
    alg = Scripted()
    c = make(trials=3, algorithm=alg)
    c.launches(0.0)
    report(c, 0, 1, acc=0.9)
    tb = 'Traceback (most recent call last):\n  File "train.py", line 3\nValueError: boom\n'
    assert c.handle(TrialFailed(0, "ValueError: boom", traceback=tb), 2.0) == []
    r = c.trials[0]
    assert r.state is TrialState.FAILED
    assert r.error == "ValueError: boom" and r.traceback == tb and r.retries == 0
    assert r.finished_at == 2.0
    assert alg.completed == [(0, None, "failed")]
    assert [l.trial_id for l in c.launches(3.0)] == [1]        # a new trial, not a retry


def test_max_retries_is_validated():
    with pytest.raises(ConfigError) as exc:
        make(trials=1, max_retries=-1)
    assert exc.value.field == "max_retries" and "-1" in str(exc.value)


# ---- interrupt --------------------------------------------------------------------------------

def test_interrupt_stops_running_trials_and_keeps_them_resumable():
    alg = Scripted()
    c = make(trials=10, algorithm=alg, slots=3)
    c.launches(0.0)
    report(c, 0, 1, acc=0.5)
    c.handle(TrialFailed(2, "bad", traceback="tb"), 0.5)       # already over before the interrupt
    commands = c.interrupt()
    assert sorted(commands, key=lambda s: s.trial_id) == [Stop(0, "interrupted"), Stop(1, "interrupted")]
    assert c.launches(1.0) == []                    # trial 2's device is free: nothing starts
    assert not c.done(1.0)
    finish(c, 0, 2.0)
    c.handle(TrialFailed(1, "stopped while loading", cause=FailureCause.ERROR), 2.0)
    assert c.trials[0].state is TrialState.PENDING and c.trials[1].state is TrialState.PENDING
    assert c.trials[0].stop_reason is None and c.trials[0].value == 0.5
    assert c.trials[2].state is TrialState.FAILED
    assert alg.completed == [(2, None, "failed")]
    assert c.running() == 0
    assert c.done(2.0)
    assert c.launches(3.0) == []


def test_interrupt_overrides_a_time_budget_stop_and_the_trial_stays_resumable():
    c = make(time_s=10.0)
    c.launches(0.0)
    assert c.tick(10.0) == [Stop(0, "time budget")]
    assert c.interrupt() == [Stop(0, "interrupted")]
    finish(c, 0, 11.0)
    assert c.trials[0].state is TrialState.PENDING and c.done(11.0)


def test_interrupt_does_not_override_a_prune():
    alg = Scripted(decisions={(0, 1): Decision.STOP})
    c = make(trials=2, algorithm=alg)
    c.launches(0.0)
    assert report(c, 0, 1, acc=0.1) == [Stop(0, "pruned")]
    assert c.interrupt() == []
    finish(c, 0, 1.0)
    assert c.trials[0].state is TrialState.PRUNED


# ---- prune ------------------------------------------------------------------------------------

def test_algorithm_stop_decision_prunes_the_trial():
    alg = Scripted(decisions={(0, 2): Decision.STOP})
    c = make(trials=2, algorithm=alg, slots=2)
    c.launches(0.0)
    assert report(c, 0, 1, acc=0.1) == []
    assert report(c, 0, 2, acc=0.2) == [Stop(0, "pruned")]
    # Further reports before the trial honours the stop: the algorithm is not asked again.
    assert report(c, 0, 3, acc=0.25) == [Stop(0, "pruned")]
    assert [r[:2] for r in alg.results] == [(0, 1), (0, 2)]
    finish(c, 0, 1.0)
    r = c.trials[0]
    assert r.state is TrialState.PRUNED and r.value == 0.25 and r.stop_reason is None
    assert alg.completed == [(0, 0.25, "pruned")]
    assert report(c, 1, 1, acc=0.9) == []             # other trials are unaffected


# ---- restore ----------------------------------------------------------------------------------

def stored_trials():
    return [
        TrialRecord(0, {"x": 0.0}, 100, TrialState.COMPLETE, attempts=1, value=0.3, finished_at=5.0),
        TrialRecord(1, {"x": 1.0}, 101, TrialState.RUNNING, attempts=1, checkpoint="/ck/1",
                    checkpoint_step=4, stop_reason="time budget", value=0.1),
        TrialRecord(2, {"x": 2.0}, 102, TrialState.PENDING, attempts=0),
        TrialRecord(3, {"x": 3.0}, 103, TrialState.FAILED, attempts=1, error="ValueError"),
        TrialRecord(4, {"x": 4.0}, 104, TrialState.PRUNED, attempts=1, value=0.05),
    ]


def test_restore_requeues_unfinished_trials_first_with_their_checkpoints():
    alg = Scripted()
    c = make(trials=7, time_s=100.0, algorithm=alg, now=1000.0, slots=3)
    records = stored_trials()
    c.restore(reversed(records), {"made": 5}, elapsed_s=40.0)
    assert alg.made == 5
    assert c.elapsed(1010.0) == 50.0
    assert [r.trial_id for r in c.take_changes()] == [1, 2]
    assert c.trials[1].state is TrialState.PENDING and c.trials[1].stop_reason is None
    assert [c.trials[i].state for i in (0, 3, 4)] == [TrialState.COMPLETE, TrialState.FAILED,
                                                     TrialState.PRUNED]
    assert not c.done(1000.0)

    launches = c.launches(1001.0)
    assert len(launches) == 3
    assert unplaced(launches[0]) == Launch(1, {"x": 1.0}, 101, 2, "/ck/1")
    assert unplaced(launches[1]) == Launch(2, {"x": 2.0}, 102, 1, None)
    assert launches[2].trial_id == 5 and launches[2].config == {"x": 5.0}
    assert alg.made == 6
    assert c.trials[0].value == 0.3 and c.trials[0].state is TrialState.COMPLETE
    # A restored trial is consulted by the algorithm again (its old stop request is gone).
    assert report(c, 1, 5, 1002.0, acc=0.2) == []


def test_a_retried_trial_goes_before_the_trials_already_waiting():
    c = make(trials=5, max_retries=1)
    c.restore(stored_trials(), None)                # trials 1 and 2 wait, in that order
    (first,) = c.launches(0.0)
    assert first.trial_id == 1
    c.handle(TrialFailed(1, "worker died", cause=FailureCause.WORKER_DIED), 1.0)
    (again,) = c.launches(1.0)
    assert (again.trial_id, again.attempt, again.checkpoint) == (1, 3, "/ck/1")
    finish(c, 1, 2.0)
    assert [l.trial_id for l in c.launches(2.0)] == [2]


def test_restore_carries_elapsed_time_into_the_budget():
    c = make(time_s=60.0, now=0.0, slots=3)
    c.restore(stored_trials(), None, elapsed_s=50.0)
    assert [l.trial_id for l in c.launches(5.0)] == [1, 2, 5]   # the two requeued and one new
    c.handle(TrialFailed(5, "ValueError: boom"), 10.0)        # its device is free
    assert c.launches(10.0) == []                  # 50 + 10 >= 60
    assert len(c.tick(10.0)) == 2
    assert c.state_dict(10.0)["elapsed_s"] == 60.0


def test_restore_continues_a_random_search_exactly():
    space = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0}, "n": [1, 2, 3]})
    original = make(trials=8, algorithm=RandomSearch(space, OBJ, seed=4), seed=4, slots=3)
    original.launches(0.0)
    for t in range(3):
        report(original, t, 1, 1.0, acc=t / 10)
        finish(original, t, 2.0)
    saved_trials = [TrialRecord(**vars(r)) for r in original.take_changes()]
    saved_state = json.loads(json.dumps(original.state_dict(2.0)))
    expected = original.launches(3.0)
    assert [l.trial_id for l in expected] == [3, 4, 5]

    resumed = make(trials=8, algorithm=RandomSearch(space, OBJ, seed=4), seed=4, slots=3)
    resumed.restore(saved_trials, saved_state["algorithm"], saved_state["elapsed_s"])
    assert resumed.launches(3.0) == expected
    assert resumed.best().trial_id == 2


def test_restore_without_algorithm_state_keeps_the_fresh_algorithm():
    alg = Scripted()
    c = make(trials=3, algorithm=alg)
    c.restore([], {})
    assert alg.made == 0 and c.elapsed(0.0) == 0.0


# ---- change tracking, best, done --------------------------------------------------------------

def test_take_changes_returns_each_changed_record_once():
    c = make(trials=3, slots=3)
    assert c.take_changes() == []
    c.launches(0.0)
    assert [r.trial_id for r in c.take_changes()] == [0, 1, 2]
    assert c.take_changes() == []
    report(c, 1, 1, acc=0.5)
    report(c, 1, 2, acc=0.6)
    changed = c.take_changes()
    assert [r.trial_id for r in changed] == [1] and changed[0] is c.trials[1]
    assert c.take_changes() == []
    finish(c, 2, 1.0)
    c.tick(1.0)
    assert [r.trial_id for r in c.take_changes()] == [2]


@pytest.mark.parametrize("mode, expected_id", [("max", 1), ("min", 3)])
def test_best_respects_the_objective_mode(mode, expected_id):
    objective = Objective("acc", mode)
    c = make(trials=5, objective=objective, slots=5)
    assert c.best() is None
    c.launches(0.0)
    values = {0: 0.5, 1: 0.9, 2: 0.95, 3: 0.1, 4: 0.7}
    for t, v in values.items():
        report(c, t, 1, acc=v)
    finish(c, 0)
    finish(c, 1)
    c.handle(TrialFailed(2, "crash"), 0.0)                      # best raw value, but failed
    finish(c, 3)
    # trial 4 still running (0.7): neither the best nor the worst
    assert c.best().trial_id == expected_id
    assert c.best().value == values[expected_id]


def test_best_counts_pruned_trials_with_the_value_they_reached():
    alg = Scripted(decisions={(0, 1): Decision.STOP})
    c = make(trials=2, algorithm=alg, slots=2)
    c.launches(0.0)
    report(c, 0, 1, acc=0.99)
    report(c, 1, 1, acc=0.5)
    finish(c, 0)
    finish(c, 1)
    assert c.trials[0].state is TrialState.PRUNED
    assert c.best().trial_id == 0 and c.best().last_step == 1


def test_done_when_the_grid_is_exhausted():
    space = SearchSpace({"c": ["a", "b"]})
    c = make(trials=100, algorithm=GridSearch(space, OBJ), slots=3)
    assert not c.done(0.0)
    launches = c.launches(0.0)
    assert [l.config for l in launches] == [{"c": "a"}, {"c": "b"}]
    assert not c.done(0.0)
    for t in (0, 1):
        report(c, t, 1, acc=0.5)
        finish(c, t)
    assert c.done(1.0)
    assert c.launches(1.0) == []


def test_done_when_the_trials_budget_is_spent():
    c = make(trials=2, slots=3)
    assert len(c.launches(0.0)) == 2
    report(c, 0, 1, acc=0.5)
    finish(c, 0)
    assert not c.done(0.0)
    finish(c, 1)
    assert c.done(0.0)


def test_done_when_the_algorithm_has_nothing_more_to_suggest():
    alg = Scripted(idle_after=1)
    c = make(trials=10, algorithm=alg, slots=2)
    assert [l.trial_id for l in c.launches(0.0)] == [0]
    assert not c.done(0.0)
    report(c, 0, 1, acc=0.5)
    finish(c, 0)
    assert c.done(0.0)


def test_not_done_while_a_retry_is_queued():
    c = make(trials=1)
    c.launches(0.0)
    c.handle(TrialFailed(0, "died", cause=FailureCause.WORKER_DIED), 0.0)
    assert c.running() == 0 and not c.done(0.0)
    assert c.launches(0.0)[0].attempt == 2


def test_state_dict_holds_algorithm_state_and_elapsed_time():
    alg = Scripted()
    c = make(trials=3, algorithm=alg, now=10.0, slots=2)
    c.launches(10.0)
    state = c.state_dict(13.5)
    assert state == {"algorithm": {"made": 2}, "elapsed_s": 3.5}
    json.dumps(state)


# ---- budget and seeds -------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, field, value_text", [
    ({}, "budget", "{}"),
    ({"trials": 0}, "budget.trials", "0"),
    ({"trials": -3}, "budget.trials", "-3"),
    ({"trials": 2.5}, "budget.trials", "2.5"),
    ({"trials": "10"}, "budget.trials", "'10'"),
    ({"trials": True}, "budget.trials", "True"),
    ({"time_s": 0}, "budget.time_s", "0"),
    ({"time_s": -1.5}, "budget.time_s", "-1.5"),
    ({"time_s": "60"}, "budget.time_s", "'60'"),
    ({"time_s": float("nan")}, "budget.time_s", "nan"),
    ({"time_s": float("inf")}, "budget.time_s", "inf"),
    ({"trials": 5, "time_s": 0.0}, "budget.time_s", "0.0"),
])
def test_budget_validation(kwargs, field, value_text):
    with pytest.raises(ConfigError) as exc:
        Budget(**kwargs)
    assert exc.value.field == field
    assert value_text in str(exc.value)


def test_valid_budgets():
    assert Budget(trials=1).time_s is None
    assert Budget(time_s=0.5).trials is None
    assert Budget(trials=3, time_s=60) == Budget(trials=3, time_s=60)


def test_trial_seed_is_deterministic_and_distinct():
    assert trial_seed(0, 0) == trial_seed(0, 0)
    assert trial_seed(7, 12) == trial_seed(7, 12)
    seeds = [trial_seed(7, t) for t in range(2000)]
    assert len(set(seeds)) == len(seeds)
    assert all(0 <= s < 2**31 - 1 for s in seeds)
    assert trial_seed(1, 5) != trial_seed(2, 5)
    # The controller uses it for every trial it creates.
    c = make(trials=3, seed=7, slots=3)
    assert [l.seed for l in c.launches(0.0)] == seeds[:3]


def test_launch_config_is_a_copy():
    c = make(trials=1)
    (launch,) = c.launches(0.0)
    launch.config["x"] = math.pi
    assert c.trials[0].config == {"x": 0.0}


def test_a_trial_past_its_time_limit_fails_and_is_cancelled_by_the_controller():
    from hypersack.core.trial import DeviceAdded
    c = make(trials=3, trial_timeout_s=10.0)
    c.launches(0.0)
    c.handle(DeviceAdded(slot(1)[0], slot_gpu(1)), 5.0)        # a second device joins
    assert [l.trial_id for l in c.launches(5.0)] == [1]
    assert c.tick(9.0) == []
    from hypersack.core.trial import Cancel
    (cancel,) = c.tick(10.5)
    assert cancel == Cancel(0, "timed out after 10 s (executor.trial_timeout_s)")
    assert c.trials[0].state is TrialState.FAILED and "timed out" in c.trials[0].error
    # The executor's late news of the killed worker changes nothing.
    c.handle(TrialFailed(0, "cancelled", cause=FailureCause.CANCELLED), 11.0)
    assert c.trials[0].state is TrialState.FAILED and c.trials[0].retries == 0
    assert [x.trial_id for x in c.tick(15.5)] == [1]


def test_a_silent_trial_is_marked_not_responding_then_killed_and_retried_as_a_dead_worker():
    from hypersack.core.timeouts import NOT_RESPONDING
    from hypersack.core.trial import Cancel, TrialHeartbeat
    c = make(trials=2, slots=2, heartbeat_timeout_s=10.0)
    c.launches(0.0)
    assert c.tick(1000.0) == []                     # no heartbeat yet (start-up): never judged
    c.handle(TrialHeartbeat(0), 1000.0)
    c.handle(TrialHeartbeat(1), 1000.0)
    c.take_changes()
    c.handle(TrialHeartbeat(1), 1004.0)
    assert c.tick(1005.0) == [] and NOT_RESPONDING not in c.trials[0].info
    assert c.tick(1005.5) == []                     # silent for more than half the limit
    assert c.trials[0].info[NOT_RESPONDING] == 5.5 and NOT_RESPONDING not in c.trials[1].info
    assert [r.trial_id for r in c.take_changes()] == [0]
    (cancel,) = c.tick(1010.5)
    assert cancel.trial_id == 0 and cancel.cause is FailureCause.WORKER_DIED
    assert "no heartbeat from its worker for 10 s (executor.heartbeat_timeout_s = 10)" in cancel.reason
    assert c.tick(1011.0) == [] and c.trials[0].state is TrialState.RUNNING   # killed once
    c.handle(TrialFailed(0, cancel.reason, cause=cancel.cause), 1011.0)
    assert c.trials[0].state is TrialState.PENDING and c.trials[0].retries == 1
    assert NOT_RESPONDING not in c.trials[0].info
    (again,) = c.launches(1011.0)
    assert again.trial_id == 0 and again.attempt == 2
    assert c.tick(1100.0) == [Cancel(1, cancel.reason.replace("10 s", "96 s"), FailureCause.WORKER_DIED)]
    assert c.trials[0].state is TrialState.RUNNING   # its new attempt has not beaten yet


def test_a_trial_heard_again_responds_again_and_heartbeats_alone_change_nothing_stored():
    from hypersack.core.timeouts import NOT_RESPONDING
    from hypersack.core.trial import TrialHeartbeat
    c = make(trials=1, heartbeat_timeout_s=10.0)
    c.launches(0.0)
    c.handle(TrialHeartbeat(0), 0.0)
    c.take_changes()
    c.handle(TrialHeartbeat(0), 1.0)
    assert c.take_changes() == []
    c.tick(7.0)
    assert c.trials[0].info[NOT_RESPONDING] == 6.0
    c.take_changes()
    c.handle(TrialHeartbeat(0), 8.0)
    assert NOT_RESPONDING not in c.trials[0].info and [r.trial_id for r in c.take_changes()] == [0]
    assert c.tick(17.0) == []


def test_heartbeats_are_not_watched_without_a_limit():
    from hypersack.core.trial import TrialHeartbeat
    c = make(trials=1)
    c.launches(0.0)
    c.handle(TrialHeartbeat(0), 0.0)
    assert c.tick(1e9) == []
