"""The study's best trial (any trial's last reported value) and the end-game that finishes the
best paused trials a trial budget left stranded (issue 12, item 4)."""
from __future__ import annotations

import pytest

from hypersack.core.algorithms import Decision
from hypersack.core.algorithms.asha import ASHA
from hypersack.core.algorithms.sha import SuccessiveHalving
from hypersack.core.objective import Objective
from hypersack.core.trial import TrialState

from test_controller import OBJ, SPACE, Scripted, finish, make, report


def pause_all_at_step_1(n: int) -> Scripted:
    return Scripted(decisions={(t, 1): Decision.PAUSE for t in range(n)})


def run_to_pauses(c, values):
    """Run trials 0..n-1 (``c`` has a device for each) to step 1 with ``values``."""
    assert len(c.launches(0.0)) == len(values)
    for t, v in enumerate(values):
        report(c, t, 1, acc=v)
        finish(c, t)


def test_best_is_any_reported_value_of_a_trial_that_did_not_fail():
    from hypersack.core.trial import TrialFailed
    c = make(trials=5, algorithm=Scripted(decisions={(1, 2): Decision.PAUSE, (2, 1): Decision.STOP}),
             slots=5)
    c.launches(0.0)
    report(c, 0, 3, acc=0.6)
    finish(c, 0)                                   # complete 0.6
    report(c, 1, 2, acc=0.7)
    finish(c, 1)                                   # paused 0.7 at step 2
    assert c.best().trial_id == 1 and c.trials[1].state is TrialState.PAUSED
    report(c, 2, 1, acc=0.8)
    finish(c, 2)                                   # pruned 0.8
    assert c.best().trial_id == 2 and c.best().last_step == 1
    report(c, 3, 1, acc=0.99)
    c.handle(TrialFailed(3, "crash"), 0.0)         # failed: its 0.99 does not count
    assert c.trials[3].state is TrialState.FAILED and c.best().trial_id == 2
    report(c, 4, 1, acc=0.9)                       # running: counts, the best so far
    assert c.best().trial_id == 4


def test_end_game_finishes_the_most_advanced_best_paused_trial():
    alg = Scripted(decisions={(0, 1): Decision.PAUSE, (1, 1): Decision.PAUSE, (1, 2): Decision.PAUSE,
                              (2, 1): Decision.PAUSE, (2, 2): Decision.PAUSE})
    c = make(trials=3, algorithm=alg, slots=3)
    c.launches(0.0)
    report(c, 0, 1, acc=0.99)                      # best value, but least advanced
    finish(c, 0)
    for t, v in ((1, 0.5), (2, 0.6)):
        report(c, t, 1, acc=v)
        report(c, t, 2, acc=v)
        finish(c, t)
    assert all(r.state is TrialState.PAUSED for r in c.trials.values())
    assert not c.done(1.0)                         # the end-game has a trial to finish
    launched = c.launches(1.0)                     # three idle devices, one end-game trial
    assert [l.trial_id for l in launched] == [2]   # step 2 beats step 1; 0.6 beats 0.5
    assert c.trials[2].info["end_game"] is True
    seen = len(alg.results)
    assert report(c, 2, 2, acc=0.7) == [] and report(c, 2, 3, acc=0.8) == []
    assert len(alg.results) == seen                # the algorithm is not asked again
    finish(c, 2, 2.0)
    assert c.trials[2].state is TrialState.COMPLETE
    assert c.launches(2.0) == [] and c.done(2.0)
    c.finalize(2.0)
    assert [c.trials[t].state for t in (0, 1)] == [TrialState.PRUNED, TrialState.PRUNED]
    assert c.best().trial_id == 0                  # 0.99 at step 1: reported, with its step


def test_end_game_waits_while_trials_may_still_be_created_or_run():
    c = make(trials=3, algorithm=pause_all_at_step_1(3), slots=2)
    c.launches(0.0)                                # two devices: one trial still to create
    for t in (0, 1):
        report(c, t, 1, acc=0.5)
        finish(c, t)
    assert [l.trial_id for l in c.launches(0.0)] == [2]      # a new trial, not the end-game
    assert c.launches(0.0) == []                   # trial 2 runs (a device is idle): no end-game yet
    report(c, 2, 1, acc=0.4)
    finish(c, 2)
    assert [l.trial_id for l in c.launches(0.0)] == [0]


def test_no_end_game_when_a_trial_completed_or_out_of_time_or_interrupted():
    alg = Scripted(decisions={(0, 1): Decision.PAUSE})
    c = make(trials=2, algorithm=alg, slots=2)
    run_to_pauses(c, [0.9, 0.1])                   # trial 1 completes
    assert c.trials[1].state is TrialState.COMPLETE
    assert c.launches(1.0) == [] and c.done(1.0)

    timed = make(trials=2, time_s=10.0, algorithm=pause_all_at_step_1(2), slots=2)
    run_to_pauses(timed, [0.9, 0.1])
    assert timed.launches(10.0) == [] and timed.done(10.0)

    stopped = make(trials=2, algorithm=pause_all_at_step_1(2), slots=2)
    run_to_pauses(stopped, [0.9, 0.1])
    stopped.interrupt()
    assert stopped.launches(1.0) == [] and stopped.done(1.0)


def test_end_game_picks_one_trial_per_bracket_and_retries_after_a_failure():
    from hypersack.core.trial import TrialFailed
    c = make(trials=4, algorithm=pause_all_at_step_1(4), max_retries=0, slots=4)
    c.launches(0.0)
    for t, v in enumerate([0.1, 0.2, 0.3, 0.4]):
        c.trials[t].info["bracket"] = t % 2      # as SHA, Hyperband and BOHB annotate trials
        report(c, t, 1, acc=v)
        finish(c, t)
    assert sorted(l.trial_id for l in c.launches(1.0)) == [2, 3]
    c.handle(TrialFailed(3, "crash"), 1.0)
    report(c, 2, 2, acc=0.5)
    finish(c, 2)
    assert [l.trial_id for l in c.launches(1.0)] == [1]      # bracket 1's next best


@pytest.mark.parametrize("algorithm", [
    lambda: ASHA(SPACE, OBJ, min_t=1, max_t=12, reduction_factor=3),
    lambda: SuccessiveHalving(SPACE, OBJ, n=27, min_t=1, max_t=9, reduction_factor=3),
])
def test_multi_fidelity_study_with_a_small_trial_budget_completes_a_trial(algorithm):
    """The issue's case: 8 trials under pause-mode ASHA (or SHA wanting 27) ended 0 complete."""
    c = make(trials=8, algorithm=algorithm(), objective=Objective("acc", "max"), slots=2)
    running: dict[int, int] = {}                   # trial -> next step
    for _ in range(200):
        for launch in c.launches(0.0):
            running[launch.trial_id] = (c.trials[launch.trial_id].last_step or 0) + 1
        if not running:
            break
        trial_id, step = next(iter(running.items()))
        commands = report(c, trial_id, step, acc=c.trials[trial_id].config["x"] + step / 100)
        if commands or step == 12:
            del running[trial_id]
            finish(c, trial_id)
        else:
            running[trial_id] = step + 1
    assert c.done(0.0)
    c.finalize(0.0)
    complete = [r for r in c.trials.values() if r.state is TrialState.COMPLETE]
    assert len(complete) == 1 and complete[0].last_step == 12
    assert c.best() is not None
