"""The controller with time-sharing: binding, Preempt at the end of a quantum, waiting trials,
capacity, algorithm decisions over preemption, devices lost, and state kept across a restart."""
from __future__ import annotations

from hypersack.core.algorithms import Decision
from hypersack.core.allocator import Demand
from hypersack.core.controller import Budget, Controller, ControllerOptions
from hypersack.core.trial import (DeviceLost, FailureCause, Launch, Preempt, Stop, StopReason,
                                  TrialFailed, TrialFinished, TrialState)
from hypersack.placement import GPU, Cluster, Node
from timesharing_helpers import OBJ, Scripted, make, report, ts

def test_trials_are_bound_and_one_runs_per_device():
    c = make(n=1, trials=3)
    launches = c.launches(0.0)
    assert [(l.trial_id, l.devices) for l in launches] == [(0, (("n0", "g0"),))]
    assert len(c.trials) == 3                      # all three bound to the device (G_thres 4)
    assert [c.trials[t].state for t in (1, 2)] == [TrialState.PENDING] * 2
    assert ts(c, 0)["state"] == "running" and ts(c, 1)["state"] == "waiting"
    assert ts(c, 1)["priority"] is None and ts(c, 1)["device"] == "n0/g0"


def test_g_thres_keeps_later_trials_in_the_global_queue():
    c = make(n=1, trials=6, max_jobs_per_device=2)
    c.launches(0.0)
    assert len(c.trials) == 2          # two bound; the next is created once a binding frees
    report(c, 0, 1, 1.0, 1.0)
    c.handle(TrialFinished(0), 2.0)
    assert c.trials[0].state is TrialState.COMPLETE
    assert [l.trial_id for l in c.launches(2.0)] == [1]
    assert len(c.trials) == 3 and ts(c, 2)["device"] == "n0/g0"


def test_quantum_end_preempts_for_a_new_trial_and_the_next_one_starts():
    c = make(n=1, trials=2)
    c.launches(0.0)
    assert report(c, 0, 1, 5.0, 3.0) == []
    assert report(c, 0, 2, 4.0, 6.0) == []
    assert c.tick(9.0) == []                       # the quantum is not over
    assert c.tick(10.0) == [Preempt(0)]
    assert c.tick(11.0) == []                      # asked once
    assert c.launches(11.0) == []            # trial 0 holds the device until it leaves
    assert report(c, 0, 3, 3.9, 12.0) == [Preempt(0)]   # the next report repeats the request
    c.handle(TrialFinished(0), 12.5)
    record = c.trials[0]
    assert record.state is TrialState.PENDING and record.retries == 0 and record.error is None
    assert ts(c, 0)["state"] == "waiting" and ts(c, 0)["preemptions"] == 1
    launches = c.launches(13.0)
    assert [l.trial_id for l in launches] == [1]
    assert not c.done(13.0)


def test_a_preempted_trial_resumes_from_its_checkpoint_on_its_device():
    c = make(n=2, trials=3)
    first = c.launches(0.0)
    device_of_0 = next(l.devices for l in first if l.trial_id == 0)
    report(c, 0, 1, 5.0, 1.0)
    report(c, 0, 2, 4.0, 2.0)
    assert c.tick(10.0) == [Preempt(0)]
    c.handle(TrialFinished(0), 10.0)
    (launch_2,) = c.launches(10.0)
    assert launch_2.trial_id == 2 and launch_2.devices == device_of_0
    report(c, 2, 1, 5.0, 11.0)
    report(c, 2, 2, 4.9, 12.0)                      # converges far slower than trial 0 did
    assert c.tick(20.0) == [Preempt(2)]
    c.handle(TrialFinished(2), 20.0)
    (again,) = c.launches(20.0)
    assert isinstance(again, Launch) and again.trial_id == 0
    assert again.checkpoint == "ck-0-2" and again.devices == device_of_0 and again.attempt == 2


def test_the_best_running_trial_keeps_its_device():
    c = make(n=1, trials=2)
    c.launches(0.0)
    report(c, 0, 1, 5.0, 1.0)
    report(c, 0, 2, 4.0, 2.0)
    c.tick(10.0)
    c.handle(TrialFinished(0), 10.0)
    c.launches(10.0)                          # trial 1's first quantum
    report(c, 1, 1, 5.0, 11.0)
    report(c, 1, 2, 4.99, 12.0)                     # C = 0.005 against trial 0's 0.5
    assert c.tick(20.0) == [Preempt(1)]
    c.handle(TrialFinished(1), 20.0)
    c.launches(20.0)                          # trial 0 is back
    report(c, 0, 3, 3.0, 21.0)
    report(c, 0, 4, 2.0, 22.0)                      # (4.5 - 2.5) / 2 = 1.0: still the best
    assert c.tick(40.0) == []
    assert c.trials[0].state is TrialState.RUNNING


