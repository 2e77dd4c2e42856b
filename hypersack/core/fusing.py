"""Whether a trial runs in a fused pack, and how many members a new pack may hold. Pure: used
alike by the local executor's pack plan (``runtime/pack_worker.py``) and the simulator.

- ``runs_fused(mode, accepts, pack_size)``: the study's ``execution`` mode decides; in ``auto``
  the fusable task's verdict on the config (``accepts()``, asked only then) does. A trial whose
  algorithm pack holds only itself (``pack_size`` 1, e.g. a late rung of pack-aware Hyperband)
  runs alone as a plain trial in every mode.
- ``pack_cap(max_members, free, per_member, base)``: members a pack takes, from the memory
  free on its device when it starts (``None``: not measurable, e.g. a CPU device, where host RAM
  is the placement's question): ``max_members``, lowered to the members that fit
  ``PACK_HEADROOM`` of the free memory, at least 1 (whether one member fits at all is the
  placement's question). Units: any, as long as the three figures share them.
"""
from __future__ import annotations

from typing import Callable

from hypersack.core.packing import member_cap
from hypersack.core.spec import EXECUTION_MODES
from hypersack.errors import ConfigError

__all__ = ["runs_fused", "pack_cap", "PACK_HEADROOM"]

#: Share of a device's free memory a new pack may fill: the rest is kept for fragmentation and
#: the evaluation pass.
PACK_HEADROOM = 0.9


def runs_fused(mode: str, accepts: Callable[[], bool], pack_size: int | None = None) -> bool:
    """Whether a trial runs in a pack: never in ``separate``, always in ``fused`` (a config the
    task refuses then fails in its pack), in ``auto`` when ``accepts()`` (the task takes the
    config: optimizer, schedule, batch size...). Never when its algorithm pack has one member
    (``pack_size`` 1; None: the algorithm forms no packs): a pack of one trains as the plain
    trial does (the isolation guarantee) but pays the fused runner's cost (0.35x the plain speed
    on the measured CPU table) and a pack process."""
    if mode == "separate" or pack_size == 1:
        return False
    if mode == "fused":
        return True
    if mode == "auto":
        return bool(accepts())
    raise ConfigError("execution", mode, f"must be one of {', '.join(EXECUTION_MODES)}")


def pack_cap(max_members: int, free: float | None, per_member: float | None,
             base: float = 0.0) -> int:
    """Members a new pack may hold (see the module docstring): ``min(max_members,
    member_cap(PACK_HEADROOM * free, per_member, base))``; ``max_members`` when ``free`` or
    ``per_member`` is None (nothing measured)."""
    if isinstance(max_members, bool) or not isinstance(max_members, int) or max_members < 1:
        raise ConfigError("pack.max_members", max_members, "must be an integer >= 1")
    if free is None or per_member is None:
        return max_members
    return min(max_members, member_cap(PACK_HEADROOM * max(0.0, free), per_member, base))
