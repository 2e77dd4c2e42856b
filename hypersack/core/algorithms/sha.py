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

from hypersack.core.algorithms.base import (NO_DECISION, Algorithm, Decision, StateParts,
                                            Suggestion, refuse_several_objectives,
                                            register_algorithm)
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
    """Successive halving over fixed rungs ``[(n_i, steps_i)]``; plain data, JSON state.

    ``dirty``: the trials whose part (``trial_part``) changed since the owner last took them;
    the bracket's own part (``part``: created, queue, closed) is small and taken with them."""

    def __init__(self, rungs: list[tuple[int, int]]):
        self.rungs = [(int(n), int(r)) for n, r in rungs]
        self.created = 0
        self.trials: dict[int, list[Any]] = {}         # id -> [rung index, status]
        self.records: list[dict[int, float]] = [{} for _ in self.rungs]
        self.queue: list[int] = []                     # promoted, resume not yet handed out
        self.closed = [False] * len(self.rungs)
        self.dirty: set[int] = set()

    @property
    def finished(self) -> bool:
        return self.closed[-1]

    def wants_new(self) -> bool:
        return self.created < self.rungs[0][0]

    def busy(self) -> bool:
        """Whether a trial of the bracket runs or waits for its resume."""
        return any(s in (RUNNING, QUEUED) for _, s in self.trials.values())

    def add(self, trial_id: int) -> None:
        self.trials[trial_id] = [0, RUNNING]
        self.created += 1
        self.dirty.add(trial_id)

    def pop_resume(self) -> int:
        trial_id = self.queue.pop(0)
        self.trials[trial_id][1] = RUNNING
        self.dirty.add(trial_id)
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
        self.dirty.add(trial_id)
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
        self.dirty.add(trial_id)
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
            self.dirty.add(trial_id)

    # ---- state: whole, or in parts (the bracket's, one per trial) -------------------------

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
        self.dirty = set(self.trials)

    def part(self) -> list[Any]:
        """The bracket's own state: ``[created, queue, closed]``."""
        return [self.created, list(self.queue), list(self.closed)]

    def trial_part(self, trial_id: int) -> list[Any]:
        """A trial's state: ``[rung index, status, [its value at rung 0, 1, ... (None where
        it has none)]]``."""
        values = [records.get(trial_id) for records in self.records]
        while values and values[-1] is None:
            values.pop()
        entry = self.trials[trial_id]
        return [entry[0], entry[1], values]

    def load_parts(self, part: list[Any], trials: Mapping[int, list[Any]]) -> None:
        """From ``part()`` and the ``trial_part`` of each of its trials (by id)."""
        self.created, queue, closed = int(part[0]), part[1], part[2]
        self.queue = [int(t) for t in queue]
        self.closed = [bool(c) for c in closed]
        self.trials, self.records = {}, [{} for _ in self.rungs]
        for trial_id in sorted(trials):
            rung, status, values = trials[trial_id]
            self.trials[trial_id] = [int(rung), str(status)]
            for records, value in zip(self.records, values):
                if value is not None:
                    records[trial_id] = float(value)
        self.dirty = set(self.trials)


# ---- several brackets behind the Algorithm interface ---------------------------------------

