"""Synchronous successive halving (Jamieson & Talwalkar 2016), and the bracket engine that
Hyperband and BOHB reuse.

Resource is measured in *steps*: the ``step`` a trainable reports is the resource it has used so
far (epochs, 1-based). A bracket is a list of rungs ``(n_i, steps_i)``: ``n_i`` trials train to
``steps_i``. A trial reaching its rung's milestone is PAUSED (checkpoint kept); once every trial
of the rung has reported there (or ended: a failed trial never blocks a rung), the best
``n_{i+1}`` are resumed from their checkpoints into the next rung and the rest are *discarded*:
they stay PAUSED and are never resumed (the study prunes them when it ends). Trials of the last
rung train to ``steps_last`` and complete normally: the trainable is expected to train for
``max_t`` steps.

Ranking uses the study objective (ties: lower trial id first). Results may arrive out of order
across trials, and a trial restarted from an older checkpoint may report a step again: a rung
records a trial once, and only a milestone ahead of the trial's current rung is acted upon.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Mapping

import numpy as np

from hypersack.core.algorithms.base import (NO_DECISION, Algorithm, Decision, Suggestion,
                                            refuse_several_objectives, register_algorithm)
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError
from hypersack.validation import INT53, check_integer

__all__ = ["SuccessiveHalving", "BracketSearch", "SHBracket", "sha_rungs", "floor_log",
           "objective_value", "check_horizon"]

# Per-trial status inside a bracket.
RUNNING = "running"      # training towards its rung's milestone
PAUSED = "paused"        # recorded at its rung, waiting for the rung to close
QUEUED = "queued"        # promoted, waiting for suggest() to hand out its resume
DISCARDED = "discarded"  # paused and not promoted: never resumed
DONE = "done"            # ended (complete, pruned or failed)


# ---- shared validation and small helpers ------------------------------------------------------

def check_horizon(min_t: Any, max_t: Any) -> tuple[int, int]:
    """Validated ``(min_t, max_t)`` in steps: 1 <= min_t <= max_t."""
    min_t = check_integer("algorithm.min_t", min_t, low=1, high=INT53)
    max_t = check_integer("algorithm.max_t", max_t, low=1, high=INT53)
    if max_t < min_t:
        raise ConfigError("algorithm.max_t", max_t, f"must be >= min_t ({min_t})")
    return min_t, max_t


def floor_log(value: Fraction | int, base: int) -> int:
    """Largest integer s with ``base**s <= value`` (value >= 1), by exact integer arithmetic."""
    value = Fraction(value)
    s = 0
    while base ** (s + 1) <= value:
        s += 1
    return s


def round_steps(resource: Fraction) -> int:
    """A resource in steps rounded half up, at least 1."""
    return max(1, math.floor(resource + Fraction(1, 2)))


def objective_value(objective: Objective, metrics: Mapping[str, Any]) -> float | None:
    """The objective metric signed so that larger is better; None when absent or not finite."""
    value = metrics.get(objective.metric)
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    value = float(value)
    return objective.sign() * value if math.isfinite(value) else None


def ranked(records: Mapping[int, float]) -> list[int]:
    """Trial ids of a rung, best first (ties: lower id first)."""
    return sorted(records, key=lambda t: (-records[t], t))


def sha_rungs(n: int, min_t: int, max_t: int, eta: int) -> list[tuple[int, int]]:
    """Rungs ``(n_i, steps_i)`` of successive halving over ``n`` configs.

    ``s = floor(log_eta(max_t / min_t))``; rung i trains ``n_i = max(1, n // eta**i)`` trials to
    ``max_t * eta**(i - s)`` steps (rounded, >= 1), so the last rung is ``max_t`` and the first is
    at least ``min_t``.
    """
    ratio = Fraction(max_t, min_t)
    s = floor_log(ratio, eta)
    return [(max(1, n // eta**i), round_steps(Fraction(max_t) / eta ** (s - i)))
            for i in range(s + 1)]


# ---- one synchronous bracket ---------------------------------------------------------------

class SHBracket:
    """Successive halving over fixed rungs ``[(n_i, steps_i)]``; plain data, JSON state."""

    def __init__(self, rungs: list[tuple[int, int]]):
        self.rungs = [(int(n), int(r)) for n, r in rungs]
        self.created = 0
        self.trials: dict[int, list[Any]] = {}         # id -> [rung index, status]
        self.records: list[dict[int, float]] = [{} for _ in self.rungs]
        self.queue: list[int] = []                     # promoted, resume not yet handed out
        self.closed = [False] * len(self.rungs)

    @property
    def finished(self) -> bool:
        return self.closed[-1]

    def wants_new(self) -> bool:
        return self.created < self.rungs[0][0]

    def add(self, trial_id: int) -> None:
        self.trials[trial_id] = [0, RUNNING]
        self.created += 1

    def pop_resume(self) -> int:
        trial_id = self.queue.pop(0)
        self.trials[trial_id][1] = RUNNING
        return trial_id

    def on_result(self, trial_id: int, step: int, value: float | None) -> Decision:
        entry = self.trials.get(trial_id)
        if entry is None or entry[1] == DONE:
            return Decision.CONTINUE
        rung, status = entry
        if status != RUNNING:
            return Decision.PAUSE       # late report from a trial already told to pause
        if rung == len(self.rungs) - 1 or value is None or step < self.rungs[rung][1]:
            return Decision.CONTINUE
        self.records[rung][trial_id] = value
        entry[1] = PAUSED
        self._close_ready()
        return Decision.PAUSE

    def next_decision_step(self, trial_id: int) -> int:
        """The step of the trial's rung (a report below it CONTINUEs); 0 unless it runs;
        ``NO_DECISION`` in the last rung."""
        entry = self.trials.get(trial_id)
        if entry is None or entry[1] != RUNNING:
            return 0 if entry is None or entry[1] != DONE else NO_DECISION
        if entry[0] == len(self.rungs) - 1:
            return NO_DECISION
        return int(self.rungs[entry[0]][1])

    def on_complete(self, trial_id: int) -> None:
        entry = self.trials.get(trial_id)
        if entry is None:
            return
        if entry[1] == QUEUED:
            self.queue.remove(trial_id)
        entry[1] = DONE
        self._close_ready()

    def _settled(self, i: int) -> bool:
        entered = self.created == self.rungs[0][0] if i == 0 else self.closed[i - 1]
        return entered and not any(r == i and s in (RUNNING, QUEUED) for r, s in self.trials.values())

    def _close_ready(self) -> None:
        for i in range(len(self.rungs)):
            if self.closed[i]:
                continue
            if not self._settled(i):
                return
            self.closed[i] = True
            if i + 1 < len(self.rungs):
                self._promote_from(i)

    def _promote_from(self, i: int) -> None:
        waiting = {t: v for t, v in self.records[i].items() if self.trials[t][1] == PAUSED}
        keep = self.rungs[i + 1][0]
        for place, trial_id in enumerate(ranked(waiting)):
            if place < keep:
                self.trials[trial_id] = [i + 1, QUEUED]
                self.queue.append(trial_id)
            else:
                self.trials[trial_id][1] = DISCARDED

    def state_dict(self) -> dict[str, Any]:
        return {"created": self.created,
                "trials": {str(t): list(e) for t, e in self.trials.items()},
                "records": [{str(t): v for t, v in r.items()} for r in self.records],
                "queue": list(self.queue), "closed": list(self.closed)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.created = int(state["created"])
        self.trials = {int(t): [int(e[0]), str(e[1])] for t, e in state["trials"].items()}
        self.records = [{int(t): float(v) for t, v in r.items()} for r in state["records"]]
        self.queue = [int(t) for t in state["queue"]]
        self.closed = [bool(c) for c in state["closed"]]


# ---- several brackets behind the Algorithm interface ---------------------------------------

class BracketSearch(Algorithm):
    """Runs synchronous brackets, interleaved to keep devices busy (one objective: see
    ``refuse_several_objectives``).

    ``promote`` (asked by the study before ``suggest``; ``suggest`` asks it too) hands out a
    pending promotion of any bracket, earliest bracket first; ``suggest`` otherwise gives a new
    config for the earliest bracket still filling its first rung; else None.
    So a later bracket starts only while every earlier one is waiting on running trials, and
    brackets run one after another when there is a single device. New configs come from
    ``_new_config`` (random by default: a numpy Generator seeded with ``seed``).
    """

    ranks_by_one_metric = True

    def __init__(self, space: SearchSpace, objective: Objective, seed: int,
                 brackets: list[list[tuple[int, int]]], rung_model: Any = None):
        refuse_several_objectives(objective, type(self).__name__)
        super().__init__(space, objective, seed)
        self._brackets = [SHBracket(rungs) for rungs in brackets]
        self._home: dict[int, int] = {}       # trial id -> bracket index
        self._rng = np.random.default_rng(seed)
        self._rung_model = rung_model         # a RungModel proposes new configs (BOHB), or None

    def pin(self, trial_id: int, config: Mapping[str, Any]) -> None:
        if self._rung_model is not None:
            self._rung_model.pin(trial_id, config)

    def use_background(self, runner: Any, wait_s: float = 0.0) -> None:
        if self._rung_model is not None:
            self._rung_model.use_background(runner, wait_s)

    @property
    def brackets(self) -> list[list[tuple[int, int]]]:
        """Per bracket, the ``(n_i, steps_i)`` of each rung."""
        return [list(b.rungs) for b in self._brackets]

    @property
    def exhausted(self) -> bool:
        return all(b.finished for b in self._brackets)

    def promote(self) -> int | None:
        """The next promoted trial to resume (earliest bracket first), or None."""
        for bracket in self._brackets:
            if bracket.queue:
                return bracket.pop_resume()
        return None

    def suggest(self, trial_id: int) -> Suggestion | None:
        resumed = self.promote()
        if resumed is not None:
            bracket = self._home[resumed]
            return Suggestion(info={"bracket": bracket,
                                    "rung": self._brackets[bracket].trials[resumed][0]},
                              resume=resumed)
        for index, open_bracket in enumerate(self._brackets):
            if open_bracket.wants_new():
                config = self._new_config(trial_id, index)
                if config is None:
                    return None               # a model proposal still being computed
                open_bracket.add(trial_id)
                self._home[trial_id] = index
                return Suggestion(config, {"bracket": index, "rung": 0})
        return None

    def _new_config(self, trial_id: int, bracket: int) -> dict[str, Any] | None:
        if self._rung_model is None:
            return self.space.sample(self._rng)
        busy = any(s in (RUNNING, QUEUED) for b in self._brackets for _, s in b.trials.values())
        proposal: dict[str, Any] | None = self._rung_model.propose(trial_id, self._rng, defer=busy)
        return proposal

    def on_result(self, trial_id: int, step: int, metrics: Mapping[str, float]) -> Decision:
        if trial_id not in self._home:
            return Decision.CONTINUE
        value = objective_value(self.objective, metrics)
        bracket = self._brackets[self._home[trial_id]]
        rung = bracket.trials[trial_id][0]
        recorded = trial_id in bracket.records[rung]
        decision = bracket.on_result(trial_id, step, value)
        if self._rung_model is not None and not recorded and trial_id in bracket.records[rung]:
            self._rung_model.observe(trial_id, bracket.rungs[rung][1], bracket.records[rung][trial_id])
        return decision

    def next_decision_step(self, trial_id: int) -> int:
        """The milestone of the trial's rung in its bracket (see ``SHBracket``)."""
        if trial_id not in self._home:
            return 0
        return self._brackets[self._home[trial_id]].next_decision_step(trial_id)

    def on_complete(self, trial_id: int, value: Any, state: str) -> None:
        if trial_id in self._home:
            self._brackets[self._home[trial_id]].on_complete(trial_id)

    def state_dict(self) -> dict[str, Any]:
        state = {"rng": self._rng.bit_generator.state,
                 "home": {str(t): b for t, b in self._home.items()},
                 "brackets": [b.state_dict() for b in self._brackets]}
        if self._rung_model is not None:
            state["model"] = self._rung_model.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._rng.bit_generator.state = dict(state["rng"])
        self._home = {int(t): int(b) for t, b in state["home"].items()}
        for bracket, saved in zip(self._brackets, state["brackets"], strict=True):
            bracket.load_state_dict(saved)
        if self._rung_model is not None:
            self._rung_model.load_state_dict(state["model"])


@register_algorithm("sha")
class SuccessiveHalving(BracketSearch):
    """Synchronous successive halving: ``n`` random configs, rungs from :func:`sha_rungs`.

    Options: ``n`` (configs, >= 1), ``min_t`` and ``max_t`` (steps, 1 <= min_t <= max_t),
    ``reduction_factor`` (eta, integer >= 2).
    """

    def __init__(self, space: SearchSpace, objective: Objective, seed: int = 0, n: int = 27,
                 min_t: int = 1, max_t: int = 27, reduction_factor: int = 3):
        n = check_integer("algorithm.n", n, low=1, high=INT53)
        min_t, max_t = check_horizon(min_t, max_t)
        eta = check_integer("algorithm.reduction_factor", reduction_factor, low=2, high=INT53)
        super().__init__(space, objective, seed, [sha_rungs(n, min_t, max_t, eta)])
