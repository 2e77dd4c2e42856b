"""The worker pool driven directly: launch, reports and acks, stop, cancel, slot reuse."""
from __future__ import annotations

import time

import pytest

from hypersack.core.trial import (Cancel, Launch, ResultReported, Stop, TrialFailed, TrialFinished,
                                  TrialStarted)
from hypersack.runtime.devices.slots import default_slots
from hypersack.runtime.executors.local import LocalExecutor
from hypersack.runtime.worker.trainable import TrainableRef

from executor_helpers import collect


@pytest.fixture
def executor(tmp_path):
    made = []

    def make(trainable: str, workers: int = 1) -> LocalExecutor:
        ex = LocalExecutor(default_slots(workers, gpus=[]), TrainableRef.of(trainable),
                           trial_dir=lambda t: tmp_path / f"trial-{t}", metric="score")
        ex.start()
        made.append(ex)
        return ex
    yield make
    for ex in made:
        ex.shutdown(kill=True)


def test_launch_runs_to_completion_and_frees_the_slot(executor):
    ex = executor("trainables:quick")
    ex.submit(Launch(0, {"x": 0.5}, seed=1, attempt=1))
    with pytest.raises(RuntimeError, match="no free slot for trial 1"):
        ex.submit(Launch(1, {"x": 0.5}, seed=1, attempt=1))      # the only device is busy
    events = collect(ex, lambda ev: any(isinstance(e, TrialFinished) for e in ev))
    assert isinstance(events[0], TrialStarted) and events[0].device == "cpu/0"
    assert [e.step for e in events if isinstance(e, ResultReported)] == [1, 2, 3, 4, 5]
    ex.submit(Launch(1, {"x": 0.5}, seed=1, attempt=1))          # free again
    events = collect(ex, lambda ev: any(isinstance(e, TrialFinished) for e in ev))
    assert {e.trial_id for e in events} == {1}


def test_stop_ends_the_trial_at_its_next_report(executor):
    ex = executor("trainables:ignores_stop")
    ex.submit(Launch(0, {}, seed=1, attempt=1))
    collect(ex, lambda ev: sum(isinstance(e, ResultReported) for e in ev) >= 3)
    ex.submit(Stop(0, "enough"))
    events = collect(ex, lambda ev: any(isinstance(e, TrialFinished) for e in ev))
    assert sum(isinstance(e, ResultReported) for e in events) <= 1


def test_cancel_kills_the_trial_and_the_slot_is_reused(executor):
    ex = executor("trainables:sleeps")
    ex.submit(Launch(0, {"sleep": 60}, seed=1, attempt=1))
    collect(ex, lambda ev: any(isinstance(e, ResultReported) for e in ev))
    ex.submit(Cancel(0))
    events = collect(ex, lambda ev: any(isinstance(e, TrialFailed) for e in ev))
    assert [e.reason for e in events if isinstance(e, TrialFailed)] == ["cancelled"]
    ex.submit(Launch(1, {"sleep": 0}, seed=1, attempt=1))
    events = collect(ex, lambda ev: any(isinstance(e, TrialFinished) for e in ev))
    assert any(isinstance(e, TrialFinished) and e.trial_id == 1 for e in events)


def test_workers_keep_their_process_across_trials(executor):
    ex = executor("trainables:quick")
    pids = ex.worker_pids()
    assert len(pids) == 1
    for trial_id in range(3):
        ex.submit(Launch(trial_id, {"x": 0.1}, seed=1, attempt=1))
        collect(ex, lambda ev: any(isinstance(e, TrialFinished) for e in ev))
    assert ex.worker_pids() == pids


def test_a_lost_device_ends_its_trials_as_retryable_failures(tmp_path):
    from hypersack.core.trial import DeviceLost
    lost: list = []
    ex = LocalExecutor(default_slots(2, gpus=[]), TrainableRef.of("trainables:sleeps"),
                       trial_dir=lambda t: tmp_path / f"trial-{t}", metric="score",
                       device_events=lambda: [lost.pop()] if lost else [])
    ex.start()
    try:
        ex.submit(Launch(0, {"x": 0.5, "sleep": 30}, seed=1, attempt=1, devices=(("local", "cpu1"),)))
        collect(ex, lambda ev: any(isinstance(e, TrialStarted) for e in ev))
        lost.append(DeviceLost("local", "cpu1"))
        events = collect(ex, lambda ev: any(isinstance(e, TrialFailed) for e in ev), timeout=10)
        assert any(isinstance(e, DeviceLost) for e in events)
        (failed,) = [e for e in events if isinstance(e, TrialFailed)]
        assert failed.trial_id == 0 and failed.cause.value == "device_lost" and "cpu1" in failed.reason
        for trial_id in (1, 2):         # both devices are free again (trial 0 is forgotten)
            ex.submit(Launch(trial_id, {"x": 0.5, "sleep": 30}, seed=1, attempt=1))
        started = collect(ex, lambda ev: {e.trial_id for e in ev if isinstance(e, TrialStarted)} == {1, 2})
        assert sorted(e.device for e in started if isinstance(e, TrialStarted)) == ["cpu/0", "cpu/1"]
    finally:
        ex.shutdown(kill=True)


