"""Driving the simulated executor directly in tests."""
from __future__ import annotations

from typing import Any, Callable


def drain(ex: Any, until: Callable[[list], bool] | None = None) -> list[tuple[float, object]]:
    """Poll and acknowledge until nothing runs; returns (time, event) pairs. With ``until``, stop
    as soon as it holds, without acknowledging that poll (the caller decides first, as the loop
    does)."""
    out: list[tuple[float, object]] = []
    while ex.running() or ex._heap:
        events = ex.poll(0.1)
        out += [(ex.clock.now, e) for e in events]
        if until is not None and until(out):
            break
        ex.acknowledge()
    return out
