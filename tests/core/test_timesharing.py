"""Hermes' time-sharing decisions (core/timesharing.py): Eq. 2-4 by hand, Algorithm 2's ties,
Algorithm 3 per policy, quantum growth, options; G_thres and device capacity as properties."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypersack.core.allocator import Allocator
from hypersack.core.objective import Objective
from hypersack.placement import GPU, Cluster, Job, Node
from hypersack.core.shared_devices import SharedDevices
from hypersack.core.timesharing import (TimeShare, TimeSharing, convergence, find_device,
                                        quantum_length, representative_loss, slaq_priority)
from hypersack.core.trial import TrialRecord, TrialState
from hypersack.errors import ConfigError

A, B, C = ("n0", "0"), ("n0", "1"), ("n1", "0")


# ---- Eq. 2-4, worked by hand ------------------------------------------------------------------

def test_representative_loss_is_the_midpoint_of_max_and_min():
    # losses 5.0, 4.0, 4.6, 3.8: max 5.0, min 3.8 -> (5.0 + 3.8) / 2 = 4.4 (not the mean 4.35)
    assert representative_loss([5.0, 4.0, 4.6, 3.8]) == pytest.approx(4.4)
    assert representative_loss([2.0]) == 2.0


def test_first_quantum_convergence_is_the_range_per_loss():
    # Eq. 4: (5.0 - 3.8) / 4 losses = 0.3
    assert convergence([5.0, 4.0, 4.6, 3.8], None) == pytest.approx(0.3)


def test_later_convergence_is_the_drop_of_the_representative_loss_per_loss():
    # Eq. 3: previous 4.4; now 4.0, 3.0, 3.6 -> representative 3.5; (4.4 - 3.5) / 3 = 0.3
    assert convergence([4.0, 3.0, 3.6], 4.4) == pytest.approx(0.3)
    # a loss that rose gives a negative convergence
    assert convergence([4.6, 4.8], 4.4) == pytest.approx((4.4 - 4.7) / 2)


def test_empty_quantum_has_no_convergence():
    with pytest.raises(ValueError):
        convergence([], None)
    with pytest.raises(ValueError):
        representative_loss([])


def test_close_quantum_chains_eq4_then_eq3():
    share = TimeShare(TimeSharing("hermes"), [A])
    share.bind(1)
    share.started(1, now=0.0)
    for loss in (5.0, 4.0, 4.6, 3.8):
        share.observe(1, loss)
    share.close_quantum(1, now=10.0)
    assert share.jobs[1].priority == pytest.approx(0.3)       # Eq. 4
    assert share.jobs[1].last_loss == pytest.approx(4.4)
    for loss in (4.0, 3.0, 3.6):
        share.observe(1, loss)
    share.close_quantum(1, now=20.0)
    assert share.jobs[1].priority == pytest.approx(0.3)       # Eq. 3 from 4.4
    assert share.jobs[1].last_loss == pytest.approx(3.5)
    assert share.jobs[1].quanta == 2


def test_slaq_normalises_by_the_largest_drop_seen():
    assert slaq_priority(0.5, 1.0) == 0.5
    assert slaq_priority(2.0, 1.0) == 1.0     # a new largest drop is 1
    assert slaq_priority(0.0, 0.0) == 0.0
    share = TimeShare(TimeSharing("slaq"), [A])
    share.bind(1)
    share.started(1, 0.0)
    for loss in (5.0, 3.0):                    # Eq. 4 drop (5 - 3) / 2 = 1.0 -> priority 1
        share.observe(1, loss)
    share.close_quantum(1, 30.0)
    assert share.jobs[1].priority == pytest.approx(1.0)
    for loss in (3.5, 3.5):                    # (4.0 - 3.5) / 2 = 0.25 -> 0.25 / 1.0
        share.observe(1, loss)
    share.close_quantum(1, 60.0)
    assert share.jobs[1].priority == pytest.approx(0.25)


# ---- Algorithm 2 ---------------------------------------------------------------------------

def test_find_device_takes_the_least_loaded_device_under_the_threshold():
    assert find_device([(A, 2), (B, 1), (C, 3)], limit=4) == B
    assert find_device([(A, 4), (B, 4), (C, 3)], limit=4) == C
    assert find_device([(A, 4), (B, 4)], limit=4) is None
    assert find_device([], limit=4) is None


def test_find_device_ties_go_to_the_first_device_in_inventory_order():
    assert find_device([(A, 1), (B, 0), (C, 0)], limit=4) == B
    assert find_device([(C, 0), (B, 0), (A, 0)], limit=4) == C
    assert find_device([(A, 2), (B, 2), (C, 2)], limit=4) == A


def test_binding_fills_devices_evenly_then_queues_globally():
    share = TimeShare(TimeSharing("hermes", max_jobs_per_device=2), [A, B])
    devices = [share.bind(t) for t in range(5)]
    assert devices == [A, B, A, B, None]
    share.forget(1)                 # a trial of B ended: the queued trial goes there
    assert share.bind(4) == B


# ---- Algorithm 3 ---------------------------------------------------------------------------

def _running(share: TimeShare, trial_id: int, losses, now: float = 0.0) -> None:
    share.started(trial_id, now)
    for loss in losses:
        share.observe(trial_id, loss)


def test_a_new_trial_gets_one_quantum_before_a_trial_with_a_convergence():
    share = TimeShare(TimeSharing("hermes"), [A])
    for t in (1, 2):
        share.bind(t)
    _running(share, 1, [9.0, 1.0])            # huge convergence, 4.0
    assert share.due(1, 10.0)
    assert share.should_preempt(1, [2], 10.0) == 2


def test_the_running_trial_competes_and_keeps_the_device_while_best():
    share = TimeShare(TimeSharing("hermes"), [A])
    for t in (1, 2):
        share.bind(t)
    share.jobs[2].priority = 0.5                # trial 2 waits with C = 0.5
    _running(share, 1, [5.0, 3.0])             # Eq. 4: (5 - 3) / 2 = 1.0 > 0.5
    assert share.should_preempt(1, [2], 10.0) is None
    share.observe(1, 3.0)
    share.observe(1, 2.8)                       # (4.0 - 2.9) / 2 = 0.55 > 0.5: stays
    assert share.should_preempt(1, [2], 20.0) is None
    share.observe(1, 2.8)
    share.observe(1, 2.7)                       # (2.9 - 2.75) / 2 = 0.075 < 0.5: preempted
    assert share.should_preempt(1, [2], 30.0) == 2


def test_a_tie_keeps_the_running_trial():
    share = TimeShare(TimeSharing("hermes"), [A])
    for t in (1, 2):
        share.bind(t)
    share.jobs[2].priority = 1.0
    _running(share, 1, [5.0, 3.0])             # C = 1.0, equal to the waiting trial's
    assert share.should_preempt(1, [2], 10.0) is None


def test_the_waiting_trial_with_the_largest_convergence_is_chosen():
    share = TimeShare(TimeSharing("hermes"), [A])
    for t in (1, 2, 3, 4):
        share.bind(t)
    share.jobs[2].priority, share.jobs[3].priority, share.jobs[4].priority = 0.2, 0.9, 0.4
    _running(share, 1, [5.0, 4.9])             # 0.05
    assert share.should_preempt(1, [2, 3, 4], 10.0) == 3
    assert share.ranked([2, 3, 4, 1]) == [3, 4, 2, 1]


def test_a_quantum_needs_its_time_and_two_reports():
    share = TimeShare(TimeSharing("hermes", quantum_s=10), [A])
    share.bind(1)
    _running(share, 1, [5.0], now=0.0)
    assert not share.due(1, 9.9)
    assert not share.due(1, 50.0)              # one report only
    share.observe(1, 4.0)
    assert not share.due(1, 9.9)
    assert share.due(1, 10.0)


def test_round_robin_runs_the_longest_waiting_trial_and_sends_the_runner_back():
    share = TimeShare(TimeSharing("rr"), [A])
    for t in (1, 2, 3):
        share.bind(t)
    _running(share, 1, [5.0, 1.0])             # convergence does not matter to rr
    assert share.should_preempt(1, [2, 3], 30.0) == 2
    share.preempted(1)
    _running(share, 2, [5.0, 4.99])
    assert share.should_preempt(2, [3, 1], 60.0) == 3     # 3 waited longer than 1
    share.preempted(2)
    _running(share, 3, [5.0, 4.0])
    assert share.should_preempt(3, [1, 2], 90.0) == 1
    assert share.should_preempt(3, [], 120.0) is None     # alone: it keeps the device


def test_fifo_never_preempts():
    share = TimeShare(TimeSharing("fifo"), [A])
    share.bind(1)
    share.bind(2)
    _running(share, 1, [5.0, 4.999])
    assert share.should_preempt(1, [2], 1e6) is None


def test_slaq_prefers_the_trial_still_improving_at_its_own_pace():
    share = TimeShare(TimeSharing("slaq"), [A])
    for t in (1, 2):
        share.bind(t)
    share.jobs[2].priority = 0.9               # a slow trial, still dropping at 90% of its best
    _running(share, 1, [5.0, 3.0])             # first quantum: (5 - 3) / 2 = 1.0 -> 1.0 / 1.0
    assert share.should_preempt(1, [2], 30.0) is None
    share.observe(1, 1.0)
    share.observe(1, 0.9)                      # (4.0 - 0.95) / 2 = 1.525, a new largest -> 1
    assert share.should_preempt(1, [2], 60.0) is None
    share.observe(1, 0.9)
    share.observe(1, 0.89)                     # (0.95 - 0.895) / 2 = 0.0275 / 1.525 < 0.9
    assert share.should_preempt(1, [2], 90.0) == 2


# ---- quanta and options ----------------------------------------------------------------------

def test_quantum_grows_with_preemptions_up_to_its_cap():
    options = TimeSharing("hermes", quantum_s=10, growth=1.5, max_quantum_s=30)
    assert [quantum_length(options, p) for p in range(5)] == pytest.approx([10, 15, 22.5, 30, 30])
    fixed = TimeSharing("rr")
    assert quantum_length(fixed, 7) == 30.0
    share = TimeShare(options, [A])
    share.bind(1)
    share.preempted(1)
    assert share.quantum(1) == pytest.approx(15.0)


def test_defaults_per_policy():
    assert TimeSharing("hermes").to_dict() == {"policy": "hermes", "quantum_s": 10.0, "growth": 1.5,
                                               "max_quantum_s": 80.0, "max_jobs_per_device": 4,
                                               "metric": None}
    assert TimeSharing("slaq").quantum_s == 30.0 and TimeSharing("slaq").growth == 1.0
    assert TimeSharing.parse("rr") == TimeSharing("rr")
    assert TimeSharing.parse(None) is None
    assert TimeSharing.parse(TimeSharing("rr").to_dict()) == TimeSharing("rr")


@pytest.mark.parametrize("given_value, field", [
    ({"policy": "lottery"}, "time_sharing.policy"),
    ({"quantum_s": 0}, "time_sharing.quantum_s"),
    ({"quantum_s": "10"}, "time_sharing.quantum_s"),
    ({"growth": 0.5}, "time_sharing.growth"),
    ({"quantum_s": 20, "max_quantum_s": 10}, "time_sharing.max_quantum_s"),
    ({"max_jobs_per_device": 0}, "time_sharing.max_jobs_per_device"),
    ({"max_jobs_per_device": 2.5}, "time_sharing.max_jobs_per_device"),
    ({"metric": ""}, "time_sharing.metric"),
    ({"quantum": 10}, "time_sharing.quantum"),
    (7, "time_sharing"),
])
def test_bad_options_name_field_and_value(given_value, field):
    with pytest.raises(ConfigError) as err:
        TimeSharing.parse(given_value)
    assert err.value.field == field
    assert repr(given_value if not isinstance(given_value, dict) else list(given_value.values())[-1]) \
        in str(err.value) or str(given_value) in str(err.value)


def test_state_round_trip_keeps_bindings_and_priorities():
    share = TimeShare(TimeSharing("slaq"), [A, B])
    for t in range(3):
        share.bind(t)
    _running(share, 0, [5.0, 4.0])
    share.close_quantum(0, 30.0)
    share.preempted(0)
    again = TimeShare(TimeSharing("slaq"), [A, B])
    again.load_state_dict(share.state_dict())
    assert {t: j.to_dict() for t, j in again.jobs.items()} == \
        {t: j.to_dict() for t, j in share.jobs.items()}
    assert again.bind(3) == share.bind(3)     # the bind counter continues
    lost = TimeShare(TimeSharing("slaq"), [A])          # B is gone after the restart
    lost.load_state_dict(share.state_dict())
    assert lost.device_of(1) is None and lost.device_of(0) == A


def test_removing_a_device_unbinds_its_trials():
    share = TimeShare(TimeSharing("hermes"), [A, B])
    for t in range(4):
        share.bind(t)
    assert sorted(share.remove_device(B)) == [1, 3]
    assert share.device_of(1) is None
    assert share.bind(1) == A


# ---- properties: G_thres ----------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(devices=st.integers(1, 5), limit=st.integers(1, 5),
       ops=st.lists(st.tuples(st.booleans(), st.integers(0, 40)), max_size=80))
def test_binding_respects_g_thres_and_queues_only_when_every_device_is_full(devices, limit, ops):
    keys = [("n", str(i)) for i in range(devices)]
    share = TimeShare(TimeSharing("hermes", max_jobs_per_device=limit), keys)
    for is_bind, trial_id in ops:
        if is_bind:
            before = dict(share.load())
            was = share.device_of(trial_id)
            got = share.bind(trial_id)
            if was is not None:
                assert got == was                                # bound once, stays bound
            elif got is None:
                assert all(n >= limit for n in before.values())  # global queue: every device full
            else:
                open_counts = [n for n in before.values() if n < limit]
                assert before[got] == min(open_counts)           # least loaded (Algorithm 2)
        else:
            share.forget(trial_id)
        assert all(n <= limit for _, n in share.load())


@settings(max_examples=40, deadline=None)
@given(devices=st.integers(1, 6), limit=st.integers(1, 6), trials=st.integers(0, 50))
def test_binding_from_empty_balances_devices(devices, limit, trials):
    keys = [("n", str(i)) for i in range(devices)]
    share = TimeShare(TimeSharing("hermes", max_jobs_per_device=limit), keys)
    bound = [share.bind(t) for t in range(trials)]
    counts = [n for _, n in share.load()]
    assert sum(b is not None for b in bound) == min(trials, devices * limit)
    assert max(counts) - min(counts) <= 1


# ---- properties: capacity -------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(ratio=st.sampled_from([1.0, 1.5, 2.0, 3.0]),
       demands=st.lists(st.sampled_from([20.0, 35.0, 50.0, 100.0]), min_size=1, max_size=12),
       running=st.integers(0, 12), policy=st.sampled_from(["hermes", "rr", "slaq", "fifo"]))
def test_started_trials_fit_r_times_c_and_are_the_best_waiting(ratio, demands, running, policy):

    cluster = Cluster([Node("n", 64, tuple(GPU(str(i), "A100", 1000.0, oversubscription=ratio)
                                           for i in range(2)))])
    allocator = Allocator(cluster, "wfd", lambda r: Job(r.trial_id, demands[r.trial_id], 1.0))
    shared = SharedDevices(TimeSharing(policy, max_jobs_per_device=6), allocator,
                           Objective("loss", "min"))
    records = [TrialRecord(t, {}, 0) for t in range(len(demands))]
    for r in records:
        shared.share.bind(r.trial_id)
    runs = []
    for r in records[:running]:             # start what fits, as the controller would
        key = shared.share.device_of(r.trial_id)
        on = [x for x in runs if shared.share.device_of(x.trial_id) == key]
        if key is not None and shared.fits(key, on, r):
            r.state = TrialState.RUNNING
            runs.append(r)
    pending = [r for r in records if r.state is TrialState.PENDING
               and shared.share.device_of(r.trial_id) is not None]
    starts = shared.starts(pending, runs)
    for key in shared.share.devices:
        on = [r for r in runs if shared.share.device_of(r.trial_id) == key]
        new = [r for r, k in starts if k == key]
        total = sum(demands[r.trial_id] for r in on + new)
        assert total <= 100.0 * ratio + 1e-9 or (not on and len(new) == 1)
        waiting = [r.trial_id for r in pending if shared.share.device_of(r.trial_id) == key]
        ranked = shared.share.ranked(waiting)
        assert [r.trial_id for r in new] == ranked[:len(new)]       # best first, no overtaking
