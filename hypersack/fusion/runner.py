"""Run a pack: load members into free slots, train them fused, report, free, repeat.

``run_pack(task, source, device, max_members)`` is the whole API a worker process needs to run a
pack. It asks ``source.next_member()`` whenever a slot is free, trains every loaded member one
mini-batch per iteration, and at the end of each member's epoch evaluates it, sends its
checkpoint and its report, and frees it when it has done its ``max_steps`` epochs or when
``report`` answers True (stopped or paused: the executor knows which). A freed slot is given to
the next pending member at once; the pack never restarts. It returns when no member is active
and ``next_member()`` has none to give.

A pack is one ``FusedStack``: horizontally fused where its model fuses (vmap otherwise, a
per-member loop where vmap cannot run it either), with fixed slots, a CUDA-graph step on CUDA
(``cudnn.benchmark`` on) and the pack's precision (``StackOptions``). Members with different
optimizer kinds (e.g. adam and sgd) share the one stack (one forward and backward; one update
per kind). Before each step, a stack whose live members fell to half its slots or fewer is
compacted to them (``hypersack.core.packs.compacted_capacity``; one recapture), so empty slots
cost little: ``PackStats.slot_steps_per_member_step`` says how much. Members whose
architecture key differs from the pack's are refused through ``source.failed``
(``hypersack.core.packs`` keeps them out of the pack in the first place).

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

from hypersack.core.packs import compacted_capacity, fusibility_key
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
    members), as a plain mean over iterations and weighted by each iteration's wall time.
    ``member_steps`` / ``slot_steps``: member updates done / slots computed, summed over
    iterations (a free slot is computed too); ``captures``: CUDA graphs captured;
    ``compactions``: times the stack shrank to its live members."""
    iterations: int = 0
    loaded: int = 0
    freed: int = 0
    failed: int = 0
    peak_members: int = 0
    trial_ids: list[int] = field(default_factory=list)
    occupancy_sum: float = 0.0
    occupancy_seconds: float = 0.0
    seconds: float = 0.0
    member_steps: int = 0
    slot_steps: int = 0
    captures: int = 0
    compactions: int = 0

    def record(self, occupied: int, capacity: int, seconds: float,
               slots: int | None = None) -> None:
        """One training iteration with ``occupied`` of ``capacity`` slots that took ``seconds``;
        ``slots``: the slots the stack computed (None: ``capacity``)."""
        fullness = occupied / max(1, capacity)
        self.iterations += 1
        self.occupancy_sum += fullness
        self.occupancy_seconds += fullness * max(0.0, seconds)
        self.seconds += max(0.0, seconds)
        self.member_steps += occupied
        self.slot_steps += capacity if slots is None else slots

    @property
    def slot_steps_per_member_step(self) -> float:
        """Slots computed per member update (1.0: no empty slot computed; 0.0 before any)."""
        return self.slot_steps / self.member_steps if self.member_steps else 0.0

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
                f"time-weighted {self.time_occupancy:.3f}; slot-steps {self.slot_steps} for "
                f"member-steps {self.member_steps} ({self.slot_steps_per_member_step:.3f} per "
                f"member-step), compactions {self.compactions}, graph captures {self.captures}")


class Pack:
    """The members of one pack: one ``FusedStack`` (built with the first member) on
    ``PackData``. ``engine``: "hfused" | "vmap" | "loop" once built (None before)."""

    def __init__(self, task: FusableTask, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, options: StackOptions | None = None):
        self.task, self.device, self.dtype = task, torch.device(device), dtype
        self.options = options or StackOptions(precision=task.precision)
        if self.options.graphs == "on" and self.device.type != "cuda":
            raise ConfigError("pack.graphs", "on", f"needs a CUDA device (the pack is on "
                                                   f"{self.device})")
        if self.device.type == "cuda":
            # A pack's shapes are few and fixed: let cuDNN pick its fastest kernels for them.
            torch.backends.cudnn.benchmark = True
        self.data = PackData.from_task(task, self.device, dtype)
        self.stack: FusedStack | None = None
        self.architecture: tuple[tuple[str, Hashable], ...] | None = None
        self.compactions = 0
        self._captures_before = 0      # captures of runners replaced by ``set_mode``

    def __len__(self) -> int:
        return 0 if self.stack is None else len(self.stack)

    @property
    def engine(self) -> str | None:
        return None if self.stack is None else self.stack.engine

    @property
    def captures(self) -> int:
        """CUDA graphs captured by this pack's step so far."""
        return self._captures_before + (0 if self.stack is None else self.stack.runner.captures)

    @property
    def graphs_enabled(self) -> bool:
        """Whether the step runs as CUDA graphs (False after a failed capture)."""
        return self.stack is not None and self.stack.runner.enabled

    def load(self, member: Member) -> int:
        """Add ``member``; returns its slot. Raises ConfigError for an unfit member."""
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
        if self.stack is None:
            self.stack = FusedStack(self.task, model, self.data, self.options)
        slot = self.stack.add(member, model, optimizer, batch, max_steps)
        self.architecture = key
        return slot

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

    def free(self, rows: list[int]) -> None:
        """Free the slots ``rows`` (the stack keeps its shapes until it is compacted)."""
        assert self.stack is not None
        self.stack.remove(rows)

    def compact(self) -> bool:
        """Shrink the stack to its live members when they fill half its slots or fewer
        (``compacted_capacity``); True if it shrank (slot numbers changed)."""
        stack = self.stack
        if stack is None or len(stack) == 0:
            return False
        target = compacted_capacity(stack.capacity, len(stack))
        if target is None or not stack.shrink(target):
            return False
        self.compactions += 1
        return True

    def set_mode(self, precision: str, graphs: str, conv: str | None = None) -> None:
        """Another precision, graph mode and (``conv`` not None) convolution form for the built
        stack (a benchmark's switch: the state carries over, the step is captured again)."""
        import dataclasses
        from hypersack.fusion.graphs import StepRunner
        self.options = dataclasses.replace(self.options, precision=precision, graphs=graphs,
                                           conv=conv or self.options.conv)
        if self.stack is not None:
            self._captures_before += self.stack.runner.captures
            self.stack.options = self.options
            self.stack.runner = StepRunner(self.stack._device_step, graphs, self.stack.device)

    def train_iteration(self, on_error: Callable[[BaseException], bool] | None = None
                        ) -> list[int]:
        """One step of every member; the slots whose epoch ended. Compacts first when the
        live members fill half the slots or fewer (``compact``: slot numbers change only
        here, before the step, so the slots returned are valid until the next call).

        When the step raises, ``on_error(exc)`` True retries it (``on_error`` may reshape the
        stack); False or no ``on_error`` re-raises. A retry repeats the step exactly when the
        error came before its update (an OOM in the forward or backward pass, where
        activations peak)."""
        if self.stack is None or len(self.stack) == 0:
            return []
        self.compact()
        while True:
            try:
                return self.stack.train_iteration()
            except Exception as exc:
                if on_error is None or not on_error(exc):
                    raise


