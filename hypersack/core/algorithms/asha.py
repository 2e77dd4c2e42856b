"""ASHA: asynchronous successive halving (Li et al., MLSys 2020).

Decision rungs are the milestones ``min_t * rf**k < max_t`` (steps); trials that pass the last one
train to ``max_t`` and complete (the trainable is expected to train ``max_t`` steps).

``mode="pause"`` (default, the paper's promotion scheme): a trial reaching a milestone CONTINUEs
if it is in the top ``floor(n / rf)`` of the ``n`` results recorded at that rung (itself
included), which is "promote as soon as it is in the top 1/rf" without retraining; otherwise it
is PAUSED. ``promote()`` (asked by the study before ``suggest``; ``suggest`` asks it too) names a
paused trial that has since become promotable (highest rung first, best first); ``suggest``
otherwise proposes a new random config. With ``num_samples`` set,
once all are created and none runs, the leader of the highest rung is resumed if no trial has
passed the last rung yet (see ``_end_game``), so some trial always trains to ``max_t``.

``mode="stop"`` (Ray Tune's default ASHA): a trial whose value is below the
``(1 - 1/rf)`` quantile of the values recorded before it at that rung is STOPped; no pauses.

A trial is judged once per rung. A report past several milestones at once (sparse reports) is
judged at each in turn with that value; a re-reported step (restart from an older checkpoint)
is never judged again. Ties rank the lower trial id first.
"""
from __future__ import annotations

from bisect import bisect_left, insort
from typing import Any, Mapping

import numpy as np

from hypersack.core.algorithms.base import (NO_DECISION, Algorithm, Decision, StateParts,
                                            Suggestion, refuse_several_objectives,
                                            register_algorithm)
from hypersack.core.algorithms.rung_model import build_rung_model
from hypersack.core.algorithms.sha import (DONE, PAUSED, RUNNING, check_horizon,
                                           objective_value)
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError
from hypersack.validation import INT53, check_integer, check_number

__all__ = ["ASHA", "geometric_milestones"]

MODES = ("pause", "stop")


def geometric_milestones(min_t: int, max_t: int, factor: int) -> list[int]:
    """``min_t * factor**k`` for k = 0, 1, ... while <= max_t (integer arithmetic)."""
    out, milestone = [], min_t
    while milestone <= max_t:
        out.append(milestone)
        milestone *= factor
    return out


class Rung:
    """The results recorded at one milestone, kept sorted best first (ties: lower id first),
    and the trials paused there; every query is O(log n)."""

    def __init__(self) -> None:
        self.values: dict[int, float] = {}          # trial -> signed value (larger is better)
        self._order: list[tuple[float, int]] = []   # (-value, trial), ascending: best first
        self._paused: list[tuple[float, int]] = []

    def __len__(self) -> int:
        return len(self.values)

    def add(self, trial_id: int, value: float) -> None:
        if trial_id not in self.values:
            self.values[trial_id] = value
            insort(self._order, (-value, trial_id))

    def rank(self, trial_id: int, value: float) -> int:
        """0-based place ``trial_id`` with ``value`` has (or would have) here."""
        return bisect_left(self._order, (-value, trial_id))

    def quantile(self, q: float) -> float:
        """The q-quantile of the values, interpolated linearly (numpy's default percentile)."""
        n = len(self._order)
        pos = q * (n - 1)
        lo = int(pos)
        hi = min(lo + 1, n - 1)
        a, b = -self._order[n - 1 - lo][0], -self._order[n - 1 - hi][0]
        return a + (b - a) * (pos - lo)

    def pause(self, trial_id: int) -> None:
        insort(self._paused, (-self.values[trial_id], trial_id))

    def unpause(self, trial_id: int) -> None:
        key = (-self.values[trial_id], trial_id)
        index = bisect_left(self._paused, key)
        if index < len(self._paused) and self._paused[index] == key:
            self._paused.pop(index)

    def best_paused(self) -> int | None:
        return self._paused[0][1] if self._paused else None


