"""Driving the simulated executor directly in tests."""
from __future__ import annotations

from typing import Any, Callable

from executor_helpers import ack_reports


def drain(ex: Any, until: Callable[[list], bool] | None = None) -> list[tuple[float, object]]:
    """Poll and acknowledge each poll's reports (as the loop does) until nothing runs; returns
    (time, event) pairs. With ``until``, stop as soon as it holds, without acknowledging that
    poll (the caller decides first, as the loop does, then acks it with ``ack_reports``)."""
    out: list[tuple[float, object]] = []
    while ex.running() or ex._heap:
        events = ex.poll(0.1)
        out += [(ex.clock.now, e) for e in events]
        if until is not None and until(out):
            break
        ack_reports(ex, events)
    return out
