"""Any Optuna sampler as a HyperSack algorithm: ``{type: optuna, sampler: GPSampler, options: {...}}``.

Every new trial is one proposal of an :class:`~hypersack.core.algorithms.optuna_model.OptunaModel`
(one study, fed each trial's final value when it ends); see that module for exact resume, the
one exception (sampler objects) and the off-thread proposals. Intermediate results are not fed:
no trial of this algorithm is pruned, and samplers read a finished trial's final value. For
early stopping with a sampler, combine it with a multi-fidelity algorithm
(``{type: asha, sampler: ...}``, ``{type: hyperband, sampler: ...}``, ``bohb``).

A multi-objective study (``objective`` a list) gets an Optuna study with one direction per
objective and is told every objective's value: use a sampler that handles several
(NSGAIISampler, NSGAIIISampler, TPESampler, GPSampler, RandomSampler...); Optuna refuses the
others (CmaEsSampler...) when the first trial is proposed.
"""
from __future__ import annotations

from typing import Any, Mapping

from hypersack.core.algorithms.base import NO_DECISION, Algorithm, Suggestion, register_algorithm
from hypersack.core.algorithms.optuna_model import OptunaModel, parse_sampler
from hypersack.core.objective import Objective, Value
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError

__all__ = ["OptunaSearch"]

_SINGLE_OBJECTIVE = frozenset({"CmaEsSampler"})   # Optuna refuses them for several directions


@register_algorithm("optuna")
class OptunaSearch(Algorithm):
    """Options: ``sampler`` (a name of ``optuna.samplers``: TPESampler, GPSampler, CmaEsSampler,
    QMCSampler, RandomSampler, NSGAIISampler, BruteForceSampler, GridSampler..., or a short
    form: tpe, gp, cmaes, qmc...; or ``{type: name, options: {...}}``; or a sampler object) and
    ``options`` (its constructor arguments except ``seed``, which the study's seed sets)."""

    _feature = "The optuna algorithm"

    def __init__(self, space: SearchSpace, objective: Objective, seed: int = 0,
                 sampler: Any = "TPESampler", options: Mapping[str, Any] | None = None):
        super().__init__(space, objective, seed)
        self.sampler = parse_sampler(sampler, options)
        directions = ["maximize" if p.mode == "max" else "minimize" for p in objective.parts]
        self.model = OptunaModel(self.sampler, space,
                                 directions if objective.is_multi else directions[0], seed,
                                 self._feature)
        built = type(self.model._sampler).__name__
        if objective.is_multi and built in _SINGLE_OBJECTIVE:
            raise ConfigError("algorithm.sampler", built, (
                f"handles one objective, and the study has several ({', '.join(objective.metrics)}): "
                "use NSGAIISampler (nsga2), NSGAIIISampler (nsga3), TPESampler, GPSampler or "
                "RandomSampler"))
        self._live: set[int] = set()          # proposed, not ended
        self._pinned: dict[int, dict[str, Any]] = {}   # trial -> the config it really runs

    def use_background(self, runner: Any, wait_s: float = 0.0) -> None:
        """A trial has no config until its proposal is ready (no random fallback here): a
        runner's ``eager`` form, when it has one, runs the asks without rest."""
        self.model.use_background(getattr(runner, "eager", runner), wait_s)

    def suggest(self, trial_id: int) -> Suggestion | None:
        # Defer (return None, "ask again") only while another trial runs: with none running
        # the study would read None as "nothing more to propose".
        config = self.model.propose(trial_id, defer=bool(self._live - {trial_id}))
        if config is None:
            return None
        self._live.add(trial_id)
        return Suggestion(config)

    def next_decision_step(self, trial_id: int) -> int:
        """None: every result CONTINUEs (no trial of this algorithm is stopped early)."""
        return NO_DECISION

    def on_complete(self, trial_id: int, value: Value | None, state: str) -> None:
        self._live.discard(trial_id)
        pinned = self._pinned.pop(trial_id, None)
        if pinned is None:
            self.model.finish(trial_id, value, state)
        elif value is not None and state == "complete":
            self.model.observe(pinned, value)

    def pin(self, trial_id: int, config: Mapping[str, Any]) -> None:
        """The proposal is dropped (failed in the model); the config run is observed at the end."""
        self.model.finish(trial_id, None, "failed")
        self._pinned[trial_id] = dict(config)

    def observe(self, trial_id: int, config: Mapping[str, Any], value: Value) -> None:
        self.model.observe(config, value)        # a non-finite value is ignored

    def state_dict(self) -> dict[str, Any]:
        state = {"model": self.model.state_dict(), "live": sorted(self._live)}
        if self._pinned:
            state["pinned"] = {str(t): c for t, c in self._pinned.items()}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self._live = {int(t) for t in state.get("live", [])}
        self._pinned = {int(t): dict(c) for t, c in state.get("pinned", {}).items()}

