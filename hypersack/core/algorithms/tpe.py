"""TPE: the short name for ``{type: optuna, sampler: TPESampler}`` (extra ``[tpe]``).

``{type: tpe, n_startup_trials: 10, multivariate: true}``: every option is a TPESampler
argument. Proposals are incremental and resume exactly (see ``optuna_model``).
"""
from __future__ import annotations

from typing import Any, Mapping

from hypersack.core.algorithms.base import register_algorithm
from hypersack.core.algorithms.optuna_model import (SamplerSpec, distribution as _distribution,
                                                    import_optuna as _import_optuna)
from hypersack.core.algorithms.optuna_search import OptunaSearch
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace

__all__ = ["TPESearch"]
_compat = (_distribution, _import_optuna)       # older imports of these names keep working


@register_algorithm("tpe")
class TPESearch(OptunaSearch):
    """Options are passed to ``optuna.samplers.TPESampler`` (e.g. ``n_startup_trials``)."""

    _feature = "The TPE algorithm"

    def __init__(self, space: SearchSpace, objective: Objective, seed: int = 0, **sampler_options: Any):
        spec = SamplerSpec("TPESampler", dict(sampler_options), field="algorithm",
                           options_field="algorithm")
        super().__init__(space, objective, seed, sampler=spec)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if "journal" in state:                    # saved before the incremental model
            state = _legacy_state(state, list(self.model._names))
        super().load_state_dict(state)


def _legacy_state(state: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
    """The old journal (finished trials in completion order, then running ones) as a model
    journal in that order: the study the old code replayed."""
    trials: list[dict[str, Any]] = []
    for entry in state["journal"]:
        value = entry["value"]
        trials.append({"p": [entry["config"][n] for n in names], "s": "F" if value is None else "C",
                       **({} if value is None else {"v": value})})
    running = {int(t): c for t, c in state.get("running", {}).items()}
    for trial_id, config in sorted(running.items()):
        trials.append({"t": trial_id, "p": [config[n] for n in names], "s": "R"})
    return {"model": {"trials": trials}, "live": sorted(running)}
