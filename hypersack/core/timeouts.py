"""When a trial has run too long. Pure: the controller decides with ``timed_out``; an executor
with its own clock (the simulator) wakes the loop at ``deadline`` so the decision is taken on
time, never before.

A trial times out once strictly more than ``limit`` seconds have passed since its launch
(``executor.trial_timeout_s``; None: no limit). A data-parallel trial whose rank 0 has finished
is finished once its other ranks are done, or ``RANK_GRACE_S`` seconds later (``straggling``):
ranks still running then are ended and the trial counts as finished.

A worker sends a heartbeat every ``HEARTBEAT_S`` seconds while it runs a trial (a thread: a
stopped or frozen process sends none). ``silence`` judges a trial by its last heartbeat: the
count starts at its first heartbeat (never during a worker's start-up, never for an executor
that sends none, as the simulator); a trial silent for more than half of ``limit``
(``executor.heartbeat_timeout_s``) is NOT_RESPONDING (shown), past ``limit`` it is GONE (its
worker is killed and the trial retried as a dead worker's).
"""
from __future__ import annotations

import enum
import math

__all__ = ["timed_out", "deadline", "straggling", "silence", "Silence", "RANK_GRACE_S",
           "HEARTBEAT_S", "HEARTBEAT_TIMEOUT_S", "MIN_HEARTBEAT_TIMEOUT_S", "NOT_RESPONDING"]

#: Seconds the other ranks of a data-parallel trial may run after rank 0 finished.
RANK_GRACE_S = 60.0
#: Seconds between a busy worker's heartbeats.
HEARTBEAT_S = 1.0
#: The default ``executor.heartbeat_timeout_s``: as Optuna's heartbeat interval (60 s; its
#: grace period adds as much again), far above a worker's pauses (a garbage collection, a
#: C call that holds the GIL).
HEARTBEAT_TIMEOUT_S = 60.0
#: The least ``executor.heartbeat_timeout_s`` accepted: a few heartbeats.
MIN_HEARTBEAT_TIMEOUT_S = 3 * HEARTBEAT_S
#: The key of a running trial's ``info`` while it is not responding: seconds of silence when
#: that was first seen (the controller sets and clears it; status and progress show it).
NOT_RESPONDING = "not_responding"


class Silence(enum.Enum):
    """How long a running trial has not been heard from, judged by ``silence``."""
    HEARD = "heard"
    NOT_RESPONDING = "not responding"
    GONE = "gone"


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


def silence(heard_at: float | None, now: float, limit: float | None) -> Silence:
    """A trial's state at ``now`` whose last heartbeat came at ``heard_at`` (None: none yet,
    never judged) under ``limit`` seconds (None: heartbeats are not watched)."""
    if limit is None or heard_at is None:
        return Silence.HEARD
    quiet = now - heard_at
    if quiet > limit:
        return Silence.GONE
    return Silence.NOT_RESPONDING if quiet > limit / 2 else Silence.HEARD
