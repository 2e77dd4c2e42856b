"""Where a study's model fits (Optuna samplers) run: a share of the loop's own time.

A multi-fidelity algorithm with a sampler submits each fit ahead of need and never waits for it
(``core.algorithms.rung_model``: a trial whose proposal is not ready gets a random config). A
thread beside the loop would share the interpreter lock with it: a fit holding the lock stalls
the loop at each of its hand-overs (every SQLite call and pipe read) for up to the switch
interval, which under load cost the loop several times the fit's own CPU (issue 41). So
:class:`ProposalRunner` runs a submitted fit on the loop's thread, when its result is first
looked at (``done()``), and only while the fits so far plus the next (expected to take as long
as the previous one) take at most ``share`` of the wall time since the first was submitted;
otherwise ``done()`` says not yet and the trial gets its fallback. Which trials get a model's proposal thus depends on timing, never a value; what a
fit costs the loop is bounded, whatever one fit costs (TPE's ask grows with the results).
``result()`` (a caller that must wait) runs it at once.

A plain sampler (``{type: tpe}``) has no fallback: a trial has no config until its proposal is
ready, so it takes ``eager``: a one-thread pool, its asks computed beside the loop as before.
"""
from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

__all__ = ["ProposalRunner", "DEFAULT_SHARE"]

#: The share of the wall time that model fits may take on the loop's thread.
DEFAULT_SHARE = 0.1


class ProposalRunner:
    """``submit(fn)`` returns a Future that runs ``fn`` on the caller's thread when looked at,
    at most ``share`` (0, 1] of the time (see the module doc). ``busy_s``: time spent in fits."""

    def __init__(self, share: float = DEFAULT_SHARE, clock: Callable[[], float] = time.monotonic):
        if not 0.0 < share <= 1.0:
            raise ValueError(f"share must be in (0, 1], not {share!r}")
        self.share, self._clock = share, clock
        self._since: float | None = None
        self.busy_s = 0.0
        self.last_s = 0.0                     # the previous fit's time: what the next may take
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, fn: Callable[[], Any]) -> "_Deferred":
        if self._since is None:
            self._since = self._clock()
        return _Deferred(self, fn)

    def may_run(self) -> bool:
        """Whether a fit may run now: the fits so far and one more as long as the previous
        take at most ``share`` of the time (so a run stays within it, not one fit over)."""
        since = self._since if self._since is not None else self._clock()
        return self.busy_s + self.last_s <= self.share * (self._clock() - since)

    def run(self, future: "_Deferred") -> None:
        started = self._clock()
        try:
            result = future.fn()
        except BaseException as exc:         # handed to whoever collects the proposal
            future.set_exception(exc)
        else:
            future.set_result(result)
        self.last_s = self._clock() - started
        self.busy_s += self.last_s

    @property
    def eager(self) -> ThreadPoolExecutor:
        """A one-thread pool for asks that are waited for (see the module doc)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="hypersack-suggest")
        return self._pool


class _Deferred(Future[Any]):
    """A fit that runs when looked at and the runner's share allows (``result``: at once)."""

    def __init__(self, runner: ProposalRunner, fn: Callable[[], Any]):
        super().__init__()
        self.runner, self.fn = runner, fn

    def done(self) -> bool:
        if not super().done() and self.runner.may_run() and self.set_running_or_notify_cancel():
            self.runner.run(self)
        return super().done()

    def result(self, timeout: float | None = None) -> Any:
        if not super().done() and self.set_running_or_notify_cancel():
            self.runner.run(self)
        return super().result(timeout)
