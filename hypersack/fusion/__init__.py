"""Fused training of many same-architecture trials in one process (the Pack primitive).

- ``run_pack(task, source, device, max_members)``: the runner a worker process calls
  (``hypersack.fusion.runner``); ``Member`` and ``MemberSource`` are its contract.
- ``FusableTask``: what a workload declares to be fusable (``hypersack.fusion.task``).
- ``OptimizerConfig`` / ``Schedule``: per-member optimizers over stacked parameters
  (``hypersack.fusion.optim``).
- ``measure_member_memory``: the per-member memory that caps a pack's size.
- ``StackOptions``: slots, engine, precision and CUDA graphs of a pack's stack
  (``hypersack.fusion.stack``; ``run_pack`` takes the same as keyword arguments).

Engines: ``hfused`` (``hypersack.fusion.hfused`` over the op table of
``hypersack.fusion.fused_ops``) is the default; a model it cannot fuse trains under vmap.
The step runs eagerly or as a CUDA graph (``hypersack.fusion.graphs``) in fp32, bf16 or fp16
(``hypersack.fusion.precision``).

Which trials fuse is decided by ``hypersack.core.packs`` (pure, no torch).
"""
from hypersack.errors import MissingDependencyError

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
    raise MissingDependencyError("Fused training", "torch", "workloads") from exc

from hypersack.fusion.memory import MemoryProfile, measure_member_memory
from hypersack.fusion.optim import OptimizerConfig, Schedule
from hypersack.fusion.runner import Pack, PackStats, run_pack
from hypersack.fusion.stack import StackOptions
from hypersack.fusion.task import FusableTask, Member, MemberSource

__all__ = ["run_pack", "Pack", "PackStats", "FusableTask", "Member", "MemberSource",
           "OptimizerConfig", "Schedule", "MemoryProfile", "measure_member_memory",
           "StackOptions"]
