"""When a trial has run too long. Pure: the controller decides with ``timed_out``; an executor
with its own clock (the simulator) wakes the loop at ``deadline`` so the decision is taken on
time, never before.

A trial times out once strictly more than ``limit`` seconds have passed since its launch
(``executor.trial_timeout_s``; None: no limit).
"""
from __future__ import annotations

import math

__all__ = ["timed_out", "deadline"]


def timed_out(started_at: float | None, now: float, limit: float | None) -> bool:
    """Whether a trial launched at ``started_at`` has run past ``limit`` seconds at ``now``."""
    return limit is not None and started_at is not None and now - started_at > limit


def deadline(started_at: float, limit: float | None) -> float | None:
    """The first time at which ``timed_out(started_at, t, limit)`` holds (None: never)."""
    if limit is None:
        return None
    t = started_at + limit
    while not timed_out(started_at, t, limit):
        t = math.nextafter(t, math.inf)
    return t
