"""The local executor's pack host without processes: members sent to the pack their Launch names
(started on the slot it gives when not running), seats freed by members that end, caps and ends
reported as ``PackCapped``, and a dead pack failing its members. (Which pack and seat is
``core.packs``'s decision, tested in tests/core/test_packs.py; one real fused study runs in
tests/runtime/test_fused_study.py.)"""
from __future__ import annotations

from types import SimpleNamespace

from hypersack.core.trial import (FailureCause, Launch, PackCapped, ResultReported,
                                  TrialFailed, TrialFinished, TrialHeartbeat, TrialStarted)
from hypersack.runtime.devices.slots import Slot
from hypersack.runtime.executors.packs import PackHost
from hypersack.runtime.executors.pool import Worker
from hypersack.runtime.worker.messages import (AddMember, Done, EndPack, PackCap, PackFailed, Reported,
                                               StartPack, Started, StopTrial)


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


def _plan(max_members: int, precision: str = "fp32", graphs: str = "auto",
          conv: str = "grouped"):
    """A pack plan as the host uses it: how a new pack starts (the controller seats members)."""
    return SimpleNamespace(max_members=max_members, precision=precision, graphs=graphs, conv=conv,
                           ref=SimpleNamespace(key="k", reference="fused_tasks:SMALL", payload=None))


SLOT = Slot(0, None, {})


def _host(max_members: int = 2, **options: str) -> tuple[PackHost, FakePool]:
    pool = FakePool()
    host = PackHost(_plan(max_members, **options), pool, trial_dir=lambda t: f"/tmp/runs/trial-{t}",
                    steps_for=lambda config: None, unsafe_checkpoints=False)
    return host, pool


def _launch(host: PackHost, trial_id: int, pack: int = 1, seat: int | None = None,
            slot: Slot = SLOT, **config):
    """Send a member where the controller's Launch says (``seat`` default: the trial id)."""
    seat = trial_id if seat is None else seat
    return host.launch(Launch(trial_id, {"hidden": 8, **config}, seed=trial_id, attempt=1,
                              pack=pack, seat=seat), lambda: slot)


def _members_sent(worker: Worker) -> list[int]:
    return [m.member.trial_id for m in worker.pipe.sent if isinstance(m, AddMember)]


def test_members_join_the_pack_their_launch_names_and_a_new_id_starts_one():
    host, pool = _host(max_members=2)
    packs = [_launch(host, t, pack=p) for t, p in enumerate([4, 4, 9])]
    assert packs[0] is packs[1] is not packs[2]
    assert [(p.pack_id, p.members) for p in host.packs] == [(4, {0: 0, 1: 1}), (9, {2: 2})]
    assert [_members_sent(w) for w in pool.taken] == [[0, 1], [2]]
    assert all(isinstance(w.pipe.sent[0], StartPack) for w in pool.taken)   # one start each
    assert [w.pipe.sent[0].spec.pack_id for w in pool.taken] == [4, 9]
    assert _launch(host, 3, pack=4, seat=5) is packs[0]     # obeyed: the host decides nothing
    assert host.packs[0].members == {0: 0, 1: 1, 3: 5}


def test_a_new_pack_starts_on_the_slot_its_launch_gives_and_later_members_follow_it():
    host, pool = _host(max_members=4)
    first = _launch(host, 0)
    other = Slot(1, None, {})
    second = _launch(host, 1, pack=2, slot=other)
    assert second is not first and second.worker.slot is other
    assert _launch(host, 2, pack=2) is second          # its pack runs on the other slot
    assert _launch(host, 3) is first


def test_a_member_that_ends_frees_its_seat_while_the_pack_runs():
    host, pool = _host(max_members=2)
    pack = _launch(host, 0)
    _launch(host, 1)
    host.stop(0)
    assert pack.worker.pipe.sent[-1] == StopTrial(0)
    pack.worker.pipe.inbox += [Started(0), Started(1), Reported(0, 1, {"loss": 1.0}, "c"),
                               Done(0)]
    assert host.drain(pack) == [TrialStarted(0, "cpu/0"), TrialHeartbeat(0),
                                TrialStarted(1, "cpu/0"), TrialHeartbeat(1),
                                ResultReported(0, 1, {"loss": 1.0}, "c"), TrialFinished(0)]
    assert host.members == {1: pack} and pack.members == {1: 1}
    assert host.end_empty() == []                      # trial 1 still runs: the pack stays
    assert _launch(host, 2, seat=0) is pack and len(pool.taken) == 1
    assert _members_sent(pack.worker) == [0, 1, 2]


def test_a_measured_cap_is_reported_to_the_controller():
    host, _ = _host(max_members=8)
    pack = _launch(host, 0, pack=3)
    pack.worker.pipe.inbox.append(PackCap(0))
    assert host.drain(pack) == [PackCapped(3, 1)]      # at least one member


def test_an_emptied_pack_takes_a_launch_of_the_same_turn_and_else_returns_to_the_pool():
    host, pool = _host(max_members=1)
    pack = _launch(host, 0)
    pack.worker.pipe.inbox.append(Done(0))
    assert host.drain(pack) == [TrialFinished(0)]
    assert _launch(host, 1, seat=0) is pack            # before the next poll: it joins
    pack.worker.pipe.inbox.append(Done(1))
    host.drain(pack)
    assert host.end_empty() == [PackCapped(1, 0)]      # ended: the controller's book drops it
    assert pack.worker.pipe.sent[-1] == EndPack() and pool.returned == [pack.worker]
    assert host.packs == [] and _launch(host, 2, pack=2) is not pack