def test_a_busy_worker_killed_is_reported_and_a_dead_idle_one_replaced(executor):
    """Death is seen through the exit sentinels the poll waits on (no liveness sweep needed)."""
    import os
    import signal
    ex = executor("trainables:sleeps", workers=2)
    ex.submit(Launch(0, {"sleep": 60}, seed=1, attempt=1))
    collect(ex, lambda ev: any(isinstance(e, ResultReported) for e in ev))
    busy = ex._jobs[0].workers[0].process.pid
    idle = [p for p in ex.worker_pids() if p != busy]
    os.kill(busy, signal.SIGKILL)
    events = collect(ex, lambda ev: any(isinstance(e, TrialFailed) for e in ev))
    assert [e.cause.value for e in events if isinstance(e, TrialFailed)] == ["worker_died"]
    os.kill(idle[0], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while idle[0] in ex.worker_pids() or len(ex.worker_pids()) < 2:
        assert time.monotonic() < deadline, ex.worker_pids()
        ex.poll(0.05)
    assert busy not in ex.worker_pids() and len(ex.worker_pids()) == 2


def test_the_poller_reports_exactly_the_readable_descriptors_of_each_call():
    import os
    from hypersack.runtime.executors.local import _Poller
    (r1, w1), (r2, w2), (r3, w3) = os.pipe(), os.pipe(), os.pipe()
    poller = _Poller()
    try:
        assert poller.ready([r1, r2], 0) == set()
        os.write(w2, b"x")
        assert poller.ready([r1, r2], 0) == {r2}
        assert poller.ready([r1, r2], 5.0) == {r2}     # returns at once when one is ready
        os.close(w1)                                   # a closed writer reads as ready (EOF)
        assert poller.ready([r1, r2], 0) == {r1, r2}
        assert poller.ready([r1], 0) == {r1}           # one left out: not polled any more
        os.write(w3, b"x")
        assert poller.ready([r1, r3], 0) == {r1, r3}   # a new one is
        fresh, w4 = os.pipe()
        os.dup2(fresh, r2)                             # r2's number, now a new, empty pipe
        os.close(fresh)
        assert poller.ready([r2], 0) == set()
        os.write(w4, b"x")
        assert poller.ready([r2, r3], 0) == {r2, r3}
        assert poller.ready([], 0) == set()
        os.close(w4)
    finally:
        for fd in (r1, r2, w2, r3, w3):
            os.close(fd)


def test_each_rank_is_sent_its_own_world_and_trial_folder(tmp_path):
    """``launch_ranks``: one RunTrial per rank, each naming its rank in the launch's group (a
    rank 0 gets the group as given; the others a copy with their rank), the trial's folder,
    and the trainable in full only to a worker that has not loaded it."""
    from hypersack.runtime.worker.messages import WorldSpec

    class Sent:
        def __init__(self, slot):
            self.slot, self.has_trainable, self.messages = slot, False, []

        def send(self, message):
            self.messages.append(message)
    slots = default_slots(2, gpus=[])
    ex = LocalExecutor(slots, TrainableRef("k", "mod:fn"), trial_dir=lambda t: tmp_path / f"t{t}",
                       metric="score")
    taken = []
    ex._pool.take = lambda slot, share: taken.append(Sent(slot)) or taken[-1]
    keys = [s.key for s in slots]
    world = WorldSpec(2, 0, 1234)
    ex.launch_ranks(Launch(3, {"x": 1}, 0, 1), keys, [0, 1], world)
    tasks = [w.messages[0].task for w in taken]
    assert [t.world for t in tasks] == [world, WorldSpec(2, 1, 1234)]
    assert [t.trial_dir for t in tasks] == [str(tmp_path / "t3")] * 2
    assert [t.trainable for t in tasks] == [("k", "mod:fn", None)] * 2
    ex.launch_ranks(Launch(4, {"x": 2}, 0, 1), keys[1:], [1], world)    # rank 0 elsewhere
    assert taken[2].messages[0].task.world == WorldSpec(2, 1, 1234)
