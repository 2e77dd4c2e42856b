"""What a fusable task declares, and how a pack talks to whoever feeds it members.

A *fusable task* is a workload whose trials can train side by side in one fused model: a model
factory from config, a per-sample loss, metrics, and one data set shared by every member.
``FusableTask`` is the base class to subclass (``hypersack.workloads.digits_fused`` has two).

A *member* is one trial inside a pack. To the rest of HyperSack it is an ordinary trial: it has
its own id, config and seed, reports its own metrics once per step (one step = one epoch), and
checkpoints and resumes on its own. ``MemberSource`` is the executor's side of that contract.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol

import torch
from torch import nn

from hypersack.fusion.optim import OptimizerConfig

__all__ = ["FusableTask", "Member", "MemberSource"]


class FusableTask:
    """A workload that fused training can run. Subclasses override the methods below.

    ``architecture_keys``: the config keys whose values change tensor shapes (layer widths,
    channels...). Trials fuse only when these are equal (``hypersack.core.packs``); every other
    key (learning rate, optimizer, batch size, dropout, ...) may differ per member.
    """

    name: str = "task"
    architecture_keys: tuple[str, ...] = ()
    #: Training precision of this task's packs: "fp32" (exact), "bf16" or "fp16" (autocast over
    #: fp32 master weights; ``hypersack.fusion.precision``). ``run_pack(precision=...)`` wins.
    precision: str = "fp32"

    def build_model(self, config: Mapping[str, Any]) -> nn.Module:
        """A new model for ``config``. Called with the global torch RNG seeded by the member's
        seed (inside ``torch.random.fork_rng``), so initialisation is reproducible per member."""
        raise NotImplementedError

    def optimizer(self, config: Mapping[str, Any], steps_per_epoch: int) -> OptimizerConfig:
        """The member's optimizer; ``steps_per_epoch`` converts epoch-based schedules."""
        raise NotImplementedError

    def batch_size(self, config: Mapping[str, Any]) -> int:
        """Training mini-batch size (>= 1)."""
        raise NotImplementedError

    def max_steps(self, config: Mapping[str, Any], default: int | None) -> int:
        """Epochs to train when the member does not say (``Member.max_steps`` None)."""
        raise NotImplementedError

    def train_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(inputs, targets)`` on the CPU; the pack moves them to its device once."""
        raise NotImplementedError

    def val_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(inputs, targets)`` of the validation set, evaluated after every epoch."""
        raise NotImplementedError

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-sample training loss ``[M]`` (no reduction) for outputs ``[M, ...]``."""
        raise NotImplementedError

    def metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """Validation metrics of one member from its outputs on the whole validation set."""
        raise NotImplementedError


@dataclass(frozen=True)
class Member:
    """One trial to load into a pack.

    ``checkpoint``: None on a first start, else a state that ``checkpoint`` received earlier
    (the member resumes exactly where it stopped). ``max_steps``: epochs after which the member
    is finished (None: the task's default for its config).
    """
    trial_id: int
    config: Mapping[str, Any]
    seed: int
    checkpoint: Any = None
    max_steps: int | None = None


class MemberSource(Protocol):
    """The executor's side of a pack (``run_pack`` calls these, all from its own thread).

    - ``next_member()``: a member for a free slot, or None if none is pending *now*. Asked
      until it answers None or the pack is full; after a None it is asked again only when a
      member leaves. When it answers None and no member is active, the pack ends.
    - ``checkpoint(trial_id, state)``: the member's state after an epoch (CPU tensors and
      numbers: ``torch.save`` can write it). Always sent before the ``report`` of that epoch.
    - ``report(trial_id, step, metrics) -> bool``: one result per epoch (``step`` counts epochs
      from 1). True means: stop (or pause) this member now; it is freed at once.
    - ``finished(trial_id)``: the member has left the pack (done, stopped or paused) and its
      slot is free. Its last checkpoint is the one to resume from.
    - ``failed(trial_id, error)``: the member could not be loaded (invalid config, a checkpoint
      that does not fit the architecture). The pack goes on without it.
    """

    def next_member(self) -> Member | None: ...
    def checkpoint(self, trial_id: int, state: Any) -> None: ...
    def report(self, trial_id: int, step: int, metrics: Mapping[str, float]) -> bool: ...
    def finished(self, trial_id: int) -> None: ...
    def failed(self, trial_id: int, error: BaseException) -> None: ...
