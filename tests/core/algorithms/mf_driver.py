"""A tiny stand-in for the controller that drives an Algorithm with simulated trials (no processes).

Each trial trains one step at a time; a step takes ``duration(config) / devices`` simulated
seconds, so results from different trials interleave (and arrive out of creation order). The
driver honours every Decision: PAUSE frees the trial's devices and keeps it until ``promote()``
(asked before every ``suggest``, as the study does) or a ``Suggestion(resume=...)`` names it; GROW frees them and queues the trial for ``resources(trial)``
devices; STOP prunes it. Launches wait, first in first out, until enough devices are free. At
the end, paused trials are pruned, as the study does.

``checkpoint_every``: a trial checkpoints every that many steps and whenever it pauses or grows;
``crash``: ``{(trial, step)}``: the worker dies before reporting that step (once) and the trial
restarts from its checkpoint, so it reports earlier steps again. ``kill_at``: after that many
reports the driver is killed: the algorithm is rebuilt by ``rebuild()`` and restored from what a
store holds, and running trials restart from their checkpoints. The driver "commits" after every
report as the study does: the algorithm's ``state_delta()`` (its changed parts applied by key to
the stored ones, through JSON), or its whole ``state_dict()`` for an algorithm without parts; the
restored algorithm's ``state_dict()`` must equal the killed one's.
"""
from __future__ import annotations

import heapq
import json
from dataclasses import dataclass, field
from typing import Any, Callable

from hypersack.core.algorithms import Algorithm, Decision


@dataclass
class SimTrial:
    trial_id: int
    config: dict[str, Any]
    state: str = "pending"          # pending, running, paused, complete, pruned
    step: int = 0
    checkpoint: int = 0
    devices: int = 0
    need: int = 1
    value: float | None = None
    launches: list[tuple[int, int]] = field(default_factory=list)   # (from step, devices)


