"""RASDA: resource-adaptive successive doubling (Aach et al., FGCS 2025), on top of ASHA.

Successive halving in time and doubling in space. Rung milestones are ``min_t * sf**k`` steps
(Eq. 2-3 of the paper; with min_t=5, max_t=40, sf=2: 5, 10, 20, 40). At each milestone below
``max_t`` ASHA keeps the top 1/rf; a trial that continues past milestone k gets
``base_resources * sf**(k+1)`` devices, so the trial trains towards milestone k with
``base_resources * sf**k`` devices: 1, 2, 4, 8 x base for the example (the paper's Fig. 7: 2 to 16
GPUs for base 2). ``max_resources`` caps the allocation. A continuing trial whose allocation
changes gets GROW (the study relaunches it from its checkpoint with ``resources(trial)``
devices, waiting until they are free); trials below the cut are STOPped, as the paper's Ray Tune
ASHA does (``mode="pause"`` pauses them instead, and a resumed trial gets its new allocation).

Learning rate (paper Sec. 3.2): the global batch is ``local batch x workers``; the learning rate
scales linearly with workers for SGD and with their square root for Adam, reached by a linear
warm-up over one or two epochs after each re-scaling (:func:`scaled_lr`, :func:`warmup_factor`).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping

from hypersack.core.algorithms.asha import ASHA, geometric_milestones
from hypersack.core.algorithms.base import Decision, Suggestion, register_algorithm
from hypersack.core.algorithms.sha import check_horizon
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError
from hypersack.validation import INT53, check_integer, check_number, check_positive

__all__ = ["RASDA", "rasda_schedule", "lr_rule", "lr_scale", "scaled_lr", "warmup_factor"]

RULES = ("linear", "sqrt", "none")
_OPTIMIZER_RULES = {"sgd": "linear", "momentum": "linear", "nesterov": "linear", "lars": "linear",
                    "adam": "sqrt", "adamw": "sqrt", "adamax": "sqrt", "nadam": "sqrt",
                    "radam": "sqrt", "lamb": "sqrt", "rmsprop": "sqrt", "adagrad": "sqrt"}


def rasda_schedule(min_t: int, max_t: int, sf: int = 2, base_resources: int = 1,
                   max_resources: int | None = None) -> list[tuple[int, int]]:
    """``(milestone, devices)``: the devices a trial trains with up to each milestone (steps).

    ``rasda_schedule(5, 40, 2) == [(5, 1), (10, 2), (20, 4), (40, 8)]``. When ``max_t`` is not
    a milestone, the last entry is ``(max_t, ...)`` after the milestones below it.
    """
    min_t, max_t = check_horizon(min_t, max_t)
    sf = check_integer("algorithm.sf", sf, low=2, high=INT53)
    base = check_integer("algorithm.base_resources", base_resources, low=1, high=INT53)
    cap = None if max_resources is None else check_integer("algorithm.max_resources",
                                                           max_resources, low=base, high=INT53)
    stops = [m for m in geometric_milestones(min_t, max_t, sf) if m < max_t] + [max_t]
    return [(m, _capped(base * sf**k, cap)) for k, m in enumerate(stops)]


def _capped(devices: int, cap: int | None) -> int:
    return devices if cap is None else min(devices, cap)


@register_algorithm("rasda")
class RASDA(ASHA):
    """Options: ``min_t``, ``max_t`` (steps), ``sf`` (scale factor of milestones and devices,
    integer >= 2), ``rf`` (reduction factor, integer >= 2), ``base_resources`` (devices of a new
    trial, >= 1), ``max_resources`` (cap, >= base_resources; None: no cap), ``mode`` ("stop", the
    paper's, or "pause"), ``num_samples`` (most new configs; None: the study's budget decides)."""

    def __init__(self, space: SearchSpace, objective: Objective, seed: int = 0, min_t: int = 5,
                 max_t: int = 40, sf: int = 2, rf: int = 2, base_resources: int = 1,
                 max_resources: int | None = None, mode: str = "stop",
                 num_samples: int | None = None):
        self.sf = check_integer("algorithm.sf", sf, low=2, high=INT53)
        self.base_resources = check_integer("algorithm.base_resources", base_resources,
                                            low=1, high=INT53)
        self.max_resources = (None if max_resources is None
                              else check_integer("algorithm.max_resources", max_resources,
                                                 low=self.base_resources, high=INT53))
        try:
            super().__init__(space, objective, seed, min_t=min_t, max_t=max_t,
                             reduction_factor=rf, mode=mode, num_samples=num_samples)
        except ConfigError as exc:
            if exc.field != "algorithm.reduction_factor":
                raise
            raise ConfigError("algorithm.rf", rf, exc.problem) from None
        self._launched: dict[int, int] = {}          # id -> devices of its current launch

    def _milestones(self) -> list[int]:
        return geometric_milestones(self.min_t, self.max_t, self.sf)

    def resources(self, trial_id: int) -> int:
        """Devices for the trial's next launch: base * sf**(rung it trains towards), capped."""
        entry = self._trials.get(trial_id)
        rung = 0 if entry is None else entry[0]
        return _capped(self.base_resources * self.sf**rung, self.max_resources)

    def next_decision_step(self, trial_id: int) -> int:
        """Every step: a trial may be told to GROW at any report."""
        return 0

    def _continue_decision(self, trial_id: int) -> Decision:
        devices = self.resources(trial_id)
        if self._launched.get(trial_id, self.base_resources) == devices:
            return Decision.CONTINUE
        self._launched[trial_id] = devices
        self._dirty.add(trial_id)
        return Decision.GROW

    def promote(self) -> int | None:
        resumed = super().promote()
        if resumed is not None:
            self._launched[resumed] = self.resources(resumed)
            self._dirty.add(resumed)
        return resumed

    def suggest(self, trial_id: int) -> Suggestion | None:
        suggestion = super().suggest(trial_id)
        if suggestion is None:
            return None
        launched = trial_id if suggestion.resume is None else suggestion.resume
        self._launched[launched] = self.resources(launched)
        self._dirty.add(launched)
        return replace(suggestion, info={**suggestion.info, "resources": self._launched[launched]})

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["launched"] = {str(t): d for t, d in self._launched.items()}
        return state

    def _part(self, trial_id: int) -> list[Any] | None:
        """ASHA's part of the trial, then the devices of its current launch (None: none)."""
        part = super()._part(trial_id)
        return None if part is None else [*part, self._launched.get(trial_id)]

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        if "parts" in state:
            self._launched = {int(key[1:]): int(part[3]) for key, part in state["parts"].items()
                              if key[0] == "t" and part is not None and len(part) > 3
                              and part[3] is not None}
        else:
            self._launched = {int(t): int(d) for t, d in state.get("launched", {}).items()}


