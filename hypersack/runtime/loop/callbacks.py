"""Runs the study's callbacks (``hypersack.callbacks``) on a background thread fed by a queue.

The loop calls :meth:`CallbackRunner.listen` after each turn is durable, with the turn's events
and the controller's trials; it copies what the callbacks need (a ``FrozenTrial`` per hook) and
queues it, so the loop never waits for user code. :meth:`close` queues the trial ends the loop
did not see (timeouts, trials failed unplaced, paused trials pruned at the end), then
``on_study_end``, and joins the thread: every hook has run when it returns.
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Callable, Mapping, Sequence

from hypersack.callbacks import FrozenTrial, hooks_of
from hypersack.core.trial import ResultReported, TrialRecord, TrialStarted, TrialState

__all__ = ["CallbackRunner"]

log = logging.getLogger("hypersack.callbacks")
_STOP = object()


def freeze(record: TrialRecord, user_attrs: Mapping[str, Any] | None = None) -> FrozenTrial:
    return FrozenTrial(record.trial_id, dict(record.config), record.state.value, record.value,
                       record.last_step, dict(record.metrics), record.error,
                       None if record.values is None else list(record.values),
                       dict(user_attrs or {}))


class CallbackRunner:
    """``callbacks``: objects from ``resolve_callbacks``; ``study``: passed to every hook."""

    def __init__(self, callbacks: Sequence[Any], study: Any,
                 attrs_of: Callable[[int], Mapping[str, Any]] | None = None):
        """``attrs_of(trial_id)``: the attributes the trial set, as imported so far
        (``AttrsImporter.of``), for ``FrozenTrial.user_attrs``."""
        self.study = study
        self._attrs_of = attrs_of or (lambda trial_id: {})
        self._hooks = [(cb, hooks_of(cb)) for cb in callbacks]
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._failures: dict[int, int] = {}          # id(callback) -> times it raised
        self._started: set[int] = set()
        self._live: set[int] = set()                 # started, end not queued yet
        self._ended: set[int] = set()
        self._last_step: dict[int, int] = {}       # the last step told, per trial
        self._primed = False
        self._thread = threading.Thread(target=self._work, name="hypersack-callbacks", daemon=True)
        self._thread.start()

    # ---- the loop's side -------------------------------------------------------------------

    def listen(self, events: Sequence[Any], trials: Mapping[int, TrialRecord]) -> None:
        """After a durable turn: queue the hooks for ``events`` (trials started, results stored,
        trials ended). Cheap: it looks only at the turn's trials and the running ones."""
        if not self._primed:                   # a resumed study's stored steps are not new
            self._primed = True
            self._last_step = {t: r.last_step for t, r in trials.items() if r.last_step is not None}
            self._ended = {t for t, r in trials.items() if r.state.finished}
        touched = set(self._live)
        for event in events:
            record = trials.get(getattr(event, "trial_id", None))  # type: ignore[arg-type]
            if record is None:
                continue
            touched.add(record.trial_id)
            if isinstance(event, TrialStarted) and record.trial_id not in self._started:
                self._started.add(record.trial_id)
                self._live.add(record.trial_id)
                self._put("start", self._freeze(record))
            elif isinstance(event, ResultReported):
                self._result(record, event)
        for trial_id in sorted(touched):
            self._maybe_end(trials[trial_id])

    def _result(self, record: TrialRecord, event: ResultReported) -> None:
        last = self._last_step.get(record.trial_id)
        if last is not None and event.step <= last:
            return                             # a replay after a restart: stored once, told once
        self._last_step[record.trial_id] = event.step
        self._put("result", self._freeze(record), {"step": event.step, **event.metrics})

    def _maybe_end(self, record: TrialRecord) -> None:
        if record.state.finished and record.trial_id not in self._ended:
            self._ended.add(record.trial_id)
            self._live.discard(record.trial_id)
            kind = "error" if record.state is TrialState.FAILED else "complete"
            self._put(kind, self._freeze(record))

    def _freeze(self, record: TrialRecord) -> FrozenTrial:
        return freeze(record, self._attrs_of(record.trial_id))

    def close(self, trials: Mapping[int, TrialRecord] | None = None) -> None:
        """Queue the ends not seen yet and ``on_study_end``; wait until every hook has run."""
        if trials is not None:
            if not self._primed:
                self.listen([], trials)
            for trial_id in sorted(trials):
                self._maybe_end(trials[trial_id])
        self._put("study_end")
        self._queue.put(_STOP)
        self._thread.join()

    def _put(self, kind: str, *args: Any) -> None:
        self._queue.put((kind, args))

    # ---- the callbacks' thread -------------------------------------------------------------

    def _work(self) -> None:
        while (item := self._queue.get()) is not _STOP:
            kind, args = item
            for callback, hooks in self._hooks:
                hook = hooks.get(kind)
                if hook is not None:
                    self._call(callback, hook, args)
        for callback, _ in self._hooks:
            extra = self._failures.get(id(callback), 0) - 1
            if extra > 0:
                log.warning("callback %r raised %d more time(s) after the first", callback, extra)

    def _call(self, callback: Any, hook: Any, args: tuple) -> None:
        try:
            hook(self.study, *args)
        except Exception:              # user code: reported, never fatal to the study
            count = self._failures.get(id(callback), 0) + 1
            self._failures[id(callback)] = count
            if count == 1:
                log.error("callback %r raised (the study goes on; later errors of this "
                          "callback are counted, not logged)", callback, exc_info=True)

    @property
    def failures(self) -> dict[int, int]:
        """id(callback) -> how many times it raised (read after ``close``)."""
        return dict(self._failures)
