"""The one assembly of a study run: controller, executor, store and the driver's services wired
together, then the loop run. Every path goes through :func:`assemble`: the local executor
(``Study._drive_with``), Ray (``Study._drive_with`` with ``runtime.executors.ray.ray_executor``)
and the simulator (``sim.run.simulate``); each builds only its executor and store.

Like Syne Tune's ``Tuner(backend, scheduler, stop_criterion, callbacks)`` then ``run()``: the
caller hands over the pieces (``assemble``), and the one place that builds the controller with its
inventory, packs and time-sharing (``ControllerOptions``), adds the observers (the job history's,
the utilisation sample sink) and runs ``run_loop`` (``Assembly.run``) is here.
"""
from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from hypersack.core.algorithms import Algorithm, algorithm_names
from hypersack.core.controller import Budget, Controller, ControllerOptions
from hypersack.core.spec import StudySpec
from hypersack.core.trial import Event
from hypersack.errors import HyperSackError
from hypersack.runtime.loop.executor import Executor
from hypersack.runtime.loop.progress import Progress
from hypersack.runtime.loop.run import StudyRun, build_controller, run_loop
from hypersack.runtime.loop.store import Store, StudyRef

__all__ = ["Assembly", "DriverServices", "SampleSink", "Services", "assemble",
           "controller_options"]


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


@dataclass
class Assembly:
    """One study run, wired (:func:`assemble` builds it): ``controller`` (the caller may read its
    trials, before, during and after the run), ``executor``, ``store`` and its ``row``, the
    driver's ``services``; :meth:`run` runs the loop once."""
    spec: StudySpec
    controller: Controller
    executor: Executor
    store: Store
    row: StudyRef
    services: DriverServices
    clock: Callable[[], float]

    def run(self, *, progress: Progress | None = None, group_window_s: float = 0.0,
            on_started: Callable[[], None] | None = None,
            listeners: Sequence[Callable[[list[Event], Any], None]] = ()) -> StudyRun:
        """Run the study to its end and return how it ended (``run_loop``'s contract: errors,
        statuses, Ctrl-C). The loop's observers are the services' (read now: the caller may
        add some after ``assemble``) then a sink writing their utilisation samples to the
        store (at most every 10 s, and once at the end, a storage fault then dropped).
        ``progress``, ``group_window_s``, ``on_started`` and ``listeners``: as ``run_loop``'s."""
        sink = SampleSink(self.store, self.row.study_id, self.services.samples)
        try:
            return run_loop(self.controller, self.executor, self.store, self.row,
                            progress=progress, clock=self.clock,
                            observers=[*self.services.observers, sink.observe],
                            group_window_s=group_window_s, on_started=on_started,
                            listeners=listeners)
        finally:
            sink.flush(quiet=True)


def controller_options(spec: StudySpec, inventory: Any, *, services: DriverServices,
                       packs: Any = None, placement: Any = None) -> ControllerOptions:
    """The controller's options for ``spec``'s run on ``inventory`` (see :func:`assemble`)."""
    return ControllerOptions(inventory=inventory,
                             placement=placement if placement is not None else spec.placement,
                             demand=services.demand, packs=packs, time_sharing=spec.time_sharing)


def one_trial_when_fixed(spec: StudySpec) -> StudySpec:
    """``spec`` with a budget of one trial, said in a UserWarning, when its space has nothing
    to search (every configuration is the same: more trials would repeat one) and a named
    algorithm searches it; else ``spec`` (an Algorithm object of the user's may make configs of
    its own beyond the space)."""
    if (not spec.space.has_nothing_to_search or spec.budget.trials == 1
            or spec.algorithm.get("type") not in algorithm_names()):
        return spec
    warnings.warn(f"Study {spec.name!r}: the space has nothing to search (every parameter "
                  "holds one value), so it runs one trial", UserWarning, stacklevel=2)
    return dataclasses.replace(spec, budget=Budget(1, spec.budget.time_s))


def assemble(spec: StudySpec, algorithm: Algorithm, executor: Executor, store: Store,
             row: Any, *, resume: bool = False, services: DriverServices | None = None,
             packs: Any = None, inventory: Any = None, placement: Any = None,
             clock: Callable[[], float] = time.time) -> Assembly:
    """``spec``'s study wired for a run of ``algorithm`` on ``executor``, writing to ``store``
    (its ``row``, a StudyRow); ``resume``: the controller takes back the stored trials and
    state. The controller is built here and nowhere else for a run, at ``clock()``, with its
    options: the inventory (``inventory``, default ``executor.inventory()``) placed with
    ``placement`` (default ``spec.placement``; the simulator's policy under test) and
    ``services.demand``; the pack policy ``packs`` (None: every trial alone);
    ``spec.time_sharing``. ``clock`` is the loop's too. Nothing runs until ``Assembly.run``."""
    services = services if services is not None else Services()
    spec = one_trial_when_fixed(spec)
    cluster = inventory if inventory is not None else executor.inventory()
    options = controller_options(spec, cluster, services=services, packs=packs,
                                 placement=placement)
    controller = build_controller(spec, algorithm, row, store, clock(), resume, options)
    return Assembly(spec, controller, executor, store, row, services, clock)


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
