"""Fused packs on this machine, driver side: which trials of a study fuse (``plan_execution``,
``TaskPackPlan``: the controller's pack policy, ``core.packs.PackPlan``, with the task that
gives it its keys and verdicts), and the pack processes the executor runs as the
controller's ``Launch`` says. The worker side, what runs inside a pack process, is
``hypersack.runtime.worker.pack``; the seam is the pipe protocol of
``hypersack.runtime.worker.messages`` (StartPack, AddMember, ..., PackCap, PackFailed).

Transport only: a launch with ``pack`` set joins the running pack of that id, else starts it on
its placed device (``core.packs.PackBook`` decided which), and ``seat`` is recorded with the
member. To the study a member is an ordinary trial: its own events, acks, stop and checkpoint.
A member that ends frees its seat; a pack with no members left is ended at the next poll
(launches of the turn in between have joined it) and its process returns to the idle pool. A
pack's measured cap, and its failure or death (cap 0), are reported as ``PackCapped``. A pack
process that dies fails every member as a lost worker would (they restart from their
checkpoints). A member that is cancelled or times out is asked to stop (its pack keeps running)
and reported failed at once.

``execution`` (separate | fused | auto) and the trainable (a built-in name, ``module:NAME``, a
callable or a ``FusableTask`` object) give the plain trainable and a ``TaskPackPlan``. ``auto`` fuses
a trial when the trainable has a fusable task and the task accepts its config (optimizer,
schedule, batch size...); ``fused`` sends every trial to a pack (a config the task refuses fails).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from hypersack.core.packs import EXECUTION_MODES, PackPlan
from hypersack.core.trial import (Event, FailureCause, Launch, PackCapped, ResultReported,
                                  TrialFailed, TrialFinished, TrialHeartbeat, TrialStarted)
from hypersack.errors import ConfigError
from hypersack.runtime.devices.slots import Slot
from hypersack.runtime.executors.pool import Worker, WorkerPool
from hypersack.runtime.worker.messages import (AddMember, Alive, BadMessage, Done, EndPack, Failed,
                                               MemberTask, Message, PackCap, PackFailed, PackSpec,
                                               Reported, StartPack, Started, StopTrial)
from hypersack.runtime.worker.pack import TaskTrainable, is_task, resolve_reference, task_accepts
from hypersack.runtime.worker.trainable import TrainableRef
from hypersack.workloads import FUSED_BUILTIN_KEYS, FUSED_BUILTINS, at_precision

__all__ = ["EXECUTION_MODES", "TaskPackPlan", "plan_execution", "Pack", "PackHost", "describe_exit",
           "failure_event"]


# ---- which trials fuse ---------------------------------------------------------------------------

@dataclass
class TaskPackPlan(PackPlan):
    """``core.packs.PackPlan`` (the controller's pack policy) of a study whose packs run a
    FusableTask: ``task`` (in the driver: its ``architecture_keys`` and its verdict on configs,
    ``accepts``, come from it; None for a built-in, imported from ``ref`` the first time a
    verdict is needed: a built-in's keys are ``workloads.FUSED_BUILTIN_KEYS``, so ``auto`` with
    a kept probe that says separate never imports torch in the driver) and ``ref`` (how
    workers load it), the executor's recipe for a new pack with ``max_members``, ``precision``,
    ``graphs`` and ``conv``; ``own_task``: the plain trainable is the task itself (a pack of one)."""
    task: Any = None
    ref: TrainableRef | None = None
    own_task: bool = False
    #: ``() -> bool``: True when the task is known to accept every config of the study's
    #: space (``FusionAdvisor.space_accepted``): a verdict then needs no task.
    space_accepted: Any = None

    def __post_init__(self) -> None:
        if self.task is not None and not self.architecture_keys:
            self.architecture_keys = tuple(getattr(self.task, "architecture_keys", ()))
        if self.accepts is None and (is_task(self.task) or (self.task is None and
                                                            self.ref is not None)):
            self.accepts = self._task_verdict
        super().__post_init__()

    def loaded_task(self) -> Any:
        """The task, imported from ``ref`` at the first call when it was not given."""
        if self.task is None:
            if self.ref is None or self.ref.reference is None:
                raise ConfigError("trainable", None, "names no fusable task to load")
            self.task = resolve_reference(self.ref.reference)
        return self.task

    def _task_verdict(self, config: Mapping[str, Any]) -> bool:
        if self.task is None and self.space_accepted is not None and self.space_accepted():
            return True
        return task_accepts(self.loaded_task(), config)


def _task_ref(trainable: Any) -> TrainableRef:
    if isinstance(trainable, str):
        reference = FUSED_BUILTINS.get(trainable.removeprefix("builtin:"), trainable)
        return TrainableRef(key=f"task:{reference}", reference=reference)
    import cloudpickle
    payload = cloudpickle.dumps(trainable)
    return TrainableRef(key="task-pickle:" + hashlib.sha1(payload).hexdigest(), payload=payload)


def _find_task(trainable: Any) -> Any | None:
    """The fusable task a trainable names, or None (a plain trainable)."""
    if is_task(trainable):
        return trainable
    if not isinstance(trainable, str):
        return None
    name = trainable.removeprefix("builtin:")
    if name in FUSED_BUILTINS:
        return resolve_reference(FUSED_BUILTINS[name])
    if ":" not in name:
        return None
    obj = resolve_reference(name)
    return obj if is_task(obj) else None


def plan_execution(execution: str, trainable: Any, max_members: int, precision: str = "fp32",
                   graphs: str = "auto", conv: str = "grouped"
                   ) -> tuple[Any, TaskPackPlan | None]:
    """(the plain trainable, the pack plan or None) for a study's ``execution`` mode.

    A task object also gets a plain trainable (``TaskTrainable``: the fused runner with one
    member), so ``separate`` and the non-fusable trials of ``auto`` run it as ordinary trials.
    Plain trials train at the study's ``precision`` where they can: a task's, and a built-in
    workload's (``hypersack.workloads.at_precision``); a trainable of the user's keeps its own.
    Raises ConfigError for an unknown mode, or "fused" with a trainable that has no task.
    """
    if execution not in EXECUTION_MODES:
        raise ConfigError("execution", execution, f"must be one of {', '.join(EXECUTION_MODES)}")
    at = precision if precision != "fp32" else None     # None: a task's own precision
    if execution == "separate":
        return (TaskTrainable(trainable, at) if is_task(trainable)
                else at_precision(trainable, precision)), None
    builtin = trainable.removeprefix("builtin:") if isinstance(trainable, str) else None
    if builtin in FUSED_BUILTINS:     # keys known without torch: the task is imported lazily
        return at_precision(trainable, precision), TaskPackPlan(
            execution, max_members, FUSED_BUILTIN_KEYS[builtin], precision=precision,
            graphs=graphs, conv=conv, ref=_task_ref(trainable))
    task = _find_task(trainable)
    if task is None:
        if execution == "fused":
            raise ConfigError("execution", execution, (
                f"needs a fusable task and the trainable {_name(trainable)} has none (fusable "
                f"built-ins: {', '.join(sorted(FUSED_BUILTINS))}; or pass a FusableTask, or "
                "'module:TASK', to run())"))
        return at_precision(trainable, precision), None
    ref = _task_ref(trainable if isinstance(trainable, str) else task)
    plain = at_precision(trainable, precision) if not is_task(trainable) \
        else TaskTrainable(task, at)
    if isinstance(trainable, str) and trainable.removeprefix("builtin:") not in FUSED_BUILTINS:
        plain = TaskTrainable(task, at)     # "module:TASK" names a task, not a train() function
    return plain, TaskPackPlan(execution, max_members, precision=precision, graphs=graphs,
                               conv=conv, task=task, ref=ref,
                               own_task=isinstance(plain, TaskTrainable))


def _name(trainable: Any) -> str:
    return repr(trainable) if isinstance(trainable, str) else \
        repr(getattr(trainable, "__qualname__", type(trainable).__name__))


# ---- the pack processes --------------------------------------------------------------------------

@dataclass(eq=False)
class Pack:
    """A pack process: ``members`` maps the trials it holds (sent and not yet done or failed) to
    their seats, as their Launches named them; ``started``: those of them that said Started
    (the pack's heartbeat is theirs: ``PackHost``)."""
    pack_id: int
    worker: Worker
    members: dict[int, int] = field(default_factory=dict)
    started: set[int] = field(default_factory=set)


class PackHost:
    """The packs of one executor. ``members`` maps a member's trial id to its pack. A pack
    process's heartbeat (``Alive``, from its worker's ``Heartbeat`` thread) is a
    ``TrialHeartbeat`` of each member it started (a member's Started is its first), so a
    stopped or frozen pack falls silent for all of them (``core.timeouts.silence``), as a
    trial's worker does."""

    def __init__(self, plan: TaskPackPlan, pool: WorkerPool, *, trial_dir: Callable[[int], Path],
                 steps_for: Callable[[dict[str, Any]], int | None], unsafe_checkpoints: bool):
        self.plan, self._pool = plan, pool
        self._trial_dir, self._steps_for = trial_dir, steps_for
        self._unsafe = unsafe_checkpoints
        self.packs: list[Pack] = []
        self.members: dict[int, Pack] = {}

    def pack(self, pack_id: int) -> Pack | None:
        """The running pack ``pack_id``, or None."""
        return next((p for p in self.packs if p.pack_id == pack_id), None)

    def launch(self, launch: Launch, slot: Callable[[], Slot]) -> Pack:
        """Seat the member where ``launch`` says: in its running pack ``launch.pack``, else in a
        new pack of that id on the slot ``slot()`` gives."""
        if launch.pack is None:           # a loop bug: only members come here
            raise RuntimeError(f"trial {launch.trial_id} has no pack to join")
        pack = self.pack(launch.pack) or self._start(launch.pack, slot(), launch)
        pack.members[launch.trial_id] = launch.seat if launch.seat is not None else -1
        self.members[launch.trial_id] = pack
        pack.worker.send(AddMember(MemberTask(
            launch.trial_id, launch.config, launch.seed, launch.attempt,
            str(self._trial_dir(launch.trial_id)), self._steps_for(launch.config),
            launch.checkpoint, self._unsafe)))
        return pack

    def _start(self, pack_id: int, slot: Slot, launch: Launch) -> Pack:
        ref = self.plan.ref
        if ref is None:                   # a plan built without its task's reference
            raise RuntimeError(f"pack {pack_id} has no task to load")
        worker = self._pool.take(slot, None)
        log = Path(self._trial_dir(launch.trial_id)).parent / "packs" / f"pack-{pack_id}.log"
        worker.send(StartPack(PackSpec(pack_id, (ref.key, ref.reference, ref.payload),
                                       slot.device, self.plan.max_members, dict(launch.config),
                                       str(log), self.plan.precision, self.plan.graphs,
                                       self.plan.conv)))
        pack = Pack(pack_id, worker)
        self.packs.append(pack)
        return pack

    def stop(self, trial_id: int) -> None:
        pack = self.members.get(trial_id)
        if pack is not None:
            pack.worker.send(StopTrial(trial_id))

    def forget(self, trial_id: int, kill: bool = False) -> list[Event]:
        """The member's trial was ended by the executor (cancelled, timed out): stop it, and
        ignore what its pack still says of it. ``kill``: it stopped responding, and so did its
        pack process (one heartbeat for all its members): the process is killed and the events
        of a dead pack returned (its other members fail as WORKER_DIED: retried)."""
        pack = self.members.get(trial_id)
        self.stop(trial_id)
        self.members.pop(trial_id, None)
        if not kill or pack is None:
            return []
        pack.worker.kill()
        return self.drain(pack)

    def end_empty(self) -> list[Event]:
        """Packs left without members end (their processes go back to the idle pool):
        ``PackCapped(id, 0)`` for each."""
        events: list[Event] = []
        for pack in [p for p in self.packs if not p.members]:
            self.packs.remove(pack)
            events.append(PackCapped(pack.pack_id, 0))
            if pack.worker.process.is_alive():
                pack.worker.send(EndPack())
                self._pool.give_back(pack.worker)
        return events

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
        if isinstance(message, Alive):       # the pack process beats: each started member lives
            return [TrialHeartbeat(t) for t in sorted(pack.started)
                    if self.members.get(t) is pack]
        if isinstance(message, PackCap):
            return [PackCapped(pack.pack_id, max(1, int(message.cap)))]
        if isinstance(message, PackFailed):
            cause = FailureCause.OOM if message.oom else FailureCause.ERROR
            return self._fail_members(pack, message.reason, message.traceback, cause)
        trial_id: int = getattr(message, "trial_id", -1)
        if isinstance(message, (Done, Failed)):
            pack.members.pop(trial_id, None)
            pack.started.discard(trial_id)
        if self.members.get(trial_id) is not pack:
            return []                     # a member cancelled or timed out: stale news
        if isinstance(message, Started):   # the pack is alive now: the member's first beat
            pack.started.add(message.trial_id)
            return [TrialStarted(message.trial_id, pack.worker.slot.label),
                    TrialHeartbeat(message.trial_id)]
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
        """Every member of ``pack`` failed with it; the pack holds none afterwards and takes
        none again (``PackCapped`` 0, first)."""
        events: list[Event] = [PackCapped(pack.pack_id, 0)]
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