class Driver:
    def __init__(self, algorithm: Algorithm, curve: Callable[[dict, int], float], *,
                 max_steps: int, devices: int = 4, metric: str = "loss",
                 duration: Callable[[dict], float] | None = None, checkpoint_every: int = 1,
                 crash: set[tuple[int, int]] | None = None, kill_at: int | None = None,
                 rebuild: Callable[[], Algorithm] | None = None, max_reports: int = 200_000):
        self.alg = algorithm
        self.curve, self.metric = curve, metric
        self.max_steps, self.devices, self.free = max_steps, devices, devices
        self.duration = duration or (lambda config: 1.0)
        self.checkpoint_every = checkpoint_every
        self.crash = set(crash or ())
        self.kill_at, self.rebuild, self.max_reports = kill_at, rebuild, max_reports
        self.trials: dict[int, SimTrial] = {}
        self.pending: list[int] = []
        self.log: list[tuple] = []            # ("suggest"|"resume"|"report", trial, step, what)
        self.reports = 0
        self.steps_trained = 0                # steps computed, repeats after crashes included
        self.now = 0.0
        self._heap: list[tuple[float, int, int]] = []
        self._seq = 0
        self.stored: str | dict[str, Any] = {}    # what a store holds of the algorithm's state
        self.stored_parts: dict[str, Any] | None = None

    # ---- the loop -------------------------------------------------------------------------

    def run(self) -> "Driver":
        self._fill()
        while self._heap:
            self.now, _, trial_id = heapq.heappop(self._heap)
            self._advance(self.trials[trial_id])
            if self.reports == self.kill_at:
                self._kill_and_restore()
            if self.reports >= self.max_reports:
                raise AssertionError("the study did not end")
            self._fill()
        for trial in self.trials.values():
            if trial.state == "paused":
                trial.state = "pruned"
                self.alg.on_complete(trial.trial_id, trial.value, "pruned")
        return self

    def _fill(self) -> None:
        while (resumed := self.alg.promote()) is not None:      # as the study: before suggest
            self._resume(resumed, {})
        self._launch_pending()
        while self.free > 0 and not self.pending and not self.alg.exhausted:
            trial_id = len(self.trials)
            suggestion = self.alg.suggest(trial_id)
            if suggestion is None:
                return
            if suggestion.resume is not None:
                self._resume(suggestion.resume, dict(suggestion.info))
            else:
                trial = self.trials[trial_id] = SimTrial(trial_id, dict(suggestion.config))
                self.log.append(("suggest", trial_id, 0, dict(suggestion.info)))
                self._queue(trial)
            self._launch_pending()

    def _resume(self, trial_id: int, info: dict) -> None:
        trial = self.trials[trial_id]
        assert trial.state == "paused", (trial_id, trial.state)
        self.log.append(("resume", trial_id, trial.step, info))
        self._queue(trial)

    def _queue(self, trial: SimTrial) -> None:
        trial.state, trial.need = "pending", self.alg.resources(trial.trial_id)
        assert 1 <= trial.need <= self.devices, trial.need
        self.pending.append(trial.trial_id)

    def _launch_pending(self) -> None:
        while self.pending and self.trials[self.pending[0]].need <= self.free:
            trial = self.trials[self.pending.pop(0)]
            trial.state, trial.devices = "running", trial.need
            self.free -= trial.devices
            trial.launches.append((trial.step, trial.devices))
            self._schedule(trial)

    def _schedule(self, trial: SimTrial) -> None:
        self._seq += 1
        when = self.now + self.duration(trial.config) / trial.devices
        heapq.heappush(self._heap, (when, self._seq, trial.trial_id))

    # ---- one step of one trial ------------------------------------------------------------

    def _advance(self, trial: SimTrial) -> None:
        trial.step += 1
        self.steps_trained += 1
        if (trial.trial_id, trial.step) in self.crash:
            self.crash.discard((trial.trial_id, trial.step))
            trial.step = trial.checkpoint
            self._schedule(trial)
            return
        trial.value = self.curve(trial.config, trial.step)
        self.reports += 1
        decision = self.alg.on_result(trial.trial_id, trial.step, {self.metric: trial.value})
        self._commit()
        self.log.append(("report", trial.trial_id, trial.step, decision.value))
        if trial.step % self.checkpoint_every == 0 or decision in (Decision.PAUSE, Decision.GROW):
            trial.checkpoint = trial.step
        if self._apply(trial, decision):
            self._commit()                    # the trial's end comes in a later commit

    def _apply(self, trial: SimTrial, decision: Decision) -> bool:
        """Carry out ``decision``; True if the algorithm was told of more (an end, a queueing)."""
        if decision is Decision.CONTINUE and trial.step < self.max_steps:
            self._schedule(trial)
            return False
        self.free += trial.devices
        if decision is Decision.CONTINUE:
            trial.state = "complete"
            self.alg.on_complete(trial.trial_id, trial.value, "complete")
        elif decision is Decision.STOP:
            trial.state = "pruned"
            self.alg.on_complete(trial.trial_id, trial.value, "pruned")
        elif decision is Decision.PAUSE:
            trial.state = "paused"
        else:
            self._queue(trial)
        return True

    def _commit(self) -> None:
        """Store the algorithm's state as the study's store does (see the module doc)."""
        delta = self.alg.state_delta()
        if delta is None:     # the whole state, as the JSON text a store holds (read when restored)
            self.stored, self.stored_parts = json.dumps(self.alg.state_dict()), None
            return
        state = json.loads(json.dumps(delta))
        parts = state.pop("parts")
        self.stored = state
        self.stored_parts = {} if self.stored_parts is None else self.stored_parts
        for key, part in parts.items():
            if part is None:
                self.stored_parts.pop(key, None)
            else:
                self.stored_parts[key] = part

    def _kill_and_restore(self) -> None:
        self._commit()
        state = json.loads(self.stored) if isinstance(self.stored, str) else dict(self.stored)
        if self.stored_parts is not None:
            state["parts"] = json.loads(json.dumps(self.stored_parts))
        before = json.loads(json.dumps(self.alg.state_dict()))
        self.alg = self.rebuild()
        self.alg.load_state_dict(state)
        assert json.loads(json.dumps(self.alg.state_dict())) == before
        for trial in self.trials.values():      # running workers die: back to their checkpoints
            if trial.state == "running":
                trial.step = trial.checkpoint

    # ---- results ----------------------------------------------------------------------------

    def completed(self) -> list[SimTrial]:
        return [t for t in self.trials.values() if t.state == "complete"]

    def best(self) -> SimTrial:
        return min(self.completed(), key=lambda t: (t.value, t.trial_id))

    def final_loss(self, trial: SimTrial) -> float:
        return self.curve(trial.config, self.max_steps)
