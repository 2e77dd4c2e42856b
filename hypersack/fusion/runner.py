"""Run a pack: load members into free slots, train them fused, report, free, repeat.

``run_pack(task, source, device, max_members)`` is the whole API a worker process needs to run a
pack. It asks ``source.next_member()`` whenever a slot is free, trains every loaded member one
mini-batch per iteration, and at the end of each member's epoch evaluates it, sends its
checkpoint and its report, and frees it when it has done its ``max_steps`` epochs or when
``report`` answers True (stopped or paused: the executor knows which). A freed slot is given to
the next pending member at once; the pack never restarts. It returns when no member is active
and ``next_member()`` has none to give.

Each stack is horizontally fused where its model fuses (vmap otherwise), with fixed slots, a
CUDA-graph step on CUDA and the pack's precision (``StackOptions``).

Members with different optimizer kinds (e.g. adam and sgd) live in separate stacks of the same
pack: they share the process, the device and the data set, and each stack is one fused
computation. Members whose architecture key differs from the pack's are refused through
``source.failed`` (``hypersack.core.packs`` keeps them out of the pack in the first place).

A sketch of an executor's source::

    class StudySource:
        def next_member(self):            # a pending trial of this pack, or None
            ...
        def checkpoint(self, trial_id, state):
            torch.save(state, trial_dir(trial_id) / "checkpoint.pt")
        def report(self, trial_id, step, metrics):
            return send_result_and_wait_for_decision(trial_id, step, metrics)   # True: stop
        def finished(self, trial_id): ...
        def failed(self, trial_id, error): ...

    run_pack(DIGITS_MLP, StudySource(), device="cuda:0", max_members=32)
"""
from __future__ import annotations

import time
from typing import Callable, Hashable
from dataclasses import dataclass, field

import torch

from hypersack.core.packs import fusibility_key
from hypersack.errors import ConfigError
from hypersack.validation import check_integer
from hypersack.fusion.layers import prepare_module
from hypersack.fusion.stack import FusedStack, PackData, StackOptions, steps_per_epoch
from hypersack.fusion.task import FusableTask, Member, MemberSource

__all__ = ["Pack", "PackStats", "run_pack"]


@dataclass
class PackStats:
    """What a pack did: iterations (fused optimizer steps), members loaded / freed / refused,
    and its slot fullness: per iteration, occupied slots / the pack's capacity (its cap on
    members), as a plain mean over iterations and weighted by each iteration's wall time."""
    iterations: int = 0
    loaded: int = 0
    freed: int = 0
    failed: int = 0
    peak_members: int = 0
    trial_ids: list[int] = field(default_factory=list)
    occupancy_sum: float = 0.0
    occupancy_seconds: float = 0.0
    seconds: float = 0.0

    def record(self, occupied: int, capacity: int, seconds: float) -> None:
        """One training iteration with ``occupied`` of ``capacity`` slots that took ``seconds``."""
        fullness = occupied / max(1, capacity)
        self.iterations += 1
        self.occupancy_sum += fullness
        self.occupancy_seconds += fullness * max(0.0, seconds)
        self.seconds += max(0.0, seconds)

    @property
    def mean_occupancy(self) -> float:
        """Mean over iterations of occupied / capacity (0.0 before the first iteration)."""
        return self.occupancy_sum / self.iterations if self.iterations else 0.0

    @property
    def time_occupancy(self) -> float:
        """Occupied / capacity weighted by iteration time (the mean when no time was measured)."""
        return self.occupancy_seconds / self.seconds if self.seconds > 0 else self.mean_occupancy

    def summary(self) -> str:
        """One line for a pack's log."""
        return (f"pack stats: {self.iterations} iterations in {self.seconds:.2f}s, "
                f"members loaded {self.loaded} freed {self.freed} failed {self.failed} "
                f"peak {self.peak_members}; slot occupancy mean {self.mean_occupancy:.3f}, "
                f"time-weighted {self.time_occupancy:.3f}")