def test_a_trial_without_a_checkpoint_is_not_preempted():
    c = make(n=1, trials=2)
    c.launches(0.0)
    report(c, 0, 1, 5.0, 1.0, checkpoint=False)
    report(c, 0, 2, 4.0, 2.0, checkpoint=False)
    assert c.tick(10.0) == []


def test_the_algorithm_decides_over_a_pending_preemption():
    c = make(n=1, trials=2, decisions={(0, 3): Decision.STOP})
    c.launches(0.0)
    report(c, 0, 1, 5.0, 1.0)
    report(c, 0, 2, 4.0, 2.0)
    assert c.tick(10.0) == [Preempt(0)]
    assert report(c, 0, 3, 3.9, 11.0) == [Stop(0, StopReason.PRUNED)]
    c.handle(TrialFinished(0), 11.0)
    assert c.trials[0].state is TrialState.PRUNED
    assert ts(c, 0) is None                          # its binding is freed


def test_capacity_runs_as_many_as_fit_r_times_c():
    c = make(n=1, trials=5, demand=Demand(compute=50.0))
    launches = c.launches(0.0)
    assert [l.trial_id for l in launches] == [0, 1]    # 2 x 50% on a 100% device
    assert len(c.trials) == 4                           # G_thres 4: the fifth is not created


def test_fifo_creates_a_trial_only_when_a_device_can_start_it():
    c = make(n=1, trials=3, policy="fifo")
    assert [l.trial_id for l in c.launches(0.0)] == [0]
    assert len(c.trials) == 1
    report(c, 0, 1, 5.0, 1.0)
    report(c, 0, 2, 4.0, 2.0)
    assert c.tick(1e6) == []


def test_a_lost_device_sends_its_trials_to_another_device():
    c = make(n=2, trials=4)
    c.launches(0.0)
    on_g1 = [t for t, r in c.trials.items() if ts(c, t)["device"] == "n0/g1"]
    c.handle(DeviceLost("n0", "g1"), 1.0)
    for t in on_g1:
        if c.trials[t].state is TrialState.RUNNING:
            c.handle(TrialFailed(t, "lost", cause=FailureCause.DEVICE_LOST), 1.0)
    c.launches(1.0)
    assert all(ts(c, t)["device"] == "n0/g0" for t in on_g1)
    assert all(c.trials[t].retries == 0 for t in on_g1)


def test_restart_keeps_bindings_and_priorities():
    c = make(n=2, trials=4)
    c.launches(0.0)
    report(c, 0, 1, 5.0, 1.0)
    report(c, 0, 2, 4.0, 2.0)
    c.tick(10.0)
    c.handle(TrialFinished(0), 10.0)
    state = c.state_dict(10.0)
    assert state["time_sharing"]["jobs"]["0"]["priority"] == 0.5
    records = [c.trials[t] for t in sorted(c.trials)]
    again = Controller(Scripted(), OBJ, Budget(trials=4), options=ControllerOptions(
        inventory=Cluster([Node("n0", 8, [GPU(f"g{i}", "A100", 16.0) for i in range(2)])]),
        demand=Demand().job, time_sharing={"policy": "hermes", "quantum_s": 10}))
    again.restore(records, state["algorithm"], state["elapsed_s"], time_sharing=state["time_sharing"])
    assert again.shared.state_dict() == c.shared.state_dict()
    launched = {l.trial_id: l.devices for l in again.launches(0.0)}
    assert all(ts(again, t)["device"] == "/".join(d[0]) for t, d in launched.items())
    assert ts(again, 0)["priority"] == 0.5


def test_interrupt_during_a_preemption_leaves_the_trial_resumable():
    c = make(n=1, trials=2)
    c.launches(0.0)
    report(c, 0, 1, 5.0, 1.0)
    report(c, 0, 2, 4.0, 2.0)
    assert c.tick(10.0) == [Preempt(0)]
    assert c.interrupt() == [Stop(0, StopReason.INTERRUPTED)]
    c.handle(TrialFinished(0), 11.0)
    assert c.trials[0].state is TrialState.PENDING
    assert c.launches(11.0) == [] and c.done(11.0)