# ---- learning-rate scaling (pure helpers for the data-parallel trainable) ------------------

def lr_rule(optimizer: str) -> str:
    """The scaling rule of an optimizer name: "linear" (SGD family) or "sqrt" (Adam family)."""
    rule = _OPTIMIZER_RULES.get(str(optimizer).lower()) if isinstance(optimizer, str) else None
    if rule is None:
        raise ConfigError("optimizer", optimizer,
                          f"must be one of {sorted(_OPTIMIZER_RULES)} to scale the learning rate")
    return rule


def lr_scale(workers: int, rule: str) -> float:
    """Learning-rate multiplier for ``workers`` data-parallel workers: workers, sqrt(workers) or 1.

    ``rule`` is "linear", "sqrt", "none", or an optimizer name (see :func:`lr_rule`).
    """
    workers = _check_workers("workers", workers)
    rule = rule if rule in RULES else lr_rule(rule)
    if rule == "linear":
        return float(workers)
    return math.sqrt(workers) if rule == "sqrt" else 1.0


def scaled_lr(base_lr: float, workers: int, optimizer: str) -> float:
    """``base_lr`` (tuned for one worker) scaled for ``workers``: linear for SGD (Goyal et al.),
    square root for Adam (Malladi et al.)."""
    return check_positive("base_lr", base_lr) * lr_scale(workers, lr_rule(optimizer))


def warmup_factor(step_in_epochs: float, warmup_epochs: float, workers: int, rule: str,
                  from_workers: int = 1) -> float:
    """Multiplier on the one-worker learning rate, ``step_in_epochs`` epochs after a re-scaling.

    Goes linearly from ``lr_scale(from_workers)`` at 0 to ``lr_scale(workers)`` at
    ``warmup_epochs`` (0: at once) and stays there. Epochs may be fractional.
    """
    for name, value in (("step_in_epochs", step_in_epochs), ("warmup_epochs", warmup_epochs)):
        check_number(name, value, low=0.0, hint="(epochs)")
    start = lr_scale(_check_workers("from_workers", from_workers), rule)
    end = lr_scale(workers, rule)
    if warmup_epochs == 0 or step_in_epochs >= warmup_epochs:
        return end
    return start + (end - start) * step_in_epochs / warmup_epochs


def _check_workers(name: str, workers: Any) -> int:
    return check_integer(name, workers, low=1)
