"""BOHB's model for any sampler: one incremental Optuna model per rung, the proposal from the
largest rung with enough results (Falkner et al., ICML 2018).

A rung is identified by its steps (shared across brackets). ``observe`` feeds the result a trial
recorded at a rung (value signed: larger is better) to that rung's model as it arrives.
``propose`` draws a random config when no rung holds ``min_points`` results or, with probability
``random_fraction``, from the algorithm's numpy Generator; otherwise the sampler of the largest
ready rung proposes (its asked trial is failed at once: it is no observation of that rung). The
choice for a trial is made once, when it is first asked for, so a deferred proposal (computed off
the loop's thread, see ``optuna_model``) never draws twice; it is part of the state.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from hypersack.core.algorithms.optuna_model import OptunaModel, SamplerSpec
from hypersack.core.space import SearchSpace
from hypersack.validation import INT53, check_integer, check_probability

__all__ = ["RungModel"]


class RungModel:
    def __init__(self, sampler: SamplerSpec, space: SearchSpace, seed: int, min_points: int,
                 random_fraction: float, feature: str):
        self.sampler, self.space, self.seed = sampler, space, seed
        self.min_points, self.random_fraction, self.feature = min_points, random_fraction, feature
        self.models: dict[int, OptunaModel] = {}      # steps -> model
        self.counts: dict[int, int] = {}              # steps -> results recorded there
        self.configs: dict[int, dict[str, Any]] = {}  # trial -> config
        self._plan: tuple[int, int | None] | None = None   # (trial, steps | None: random)
        self._runner: Any = None
        self._wait_s = 0.0
        self._model(0)                                # fails fast on a bad sampler or options

    def _model(self, steps: int) -> OptunaModel:
        model = self.models.get(steps)
        if model is None:
            model = OptunaModel(self.sampler, self.space, "maximize", self.seed, self.feature)
            model.use_background(self._runner, self._wait_s)
            self.models[steps] = model
        return model

    def use_background(self, runner: Any, wait_s: float = 0.0) -> None:
        self._runner, self._wait_s = runner, wait_s
        for model in self.models.values():
            model.use_background(runner, wait_s)

    def model_steps(self) -> int | None:
        """Steps of the rung the model would be fitted on now (None: not enough results)."""
        ready = [steps for steps, n in self.counts.items() if n >= self.min_points]
        return max(ready) if ready else None

    def observe(self, trial_id: int, steps: int, value: float) -> None:
        config = self.configs.get(trial_id)
        if config is None:
            return
        self._model(steps).observe(config, value)
        self.counts[steps] = self.counts.get(steps, 0) + 1

    def pin(self, trial_id: int, config: Mapping[str, Any]) -> None:
        """``trial_id`` runs ``config`` (an enqueued one): its results feed the rungs' models."""
        self.configs[trial_id] = dict(config)

    def propose(self, trial_id: int, rng: np.random.Generator, defer: bool
                ) -> dict[str, Any] | None:
        """The config of new trial ``trial_id``, or None (``defer``: still being computed)."""
        if self._plan is None or self._plan[0] != trial_id:
            steps = self.model_steps()
            if steps is not None and rng.random() < self.random_fraction:
                steps = None
            self._plan = (trial_id, steps)
        steps = self._plan[1]
        config: dict[str, Any] | None
        if steps is None:
            config = self.space.sample(rng)
        else:
            config = self._model(steps).propose(trial_id, defer=defer, keep=False)
            if config is None:
                return None
        self._plan = None
        self.configs[trial_id] = config
        return config

    def state_dict(self) -> dict[str, Any]:
        return {"models": {str(s): m.state_dict() for s, m in self.models.items()},
                "counts": {str(s): n for s, n in self.counts.items()},
                "configs": {str(t): c for t, c in self.configs.items()},
                "plan": list(self._plan) if self._plan is not None else None}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.models = {}
        for steps, saved in state["models"].items():
            self._model(int(steps)).load_state_dict(saved)
        self.counts = {int(s): int(n) for s, n in state["counts"].items()}
        self.configs = {int(t): dict(c) for t, c in state["configs"].items()}
        plan = state.get("plan")
        self._plan = (int(plan[0]), None if plan[1] is None else int(plan[1])) if plan else None


def build_rung_model(sampler: Any, options: Mapping[str, Any] | None, space: SearchSpace,
                     seed: int, min_points: int | None, random_fraction: Any,
                     feature: str) -> RungModel | None:
    """The rung model a multi-fidelity algorithm's ``sampler`` option asks for (None: none).
    ``min_points`` defaults to the number of searched parameters + 1 (BOHB's choice)."""
    from hypersack.core.algorithms.optuna_model import parse_sampler
    from hypersack.core.space import Constant
    if sampler is None:
        return None
    fraction = check_probability("algorithm.random_fraction", random_fraction)
    searched = sum(not isinstance(d, Constant) for d in space.values())
    points = check_integer("algorithm.min_points_in_model",
                           searched + 1 if min_points is None else min_points, low=1, high=INT53)
    return RungModel(parse_sampler(sampler, options), space, seed, points,
                     fraction, feature)
