"""TPE through Optuna's TPESampler (extra ``[tpe]``), asked on an in-memory study per suggestion.

Optuna is imported on first use. The state is the journal of finished trials (config, value) in
completion order plus the configs of running trials. Every ``suggest`` replays it into a fresh
Optuna study whose sampler is seeded from (seed, trial_id), so a suggestion depends only on the
seed, the trial id and that state: a resumed study proposes exactly what the original would have.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from hypersack.core.algorithms.base import Algorithm, Suggestion, register_algorithm
from hypersack.core.objective import Objective
from hypersack.core.space import Categorical, Constant, Domain, Float, Int, SearchSpace
from hypersack.errors import MissingDependencyError


def _import_optuna(feature: str = "The TPE algorithm"):
    """Optuna, quietened; MissingDependencyError naming ``feature`` and the `tpe` extra."""
    try:
        import optuna
    except ImportError:
        raise MissingDependencyError(feature, "optuna", "tpe") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def _distribution(optuna, domain: Domain):
    d = optuna.distributions
    if isinstance(domain, Float):
        return d.FloatDistribution(domain.low, domain.high, log=domain.log)
    if isinstance(domain, Int):
        return d.IntDistribution(domain.low, domain.high, log=domain.log, step=domain.step)
    if isinstance(domain, Categorical):
        return d.CategoricalDistribution(domain.choices)
    raise TypeError(domain)


@register_algorithm("tpe")
class TPESearch(Algorithm):
    """Options are passed to ``optuna.samplers.TPESampler`` (e.g. ``n_startup_trials``)."""

    def __init__(self, space: SearchSpace, objective: Objective, seed: int = 0, **sampler_options: Any):
        super().__init__(space, objective, seed)
        self._optuna = _import_optuna()
        self._sampler_options = sampler_options
        self._distributions = {name: _distribution(self._optuna, dom) for name, dom in space.items()
                               if not isinstance(dom, Constant)}
        self._new_study(0)                    # fail fast on bad sampler options
        self._configs: dict[int, dict] = {}   # trial_id -> config of running trials
        self._journal: list[dict[str, Any]] = []

    def _new_study(self, trial_id: int):
        seed = (self.seed * 1_000_003 + trial_id) % 2**32
        sampler = self._optuna.samplers.TPESampler(seed=seed, **self._sampler_options)
        direction = "maximize" if self.objective.mode == "max" else "minimize"
        return self._optuna.create_study(sampler=sampler, direction=direction)

    def suggest(self, trial_id: int) -> Suggestion | None:
        study = self._new_study(trial_id)
        ts = self._optuna.trial.TrialState
        for entry in self._journal:
            self._add(study, entry["config"], entry["value"],
                      ts.COMPLETE if entry["value"] is not None else ts.FAIL)
        for running in self._configs.values():   # seen by TPE only with constant_liar
            self._add(study, running, None, ts.RUNNING)
        trial = study.ask(self._distributions)
        config = {name: (dom.value if isinstance(dom, Constant) else trial.params[name])
                  for name, dom in self.space.items()}
        self._configs[trial_id] = config
        return Suggestion(config)

    def on_complete(self, trial_id: int, value: float | None, state: str) -> None:
        config = self._configs.pop(trial_id, None)
        if config is None:
            return
        ok = value is not None and math.isfinite(value)
        self._journal.append({"config": config, "value": float(value) if ok else None})

    def _add(self, study, config: Mapping[str, Any], value: float | None, state) -> None:
        params = {k: config[k] for k in self._distributions}
        study.add_trial(self._optuna.trial.create_trial(
            params=params, distributions=self._distributions, value=value, state=state))

    def state_dict(self) -> dict[str, Any]:
        running = {str(t): c for t, c in self._configs.items()}
        return {"journal": [dict(e) for e in self._journal], "running": running}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._journal = [dict(entry) for entry in state["journal"]]
        self._configs = {int(t): dict(c) for t, c in state.get("running", {}).items()}