class BracketSearch(Algorithm):
    """Runs synchronous brackets, interleaved to keep devices busy (one objective: see
    ``refuse_several_objectives``).

    ``brackets`` is the list of brackets of one *iteration* (Hyperband's s = s_max..0); the
    iterations repeat ``repeat`` times, or without end with ``repeat=None`` (then the study's
    trial or time budget ends the search: the algorithm is never exhausted). Brackets are made
    when first needed and numbered over the study: bracket ``k`` is iteration ``k // len(
    brackets)``, of shape ``brackets[k % len(brackets)]``.

    ``promote`` (asked by the study before ``suggest``; ``suggest`` asks it too) hands out a
    pending promotion of any bracket, earliest bracket first; ``suggest`` otherwise gives a new
    config for the bracket still filling its first rung (the newest one; a new one when it is
    full); else None. So a later bracket starts only while every earlier one is waiting on
    running trials, and brackets run one after another when there is a single device. New
    configs come from ``_new_config`` (random by default: a numpy Generator seeded with
    ``seed``).

    State in parts (``state_delta``): the head (rng, brackets made, the rung model's head) and
    ``"b<k>"`` (bracket k's ``[created, queue, closed]``) and ``"t<id>"`` (``[bracket, rung,
    status, [values by rung]]``) for what changed since the previous call, plus the rung
    model's parts; O(changed) per commit.
    """

    ranks_by_one_metric = True

    def __init__(self, space: SearchSpace, objective: Objective, seed: int,
                 brackets: list[list[tuple[int, int]]], rung_model: Any = None,
                 repeat: int | None = 1):
        refuse_several_objectives(objective, type(self).__name__)
        super().__init__(space, objective, seed)
        self._shapes = [[(int(n), int(r)) for n, r in rungs] for rungs in brackets]
        self.repeat = repeat
        self._cap = None if repeat is None else len(self._shapes) * repeat
        self._brackets: list[SHBracket] = []
        self._open: list[int] = []            # brackets made and not finished, in order
        self._touched: set[int] = set()       # brackets changed since ``state_delta``
        self._home: dict[int, int] = {}       # trial id -> bracket index
        self._rng = np.random.default_rng(seed)
        self._rung_model = rung_model         # a RungModel proposes new configs (BOHB), or None

    def _make_bracket(self, index: int, rungs: list[tuple[int, int]]) -> SHBracket:
        """Bracket ``index`` of shape ``rungs`` (a subclass may make its own kind)."""
        return SHBracket(rungs)

    def _add_bracket(self) -> int:
        index = len(self._brackets)
        self._brackets.append(self._make_bracket(index, self._shapes[index % len(self._shapes)]))
        self._open.append(index)
        self._touched.add(index)
        return index

    def _filling(self) -> int | None:
        """The bracket that takes the next new config: the earliest one still filling its
        first rung (the newest, but for a state saved whole by older code, which made every
        bracket at once), else a new one (None once ``repeat`` iterations were made)."""
        for index in self._open:
            if self._brackets[index].wants_new():
                return index
        if self._cap is not None and len(self._brackets) >= self._cap:
            return None
        return self._add_bracket()

    def _changed(self, index: int) -> None:
        """Bracket ``index`` changed: its parts are due, and it leaves the open list once
        finished."""
        self._touched.add(index)
        if self._brackets[index].finished and index in self._open:
            self._open.remove(index)

    def pin(self, trial_id: int, config: Mapping[str, Any]) -> None:
        if self._rung_model is not None:
            self._rung_model.pin(trial_id, config)

    def use_background(self, runner: Any, wait_s: float = 0.0) -> None:
        if self._rung_model is not None:
            self._rung_model.use_background(runner, wait_s)

    @property
    def brackets(self) -> list[list[tuple[int, int]]]:
        """Per bracket, the ``(n_i, steps_i)`` of each rung: every bracket of the ``repeat``
        iterations, or one iteration's without ``repeat``."""
        return [list(rungs) for rungs in self._shapes] * (self.repeat or 1)

    def position(self) -> dict[str, Any] | None:
        """Where the search stands: the newest bracket's ``iteration`` and ``bracket`` within
        it (1-based), ``brackets`` per iteration, ``iterations`` (None: no end) and ``open``
        (brackets with trials still to run); None before the first."""
        if not self._brackets:
            return None
        newest, per = len(self._brackets) - 1, len(self._shapes)
        return {"iteration": newest // per + 1, "bracket": newest % per + 1, "brackets": per,
                "iterations": self.repeat, "open": len(self._open)}

    def progress_note(self) -> str | None:
        at = self.position()
        if at is None:
            return None
        of = f" of {at['iterations']}" if at["iterations"] is not None else ""
        text = f"iteration {at['iteration']}{of}, bracket {at['bracket']} of {at['brackets']}"
        return text + (f" ({at['open']} brackets open)" if at["open"] > 1 else "")

    @property
    def exhausted(self) -> bool:
        return self._cap is not None and len(self._brackets) >= self._cap and not self._open

    def promote(self) -> int | None:
        """The next promoted trial to resume (earliest bracket first), or None."""
        for index in self._open:
            bracket = self._brackets[index]
            if bracket.queue:
                self._touched.add(index)
                return bracket.pop_resume()
        return None

    def suggest(self, trial_id: int) -> Suggestion | None:
        resumed = self.promote()
        if resumed is not None:
            bracket = self._home[resumed]
            return Suggestion(info={"bracket": bracket,
                                    "rung": self._brackets[bracket].trials[resumed][0]},
                              resume=resumed)
        index = self._filling()
        if index is None:
            return None
        config = self._new_config(trial_id, index)
        if config is None:
            return None               # a model proposal still being computed
        self._brackets[index].add(trial_id)
        self._touched.add(index)
        self._home[trial_id] = index
        info = {"bracket": index, "rung": 0}
        if self.repeat != 1:                  # several iterations: say which (0-based)
            info["iteration"] = index // len(self._shapes)
        return Suggestion(config, info)

    def _new_config(self, trial_id: int, bracket: int) -> dict[str, Any] | None:
        if self._rung_model is None:
            return self.space.sample(self._rng)
        busy = any(self._brackets[i].busy() for i in self._open)
        proposal: dict[str, Any] | None = self._rung_model.propose(trial_id, self._rng, defer=busy)
        return proposal

    def on_result(self, trial_id: int, step: int, metrics: Mapping[str, float]) -> Decision:
        index = self._home.get(trial_id)
        if index is None:
            return Decision.CONTINUE
        value = objective_value(self.objective, metrics)
        bracket = self._brackets[index]
        rung = bracket.trials[trial_id][0]
        recorded = trial_id in bracket.records[rung]
        decision = bracket.on_result(trial_id, step, value)
        if not recorded and trial_id in bracket.records[rung]:
            self._changed(index)
            if self._rung_model is not None:
                self._rung_model.observe(trial_id, bracket.rungs[rung][1],
                                         bracket.records[rung][trial_id])
        top = bracket.rungs[-1][1]
        if (self._rung_model is not None and value is not None and rung == len(bracket.rungs) - 1
                and step >= top and bracket.trials[trial_id][1] == RUNNING):
            self._rung_model.observe_top(trial_id, top, value)    # the last rung: not a record
        return decision

    def next_decision_step(self, trial_id: int) -> int:
        """The milestone of the trial's rung in its bracket (see ``SHBracket``)."""
        if trial_id not in self._home:
            return 0
        return self._brackets[self._home[trial_id]].next_decision_step(trial_id)

    def on_complete(self, trial_id: int, value: Any, state: str) -> None:
        index = self._home.get(trial_id)
        if index is not None:
            self._brackets[index].on_complete(trial_id)
            self._changed(index)

    # ---- state -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        state = {"rng": self._rng.bit_generator.state,
                 "home": {str(t): b for t, b in self._home.items()},
                 "brackets": [b.state_dict() for b in self._brackets]}
        if self._rung_model is not None:
            state["model"] = self._rung_model.state_dict()
        return state

    def state_delta(self) -> dict[str, Any] | None:
        """The head and the parts changed since the previous call (see the class doc)."""
        parts = StateParts()
        for index in sorted(self._touched):
            bracket = self._brackets[index]
            parts[f"b{index}"] = bracket.part()
            for trial_id in sorted(bracket.dirty):
                parts[f"t{trial_id}"] = [index, *bracket.trial_part(trial_id)]
            bracket.dirty = set()
        self._touched = set()
        state: dict[str, Any] = {"rng": self._rng.bit_generator.state,
                                 "made": len(self._brackets)}
        if self._rung_model is not None:
            state["model"], model_parts = self._rung_model.state_delta()
            parts.update(model_parts)
        state["parts"] = parts
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """From ``state_dict()`` or from a head with every part (``state_delta``'s, as a store
        hands them back). Every part is then due in the next ``state_delta``."""
        self._rng.bit_generator.state = dict(state["rng"])
        self._brackets, self._open = [], []
        if "parts" in state:
            self._load_parts(int(state["made"]), state["parts"])
        else:
            for saved in state["brackets"]:
                self._brackets[self._add_bracket()].load_state_dict(saved)
            self._home = {int(t): int(b) for t, b in state["home"].items()}
        self._open = [i for i, b in enumerate(self._brackets) if not b.finished]
        self._touched = set(range(len(self._brackets)))
        if self._rung_model is not None:
            self._rung_model.load_state_dict(state["model"], state.get("parts"))

    def _load_parts(self, made: int, parts: Mapping[str, Any]) -> None:
        by_bracket: dict[int, dict[int, list[Any]]] = {}
        self._home = {}
        for key, part in parts.items():
            if key[0] == "t" and part is not None:
                trial_id = int(key[1:])
                self._home[trial_id] = int(part[0])
                by_bracket.setdefault(int(part[0]), {})[trial_id] = part[1:]
        for _ in range(made):
            index = self._add_bracket()
            self._brackets[index].load_parts(parts[f"b{index}"], by_bracket.get(index, {}))


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
        super().__init__(space, objective, seed, [sha_rungs(n, min_t, max_t, eta)], repeat=1)
