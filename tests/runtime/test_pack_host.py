"""The local executor's pack host without processes: routing members into pack processes, seats
freed by members that end, algorithm pack groups kept apart, and a dead pack failing its members.
(The routing rule itself is ``core.routing``'s, tested in tests/core/test_routing.py; one real
fused study runs in tests/runtime/test_fused_study.py.)"""
from __future__ import annotations

from types import SimpleNamespace

from hypersack.core.trial import (FailureCause, Launch, ResultReported, TrialFailed,
                                  TrialFinished, TrialStarted)
from hypersack.runtime.devices import Slot
from hypersack.runtime.executors.packs import PackHost
from hypersack.runtime.executors.pool import Worker
from hypersack.runtime.messages import (AddMember, Done, EndPack, PackFailed, Reported, StartPack,
                                        Started, StopTrial)


class FakeProcess:
    def __init__(self, pid: int):
        self.pid, self.exitcode = pid, None

    def is_alive(self) -> bool:
        return self.exitcode is None

    def kill(self) -> None:
        self.exitcode = -9

    def join(self, timeout=None) -> None:
        pass


class FakePipe:
    """What the driver sent (``sent``) and what the pack process says next (``inbox``)."""

    def __init__(self):
        self.sent, self.inbox, self.closed = [], [], False

    def send(self, message) -> None:
        self.sent.append(message)

    def poll(self, timeout: float = 0.0) -> bool:
        return bool(self.inbox)

    def recv(self):
        return self.inbox.pop(0)

    def close(self) -> None:
        self.closed = True


class FakePool:
    """Hands out a new fake worker per ``take``; records what came back."""

    def __init__(self):
        self.taken: list[Worker] = []
        self.returned: list[Worker] = []

    def take(self, slot: Slot, share) -> Worker:
        worker = Worker(slot, (slot.key, share), FakeProcess(100 + len(self.taken)), FakePipe())
        self.taken.append(worker)
        return worker

    def give_back(self, worker: Worker) -> None:
        self.returned.append(worker)


def _plan(max_members: int):
    """A pack plan as the host uses it: every config fuses, keyed by its "hidden" width."""
    return SimpleNamespace(max_members=max_members, fuses=lambda config: True,
                           key=lambda config: config.get("hidden", 8),
                           ref=SimpleNamespace(key="k", reference="fused_tasks:SMALL", payload=None))


SLOT = Slot(0, None, {})


def _host(max_members: int = 2) -> tuple[PackHost, FakePool]:
    pool = FakePool()
    host = PackHost(_plan(max_members), pool, trial_dir=lambda t: f"/tmp/runs/trial-{t}",
                    steps_for=lambda config: None, unsafe_checkpoints=False)
    return host, pool


def _launch(host: PackHost, trial_id: int, group=None, **config):
    return host.launch(Launch(trial_id, {"hidden": 8, **config}, seed=trial_id, attempt=1,
                              group=group), [SLOT.key], lambda: SLOT)


def _members_sent(worker: Worker) -> list[int]:
    return [m.member.trial_id for m in worker.pipe.sent if isinstance(m, AddMember)]


def test_members_fill_a_pack_up_to_its_cap_then_start_another():
    host, pool = _host(max_members=2)
    packs = [_launch(host, t) for t in range(3)]
    assert packs[0] is packs[1] is not packs[2]
    assert [_members_sent(w) for w in pool.taken] == [[0, 1], [2]]
    assert all(isinstance(w.pipe.sent[0], StartPack) for w in pool.taken)   # one start each
    assert _launch(host, 3, hidden=16) not in packs                           # another architecture


def test_a_member_placed_on_another_device_starts_a_pack_there():
    host, pool = _host(max_members=4)
    first = _launch(host, 0)
    other = Slot(1, None, {})
    second = host.launch(Launch(1, {"hidden": 8}, seed=1, attempt=1), [other.key], lambda: other)
    assert second is not first and second.worker.slot is other
    assert _launch(host, 2) is first                   # a seat on its own device


def test_a_member_that_ends_frees_its_seat_for_a_pending_trial_while_the_pack_runs():
    host, pool = _host(max_members=2)
    pack = _launch(host, 0)
    _launch(host, 1)
    host.stop(0)
    assert pack.worker.pipe.sent[-1] == StopTrial(0)
    pack.worker.pipe.inbox += [Started(0), Started(1), Reported(0, 1, {"loss": 1.0}, "c"),
                               Done(0)]
    assert host.drain(pack) == [TrialStarted(0, "cpu/0"), TrialStarted(1, "cpu/0"),
                                ResultReported(0, 1, {"loss": 1.0}, "c"), TrialFinished(0)]
    assert host.members == {1: pack}
    host.end_empty()                                   # trial 1 still runs: the pack stays
    assert _launch(host, 2) is pack and len(pool.taken) == 1
    assert _members_sent(pack.worker) == [0, 1, 2]


def test_an_emptied_pack_takes_a_launch_of_the_same_turn_and_else_returns_to_the_pool():
    host, pool = _host(max_members=1)
    pack = _launch(host, 0)
    pack.worker.pipe.inbox.append(Done(0))
    assert host.drain(pack) == [TrialFinished(0)]
    assert _launch(host, 1) is pack                    # before the next poll: it joins
    pack.worker.pipe.inbox.append(Done(1))
    host.drain(pack)
    host.end_empty()
    assert pack.worker.pipe.sent[-1] == EndPack() and pool.returned == [pack.worker]
    assert host.packs == [] and _launch(host, 2) is not pack


def test_trials_of_different_algorithm_packs_never_share_a_pack_process():
    host, pool = _host(max_members=4)
    packs = [_launch(host, t, group="a" if t < 2 else "b") for t in range(4)]
    assert packs[0] is packs[1] and packs[2] is packs[3] and packs[0] is not packs[2]
    assert [_members_sent(w) for w in pool.taken] == [[0, 1], [2, 3]]


def test_a_dead_pack_process_fails_each_member_as_a_lost_worker_once():
    host, pool = _host(max_members=2)
    pack = _launch(host, 0)
    _launch(host, 1)
    pack.worker.process.exitcode = -9
    events = host.drain(pack)
    assert events == [TrialFailed(0, "pack process died (killed by SIGKILL)", None,
                                  cause=FailureCause.WORKER_DIED),
                      TrialFailed(1, "pack process died (killed by SIGKILL)", None,
                                  cause=FailureCause.WORKER_DIED)]
    assert host.members == {} and host.packs == [] and pack.worker.pipe.closed
    assert host.drain(pack) == []
    assert _launch(host, 0) is not pack                # the retry goes to a new pack


def test_a_failed_pack_fails_its_members_with_the_cause_and_takes_no_new_one():
    host, _ = _host(max_members=4)
    pack = _launch(host, 0)
    pack.worker.pipe.inbox.append(PackFailed("OutOfMemoryError: CUDA", "tb", oom=True))
    (event,) = host.drain(pack)
    assert event == TrialFailed(0, "OutOfMemoryError: CUDA", "tb", cause=FailureCause.OOM)
    assert _launch(host, 1) is not pack
