"""Fused packs inside a study: which trials fuse (driver side), and the pack a worker runs.

Driver side (no torch unless the study fuses): ``plan_execution`` turns the study's
``execution`` (separate | fused | auto) and its trainable (a built-in name, ``module:NAME``, a
callable or a ``FusableTask`` object) into the plain trainable and a ``PackPlan``: the fusable
task, how workers load it, and ``fuses(config)`` / ``key(config)``, the routing questions the
executor and the demand ask per trial. ``auto`` fuses a trial when the trainable has a fusable
task and the task accepts its config (optimizer, schedule, batch size...); the others run as
ordinary trials. ``fused`` sends every trial to a pack (a config the task refuses fails).

Worker side: ``run_pack_task`` is what a worker process runs on ``StartPack``. Protocol on the
worker's pipe (``hypersack.runtime.messages``), on top of the plain one:

- driver -> worker: AddMember loads a trial into a free slot without restarting the pack;
  StopTrial and Ack as for plain trials; EndPack once the pack is empty and nothing is routed to
  it (the process goes back to the idle pool); Shutdown.
- worker -> driver: per member, the plain messages (Started, Reported [with its checkpoint, then
  its Ack], Done, Failed); PackCap when a measured memory cap (CUDA) is below ``max_members``;
  PackFailed when the pack as a whole failed (every member in it failed with it).

Each member follows the checkpoint contract of plain trials (``hypersack.runtime.checkpoints``):
at every epoch end a new private checkpoint file is written and rides with that epoch's report;
it is the member's checkpoint once the report is durable, and the one loaded as
``Member.checkpoint`` when the trial is launched again (retry, promotion, resume). A member
asked to stop (cancelled, timed out) before its report is freed without reporting: its epoch is
recomputed from its committed checkpoint if it runs again. One whose stop comes with the ack of
its report is freed right after it. Reports of members
whose epochs end on the same iteration go out together and their acks are awaited together.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from hypersack.core.fusing import pack_cap, runs_fused
from hypersack.core.spec import EXECUTION_MODES
from hypersack.errors import ConfigError
from hypersack.runtime import checkpoints
from hypersack.runtime.process_io import is_oom, redirected
from hypersack.runtime.messages import (Ack, AddMember, Done, EndPack, Failed, MemberTask, Message,
                                        PackCap, PackFailed, PackSpec, Pipe, Reported, Shutdown,
                                        Started, StopTrial)
from hypersack.runtime.trainable import TrainableRef
from hypersack.workloads import FUSED_BUILTINS

__all__ = ["EXECUTION_MODES", "PackPlan", "plan_execution", "run_pack_task", "TaskTrainable",
           "is_task"]

_SHUTDOWN = "shutdown"


# ---- driver side: which trials fuse -----------------------------------------------------------

def is_task(obj: Any) -> bool:
    """Duck-typed ``FusableTask`` check (no torch import for plain trainables)."""
    return not isinstance(obj, str) and hasattr(obj, "architecture_keys") \
        and callable(getattr(obj, "build_model", None)) \
        and callable(getattr(obj, "optimizer", None))


@dataclass
class PackPlan:
    """How a study fuses: ``task`` (a FusableTask, in the driver), ``ref`` (how workers load
    it), ``mode`` ("fused" or "auto"), ``max_members`` (members per pack, >= 1)."""
    task: Any
    ref: TrainableRef
    mode: str
    max_members: int
    _cache: dict[str, bool] = field(default_factory=dict, repr=False)

    def fuses(self, config: Mapping[str, Any], pack_size: int | None = None) -> bool:
        """Whether a trial with ``config``, in an algorithm pack of ``pack_size`` members (None:
        no algorithm pack), runs in a pack (``core.fusing.runs_fused``)."""
        return runs_fused(self.mode, lambda: self._accepts(config), pack_size)

    def _accepts(self, config: Mapping[str, Any]) -> bool:
        key = json.dumps(config, sort_keys=True, default=repr)
        if key not in self._cache:
            self._cache[key] = _task_accepts(self.task, config)
        return self._cache[key]

    def key(self, config: Mapping[str, Any]) -> tuple:
        """The fusibility key: trials fuse only when theirs are equal."""
        from hypersack.core.packing import fusibility_key
        return fusibility_key(config, self.task.architecture_keys)


def _task_accepts(task: Any, config: Mapping[str, Any]) -> bool:
    try:
        batch = task.batch_size(config)
        task.optimizer(config, 1)
        task.max_steps(config, None)
    except (ConfigError, ValueError, TypeError, KeyError):
        return False
    return isinstance(batch, int) and batch >= 1


def _resolve(reference: str) -> Any:
    """Import ``module:attr`` (dots allowed after the colon) without requiring a callable."""
    module_name, sep, attr = reference.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError("trainable", reference, "must be 'module:NAME' or a built-in name")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError("trainable", reference, f"cannot be imported ({exc})") from exc
    return obj


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
        return _resolve(FUSED_BUILTINS[name])
    if ":" not in name:
        return None
    obj = _resolve(name)
    return obj if is_task(obj) else None


def plan_execution(execution: str, trainable: Any, max_members: int) -> tuple[Any, PackPlan | None]:
    """(the plain trainable, the pack plan or None) for a study's ``execution`` mode.

    A task object also gets a plain trainable (``TaskTrainable``: the fused runner with one
    member), so ``separate`` and the non-fusable trials of ``auto`` run it as ordinary trials.
    Raises ConfigError for an unknown mode, or "fused" with a trainable that has no task.
    """
    if execution not in EXECUTION_MODES:
        raise ConfigError("execution", execution, f"must be one of {', '.join(EXECUTION_MODES)}")
    if execution == "separate":
        return (TaskTrainable(trainable) if is_task(trainable) else trainable), None
    task = _find_task(trainable)
    if task is None:
        if execution == "fused":
            raise ConfigError("execution", execution, (
                f"needs a fusable task and the trainable {_name(trainable)} has none (fusable "
                f"built-ins: {', '.join(sorted(FUSED_BUILTINS))}; or pass a FusableTask, or "
                "'module:TASK', to run())"))
        return trainable, None
    ref = _task_ref(trainable if isinstance(trainable, str) else task)
    plain = trainable if not is_task(trainable) else TaskTrainable(task)
    if isinstance(trainable, str) and trainable.removeprefix("builtin:") not in FUSED_BUILTINS:
        plain = TaskTrainable(task)     # "module:TASK" names a task, not a train() function
    return plain, PackPlan(task, ref, execution, max_members)


def _name(trainable: Any) -> str:
    return repr(trainable) if isinstance(trainable, str) else \
        repr(getattr(trainable, "__qualname__", type(trainable).__name__))


class TaskTrainable:
    """``train(config, ctx)`` for a fusable task: the fused runner with one member, so a task
    runs as an ordinary trial (same results as in a pack: the isolation guarantee)."""

    def __init__(self, task: Any):
        self.task = task

    def __call__(self, config: Mapping[str, Any], ctx: Any) -> None:
        from hypersack.fusion.runner import run_pack
        run_pack(self.task, _ContextSource(self.task, config, ctx), ctx.device, max_members=1)


class _ContextSource:
    """A MemberSource of one member, talking through a TrialContext."""

    def __init__(self, task: Any, config: Mapping[str, Any], ctx: Any):
        self._task, self._config, self._ctx, self._given = task, dict(config), ctx, False

    def next_member(self):
        if self._given:
            return None
        from hypersack.fusion.task import Member
        self._given = True
        return Member(self._ctx.trial_id, self._config, self._ctx.seed, self._ctx.restore(),
                      self._task.max_steps(self._config, self._ctx.max_steps))

    def checkpoint(self, trial_id: int, state: Any) -> None:
        self._ctx.checkpoint(state)

    def report(self, trial_id: int, step: int, metrics: Mapping[str, float]) -> bool:
        self._ctx.report(step, **metrics)     # raises TrialStopped when stopped
        return False

    def finished(self, trial_id: int) -> None:
        pass

    def failed(self, trial_id: int, error: BaseException) -> None:
        raise error


# ---- worker side: the pack ----------------------------------------------------------------------

def _load_task(spec: tuple, cache: dict[str, Any]) -> Any:
    key, reference, payload = spec
    if key not in cache:
        if payload is not None:
            import cloudpickle
            cache[key] = cloudpickle.loads(payload)
        else:
            cache[key] = _resolve(reference)
        if not is_task(cache[key]):
            raise ConfigError("trainable", reference or key, "is not a FusableTask")
    return cache[key]


@dataclass
class _Seat:
    """A loaded member, as the pack worker knows it: its attempt and checkpoint files."""
    trial_id: int
    trial_dir: Path
    max_steps: int
    attempt: int = 1
    writes: int = 0
    committed: str | None = None

    def write(self, state: Any) -> str:
        """A new checkpoint file of this member (rides with its next report)."""
        self.writes += 1
        return checkpoints.write_checkpoint(self.trial_dir, state, attempt=self.attempt,
                                            sequence=self.writes)

    def commit(self, name: str) -> None:
        self.committed = name
        checkpoints.remove_other_checkpoints(self.trial_dir, [name])


class _PackSession:
    """One pack in a worker process: its members, their stops and acks (see module doc)."""

    def __init__(self, pipe: Pipe, spec: PackSpec, task: Any):
        from hypersack.fusion.runner import Pack
        self.pipe, self.spec, self.task = pipe, spec, task
        self.pack = Pack(task, spec.device)
        self.queue: list[MemberTask] = []
        self.seats: dict[int, _Seat] = {}
        self.stops: set[int] = set()
        self.awaiting: set[int] = set()
        self.ended = self.shutdown = False

    # -- messages --

    def receive(self, block: bool) -> None:
        """Apply pending driver messages; with ``block``, wait for at least one."""
        while block or self.pipe.poll():
            block = False
            try:
                message = self.pipe.recv()
            except (EOFError, OSError):
                self.shutdown = True
                return
            self._apply(message)

    def _apply(self, message: Message) -> None:
        if isinstance(message, AddMember):
            # A stop sent before this launch was meant for the trial's previous run.
            self.stops.discard(message.member.trial_id)
            self.queue.append(message.member)
        elif isinstance(message, StopTrial):
            self.stops.add(message.trial_id)
        elif isinstance(message, Ack):
            self.awaiting.discard(message.trial_id)
        elif isinstance(message, EndPack):
            self.ended = True
        elif isinstance(message, Shutdown):
            self.shutdown = True

    # -- the loop --

    def run(self) -> str | None:
        while True:
            self.receive(block=len(self.pack) == 0 and not self.queue)
            if self.shutdown:
                return _SHUTDOWN
            while self.queue:
                self._load(self.queue.pop(0))
            if len(self.pack) == 0:
                if self.ended:
                    return None
                continue
            for kind, rows in self.pack.train_iteration().items():
                if rows and self._end_epochs(kind, rows) is _SHUTDOWN:
                    return _SHUTDOWN

    def _load(self, m: MemberTask) -> None:
        from hypersack.fusion.task import Member
        trial_id, trial_dir = m.trial_id, Path(m.trial_dir)
        _log(trial_dir, f"--- trial {trial_id} attempt {m.attempt} on {self.spec.device}: "
                        f"pack {self.spec.pack_id} (pid {os.getpid()}), with members "
                        f"{sorted(self.seats)} ---")
        self.pipe.send(Started(trial_id))
        try:
            config = dict(m.config)
            max_steps = self.task.max_steps(config, m.max_steps)
            checkpoints.remove_other_checkpoints(trial_dir, [m.checkpoint])
            state = checkpoints.read_checkpoint(trial_dir, m.checkpoint, unsafe=m.unsafe_checkpoints)
            member = Member(trial_id, config, m.seed, state, max_steps)
            kind, row = self.pack.load(member)
        except Exception as exc:
            text = traceback.format_exc()
            _log(trial_dir, text)
            self.pipe.send(Failed(trial_id, f"{type(exc).__name__}: {exc}", text))
            return
        self.seats[trial_id] = _Seat(trial_id, trial_dir, max_steps, m.attempt, committed=m.checkpoint)
        if self.pack.stacks[kind].epoch(row) >= max_steps:      # resumed with nothing left
            self._free(kind, [row])

    def _end_epochs(self, kind: str, rows: list[int]) -> str | None:
        stack = self.pack.stacks[kind]
        leaving, reported = [], []
        for row, metrics in zip(rows, stack.evaluate(rows)):
            seat, epoch = self.seats[stack.slots[row].member.trial_id], stack.epoch(row)
            self.receive(block=False)
            if seat.trial_id in self.stops:
                leaving.append(row)        # cancelled before this report: not reported
                continue
            name = seat.write(stack.member_state(row))
            self.pipe.send(Reported(seat.trial_id, epoch, metrics, name))
            self.awaiting.add(seat.trial_id)
            reported.append((row, seat, epoch, name))
        while self.awaiting and not self.shutdown:
            self.receive(block=True)
        if self.shutdown:
            return _SHUTDOWN
        for row, seat, epoch, name in reported:
            seat.commit(name)
        leaving += [row for row, seat, epoch, _ in reported
                    if seat.trial_id in self.stops or epoch >= seat.max_steps]
        if leaving:
            self._free(kind, sorted(leaving))
        return None

    def _free(self, kind: str, rows: list[int]) -> None:
        stack = self.pack.stacks[kind]
        trial_ids = [stack.slots[row].member.trial_id for row in rows]
        self.pack.free(kind, rows)
        for trial_id in trial_ids:
            self.seats.pop(trial_id, None)
            self.stops.discard(trial_id)
            self.pipe.send(Done(trial_id))

    def fail_all(self, exc: BaseException, text: str, oom: bool) -> None:
        for seat in self.seats.values():
            _log(seat.trial_dir, text)
        self.pipe.send(PackFailed(f"{type(exc).__name__}: {exc}", text, oom))


def _log(trial_dir: Path, text: str) -> None:
    checkpoints.ensure_private_dir(trial_dir)
    with open(checkpoints.open_private(trial_dir / "trial.log", append=True), "a") as f:
        f.write(text.rstrip("\n") + "\n")


def _memory_cap(task: Any, config: Mapping[str, Any], device: str, max_members: int) -> int:
    """``core.fusing.pack_cap`` of what this device measures: on CUDA the free memory and the
    task's per-member and base bytes (``measure_member_memory``). On the CPU nothing is
    measured (host RAM is the placement's ``memory_gb`` question): ``max_members``."""
    if not device.startswith("cuda"):
        return pack_cap(max_members, None, None)
    import torch
    from hypersack.fusion.memory import measure_member_memory
    profile = measure_member_memory(task, config, device)
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    torch.cuda.empty_cache()
    return pack_cap(max_members, free, profile.per_member_bytes, profile.base_bytes)


def run_pack_task(pipe: Pipe, spec: PackSpec, cache: dict[str, Any]) -> str | None:
    """Run one pack until the driver ends it; "shutdown" when the worker must exit.

    The pack process writes its own log (``spec.log``); each member's trial.log gets its load
    line and any error. Members arrive as AddMember messages.
    """
    log_path = Path(spec.log)
    checkpoints.ensure_private_dir(log_path.parent)
    with open(checkpoints.open_private(log_path, append=True), "ab", buffering=0) as log, \
            redirected(log):
        print(f"--- pack {spec.pack_id} (pid {os.getpid()}) on {spec.device} ---", flush=True)
        return _run_session(pipe, spec, cache)


def _run_session(pipe: Pipe, spec: PackSpec, cache: dict[str, Any]) -> str | None:
    session = None
    try:
        task = _load_task(spec.task, cache)
        cap = _memory_cap(task, spec.first, spec.device, spec.max_members)
        if cap < spec.max_members:
            pipe.send(PackCap(cap))
        session = _PackSession(pipe, spec, task)
        return session.run()
    except Exception as exc:
        text = traceback.format_exc()
        print(text, file=sys.stderr, flush=True)
        if session is not None:
            session.fail_all(exc, text, is_oom(exc))
        else:
            pipe.send(PackFailed(f"{type(exc).__name__}: {exc}", text, is_oom(exc)))
        return _drain_until_end(pipe)


def _drain_until_end(pipe: Pipe) -> str | None:
    """After a pack failed: ignore its members' messages until the driver ends the pack."""
    while True:
        try:
            message = pipe.recv()
        except (EOFError, OSError):
            return _SHUTDOWN
        if isinstance(message, Shutdown):
            return _SHUTDOWN
        if isinstance(message, EndPack):
            return None

