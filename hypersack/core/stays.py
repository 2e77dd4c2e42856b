"""Stays: each period a trial spent on a device, from its launch to the moment it left.

A stay is what the per-GPU timeline of a report draws: one bar per (trial, attempt, device).
The controller opens one stay per device (data-parallel rank) when it launches a trial and closes
them when the trial leaves, with the outcome that says why it left; the loop stores the changed
stays in the same transaction as the trial's state (``Store.save_batch(..., stays=...)``).

Times are the loop's clock (wall seconds since the epoch for real runs, simulated seconds in the
simulator). ``share`` is the percent of the device's compute the trial was given (100: a whole
device). Pure: no I/O, no clock.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Any, Iterable, Mapping

__all__ = ["Stay", "StayOutcome", "StayBook", "TrialTimes", "trial_times"]


class StayOutcome(str, enum.Enum):
    """Why a trial left its device."""
    FINISHED = "finished"        # it ended with a result (complete, or stopped by the time budget)
    PAUSED = "paused"            # paused at a rung by the algorithm (checkpoint kept)
    PREEMPTED = "preempted"      # time-sharing gave its device to another trial
    RESIZED = "resized"          # relaunched at once on another number of devices (grow)
    PRUNED = "pruned"            # stopped for good by the algorithm
    FAILED = "failed"            # it failed (retried or not), or timed out
    LOST = "lost"                # its device failed or vanished
    INTERRUPTED = "interrupted"  # the study was interrupted (Ctrl-C, disk full): resumable


@dataclass(frozen=True)
class Stay:
    """One trial on one device for one launch. ``end``/``outcome`` are None while it runs."""
    trial_id: int
    attempt: int
    node: str
    gpu: str
    start: float
    share: float = 100.0
    pack: Any = None
    rank: int = 0
    end: float | None = None
    outcome: StayOutcome | None = None

    @property
    def key(self) -> tuple[int, int, str, str]:
        """A stay's identity in a store: trial, attempt, node and GPU."""
        return (self.trial_id, self.attempt, self.node, self.gpu)

    def to_dict(self) -> dict[str, Any]:
        return {"trial_id": self.trial_id, "attempt": self.attempt, "node": self.node,
                "gpu": self.gpu, "start": self.start, "end": self.end, "share": self.share,
                "pack": self.pack, "rank": self.rank,
                "outcome": None if self.outcome is None else self.outcome.value}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Stay":
        outcome = d.get("outcome")
        return cls(int(d["trial_id"]), int(d["attempt"]), str(d["node"]), str(d["gpu"]),
                   float(d["start"]), float(d.get("share") or 100.0), d.get("pack"),
                   int(d.get("rank") or 0), None if d.get("end") is None else float(d["end"]),
                   None if outcome is None else StayOutcome(outcome))


class StayBook:
    """The open stays of running trials and the stays changed since the last ``take``."""

    def __init__(self) -> None:
        self._open: dict[int, list[Stay]] = {}
        self._changed: dict[tuple[int, int, str, str], Stay] = {}

    def open(self, trial_id: int, attempt: int, devices: list[tuple[str, str]], now: float,
             share: float | None, pack: Any, device: str | None = None) -> None:
        """Stays for a launch on ``devices`` (rank order); with none named yet, one on
        ``device`` (or "?") that ``place`` fills in when the executor says where it runs."""
        where = devices or [("local", device or "?")]
        stays = [Stay(trial_id, attempt, node, gpu, now, 100.0 if share is None else float(share),
                      pack, rank) for rank, (node, gpu) in enumerate(where)]
        self._open[trial_id] = stays
        for stay in stays:
            self._changed[(trial_id, attempt, stay.node, stay.gpu)] = stay   # its ``key``

    def place(self, trial_id: int, device: str) -> None:
        """The executor started an unplaced trial on ``device``: name it in its open stay."""
        stays = self._open.get(trial_id)
        if not stays or len(stays) != 1 or stays[0].gpu != "?":
            return
        self._changed.pop(stays[0].key, None)
        stays[0] = replace(stays[0], gpu=device)
        self._changed[stays[0].key] = stays[0]

    def close(self, trial_id: int, now: float, outcome: StayOutcome) -> None:
        """End the trial's open stays (no-op when it has none)."""
        for stay in self._open.pop(trial_id, ()):      # (``replace`` costs ~5x a plain call)
            ended = Stay(stay.trial_id, stay.attempt, stay.node, stay.gpu, stay.start, stay.share,
                         stay.pack, stay.rank, max(now, stay.start), outcome)
            self._changed[(stay.trial_id, stay.attempt, stay.node, stay.gpu)] = ended   # its key

    def running(self, trial_id: int) -> list[Stay]:
        return list(self._open.get(trial_id, ()))

    def take(self) -> list[Stay]:
        """Stays opened or closed since the last call, in trial, attempt, rank order."""
        if not self._changed:
            return []
        out = sorted(self._changed.values(), key=_TAKE_ORDER)
        self._changed.clear()
        return out


_TAKE_ORDER = attrgetter("trial_id", "attempt", "rank")


@dataclass(frozen=True)
class TrialTimes:
    """A trial's time over all its attempts (seconds, the stays' clock): ``first_start``, its
    first launch; ``running_s``, the time it held devices, summed over attempts (a data-parallel
    attempt counts once); ``waiting_s``, the rest of the time from its first launch to its end
    (or ``now``): paused, preempted, queued for a retry or a promotion; ``startup_s``, the time
    its launches spent before the trial began in its worker (a new worker's start-up: the
    interpreter, the trainable's imports), on the device but neither running nor waiting."""
    first_start: float
    running_s: float
    waiting_s: float
    startup_s: float = 0.0


BEGAN = "began_at"     # TrialRecord.info key: {attempt (text): when the worker began it}


def began_times(records: Iterable[Any]) -> dict[tuple[int, int], float]:
    """``(trial_id, attempt) -> when its worker began it`` from trial records' ``info[BEGAN]``
    (the controller writes it when the executor says the trial started)."""
    out = {}
    for record in records:
        for attempt, at in ((record.info or {}).get(BEGAN) or {}).items():
            out[(record.trial_id, int(attempt))] = float(at)
    return out


def trial_times(stays: Iterable[Stay], ends: Mapping[int, float | None],
                now: float, began: Mapping[tuple[int, int], float] | None = None
                ) -> dict[int, TrialTimes]:
    """Each trial's ``TrialTimes`` from its stays (rank 0: one per attempt); ``ends``: each
    trial's end (None: not finished, it counts to ``now``); an open stay runs to ``now``;
    ``began``: when each (trial, attempt) began in its worker (``began_times``): the time
    before is start-up, not running. Trials without a stay are left out."""
    firsts: dict[int, float] = {}
    running: dict[int, float] = {}
    startup: dict[int, float] = {}
    for stay in stays:
        if stay.rank != 0:
            continue
        t = stay.trial_id
        firsts[t] = min(firsts.get(t, stay.start), stay.start)
        left = stay.end if stay.end is not None else max(now, stay.start)
        ran_from = min(max((began or {}).get((t, stay.attempt), stay.start), stay.start), left)
        startup[t] = startup.get(t, 0.0) + (ran_from - stay.start)
        running[t] = running.get(t, 0.0) + max(0.0, left - ran_from)
    out = {}
    for t, first in firsts.items():
        end = ends.get(t)
        span = max(0.0, (end if end is not None else now) - first)
        out[t] = TrialTimes(first, running[t], max(0.0, span - running[t] - startup[t]),
                            startup[t])
    return out
