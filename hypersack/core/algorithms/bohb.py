"""BOHB-style search (Falkner et al., ICML 2018): Hyperband brackets whose new configs come from
a TPE model (Optuna's TPESampler, extra ``[tpe]``) instead of uniform sampling.

As in BOHB, the model is fitted on the results recorded at the *largest* rung (in steps, across
all brackets) holding at least ``min_points_in_model`` observations; with no such rung, or with
probability ``random_fraction``, the config is drawn at random (a numpy Generator seeded with
``seed``, part of the state). Each TPE proposal replays the observations into a fresh in-memory
Optuna study whose sampler is seeded from (seed, trial id), so a resumed study proposes exactly
what the original would have.
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping

from hypersack.core.algorithms.base import register_algorithm
from hypersack.core.algorithms.hyperband import Hyperband
from hypersack.core.algorithms.sha import check_int
from hypersack.core.algorithms.tpe import _distribution, _import_optuna as _import_tpe_optuna
from hypersack.core.objective import Objective
from hypersack.core.space import Constant, SearchSpace
from hypersack.errors import ConfigError

__all__ = ["BOHB"]

_DEFAULT_SAMPLER = {"n_startup_trials": 0, "multivariate": True}


def _import_optuna():
    return _import_tpe_optuna("The BOHB algorithm")


@register_algorithm("bohb")
class BOHB(Hyperband):
    """Options: those of :class:`Hyperband` (``min_t``, ``max_t``, ``reduction_factor``,
    ``repeat``), ``random_fraction`` (in [0, 1], default 1/3), ``min_points_in_model`` (default:
    number of searched parameters + 1), and any ``optuna.samplers.TPESampler`` option
    (defaults here: ``n_startup_trials=0``, ``multivariate=True``)."""

    def __init__(self, space: SearchSpace, objective: Objective, seed: int = 0, min_t: int = 1,
                 max_t: int = 81, reduction_factor: int = 3, repeat: int = 1,
                 random_fraction: float = 1 / 3, min_points_in_model: int | None = None,
                 **sampler_options: Any):
        super().__init__(space, objective, seed, min_t=min_t, max_t=max_t,
                         reduction_factor=reduction_factor, repeat=repeat)
        self._optuna = _import_optuna()
        if isinstance(random_fraction, bool) or not isinstance(random_fraction, (int, float)) \
                or not 0 <= random_fraction <= 1:
            raise ConfigError("algorithm.random_fraction", random_fraction, "must be in [0, 1]")
        self.random_fraction = float(random_fraction)
        self._distributions = {name: _distribution(self._optuna, dom)
                               for name, dom in space.items() if not isinstance(dom, Constant)}
        default_points = len(self._distributions) + 1
        self.min_points_in_model = check_int(
            "min_points_in_model",
            default_points if min_points_in_model is None else min_points_in_model, 1)
        self._sampler_options = {**_DEFAULT_SAMPLER, **sampler_options}
        self._sampler(0)                          # fail fast on bad sampler options
        self._configs: dict[int, dict[str, Any]] = {}

    def _sampler(self, trial_id: int):
        seed = (self.seed * 1_000_003 + trial_id) % 2**32
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", self._optuna.exceptions.ExperimentalWarning)
            try:
                return self._optuna.samplers.TPESampler(seed=seed, **self._sampler_options)
            except TypeError as exc:
                raise ConfigError("algorithm", dict(self._sampler_options),
                                  f"has options TPESampler does not take ({exc})") from None

    def _new_config(self, trial_id: int, bracket: int) -> dict[str, Any]:
        observations = self._model_observations()
        if observations is None or self._rng.random() < self.random_fraction:
            config = self.space.sample(self._rng)
        else:
            config = self._tpe_config(trial_id, observations)
        self._configs[trial_id] = config
        return config

    def model_rung(self) -> int | None:
        """Steps of the rung the model would be fitted on now (None: not enough results)."""
        by_steps: dict[int, int] = {}
        for bracket in self._brackets:
            for (_, steps), records in zip(bracket.rungs, bracket.records):
                by_steps[steps] = by_steps.get(steps, 0) + len(records)
        ready = [steps for steps, count in by_steps.items() if count >= self.min_points_in_model]
        return max(ready) if ready else None

    def _model_observations(self) -> list[tuple[dict[str, Any], float]] | None:
        steps = self.model_rung()
        if steps is None:
            return None
        out = []
        for bracket in self._brackets:
            for (_, rung_steps), records in zip(bracket.rungs, bracket.records):
                if rung_steps == steps:
                    out.extend((self._configs[t], v) for t, v in sorted(records.items()))
        return out

    def _tpe_config(self, trial_id: int, observations) -> dict[str, Any]:
        optuna = self._optuna
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study = optuna.create_study(sampler=self._sampler(trial_id), direction="maximize")
            for config, value in observations:      # values are signed: larger is better
                params = {k: config[k] for k in self._distributions}
                study.add_trial(optuna.trial.create_trial(
                    params=params, distributions=self._distributions, value=value))
            trial = study.ask(self._distributions)
        return {name: (dom.value if isinstance(dom, Constant) else trial.params[name])
                for name, dom in self.space.items()}

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["configs"] = {str(t): dict(c) for t, c in self._configs.items()}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self._configs = {int(t): dict(c) for t, c in state["configs"].items()}
