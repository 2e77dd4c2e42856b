"""Simulated time: a clock the study loop reads and only the simulated executor advances."""
from __future__ import annotations

from hypersack.errors import HyperSackError

__all__ = ["SimClock", "SimulationStalled"]


class SimulationStalled(HyperSackError):
    """The simulated study waits for something that can never happen (nothing runs, nothing is
    scheduled, and the controller launched nothing)."""


class SimClock:
    """Seconds since the simulation began. Call it (``clock()``) like ``time.time``."""

    __slots__ = ("now",)

    def __init__(self, start: float = 0.0):
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance_to(self, t: float) -> None:
        """Move to ``t`` (never backwards: events are popped in time order)."""
        if t < self.now:
            raise ValueError(f"simulated time cannot go back from {self.now} to {t}")
        self.now = t
