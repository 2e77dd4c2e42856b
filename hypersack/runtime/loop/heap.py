"""The driver's heap during a study: no full garbage collection inside the loop.

A long study's driver holds millions of long-lived objects (trial records, the algorithm's and
placement's state). CPython's cyclic collector walks every object of the oldest generation at
each full collection: a pause that grows with the study (40-120 ms at 10,000 trials on the
project VM, more at 100,000) and lands on whatever reports are waiting for their acks, and a
cost per report that grows with the study.

``LoopHeap`` keeps the oldest generation empty while the loop runs: after a turn in which a
generation-1 collection promoted survivors into it, the young generations are collected (their
cyclic garbage is freed, not kept) and every tracked object is moved to the permanent
generation (``gc.freeze()``), which no collection walks. Reference counting still frees
frozen objects as soon as nothing refers to them; only cyclic garbage made of objects that were
already old when they became garbage is kept, until the run ends. At the end the loop
unfreezes what it froze (``gc.unfreeze()``), unless something was frozen before it started
(the caller's own ``gc.freeze()``; then everything stays frozen, as the caller asked).
"""
from __future__ import annotations

import gc

__all__ = ["LoopHeap"]


class LoopHeap:
    """Use as a context around the loop; call ``after_turn()`` once per turn."""

    def __init__(self) -> None:
        self._promotions = 0
        self._unfreeze_at_exit = False
        self.freezes = 0               # how many times survivors were frozen (tests, benchmarks)

    def __enter__(self) -> "LoopHeap":
        self._unfreeze_at_exit = gc.get_freeze_count() == 0
        self._freeze()                 # the set-up's objects: imports, the spec, loaded trials
        return self

    def after_turn(self) -> None:
        """Freeze the survivors if a collection promoted objects to the oldest generation
        since the last freeze (a cheap check: the collector's own counter)."""
        if gc.isenabled() and gc.get_count()[2] != self._promotions:
            self._freeze()

    def _freeze(self) -> None:
        gc.collect(1)                  # young cyclic garbage is freed, not frozen
        gc.freeze()
        self.freezes += 1
        self._promotions = gc.get_count()[2]

    def __exit__(self, *exc: object) -> None:
        if self._unfreeze_at_exit:
            gc.unfreeze()
