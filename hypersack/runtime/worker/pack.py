"""The worker side of fused packs: what runs inside a pack process, and a fusable task run as a
plain trial. Its driver side (which trials fuse, starting packs and seating members as the
controller's ``Launch`` says) is ``hypersack.runtime.executors.packs``; the seam between them
is the pipe protocol of ``hypersack.runtime.worker.messages``.

``run_pack_task`` is what a worker process runs on ``StartPack``. On top of the plain protocol:

- driver -> worker: AddMember loads a trial into a free slot without restarting the pack;
  StopTrial and Ack as for plain trials; EndPack once the pack is empty and nothing is routed to
  it (the process goes back to the idle pool); Shutdown.
- worker -> driver: per member, the plain messages (Started, Reported [with its checkpoint, then
  its Ack], Done, Failed); PackCap when a measured memory cap (CUDA) is below ``max_members``,
  and again each time a fused step runs out of memory: the pack halves its cap (never below
  the members it holds), shrinks its stack to that many slots, frees the allocator's cache and
  retries the step; PackFailed when the pack as a whole failed (every member in it failed with
  it; an OOM when the cap cannot shrink).

The pack's one stack never grows past the cap and is compacted to its live members when they
fill half its slots or fewer (``Pack.compact``, before a step). At its end the pack writes its
``PackStats`` (iterations, members, slot occupancy: occupied slots / cap per iteration, plain
and time-weighted means; slot-steps per member-step, compactions, graph captures) to its own
log.

Each member follows the checkpoint contract of plain trials (``hypersack.runtime.worker.checkpoints``):
at every epoch end a new private checkpoint file is written and rides with that epoch's report;
it is the member's checkpoint once the report is durable, and the one loaded as
``Member.checkpoint`` when the trial is launched again (retry, promotion, resume). A member
asked to stop (cancelled, timed out) before its report is freed without reporting: its epoch is
recomputed from its committed checkpoint if it runs again. One whose stop comes with the ack of
its report is freed right after it. Reports of members
whose epochs end on the same iteration go out together and their acks are awaited together.

``TaskTrainable`` runs a fusable task as an ordinary trial (the fused runner with one member).
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from hypersack.core.packs import pack_cap
from hypersack.errors import ConfigError
from hypersack.runtime.worker import checkpoints
from hypersack.runtime.worker.process_io import failure_reason, is_oom, redirected
from hypersack.runtime.worker.messages import (Ack, AddMember, Done, EndPack, Failed, MemberTask, Message,
                                               PackCap, PackFailed, PackSpec, Pipe, Reported, Shutdown,
                                               Started, StopTrial)

__all__ = ["run_pack_task", "TaskTrainable", "is_task", "resolve_reference", "task_accepts"]

_SHUTDOWN = "shutdown"


def is_task(obj: Any) -> bool:
    """Duck-typed ``FusableTask`` check (no torch import for plain trainables)."""
    return not isinstance(obj, str) and hasattr(obj, "architecture_keys") \
        and callable(getattr(obj, "build_model", None)) \
        and callable(getattr(obj, "optimizer", None))


def task_accepts(task: Any, config: Mapping[str, Any]) -> bool:
    """Whether ``task`` takes ``config`` as a member (its batch size, optimizer and length
    parse): a config it refuses runs as a plain trial."""
    try:
        batch = task.batch_size(config)
        task.optimizer(config, 1)
        task.max_steps(config, None)
    except (ConfigError, ValueError, TypeError, KeyError):
        return False
    return isinstance(batch, int) and batch >= 1


def resolve_reference(reference: str) -> Any:
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



class TaskTrainable:
    """``train(config, ctx)`` for a fusable task: the fused runner with one member, so a task
    runs as an ordinary trial (same results as in a pack: the isolation guarantee), at the
    study's ``precision`` (None: the task's own)."""

    def __init__(self, task: Any, precision: str | None = None):
        self.task, self.precision = task, precision

    def __call__(self, config: Mapping[str, Any], ctx: Any) -> None:
        from hypersack.fusion.runner import run_pack
        run_pack(self.task, _ContextSource(self.task, config, ctx), ctx.device, max_members=1,
                 precision=self.precision)


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



# ---- the pack process ---------------------------------------------------------------------------

def _load_task(spec: tuple, cache: dict[str, Any]) -> Any:
    from hypersack.runtime.worker.trainable import receive, received
    key = spec[0]
    if key not in cache:
        receive(spec)
        ref = received(key)
        reference, payload = ref.reference, ref.payload
        if payload is not None:
            import cloudpickle
            cache[key] = cloudpickle.loads(payload)
        elif reference is not None:
            cache[key] = resolve_reference(reference)
        else:
            raise ConfigError("trainable", key, "was not sent to this worker (no reference and "
                              "no payload)")
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
    """One pack in a worker process: its members, their stops and acks (see module doc).
    ``cap``: the members the driver may seat (the measured cap; None: ``spec.max_members``);
    halved on an OOM of a fused step. ``stats``: what the pack did, slot occupancy against
    ``cap`` included."""

    def __init__(self, pipe: Pipe, spec: PackSpec, task: Any, cap: int | None = None):
        from hypersack.fusion.runner import Pack, PackStats
        from hypersack.fusion.stack import StackOptions
        self.pipe, self.spec, self.task = pipe, spec, task
        self.cap = max(1, spec.max_members if cap is None else cap)
        self.stats = PackStats()
        # On a GPU, as many slots as the pack may seat, so its shapes (and CUDA graphs) never
        # change; on the CPU free slots cost their full share of compute: start small, double.
        cuda = str(spec.device).startswith("cuda")
        precision = spec.precision if spec.precision != "fp32" else task.precision
        options = StackOptions(capacity=self.cap if cuda else min(4, self.cap),
                               precision=precision, graphs=spec.graphs, conv=spec.conv,
                               max_capacity=self.cap)
        self.pack = Pack(task, spec.device, options=options)
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
            rows = self._train_iteration()
            if rows and self._end_epochs(rows) is _SHUTDOWN:
                return _SHUTDOWN

    def _train_iteration(self) -> list[int]:
        from hypersack.fusion.runner import train_recorded
        return train_recorded(self.pack, self.stats, lambda: self.cap, on_error=self._shrink)

    def _shrink(self, exc: BaseException) -> bool:
        """On an OOM of the fused step: halve the cap (never below the members held), report
        it (PackCap), shrink the stack to at most that many slots, free the allocator's
        cache; True: retry the step. False (the pack fails) for any other error, or when the
        cap cannot shrink below what it is."""
        held = len(self.pack)
        new = max(self.cap // 2, held, 1)
        if not is_oom(exc) or new >= self.cap:
            return False
        print(f"out of memory in a fused step with {held} members: cap {self.cap} -> {new}, "
              f"retrying ({type(exc).__name__}: {exc})", flush=True)
        self.cap = new
        self.pipe.send(PackCap(new))
        stack = self.pack.stack
        assert stack is not None
        if not stack.shrink(new):       # its free slots cost memory too: at most ``new``
            stack.runner.reset()
        stack.options = dataclasses.replace(stack.options, max_capacity=new)
        _empty_cache(self.spec.device)
        return True

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
            row = self.pack.load(member)
        except Exception as exc:
            text = traceback.format_exc()
            _log(trial_dir, text)
            self.stats.failed += 1
            self.pipe.send(Failed(trial_id, failure_reason(exc), text))
            return
        self.stats.loaded += 1
        self.stats.trial_ids.append(trial_id)
        self.stats.peak_members = max(self.stats.peak_members, len(self.pack))
        self.seats[trial_id] = _Seat(trial_id, trial_dir, max_steps, m.attempt, committed=m.checkpoint)
        if self.pack.stack is not None and self.pack.stack.epoch(row) >= max_steps:
            self._free([row])                                    # resumed with nothing left

    def _end_epochs(self, rows: list[int]) -> str | None:
        stack = self.pack.stack
        assert stack is not None
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
            self._free(sorted(leaving))
        return None

    def _free(self, rows: list[int]) -> None:
        stack = self.pack.stack
        assert stack is not None
        trial_ids = [stack.slots[row].member.trial_id for row in rows]
        self.pack.free(rows)
        self.stats.freed += len(rows)
        for trial_id in trial_ids:
            self.seats.pop(trial_id, None)
            self.stops.discard(trial_id)
            self.pipe.send(Done(trial_id))

    def fail_all(self, exc: BaseException, text: str, oom: bool) -> None:
        for seat in self.seats.values():
            _log(seat.trial_dir, text)
        self.pipe.send(PackFailed(failure_reason(exc), text, oom))


def _empty_cache(device: str) -> None:
    """Give the CUDA allocator's cached blocks back (nothing to do on the CPU)."""
    if str(device).startswith("cuda"):
        import torch
        torch.cuda.empty_cache()


def _log(trial_dir: Path, text: str) -> None:
    checkpoints.ensure_private_dir(trial_dir)
    with open(checkpoints.open_private(trial_dir / "trial.log", append=True), "a") as f:
        f.write(text.rstrip("\n") + "\n")


def _memory_cap(task: Any, config: Mapping[str, Any], device: str, max_members: int) -> int:
    """``core.packs.pack_cap`` of what this device measures: on CUDA the free memory and the
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
    from hypersack.runtime.worker.trainable import receive
    receive(spec.task)
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
        session = _PackSession(pipe, spec, task, cap)
        try:
            return session.run()
        finally:
            print(session.stats.summary(), flush=True)
    except Exception as exc:
        text = traceback.format_exc()
        print(text, file=sys.stderr, flush=True)
        if session is not None:
            session.fail_all(exc, text, is_oom(exc))
        else:
            pipe.send(PackFailed(failure_reason(exc), text, is_oom(exc)))
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

