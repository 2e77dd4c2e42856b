"""Per-device questions an executor asks of its own devices, answered here so that executors
decide nothing: how many warm workers a device keeps, and which device takes a launch that names
none (the controller always names them; executors driven directly, as in their tests, may not).
Pure: plain values in and out.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = ["warm_workers", "first_free_device"]


def warm_workers(oversubscription: float) -> int:
    """Worker processes a device keeps warm: one per trial it may hold at once (ceil of its
    oversubscription ratio), at least one."""
    return max(1, math.ceil(oversubscription))


def first_free_device(devices: Sequence[str], busy: Iterable[str]) -> str | None:
    """The first device of ``devices`` (the inventory's order) that runs nothing, or None."""
    taken = set(busy)
    return next((d for d in devices if d not in taken), None)
