"""BOHB-style search (Falkner et al., ICML 2018): Hyperband brackets whose new configs come from
a TPE model (Optuna's TPESampler, extra ``[tpe]``) instead of uniform sampling.

As in BOHB, the model is fitted on the results recorded at the *largest* rung (in steps, across
all brackets) holding at least ``min_points_in_model`` observations; with no such rung, or with
probability ``random_fraction``, the config is drawn at random (a numpy Generator seeded with
``seed``, part of the state). Each rung has one incremental Optuna study fed its results as they
are recorded (``rung_model``, ``optuna_model``); proposals are seeded from (seed, trial id) and
the studies are journalled, so a resumed study proposes exactly what the original would have.
``sampler`` swaps TPE for another Optuna sampler.
"""
from __future__ import annotations

from typing import Any, Mapping

from hypersack.core.algorithms.base import register_algorithm
from hypersack.core.algorithms.hyperband import Hyperband
from hypersack.core.algorithms.optuna_model import SamplerSpec
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace

__all__ = ["BOHB"]

_DEFAULT_SAMPLER = {"n_startup_trials": 0, "multivariate": True}


@register_algorithm("bohb")
class BOHB(Hyperband):
    """Options: those of :class:`Hyperband` (``min_t``, ``max_t``, ``reduction_factor``,
    ``repeat``: None, the default, runs iterations until the study's budget ends),
    ``random_fraction`` (in [0, 1], default 1/3), ``fit`` (``largest``, BOHB's, or ``all``:
    see ``rung_model``), ``min_points_in_model`` (default:
    number of searched parameters + 1), and any ``optuna.samplers.TPESampler`` option
    (defaults here: ``n_startup_trials=0``, ``multivariate=True``); or ``sampler`` (+ ``options``)
    for another Optuna sampler."""

    _feature = "The BOHB algorithm"

    def __init__(self, space: SearchSpace, objective: Objective, seed: int = 0, min_t: int = 1,
                 max_t: int = 81, reduction_factor: int = 3, repeat: int | None = None,
                 random_fraction: float = 1 / 3, min_points_in_model: int | None = None,
                 sampler: Any = None, options: Any = None, fit: str = "largest",
                 **sampler_options: Any):
        if sampler is None:
            sampler = SamplerSpec("TPESampler", {**_DEFAULT_SAMPLER, **sampler_options},
                                  field="algorithm", options_field="algorithm")
        elif sampler_options:
            options = {**(options or {}), **sampler_options}
        super().__init__(space, objective, seed, min_t=min_t, max_t=max_t,
                         reduction_factor=reduction_factor, repeat=repeat, sampler=sampler,
                         options=options, min_points_in_model=min_points_in_model,
                         random_fraction=random_fraction, fit=fit)
        self.random_fraction = self._rung_model.random_fraction
        self.min_points_in_model = self._rung_model.min_points

    def model_rung(self) -> int | None:
        """Steps of the rung the model would be fitted on now (None: not enough results)."""
        steps: int | None = self._rung_model.model_steps()
        return steps

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if "model" in state:
            super().load_state_dict(state)
            return
        # Saved before the incremental models: refeed the recorded results (bracket by bracket,
        # rung by rung, by trial id: the order the old code replayed them in).
        empty: dict[str, dict[str, Any]] = {"models": {}, "counts": {},
                                            "configs": dict(state["configs"])}
        super().load_state_dict({**state, "model": empty})
        for bracket in self._brackets:
            for (_, steps), records in zip(bracket.rungs, bracket.records):
                for trial_id, value in sorted(records.items()):
                    self._rung_model.observe(trial_id, steps, value)
