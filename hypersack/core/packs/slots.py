"""How many slots a fused stack computes, and the batch width it pads to (pure rules).

A stack computes every one of its slots at every step, live or not, so a pack whose live
members fall to half its slots or fewer is compacted to exactly its live members
(``compacted_capacity``); it doubles again (up to its cap) only when a member finds no free
slot. Under CUDA graphs a step is captured per padded width, so the width is rounded up to a
bucket (``bucket_width``: powers of two and their midpoints, 1, 2, 3, 4, 6, 8, 12, 16, 24, ...,
at most a third of the rows padding) and a mix of batch sizes coming and going reuses a few
captures.
"""
from __future__ import annotations

__all__ = ["compacted_capacity", "bucket_width", "grown_capacity"]


def compacted_capacity(capacity: int, live: int) -> int | None:
    """The slots a stack of ``capacity`` slots with ``live`` members should shrink to, or None
    to keep it: ``live`` (at least 1) once ``live <= capacity / 2``."""
    if capacity < 2 or 2 * live > capacity:
        return None
    return max(1, live)


def grown_capacity(capacity: int, needed: int, cap: int | None) -> int:
    """The slots after a grow: double ``capacity`` (at least ``needed``), at most ``cap``
    (None: no cap) but never below ``needed``."""
    doubled = max(2 * capacity, needed)
    return doubled if cap is None else max(needed, min(doubled, cap))


def bucket_width(width: int) -> int:
    """The smallest bucket >= ``width`` (>= 1): 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, ..."""
    if width <= 2:
        return max(1, width)
    power = 1 << (width - 1).bit_length()        # the smallest power of two >= width
    middle = power // 2 + power // 4
    return middle if width <= middle else power