def _check_max_members(max_members: int) -> None:
    check_integer("pack.max_members", max_members, low=1)


def run_pack(task: FusableTask, source: MemberSource, device: torch.device | str = "cpu",
             max_members: int = 8, dtype: torch.dtype = torch.float32, *,
             precision: str | None = None, engine: str = "auto",
             graphs: str = "auto", conv: str = "grouped") -> PackStats:
    """Train members from ``source`` fused, at most ``max_members`` at a time (see module doc).

    ``dtype``: floating type of parameters and data (float64 for exact-isolation tests).
    ``precision``: "fp32" (exact), "bf16" or "fp16" (None: the task's ``precision``);
    ``engine``: "auto" | "hfused" | "vmap"; ``graphs``: "auto" | "on" | "off"; ``conv``:
    "grouped" | "bmm" (``hypersack.fusion.stack.StackOptions``). The stack has ``max_members`` slots at first
    and is compacted as members leave. Exceptions raised by ``source`` or by training
    propagate: the pack as a whole failed.
    """
    _check_max_members(max_members)
    options = StackOptions(capacity=int(max_members), engine=engine, graphs=graphs,
                           precision=precision or task.precision, conv=conv,
                           max_capacity=int(max_members))
    pack, stats = Pack(task, device, dtype, options), PackStats()
    ask = True
    while True:
        if ask:
            ask = _fill(pack, source, max_members, stats)
        if len(pack) == 0:
            return stats
        ended = train_recorded(pack, stats, lambda: max_members)
        if ended and _end_epochs(pack, ended, source, stats):
            ask = True


def train_recorded(pack: Pack, stats: PackStats, cap: Callable[[], int],
                   on_error: Callable[[BaseException], bool] | None = None) -> list[int]:
    """``pack.train_iteration`` with its figures added to ``stats`` (``cap()``: the pack's
    cap on members after the step, for occupancy; slot-steps count the slots computed)."""
    start, occupied = time.perf_counter(), len(pack)
    ended = pack.train_iteration(on_error)
    slots = pack.stack.capacity if pack.stack is not None else cap()
    stats.record(occupied, cap(), time.perf_counter() - start, slots=slots)
    stats.captures, stats.compactions = pack.captures, pack.compactions
    return ended


def _fill(pack: Pack, source: MemberSource, max_members: int, stats: PackStats) -> bool:
    """Load pending members into free slots; False once the source had none to give."""
    while len(pack) < max_members:
        member = source.next_member()
        if member is None:
            return False
        try:
            row = pack.load(member)
        except ConfigError as exc:
            stats.failed += 1
            source.failed(member.trial_id, exc)
            continue
        stats.loaded += 1
        stats.trial_ids.append(member.trial_id)
        stats.peak_members = max(stats.peak_members, len(pack))
        stack = pack.stack
        assert stack is not None
        if stack.epoch(row) >= stack.slots[row].max_steps:  # resumed with nothing left to do
            pack.free([row])
            stats.freed += 1
            source.finished(member.trial_id)
    return True


def _end_epochs(pack: Pack, rows: list[int], source: MemberSource,
                stats: PackStats) -> bool:
    """Evaluate, checkpoint and report the members whose epoch ended; free those that leave."""
    stack = pack.stack
    assert stack is not None
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
    pack.free(leaving)
    stats.freed += len(leaving)
    for trial_id in trial_ids:
        source.finished(trial_id)
    return True
