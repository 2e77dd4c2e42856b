"""The one assembly of a study run: controller, executor, store and the driver's services wired
together, then the loop run. Every path goes through :func:`assemble`: the local executor
(``Study._drive_with``), Ray (``Study._drive_with`` with ``runtime.executors.ray.ray_executor``)
and the simulator (``sim.run.simulate``); each builds only its executor and store.

Like Syne Tune's ``Tuner(backend, scheduler, stop_criterion, callbacks)``: the caller hands over
the pieces, and the one place that sets the controller's inventory, packs and time-sharing, adds
the observers (the job history's, the utilisation sample sink) and runs ``run_loop`` is here.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from hypersack.core.controller import Controller
from hypersack.core.spec import StudySpec
from hypersack.core.trial import Event
from hypersack.errors import HyperSackError
from hypersack.runtime.loop.executor import Executor
from hypersack.runtime.loop.progress import Progress
from hypersack.runtime.loop.run import StudyRun, run_loop
from hypersack.runtime.loop.store import Store, StudyRef

__all__ = ["DriverServices", "SampleSink", "Services", "assemble"]


class DriverServices(Protocol):
    """What the driver's machine adds to a run (``runtime.devices.machine.Machine`` is one):
    each trial's demand (None: the default demand), observers of every event (the job
    history's) and the utilisation samples taken since the last call (None: no monitor)."""
    demand: Callable[[Any], Any] | None
    observers: list[Callable[[Event], None]]
    samples: Callable[[], list[tuple[str, str, Any]]] | None


@dataclass
class Services:
    """A plain :class:`DriverServices` (the simulator's; no services by default)."""
    demand: Callable[[Any], Any] | None = None
    observers: list[Callable[[Event], None]] = field(default_factory=list)
    samples: Callable[[], list[tuple[str, str, Any]]] | None = None


def assemble(spec: StudySpec, controller: Controller, executor: Executor, store: Store,
             row: StudyRef, *, services: DriverServices | None = None, packs: Any = None,
             inventory: Any = None, placement: Any = None, progress: Progress | None = None,
             clock: Callable[[], float] = time.time, group_window_s: float = 0.0,
             on_started: Callable[[], None] | None = None,
             listeners: Sequence[Callable[[list[Event], Any], None]] = ()) -> StudyRun:
    """Run ``spec``'s study with ``controller`` on ``executor``, writing to ``store`` (its
    ``row``), and return how it ended (``run_loop``'s contract: errors, statuses, Ctrl-C).

    Before the loop, the controller gets, here and nowhere else: the inventory (``inventory``,
    default ``executor.inventory()``) placed with ``placement`` (default ``spec.placement``; the
    simulator's policy under test) and ``services.demand``; the pack policy ``packs`` (None:
    every trial alone); ``spec.time_sharing`` when set. The loop's observers are the services'
    then a sink writing their utilisation samples to the store (at most every 10 s, and once at
    the end, a storage fault then dropped). ``progress``, ``clock``, ``group_window_s``,
    ``on_started`` and ``listeners``: as ``run_loop``'s."""
    services = services if services is not None else Services()
    cluster = inventory if inventory is not None else executor.inventory()
    controller.set_inventory(cluster, placement if placement is not None else spec.placement,
                             services.demand)
    controller.set_packs(packs)
    if spec.time_sharing is not None:
        controller.set_time_sharing(spec.time_sharing)
    sink = SampleSink(store, row.study_id, services.samples)
    try:
        return run_loop(controller, executor, store, row, progress=progress, clock=clock,
                        observers=[*services.observers, sink.observe],
                        group_window_s=group_window_s, on_started=on_started,
                        listeners=listeners)
    finally:
        sink.flush(quiet=True)


class SampleSink:
    """Writes the monitor's GPU utilisation samples to the store from the loop's thread: at an
    event at most every ``every_s`` seconds, and once at the end of the run. ``take`` None (no
    monitor): inert."""

    def __init__(self, store: Any, study_id: int, take: Callable[[], list] | None,
                 every_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.store, self.study_id, self.take = store, study_id, take
        self.every_s, self.clock = every_s, clock
        self._last = clock()

    def observe(self, event: Any) -> None:
        if self.take is not None and self.clock() - self._last >= self.every_s:
            self.flush()

    def flush(self, quiet: bool = False) -> None:
        """Store what the monitor took since the last flush; ``quiet``: a storage fault is
        dropped (the run's own error, if any, is the one to see)."""
        if self.take is None:
            return
        self._last = self.clock()
        try:
            self.store.save_samples(self.study_id, self.take())
        except HyperSackError:
            if not quiet:
                raise
