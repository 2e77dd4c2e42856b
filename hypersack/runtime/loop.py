"""The study loop: the only while-loop. Events in, decisions from the controller, commands out.

Each turn: poll the executor; hand events to the controller; launch what fits; write every change
in one durable transaction; only then acknowledge results to workers and send commands.
Ctrl-C (or SIGTERM) once: running trials stop at their next report, stay resumable, and the study
is marked interrupted; twice: workers are killed at once (their trials restart on resume).
"""
from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from hypersack.core.algorithms import Algorithm
from hypersack.core.controller import Controller
from hypersack.core.spec import StudySpec
from hypersack.core.trial import Command, Event, Launch, ResultReported
from hypersack.runtime.executors.base import Executor
from hypersack.runtime.progress import Progress, NullProgress
from hypersack.runtime.storage import Storage, StudyRow

__all__ = ["StudyRun", "run_loop"]

POLL_INTERVAL_S = 0.1


@dataclass
class StudyRun:
    """How a run ended: ``status`` is complete or interrupted."""
    name: str
    status: str


def build_controller(spec: StudySpec, algorithm: Algorithm, row: StudyRow, storage: Storage,
                     now: float, resume: bool) -> Controller:
    """A controller for ``spec``; on resume it takes back the stored trials and algorithm state."""
    controller = Controller(algorithm, spec.objective, spec.budget, seed=spec.seed,
                            max_retries=spec.executor.max_retries, now=now)
    if resume:
        state = row.controller_state or {}
        controller.restore(storage.load_trials(row.study_id), state.get("algorithm"),
                           elapsed_s=float(state.get("elapsed_s", 0.0)))
    return controller


class _Interrupts:
    """Counts SIGINT/SIGTERM while installed; restores the previous handlers on exit."""

    def __init__(self) -> None:
        self.count = 0
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "_Interrupts":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.count += 1
        if self.count >= 2:
            raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def run_loop(controller: Controller, executor: Executor, storage: Storage, row: StudyRow, *,
             progress: Progress | None = None, clock: Callable[[], float] = time.time,
             observers: Sequence[Callable[[Event], None]] = ()) -> StudyRun:
    """Run the study to its end. ``observers`` see every event before the controller does
    (profiles into the job history, OOM corrections...)."""
    progress = progress or NullProgress()
    executor.start()
    killed = False
    try:
        with _Interrupts() as interrupts:
            _turns(controller, executor, storage, row, progress, clock, interrupts, observers)
        status = "interrupted" if interrupts.count else "complete"
    except KeyboardInterrupt:
        killed, status = True, "interrupted"
    finally:
        executor.shutdown(kill=killed)
        progress.close()
    storage.set_status(row.study_id, status)
    return StudyRun(row.name, status)


def _turns(controller: Controller, executor: Executor, storage: Storage, row: StudyRow,
           progress: Progress, clock: Callable[[], float], interrupts: _Interrupts,
           observers: Sequence[Callable[[Event], None]] = ()) -> None:
    interrupted = False
    first = True
    while True:
        events = [] if first else executor.poll(POLL_INTERVAL_S)
        first = False
        now = clock()
        commands: list[Command] = []
        results = []
        for event in events:
            for observe in observers:
                observe(event)
            if isinstance(event, ResultReported):
                results.append((event.trial_id, event.step, event.metrics))
            commands += controller.handle(event, now)
        commands += controller.tick(now)
        if interrupts.count and not interrupted:
            interrupted = True
            commands += controller.interrupt()
        free = None if controller.allocator is not None else executor.free_slots()
        launches: list[Launch] = controller.launches(free, now)
        changes = controller.take_changes()
        if changes or results:
            storage.save_batch(row.study_id, changes, results, lambda: controller.state_dict(now))
        for command in commands:
            executor.submit(command)
        executor.acknowledge()
        for launch in launches:
            executor.submit(launch)
        progress.update(controller, now)
        if controller.done(now):
            if not interrupted:
                controller.finalize(now)
                changes = controller.take_changes()
                if changes:
                    storage.save_batch(row.study_id, changes, [], lambda: controller.state_dict(now))
            return
