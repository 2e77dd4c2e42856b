"""Driving an executor directly in tests: poll (and acknowledge) until the events satisfy a
condition."""
from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Mapping

from hypersack.core.trial import ResultReported


def reporters(events: Iterable[Any]) -> list[int]:
    """The trials that reported in ``events``, once each, in the order of their first report
    (what the loop acknowledges after a turn, ``run.acknowledgements``)."""
    return list(dict.fromkeys(e.trial_id for e in events if isinstance(e, ResultReported)))


def ack_reports(ex: Any, events: Iterable[Any], free_below: Mapping[int, int] | None = None) -> None:
    """Acknowledge, as the loop does, every trial that reported in ``events``, each with its
    ``free_below`` (default: 0, every report waits)."""
    trials = reporters(events)
    below = free_below or {}
    ex.acknowledge(trials, {t: below.get(t, 0) for t in trials})


def collect(ex: Any, until: Callable[[list], bool], timeout: float = 30.0, ack: bool = True) -> list:
    """Events of ``ex`` (acknowledging each poll's reports when ``ack``) until ``until(events)``;
    AssertionError after ``timeout`` seconds."""
    events: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        polled = ex.poll(0.05)
        events += polled
        if ack:
            ack_reports(ex, polled)
        if until(events):
            return events
    raise AssertionError(f"timed out; events so far: {events}")

