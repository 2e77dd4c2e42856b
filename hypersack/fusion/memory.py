"""Measure what one more member costs a pack, for the memory cap of ``pack_opt``.

On CUDA the figures are measured: the peak of ``torch.cuda.max_memory_allocated`` over a few
training iterations of a pack of 1 and of 2 members; their difference is the per-member cost and
the rest is the pack's base (data set, workspace). On the CPU there is no allocator peak to read,
so the per-member figure counts the member's stacked state (parameters, gradients, buffers,
optimizer state) and ``measured`` is False: a lower bound that leaves activations out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

from hypersack.fusion.runner import Pack
from hypersack.fusion.stack import StackOptions
from hypersack.fusion.task import FusableTask, Member

__all__ = ["MemoryProfile", "measure_member_memory"]


@dataclass(frozen=True)
class MemoryProfile:
    """Bytes: ``base_bytes + n * per_member_bytes`` is the peak of a pack of n members."""
    base_bytes: float
    per_member_bytes: float
    measured: bool


def _pack(task: FusableTask, config: Mapping[str, Any], n: int, device: torch.device,
          dtype: torch.dtype, precision: str | None = None) -> Pack:
    """A pack of ``n`` members in exactly ``n`` slots, on the default (fused) engine."""
    options = StackOptions(capacity=n, precision=precision or task.precision)
    pack = Pack(task, device, dtype, options)
    for i in range(n):
        pack.load(Member(trial_id=i, config=config, seed=i, max_steps=1))
    return pack


def _state_bytes(pack: Pack) -> float:
    total = 0
    for key, value in (pack.stack.rows if pack.stack is not None else {}).items():
        total += value.numel() * value.element_size() * (2 if key.startswith("p.") else 1)
    return float(total)


def measure_member_memory(task: FusableTask, config: Mapping[str, Any],
                          device: torch.device | str = "cpu", iterations: int = 4,
                          dtype: torch.dtype = torch.float32,
                          precision: str | None = None) -> MemoryProfile:
    """The memory profile of ``config``'s architecture on ``device`` (see the module doc),
    measured on the engine, slots, precision and (on CUDA) graph step a pack really uses:
    ``iterations`` >= 3 includes the capture of the step's graph."""
    device = torch.device(device)
    if device.type != "cuda":
        one = _state_bytes(_pack(task, config, 1, device, dtype, precision))
        return MemoryProfile(base_bytes=0.0, per_member_bytes=one, measured=False)
    peaks = []
    for n in (1, 2):
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        pack = _pack(task, config, n, device, dtype, precision)
        for _ in range(iterations):
            pack.train_iteration()
        torch.cuda.synchronize(device)
        peaks.append(float(torch.cuda.max_memory_allocated(device)))
        del pack
    per_member = max(peaks[1] - peaks[0], 1.0)
    return MemoryProfile(base_bytes=max(peaks[0] - per_member, 0.0),
                         per_member_bytes=per_member, measured=True)
