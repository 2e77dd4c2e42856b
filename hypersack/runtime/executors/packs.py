"""Fused packs on this machine: pack processes, their members, and their messages as events.

A launch whose config fuses joins the pack ``core.routing.choose_pack`` names (same device,
same key, a free seat), else starts a new pack in a worker of that device. To the study a member
is an ordinary trial: its own events, acks, stop and checkpoint. A member that ends frees its
seat; a pack with no members left is ended at the next poll (launches of the turn in between
have joined it) and its process returns to the idle pool. A pack process that dies fails every
member as a lost worker would (they restart from their checkpoints). A member that is cancelled
or times out is asked to stop (its pack keeps running) and reported failed at once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from hypersack.core.routing import PackSeats, choose_pack, group_key
from hypersack.core.trial import (Event, FailureCause, Launch, ResultReported, TrialFailed,
                                  TrialFinished, TrialStarted)
from hypersack.runtime.devices import Slot
from hypersack.runtime.executors.pool import Worker, WorkerPool
from hypersack.runtime.messages import (AddMember, BadMessage, Done, EndPack, Failed,
                                        MemberTask, Message, PackCap, PackFailed, PackSpec,
                                        Reported, StartPack, Started, StopTrial)

if TYPE_CHECKING:
    from hypersack.runtime.pack_worker import PackPlan

__all__ = ["Pack", "PackHost", "describe_exit"]


@dataclass(eq=False)
class Pack:
    """A pack process: ``members`` are the trials it holds (sent and not yet done or failed)."""
    pack_id: int
    worker: Worker
    key: Any
    cap: int
    members: set[int] = field(default_factory=set)
    failed: bool = False

    def seats(self) -> PackSeats:
        return PackSeats(self.pack_id, self.worker.slot.key, self.key, len(self.members), self.cap,
                         self.failed)


class PackHost:
    """The packs of one executor. ``members`` maps a member's trial id to its pack."""

    def __init__(self, plan: "PackPlan", pool: WorkerPool, *, trial_dir: Callable[[int], Path],
                 steps_for: Callable[[dict], int | None], unsafe_checkpoints: bool):
        self.plan, self._pool = plan, pool
        self._trial_dir, self._steps_for = trial_dir, steps_for
        self._unsafe = unsafe_checkpoints
        self.packs: list[Pack] = []
        self.members: dict[int, Pack] = {}
        self._count = 0

    def fuses(self, launch: Launch) -> bool:
        return self.plan.fuses(launch.config, launch.pack_size)

    def launch(self, launch: Launch, devices: list[str], new_on: Callable[[], Slot]) -> Pack:
        """Send the member to a pack with a seat on one of ``devices``, or to a new pack on the
        slot ``new_on()`` gives."""
        key = group_key(self.plan.key(launch.config), launch.group)
        chosen = choose_pack([p.seats() for p in self.packs], key, devices)
        pack = next((p for p in self.packs if p.pack_id == chosen), None)
        if pack is None:
            pack = self._start(new_on(), key, launch)
        pack.members.add(launch.trial_id)
        self.members[launch.trial_id] = pack
        pack.worker.send(AddMember(MemberTask(
            launch.trial_id, launch.config, launch.seed, launch.attempt,
            str(self._trial_dir(launch.trial_id)), self._steps_for(launch.config),
            launch.checkpoint, self._unsafe)))
        return pack

    def _start(self, slot: Slot, key: Any, launch: Launch) -> Pack:
        self._count += 1
        worker = self._pool.take(slot, None)
        ref = self.plan.ref
        log = Path(self._trial_dir(launch.trial_id)).parent / "packs" / f"pack-{self._count}.log"
        worker.send(StartPack(PackSpec(self._count, (ref.key, ref.reference, ref.payload),
                                       slot.device, self.plan.max_members, dict(launch.config),
                                       str(log))))
        pack = Pack(self._count, worker, key, self.plan.max_members)
        self.packs.append(pack)
        return pack

    def stop(self, trial_id: int) -> None:
        pack = self.members.get(trial_id)
        if pack is not None:
            pack.worker.send(StopTrial(trial_id))

    def forget(self, trial_id: int) -> None:
        """The member's trial was ended by the executor (cancelled, timed out): stop it, and
        ignore what its pack still says of it."""
        self.stop(trial_id)
        self.members.pop(trial_id, None)

    def end_empty(self) -> None:
        """Packs left without members go back to the idle pool."""
        for pack in [p for p in self.packs if not p.members]:
            self.packs.remove(pack)
            if pack.worker.process.is_alive():
                pack.worker.send(EndPack())
                self._pool.give_back(pack.worker)

    def drain(self, pack: Pack) -> list[Event]:
        """Events from ``pack``'s pipe; its members fail if its process died."""
        events: list[Event] = []
        try:
            while pack in self.packs and pack.worker.pipe.poll():
                events.extend(self._event(pack, pack.worker.pipe.recv()))
        except (EOFError, OSError):
            pass
        except BadMessage as exc:    # the pack is out of step with the driver: it ends
            pack.worker.kill()
            self.packs.remove(pack)
            events.extend(self._fail_members(pack, f"its pack sent {exc}", None,
                                             FailureCause.ERROR))
        if pack in self.packs and not pack.worker.process.is_alive():
            self.packs.remove(pack)
            pack.worker.pipe.close()
            reason = f"pack process died ({describe_exit(pack.worker.process.exitcode)})"
            events.extend(self._fail_members(pack, reason, None, FailureCause.WORKER_DIED))
        return events

    def kill_on(self, device_key: str, reason: str) -> list[Event]:
        """Kill the packs on a lost device; their members fail as on a lost device."""
        events: list[Event] = []
        for pack in [p for p in self.packs if p.worker.slot.key == device_key]:
            pack.worker.kill()
            self.packs.remove(pack)
            events.extend(self._fail_members(pack, reason, None, FailureCause.DEVICE_LOST))
        return events

    def _event(self, pack: Pack, message: Message) -> list[Event]:
        if isinstance(message, PackCap):
            pack.cap = max(1, int(message.cap))
            return []
        if isinstance(message, PackFailed):
            pack.failed = True
            cause = FailureCause.OOM if message.oom else FailureCause.ERROR
            return self._fail_members(pack, message.reason, message.traceback, cause)
        trial_id: int = getattr(message, "trial_id", -1)
        if isinstance(message, (Done, Failed)):
            pack.members.discard(trial_id)
        if self.members.get(trial_id) is not pack:
            return []                     # a member cancelled or timed out: stale news
        if isinstance(message, Started):
            return [TrialStarted(message.trial_id, pack.worker.slot.label)]
        if isinstance(message, Reported):
            return [ResultReported(message.trial_id, message.step, message.metrics,
                                   message.checkpoint)]
        if isinstance(message, Done):
            del self.members[message.trial_id]
            return [TrialFinished(message.trial_id)]
        if isinstance(message, Failed):
            del self.members[message.trial_id]
            return [failure_event(message)]
        return []

    def _fail_members(self, pack: Pack, reason: str, text: str | None,
                      cause: FailureCause) -> list[Event]:
        """Every member of ``pack`` failed with it; the pack holds none afterwards."""
        events: list[Event] = []
        for trial_id in sorted(pack.members):
            if self.members.get(trial_id) is pack:
                del self.members[trial_id]
                events.append(TrialFailed(trial_id, reason, text, cause=cause))
        pack.members.clear()
        return events


def failure_event(message: Failed) -> TrialFailed:
    """The facts of a trial's own failure, for the controller to judge."""
    cause = (FailureCause.DISK_FULL if message.disk_full
             else FailureCause.OOM if message.oom else FailureCause.ERROR)
    return TrialFailed(message.trial_id, message.reason, message.traceback, cause=cause)


def describe_exit(code: int | None) -> str:
    import signal
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