class Pack:
    """The members of one pack, one ``FusedStack`` per optimizer kind, sharing ``PackData``."""

    def __init__(self, task: FusableTask, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, options: StackOptions | None = None):
        self.task, self.device, self.dtype = task, torch.device(device), dtype
        self.options = options or StackOptions(precision=task.precision)
        if self.options.graphs == "on" and self.device.type != "cuda":
            raise ConfigError("pack.graphs", "on", f"needs a CUDA device (the pack is on "
                                                   f"{self.device})")
        self.data = PackData.from_task(task, self.device, dtype)
        self.stacks: dict[str, FusedStack] = {}
        self.engines: dict[str, str] = {}     # optimizer kind -> "hfused" | "vmap", as built
        self.architecture: tuple[tuple[str, Hashable], ...] | None = None

    def __len__(self) -> int:
        return sum(len(s) for s in self.stacks.values())

    def load(self, member: Member) -> tuple[str, int]:
        """Add ``member``; returns (stack kind, row). Raises ConfigError for an unfit member."""
        config = member.config
        key = fusibility_key(config, self.task.architecture_keys)
        if self.architecture is not None and key != self.architecture:
            raise ConfigError(f"member[{member.trial_id}].config", dict(key),
                              f"must match the pack's architecture {dict(self.architecture)}")
        batch = self.task.batch_size(config)
        optimizer = self.task.optimizer(config, steps_per_epoch(self.data.n, batch))
        max_steps = member.max_steps if member.max_steps is not None \
            else self.task.max_steps(config, None)
        model = self._build(member)
        stack = self.stacks.get(optimizer.kind)
        if stack is None:
            stack = FusedStack(self.task, optimizer.kind, model, self.data, self.options)
            self.engines[optimizer.kind] = stack.engine
        slot = stack.add(member, model, optimizer, batch, max_steps)
        self.stacks[optimizer.kind] = stack
        self.architecture = key
        return optimizer.kind, slot

    def _build(self, member: Member) -> torch.nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(member.seed)
            model = self.task.build_model(member.config)
        model = prepare_module(model).to(device=self.device, dtype=self.dtype)
        if member.checkpoint is not None:
            try:
                model.load_state_dict(member.checkpoint["model"])
            except (KeyError, TypeError, RuntimeError) as exc:
                raise ConfigError(f"member[{member.trial_id}].checkpoint", "model",
                                  f"does not fit the architecture ({exc})") from exc
        return model

    def free(self, kind: str, rows: list[int]) -> None:
        stack = self.stacks[kind]
        stack.remove(rows)
        if len(stack) == 0:
            del self.stacks[kind]

    def train_iteration(self, on_error: Callable[[str, BaseException], bool] | None = None
                        ) -> dict[str, list[int]]:
        """One step of every stack; the rows whose epoch ended, per stack kind.

        When a stack's step raises, ``on_error(kind, exc)`` True retries that stack's step (the
        stacks already stepped are not stepped again, and their ended rows must stay valid:
        ``on_error`` may reshape only stack ``kind``); False or no ``on_error`` re-raises.
        A retry repeats the step exactly when the error came before its update (an OOM in
        the forward or backward pass, where activations peak)."""
        ended = {}
        for kind, stack in list(self.stacks.items()):
            while True:
                try:
                    ended[kind] = stack.train_iteration()
                    break
                except Exception as exc:
                    if on_error is None or not on_error(kind, exc):
                        raise
        return ended


def _check_max_members(max_members: int) -> None:
    check_integer("pack.max_members", max_members, low=1)


def run_pack(task: FusableTask, source: MemberSource, device: torch.device | str = "cpu",
             max_members: int = 8, dtype: torch.dtype = torch.float32, *,
             precision: str | None = None, engine: str = "auto",
             graphs: str = "auto") -> PackStats:
    """Train members from ``source`` fused, at most ``max_members`` at a time (see module doc).

    ``dtype``: floating type of parameters and data (float64 for exact-isolation tests).
    ``precision``: "fp32" (exact), "bf16" or "fp16" (None: the task's ``precision``); ``engine``: "auto" | "hfused" | "vmap"; ``graphs``: "auto" | "on" | "off"
    (``hypersack.fusion.stack.StackOptions``). Each stack has ``max_members`` slots.
    Exceptions raised by ``source`` or by training propagate: the pack as a whole failed.
    """
    _check_max_members(max_members)
    options = StackOptions(capacity=int(max_members), engine=engine, graphs=graphs,
                           precision=precision or task.precision)
    pack, stats = Pack(task, device, dtype, options), PackStats()
    ask = True
    while True:
        if ask:
            ask = _fill(pack, source, max_members, stats)
        if len(pack) == 0:
            return stats
        start, occupied = time.perf_counter(), len(pack)
        ended = pack.train_iteration()
        stats.record(occupied, max_members, time.perf_counter() - start)
        for kind, rows in ended.items():
            if rows and _end_epochs(pack, kind, rows, source, stats):
                ask = True


def _fill(pack: Pack, source: MemberSource, max_members: int, stats: PackStats) -> bool:
    """Load pending members into free slots; False once the source had none to give."""
    while len(pack) < max_members:
        member = source.next_member()
        if member is None:
            return False
        try:
            kind, row = pack.load(member)
        except ConfigError as exc:
            stats.failed += 1
            source.failed(member.trial_id, exc)
            continue
        stats.loaded += 1
        stats.trial_ids.append(member.trial_id)
        stats.peak_members = max(stats.peak_members, len(pack))
        stack = pack.stacks[kind]
        if stack.epoch(row) >= stack.slots[row].max_steps:  # resumed with nothing left to do
            pack.free(kind, [row])
            stats.freed += 1
            source.finished(member.trial_id)
    return True


def _end_epochs(pack: Pack, kind: str, rows: list[int], source: MemberSource,
                stats: PackStats) -> bool:
    """Evaluate, checkpoint and report the members whose epoch ended; free those that leave."""
    stack = pack.stacks[kind]
    leaving = []
    for row, metrics in zip(rows, stack.evaluate(rows)):
        slot, epoch = stack.slots[row], stack.epoch(row)
        source.checkpoint(slot.member.trial_id, stack.member_state(row))
        stop = source.report(slot.member.trial_id, epoch, metrics)
        if stop or epoch >= slot.max_steps:
            leaving.append(row)
    if not leaving:
        return False
    trial_ids = [stack.slots[row].member.trial_id for row in leaving]
    pack.free(kind, leaving)
    stats.freed += len(leaving)
    for trial_id in trial_ids:
        source.finished(trial_id)
    return True
