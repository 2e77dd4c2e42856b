"""The proposal thread: where a study's model fits (Optuna samplers) run, off the loop's thread.

An algorithm offered this runner (``Algorithm.use_background``) submits each model fit as a
job and never waits for it (``core.algorithms.rung_model``: a trial whose proposal is not ready
gets a random config). The thread shares the interpreter lock with the loop: a fit holding it
stalls the loop at each of its lock hand-overs (every SQLite call, every pipe read) for up to
the switch interval. So the thread runs jobs at most ``share`` of the time: after a job that
took ``d`` seconds it rests ``d * (1 / share - 1)`` before the next, which bounds what model
fits can cost the loop, whatever one fit costs (TPE's ask grows with the results). The rest
releases the lock; which trials get a model's proposal then depends on timing, never a value.
A caller that does wait for a job (``Future.result``: the plain ``tpe`` algorithm with nothing
else to run) cuts the rest short: resting then would only idle the study. Jobs submitted through
``eager`` never rest: an algorithm with no fallback (a plain sampler: a trial has no config
until its proposal is ready) would only leave devices idle.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any, Callable

__all__ = ["ProposalThread", "DEFAULT_SHARE"]

#: The share of wall time the proposal thread may spend on model fits.
DEFAULT_SHARE = 0.2


#: An idle thread ends after this long; the next ``submit`` starts another.
IDLE_S = 5.0


class ProposalThread:
    """A daemon thread running submitted jobs in order, at most ``share`` (0, 1] of the
    time (see the module doc). ``submit(fn)`` returns a ``concurrent.futures.Future``; the
    thread ends once idle for ``IDLE_S`` and starts again with the next job, so a study that
    is dropped leaves no thread behind. ``shutdown()`` ends it once the queued jobs ran (or
    drops them: ``cancel``)."""

    def __init__(self, share: float = DEFAULT_SHARE, clock: Callable[[], float] = time.monotonic,
                 name: str = "hypersack-suggest"):
        if not 0.0 < share <= 1.0:
            raise ValueError(f"share must be in (0, 1], not {share!r}")
        self.share, self._clock = share, clock
        self._jobs: list[tuple[Callable[[], Any], _Waited]] = []
        self._ready = threading.Condition()
        self._closed = False
        self._rest_until = 0.0
        self._dropping = False
        self.busy_s = 0.0                       # time spent running jobs
        self._name = name
        self._thread: threading.Thread | None = None

    def submit(self, fn: Callable[[], Any], eager: bool = False) -> "_Waited":
        future = _Waited()
        future.waited = eager
        with self._ready:
            if self._closed:
                raise RuntimeError("the proposal thread is shut down")
            future.hurry = self._hurry
            self._jobs.append((fn, future))
            self._ready.notify()
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._thread.start()
        return future

    def _next(self) -> tuple[Callable[[], Any], "_Waited"] | None:
        with self._ready:
            while not self._jobs and not self._closed:
                if not self._ready.wait(IDLE_S) and not self._jobs:
                    break
            if self._jobs:
                return self._jobs.pop(0)
            self._thread = None                 # idle or shut down: this thread ends
            return None

    def _work(self) -> None:
        while (job := self._next()) is not None:
            fn, future = job
            self._rest(future)
            if not future.set_running_or_notify_cancel():
                continue
            started = self._clock()
            try:
                result = fn()
            except BaseException as exc:        # handed to whoever collects the proposal
                future.set_exception(exc)
            else:
                future.set_result(result)
            took = self._clock() - started
            self.busy_s += took
            self._rest_until = self._clock() + took * (1.0 / self.share - 1.0)

    @property
    def eager(self) -> "_Eager":
        """This thread, for jobs that never rest (see the module doc)."""
        return _Eager(self)

    def _rest(self, future: "_Waited") -> None:
        """Wait out the rest (the lock is released meanwhile), unless ``future`` is waited for."""
        with self._ready:
            while not future.waited and not self._closed:
                rest = self._rest_until - self._clock()
                if rest <= 0:
                    break
                self._ready.wait(rest)
            if self._dropping:
                future.cancel()                 # shut down with cancel: it never starts

    def _hurry(self, future: "_Waited") -> None:
        with self._ready:
            future.waited = True
            self._ready.notify()

    def shutdown(self, wait: bool = True, cancel: bool = False) -> None:
        with self._ready:
            self._closed = True
            self._dropping = cancel
            if cancel:
                for _, future in self._jobs:
                    future.cancel()
                self._jobs = []
            self._ready.notify()
            thread = self._thread
        if wait and thread is not None:
            thread.join()


class _Waited(Future[Any]):
    """A Future whose ``result()`` first cuts its thread's rest short."""

    waited = False
    hurry: Callable[["_Waited"], None]

    def result(self, timeout: float | None = None) -> Any:
        if not self.done():
            self.hurry(self)
        return super().result(timeout)


class _Eager:
    """A runner whose jobs run on a ``ProposalThread`` without resting."""

    def __init__(self, thread: ProposalThread):
        self.thread = thread

    def submit(self, fn: Callable[[], Any]) -> _Waited:
        return self.thread.submit(fn, eager=True)
