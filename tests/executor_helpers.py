"""Driving an executor directly in tests: poll (and acknowledge) until the events satisfy a
condition."""
from __future__ import annotations

import time
from typing import Any, Callable


def collect(ex: Any, until: Callable[[list], bool], timeout: float = 30.0, ack: bool = True) -> list:
    """Events of ``ex`` (acknowledging each poll's reports when ``ack``) until ``until(events)``;
    AssertionError after ``timeout`` seconds."""
    events: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events += ex.poll(0.05)
        if ack:
            ex.acknowledge()
        if until(events):
            return events
    raise AssertionError(f"timed out; events so far: {events}")
