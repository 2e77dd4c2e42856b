"""Random search: independent draws from the space with a seeded numpy Generator."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from hypersack.core.algorithms.base import NO_DECISION, Algorithm, Suggestion, register_algorithm
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace


@register_algorithm("random")
class RandomSearch(Algorithm):
    """The k-th suggestion depends only on ``seed`` and k."""

    def __init__(self, space: SearchSpace, objective: Objective, seed: int = 0):
        super().__init__(space, objective, seed)
        self._rng = np.random.default_rng(seed)

    def suggest(self, trial_id: int) -> Suggestion | None:
        return Suggestion(self.space.sample(self._rng))

    def next_decision_step(self, trial_id: int) -> int:
        """None: every result CONTINUEs (no trial of this algorithm is stopped early)."""
        return NO_DECISION

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self._rng.bit_generator.state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._rng.bit_generator.state = dict(state["rng"])