def test_a_dead_pack_process_fails_each_member_as_a_lost_worker_once():
    host, pool = _host(max_members=2)
    pack = _launch(host, 0)
    _launch(host, 1)
    pack.worker.process.exitcode = -9
    events = host.drain(pack)
    assert events == [PackCapped(1, 0),
                      TrialFailed(0, "pack process died (killed by SIGKILL)", None,
                                  cause=FailureCause.WORKER_DIED),
                      TrialFailed(1, "pack process died (killed by SIGKILL)", None,
                                  cause=FailureCause.WORKER_DIED)]
    assert host.members == {} and host.packs == [] and pack.worker.pipe.closed
    assert host.drain(pack) == []
    assert _launch(host, 0, pack=2) is not pack        # the retry goes to a new pack


def test_a_failed_pack_fails_its_members_with_the_cause_and_takes_no_new_one():
    host, _ = _host(max_members=4)
    pack = _launch(host, 0)
    pack.worker.pipe.inbox.append(PackFailed("OutOfMemoryError: CUDA", "tb", oom=True))
    assert host.drain(pack) == [PackCapped(1, 0), TrialFailed(0, "OutOfMemoryError: CUDA", "tb",
                                                              cause=FailureCause.OOM)]


def test_a_new_pack_trains_as_the_studys_pack_options_say():
    host, pool = _host(max_members=2, precision="bf16", graphs="off", conv="bmm")
    _launch(host, 0)
    spec = pool.taken[0].pipe.sent[0].spec
    assert (spec.precision, spec.graphs, spec.conv) == ("bf16", "off", "bmm")


def test_the_pack_process_trains_as_its_spec_says():
    from fused_tasks import SMALL
    from hypersack.runtime.worker.messages import PackSpec
    from hypersack.runtime.worker.pack import _PackSession
    spec = PackSpec(1, ("k", "fused_tasks:SMALL", None), "cpu", 16, {}, "/tmp/x.log", "bf16", "off",
                    "bmm")
    options = _PackSession(None, spec, SMALL).pack.options
    assert (options.precision, options.graphs, options.conv) == ("bf16", "off", "bmm")
    assert options.capacity == 4                    # on the CPU a pack starts small and doubles
    default = PackSpec(1, ("k", "fused_tasks:SMALL", None), "cpu", 16, {}, "/tmp/x.log")
    assert _PackSession(None, default, SMALL).pack.options.precision == SMALL.precision
    assert _PackSession(None, default, SMALL).pack.options.conv == "grouped"


def test_a_pack_s_heartbeat_is_a_heartbeat_of_each_member_it_started_and_still_holds():
    from hypersack.runtime.worker.messages import Alive
    host, _ = _host(max_members=4)
    pack = _launch(host, 0)
    _launch(host, 1)
    _launch(host, 2)
    pack.worker.pipe.inbox += [Alive()]                  # before any member started: nobody
    assert host.drain(pack) == []
    pack.worker.pipe.inbox += [Started(0), Started(1), Started(2), Alive()]
    events = host.drain(pack)
    assert events[:2] == [TrialStarted(0, SLOT.label), TrialHeartbeat(0)]  # Started: a first beat
    assert events[6:] == [TrialHeartbeat(0), TrialHeartbeat(1), TrialHeartbeat(2)]
    host.forget(1)                                       # timed out / cancelled by the driver
    pack.worker.pipe.inbox += [Done(2), Alive()]         # 2 finished
    assert host.drain(pack) == [TrialFinished(2), TrialHeartbeat(0)]


def test_a_pack_process_beats_while_it_runs_a_pack(monkeypatch):
    from hypersack.runtime.worker import pack as pack_worker
    from hypersack.runtime.worker import process
    from hypersack.runtime.worker.messages import Alive, PackSpec, Shutdown, StartPack
    sent = []

    class Pipe:
        def __init__(self):
            self.inbox = [StartPack(PackSpec(1, ("k", "r", None), "cpu", 2, {}, "/tmp/x.log")),
                          Shutdown()]

        def send(self, message):
            sent.append(message)

        def recv(self):
            return self.inbox.pop(0)
    monkeypatch.setattr(pack_worker, "run_pack_task",
                        lambda pipe, spec, cache: sent.append("pack ran") or None)
    monkeypatch.setattr(process, "end_trial_processes", lambda: None)
    process._serve(Pipe())
    assert sent[0] == Alive() and "pack ran" in sent     # heard from before the pack's code runs


def test_a_member_ended_for_silence_takes_its_silent_pack_process_with_it():
    host, pool = _host(max_members=2)
    pack = _launch(host, 0)
    _launch(host, 1)
    _launch(host, 2, seat=0)
    assert host.forget(0) == []                          # cancelled: the pack goes on
    assert pack.worker.process.is_alive()
    events = host.forget(1, kill=True)                   # no heartbeat: the process is killed
    assert not pack.worker.process.is_alive() and host.packs == [] and host.members == {}
    assert events == [PackCapped(1, 0), TrialFailed(2, "pack process died (killed by SIGKILL)",
                                                    None, cause=FailureCause.WORKER_DIED)]
    assert pool.returned == []                           # never back in the idle pool
