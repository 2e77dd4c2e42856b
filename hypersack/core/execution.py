"""``execution: auto``: fused, co-located or exclusive, per group of trials, from the profiles.

A *group* here is the trials of one model (one job-history signature). The rule, in order:

1. ``fused``: the trainable's task fuses the group's architecture (and its data lives on the
   device) and at least ``MIN_FUSED_TRIALS`` trials of it run: one fused pack amortises the
   kernels of several trials (Pack, seed 001);
2. ``exclusive``: the profiler measured that one trial fills the GPU alone (utilisation at least
   ``FILLS_DEVICE_PERCENT``) or needs more than half its memory: a second trial would only slow
   both down;
3. ``co-located``: otherwise; trials share the GPU (MPS), placed by their measured demand and
   the oversubscription ratio (before any profile: at the study's declared demand).

Pure; the choice comes with a one-line reason for logs, the progress view and the report.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

__all__ = ["MODES", "MIN_FUSED_TRIALS", "FILLS_DEVICE_PERCENT", "Group", "ExecutionChoice",
           "choose_execution", "group_of", "exclusive_demand"]

MODES = ("fused", "co-located", "exclusive")
MIN_FUSED_TRIALS = 4
FILLS_DEVICE_PERCENT = 90.0


@dataclass(frozen=True)
class Group:
    """What the choice looks at. ``compute_percent`` / ``memory_gb``: one trial's profile alone
    (None: not profiled); ``device_memory_gb``: the device's memory (None: unknown)."""
    name: str
    trials: int
    fusable: bool
    compute_percent: float | None = None
    memory_gb: float | None = None
    device_memory_gb: float | None = None


@dataclass(frozen=True)
class ExecutionChoice:
    mode: str
    reason: str


def choose_execution(group: Group) -> ExecutionChoice:
    """The mode for ``group`` (the rule in the module docstring) and why."""
    name, util, memory = group.name, group.compute_percent, group.memory_gb
    if group.fusable and group.trials >= MIN_FUSED_TRIALS:
        return ExecutionChoice("fused", f"{name}: {group.trials} trials of one fusable "
                               f"architecture (>= {MIN_FUSED_TRIALS}) train as fused packs")
    if util is not None and util >= FILLS_DEVICE_PERCENT:
        return ExecutionChoice("exclusive", f"{name}: one trial fills the GPU alone "
                               f"({util:.0f}% utilisation >= {FILLS_DEVICE_PERCENT:.0f}%)")
    if memory is not None and group.device_memory_gb and memory > group.device_memory_gb / 2:
        return ExecutionChoice("exclusive", f"{name}: one trial needs {memory:.1f} of "
                               f"{group.device_memory_gb:.0f} GiB, no room for a second")
    why = ("not fusable" if not group.fusable
           else f"only {group.trials} trial(s) to fuse (< {MIN_FUSED_TRIALS})")
    if util is None:
        return ExecutionChoice("co-located", f"{name}: {why}; not profiled yet, shares the GPU "
                               "at its declared demand")
    return ExecutionChoice("co-located", f"{name}: {why}; {util:.0f}% utilisation alone "
                           "leaves room: shares the GPU (MPS)")


def group_of(name: str, per_arch: Mapping[str, Mapping[str, float]],
             device_memory: Iterable[float]) -> Group:
    """The ``Group`` of one model that does not fuse, from its job-history demand per
    architecture (``compute`` and ``memory_gb``: the busiest architecture's; none: not
    profiled) and the memory of the devices here (the smallest counts; none: unknown)."""
    util = max((d["compute"] for d in per_arch.values()), default=None)
    memory = max((d["memory_gb"] for d in per_arch.values()), default=None)
    return Group(name, 1, False, util, memory, min(device_memory, default=None))


def exclusive_demand(per_arch: Mapping[str, Mapping[str, float]],
                     capacity: Mapping[str, float]) -> dict[str, dict[str, Any]]:
    """The per-architecture demand of an ``exclusive`` trial: each architecture's whole
    capacity (r x C, ``capacity``) as its compute, its profiled memory and runtime kept; the
    architectures without a capacity here are left out."""
    return {arch: {"compute": capacity[arch], "memory_gb": d["memory_gb"],
                   "runtime": d["runtime"]} for arch, d in per_arch.items() if arch in capacity}
