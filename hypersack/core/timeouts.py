"""When a trial has run too long. Pure: the controller decides with ``timed_out``; an executor
with its own clock (the simulator) wakes the loop at ``deadline`` so the decision is taken on
time, never before.

A trial times out once strictly more than ``limit`` seconds have passed since its launch
(``executor.trial_timeout_s``; None: no limit). A data-parallel trial whose rank 0 has finished
is finished once its other ranks are done, or ``RANK_GRACE_S`` seconds later (``straggling``):
ranks still running then are ended and the trial counts as finished.
"""
from __future__ import annotations

import math

__all__ = ["timed_out", "deadline", "straggling", "RANK_GRACE_S"]

#: Seconds the other ranks of a data-parallel trial may run after rank 0 finished.
RANK_GRACE_S = 60.0


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


def straggling(rank0_done_at: float | None, now: float, grace: float = RANK_GRACE_S) -> bool:
    """Whether a data-parallel trial's other ranks, still running at ``now``, have outlived
    rank 0 (done at ``rank0_done_at``; None: not done) by more than ``grace`` seconds."""
    return rank0_done_at is not None and now - rank0_done_at > grace
