"""A persistent pool of worker processes on this machine, one per slot.

Workers are spawned once (the trainable's imports, torch included, are paid once per worker).
A worker that dies under a trial is replaced and its trial reported as a retryable failure; a
trial over its time limit is killed with its worker and reported as a failure.
"""
from __future__ import annotations

import multiprocessing as mp
import signal
import time
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Callable

from hypersack.core.trial import (Cancel, CheckpointSaved, Command, Event, Launch, ResultReported,
                                  Stop, TrialFailed, TrialFinished, TrialStarted)
from hypersack.runtime.devices import Slot
from hypersack.runtime.trainable import TrainableRef
from hypersack.runtime.worker import worker_main

__all__ = ["LocalExecutor"]


@dataclass
class _Worker:
    slot: Slot
    process: Any
    conn: Any
    trial_id: int | None = None
    started_at: float = 0.0
    awaiting_ack: bool = False
    has_trainable: bool = False


class LocalExecutor:
    def __init__(self, slots: list[Slot], trainable: TrainableRef, *,
                 trial_dir: Callable[[int], Path], metric: str,
                 steps_for: Callable[[dict], int | None] = lambda config: None,
                 trial_timeout_s: float | None = None, clock: Callable[[], float] = time.monotonic):
        self._slots = slots
        self._trainable = trainable
        self._trial_dir = trial_dir
        self._metric = metric
        self._steps_for = steps_for
        self._timeout = trial_timeout_s
        self._clock = clock
        self._ctx = mp.get_context("spawn")
        self._workers: list[_Worker] = []
        self._pending: list[Event] = []     # events made by commands, handed out by the next poll

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._workers = [self._spawn(slot) for slot in self._slots]

    def _spawn(self, slot: Slot) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(target=worker_main, args=(child, slot.env), daemon=True,
                                    name=f"hypersack-worker-{slot.index}")
        process.start()
        child.close()
        return _Worker(slot, process, parent)

    def shutdown(self, kill: bool = False) -> None:
        for w in self._workers:
            if kill:
                w.process.kill()
            else:
                try:
                    w.conn.send(("shutdown",))
                except (OSError, BrokenPipeError):
                    pass
        deadline = time.monotonic() + 5.0
        for w in self._workers:
            w.process.join(max(0.0, deadline - time.monotonic()))
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
            w.conn.close()
        self._workers = []

    # ---- commands --------------------------------------------------------------------------

    def free_slots(self) -> int:
        return sum(1 for w in self._workers if w.trial_id is None)

    def submit(self, command: Command) -> None:
        if isinstance(command, Launch):
            self._launch(command)
        elif isinstance(command, Stop):
            for w in self._workers:
                if w.trial_id == command.trial_id:
                    self._send(w, ("stop", command.trial_id))
        elif isinstance(command, Cancel):
            for i, w in enumerate(self._workers):
                if w.trial_id == command.trial_id:
                    self._kill_and_replace(i)
                    self._pending.append(TrialFailed(command.trial_id, command.reason))

    def _launch(self, launch: Launch) -> None:
        worker = next((w for w in self._workers if w.trial_id is None), None)
        if worker is None:
            raise RuntimeError(f"no free slot for trial {launch.trial_id}")   # a loop bug, not user input
        ref = self._trainable
        task = {
            "trial_id": launch.trial_id, "config": launch.config, "seed": launch.seed,
            "attempt": launch.attempt, "device": worker.slot.device,
            "trial_dir": str(self._trial_dir(launch.trial_id)), "metric": self._metric,
            "max_steps": self._steps_for(launch.config),
            "trainable": (ref.key, None, None) if worker.has_trainable else (ref.key, ref.reference, ref.payload),
        }
        worker.trial_id, worker.started_at, worker.has_trainable = launch.trial_id, self._clock(), True
        self._send(worker, ("run", task))

    def _send(self, worker: _Worker, message: tuple) -> None:
        try:
            worker.conn.send(message)
        except (OSError, BrokenPipeError):
            pass   # the worker died; poll() notices through its sentinel

    def acknowledge(self) -> None:
        for w in self._workers:
            if w.awaiting_ack:
                w.awaiting_ack = False
                self._send(w, ("ack", w.trial_id))

    # ---- events ----------------------------------------------------------------------------

    def poll(self, timeout: float) -> list[Event]:
        events: list[Event] = self._pending + self._enforce_timeouts()
        self._pending = []
        waitables = [w.conn for w in self._workers] + [w.process.sentinel for w in self._workers]
        wait(waitables, timeout=0 if events else timeout)
        for w in list(self._workers):
            events.extend(self._drain(w))
            if not w.process.is_alive():
                events.extend(self._replace_dead(w))
        return events

    def _drain(self, w: _Worker) -> list[Event]:
        events: list[Event] = []
        try:
            while w.conn.poll():
                event = self._event(w, w.conn.recv())
                if event is not None:
                    events.append(event)
        except (EOFError, OSError):
            pass
        return events

    def _event(self, w: _Worker, message: tuple) -> Event | None:
        kind, trial_id = message[0], message[1]
        if trial_id != w.trial_id:
            return None
        if kind == "started":
            return TrialStarted(trial_id, w.slot.label)
        if kind == "report":
            w.awaiting_ack = True
            return ResultReported(trial_id, message[2], message[3])
        if kind == "checkpoint":
            return CheckpointSaved(trial_id, message[2], message[3])
        w.trial_id = None
        if kind == "done":
            return TrialFinished(trial_id)
        return TrialFailed(trial_id, message[2], message[3])

    def _replace_dead(self, w: _Worker) -> list[Event]:
        trial_id, code = w.trial_id, w.process.exitcode
        w.conn.close()
        self._workers[self._workers.index(w)] = self._spawn(w.slot)
        if trial_id is None:
            return []
        return [TrialFailed(trial_id, f"worker process died ({_describe_exit(code)})", retryable=True)]

    def _enforce_timeouts(self) -> list[Event]:
        if self._timeout is None:
            return []
        events: list[Event] = []
        now = self._clock()
        for i, w in enumerate(self._workers):
            if w.trial_id is not None and now - w.started_at > self._timeout:
                self._kill_and_replace(i)
                events.append(TrialFailed(w.trial_id, f"timed out after {self._timeout:g} s "
                                          "(executor.trial_timeout_s)"))
        return events

    def _kill_and_replace(self, index: int) -> None:
        w = self._workers[index]
        w.process.kill()
        w.process.join()
        w.conn.close()
        self._workers[index] = self._spawn(w.slot)


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