@register_algorithm("asha")
class ASHA(Algorithm):
    """Options: ``min_t`` (grace period, steps), ``max_t`` (steps), ``reduction_factor`` (rf,
    integer >= 2), ``mode`` ("pause" or "stop"), ``num_samples`` (most new configs; None:
    unbounded, the study's budget decides); ``sampler`` (+ ``options``, ``min_points_in_model``,
    ``random_fraction``: see :class:`~hypersack.core.algorithms.hyperband.Hyperband`): new
    configs come from that Optuna sampler, by default (``fit: all``) ONE model fed every
    result recorded at a milestone and every result at ``max_t``, ranked as Optuna's TPE
    ranks pruned and complete trials (``rung_model``); ``fit: largest``: BOHB's model of the
    largest rung with enough results. ``agreement`` (``fit: all``; default ``"auto"``: 0.3;
    None: off): the model learns only from the rungs whose Kendall tau with every higher rung
    is at least that threshold, less one standard error (``rung_model``). ``skip_disagreeing``
    (a Kendall tau threshold; needs a sampler with ``agreement``; default None: off): ASHA does
    not decide at a milestone below :func:`~hypersack.core.algorithms.rung_model.agreeing_cutoff`
    at that threshold either (Hyper-Tune's choice of fidelities): a trial reaching it goes on
    whatever its rank, and no paused trial is promoted from it, so the effective ``min_t`` rises
    to the lowest rung that agrees with the higher ones. The cutoff is a function of the results
    stored so far (``RungModel.cutoff``), so a resume decides the same. Off by default: it did
    not meet issue 41's bar (``benchmarks/RESULTS.md``, section ``skiprung``)."""

    _feature = "ASHA with a sampler"
    ranks_by_one_metric = True

    def __init__(self, space: SearchSpace, objective: Objective, seed: int = 0, min_t: int = 1,
                 max_t: int = 81, reduction_factor: int = 3, mode: str = "pause",
                 num_samples: int | None = None, sampler: Any = None,
                 options: Mapping[str, Any] | None = None, min_points_in_model: int | None = None,
                 random_fraction: float = 0.0, fit: str = "all",
                 agreement: float | str | None = "auto", skip_disagreeing: float | None = None):
        refuse_several_objectives(objective, type(self).__name__)
        super().__init__(space, objective, seed)
        self._rung_model = build_rung_model(sampler, options, space, seed, min_points_in_model,
                                            random_fraction, self._feature, fit,
                                            agreement)
        self.skip_disagreeing = self._check_skip(skip_disagreeing)
        self.min_t, self.max_t = check_horizon(min_t, max_t)
        self.rf = check_integer("algorithm.reduction_factor", reduction_factor, low=2, high=INT53)
        if mode not in MODES:
            raise ConfigError("algorithm.mode", mode, f"must be one of {list(MODES)}")
        self.mode = mode
        self.num_samples = (None if num_samples is None
                            else check_integer("algorithm.num_samples", num_samples, low=1, high=INT53))
        self.milestones = [m for m in self._milestones() if m < self.max_t]
        self._rng = np.random.default_rng(seed)
        self._created = 0
        self._trials: dict[int, list[Any]] = {}      # id -> [next rung index, status]
        self._rungs = [Rung() for _ in self.milestones]
        self._running = 0       # trials with status RUNNING
        self._through = 0       # trials past the last rung (any status)
        self._dirty: set[int] = set()    # trials whose state part changed since ``state_delta``

    def _set(self, entry: list[Any], rung: int | None = None, status: str | None = None) -> None:
        """Change a trial's ``[next rung index, status]`` in place, keeping the two counters
        (``_running``, ``_through``) that make ``exhausted``/``_end_game`` O(1)."""
        last = len(self.milestones)
        self._running -= entry[1] == RUNNING
        self._through -= entry[0] == last
        if rung is not None:
            entry[0] = rung
        if status is not None:
            entry[1] = status
        self._running += entry[1] == RUNNING
        self._through += entry[0] == last

    def _put(self, trial_id: int, rung: int, status: str) -> None:
        """Set (or create) a trial's entry, keeping the counters."""
        self._dirty.add(trial_id)
        entry = self._trials.get(trial_id)
        if entry is None:
            self._trials[trial_id] = entry = [rung, status]
            self._running += status == RUNNING
            self._through += rung == len(self.milestones)
        else:
            self._set(entry, rung, status)

    def _recount(self) -> None:
        last = len(self.milestones)
        self._running = sum(1 for _, status in self._trials.values() if status == RUNNING)
        self._through = sum(1 for r, _ in self._trials.values() if r == last)

    def _milestones(self) -> list[int]:
        return geometric_milestones(self.min_t, self.max_t, self.rf)

    # ---- decisions ---------------------------------------------------------------------------

    def on_result(self, trial_id: int, step: int, metrics: Mapping[str, float]) -> Decision:
        entry = self._trials.get(trial_id)
        if entry is None or entry[1] == DONE:
            return Decision.CONTINUE
        if entry[1] == PAUSED:
            return Decision.PAUSE        # late report from a trial already told to pause
        value = objective_value(self.objective, metrics)
        if value is None:
            return Decision.CONTINUE
        while entry[0] < len(self.milestones) and step >= self.milestones[entry[0]]:
            self._dirty.add(trial_id)            # a report between milestones changes nothing
            rung = self._rungs[entry[0]]
            passes = self._skipped(entry[0]) or self._passes(trial_id, rung, value)
            if self._rung_model is not None and trial_id not in rung.values:
                self._rung_model.observe(trial_id, self.milestones[entry[0]], value)
            rung.add(trial_id, value)
            if not passes:
                return self._cut(trial_id, entry)
            self._set(entry, rung=entry[0] + 1)
        if self._rung_model is not None and step >= self.max_t:
            self._rung_model.observe_top(trial_id, self.max_t, value)
        return self._continue_decision(trial_id)

    def next_decision_step(self, trial_id: int) -> int:
        """The trial's next milestone (a report below it CONTINUEs); 0 for a paused or unknown
        trial; ``NO_DECISION`` past the last milestone, or once it is done."""
        entry = self._trials.get(trial_id)
        if entry is None or entry[1] == PAUSED:
            return 0
        if entry[1] == DONE or entry[0] >= len(self.milestones):
            return NO_DECISION
        return int(self.milestones[entry[0]])

    def _check_skip(self, threshold: Any) -> float | None:
        """``skip_disagreeing``: None, or a number in [-1, 1] with a sampler and agreement."""
        if threshold is None:
            return None
        value = check_number("algorithm.skip_disagreeing", threshold, low=-1.0, high=1.0,
                             hint="(a Kendall tau; or null: off)")
        if self._rung_model is None or self._rung_model.agreement is None:
            raise ConfigError("algorithm.skip_disagreeing", threshold,
                              "needs a sampler with agreement on")
        return value

    def _skipped(self, index: int) -> bool:
        """Whether ASHA leaves the decision at milestone ``index`` out: ``skip_disagreeing``
        set and the milestone below the agreeing cutoff at that threshold."""
        model = self._rung_model
        return (self.skip_disagreeing is not None and model is not None
                and self.milestones[index] < model.cutoff(self.skip_disagreeing))

    def _passes(self, trial_id: int, rung: Rung, value: float) -> bool:
        """Whether a trial arriving at ``rung`` with ``value`` goes on (not yet recorded)."""
        if self.mode == "stop":
            return not len(rung) or value >= rung.quantile(1 - 1 / self.rf)
        return rung.rank(trial_id, value) < (len(rung) + 1) // self.rf

    def _cut(self, trial_id: int, entry: list[Any]) -> Decision:
        if self.mode == "stop":
            self._set(entry, status=DONE)
            return Decision.STOP
        self._set(entry, status=PAUSED)
        self._rungs[entry[0]].pause(trial_id)
        return Decision.PAUSE

    def _continue_decision(self, trial_id: int) -> Decision:
        """Hook: the decision for a trial that goes on (RASDA returns GROW when it grows)."""
        return Decision.CONTINUE

    def on_complete(self, trial_id: int, value: Any, state: str) -> None:
        entry = self._trials.get(trial_id)
        if entry is None:
            return
        if entry[1] != DONE:
            self._dirty.add(trial_id)
        if entry[1] == PAUSED:
            self._rungs[entry[0]].unpause(trial_id)
        self._set(entry, status=DONE)

    # ---- suggestions -------------------------------------------------------------------------

    def _promotable(self) -> tuple[int, int] | None:
        """(trial, rung) of the paused trial to resume: highest rung first, best first."""
        for index in reversed(range(len(self._rungs))):
            rung = self._rungs[index]
            best = rung.best_paused()       # if the best paused one is not in the top, none is
            if best is not None and not self._skipped(index) and rung.rank(best, rung.values[best]) < len(rung) // self.rf:
                return best, index
        return self._end_game()

    def _end_game(self) -> tuple[int, int] | None:
        """Once ``num_samples`` configs exist and none runs, if no trial has passed the last
        rung, the best paused trial of the highest rung goes on, so that the study ends with
        at least one trial trained to ``max_t`` (few samples: floor(n / rf) may round to 0)."""
        if self.num_samples is None or self._created < self.num_samples:
            return None
        if self._running or self._through:      # some trial runs, or one passed the last rung
            return None
        for index in reversed(range(len(self._rungs))):
            best = self._rungs[index].best_paused()
            if best is not None:
                return best, index
        return None

    def promote(self) -> int | None:
        """The paused trial to resume now (it is then counted as running), or None."""
        promotion = self._promotable()
        if promotion is None:
            return None
        resumed, rung = promotion
        self._rungs[rung].unpause(resumed)
        self._put(resumed, rung + 1, RUNNING)
        return resumed

    def suggest(self, trial_id: int) -> Suggestion | None:
        resumed = self.promote()
        if resumed is not None:
            return Suggestion(info={"rung": self._trials[resumed][0]}, resume=resumed)
        if self.num_samples is not None and self._created >= self.num_samples:
            return None
        config = self._new_config(trial_id)
        if config is None:
            return None               # a model proposal still being computed
        self._put(trial_id, 0, RUNNING)
        self._created += 1
        return Suggestion(config, {"rung": 0})

    def _new_config(self, trial_id: int) -> dict[str, Any] | None:
        if self._rung_model is None:
            return self.space.sample(self._rng)
        return self._rung_model.propose(trial_id, self._rng, defer=self._running > 0)

    def pin(self, trial_id: int, config: Mapping[str, Any]) -> None:
        if self._rung_model is not None:
            self._rung_model.pin(trial_id, config)

    def use_background(self, runner: Any, wait_s: float = 0.0) -> None:
        if self._rung_model is not None:
            self._rung_model.use_background(runner, wait_s)

    @property
    def exhausted(self) -> bool:
        """No new config may be made, none is running, and no paused trial is promotable."""
        if self.num_samples is None or self._created < self.num_samples:
            return False
        return not self._running and self._promotable() is None

    # ---- state -------------------------------------------------------------------------------

    def _head(self) -> dict[str, Any]:
        """The state that does not grow with the trials."""
        return {"rng": self._rng.bit_generator.state, "created": self._created}

    def state_dict(self) -> dict[str, Any]:
        state = self._head()
        if self._rung_model is not None:
            state["model"] = self._rung_model.state_dict()
        state["trials"] = {str(t): list(e) for t, e in self._trials.items()}
        state["records"] = [{str(t): v for t, v in r.values.items()} for r in self._rungs]
        return state

    def state_delta(self) -> dict[str, Any]:
        """The head (rng, count, the sampler model's head) and, under ``"parts"``, one part per
        trial changed since the previous call: ``"t<id>": _part(id)``, and the sampler model's
        new parts (``rung_model``). O(changed trials x rungs)."""
        state = self._head()
        parts = StateParts({f"t{t}": self._part(t) for t in sorted(self._dirty)})
        self._dirty = set()
        if self._rung_model is not None:
            state["model"], model_parts = self._rung_model.state_delta()
            parts.update(model_parts)
        state["parts"] = parts
        return state

    def _part(self, trial_id: int) -> list[Any] | None:
        """A trial's state: ``[next rung index, status, [its value at rung 0, 1, ... (None
        where it has none)]]`` (None: no such trial)."""
        entry = self._trials.get(trial_id)
        if entry is None:
            return None
        values = [rung.values.get(trial_id) for rung in self._rungs]
        while values and values[-1] is None:
            values.pop()
        return [entry[0], entry[1], values]

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """From ``state_dict()`` or from a head with every part (``state_delta``'s, as a store
        hands them back). Every trial is then due in the next ``state_delta``."""
        self._rng.bit_generator.state = dict(state["rng"])
        self._created = int(state["created"])
        self._rungs = [Rung() for _ in self.milestones]
        if "parts" in state:
            self._trials = {}
            for trial_id, part in sorted((int(key[1:]), part) for key, part in state["parts"].items()
                                         if key[0] == "t" and part is not None):
                self._trials[trial_id] = [int(part[0]), str(part[1])]
                for rung, value in zip(self._rungs, part[2]):
                    if value is not None:
                        rung.add(trial_id, float(value))
        else:
            self._trials = {int(t): [int(e[0]), str(e[1])] for t, e in state["trials"].items()}
            for rung, records in zip(self._rungs, state["records"], strict=True):
                for t, v in records.items():
                    rung.add(int(t), float(v))
        for trial_id, (index, status) in self._trials.items():
            if status == PAUSED:
                self._rungs[index].pause(trial_id)
        self._recount()
        self._dirty = set(self._trials)
        if self._rung_model is not None:
            self._rung_model.load_state_dict(state["model"], state.get("parts"))
