"""Random search: independent draws from the space with a seeded numpy Generator."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from hypersack.core.algorithms.base import (NO_DECISION, Algorithm, StateSnapshot, Suggestion,
                                            register_algorithm)
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace


@register_algorithm("random")
class RandomSearch(Algorithm):
    """The k-th suggestion depends only on ``seed`` and k."""

    def __init__(self, space: SearchSpace, objective: Objective, seed: int = 0):
        super().__init__(space, objective, seed)
        self._generator = np.random.default_rng(seed)
        self._snapshot: StateSnapshot | None = None    # state_dict() until the generator is used

    @property
    def _rng(self) -> np.random.Generator:
        """The generator; whoever takes it may draw from it, so the state is taken anew."""
        self._snapshot = None
        return self._generator

    def suggest(self, trial_id: int) -> Suggestion | None:
        return Suggestion(self.space.sample(self._rng))

    def next_decision_step(self, trial_id: int) -> int:
        """None: every result CONTINUEs (no trial of this algorithm is stopped early)."""
        return NO_DECISION

    def state_dict(self) -> dict[str, Any]:
        """The generator's state: a ``StateSnapshot``, the same one until the next draw."""
        if self._snapshot is None:
            self._snapshot = StateSnapshot(rng=self._generator.bit_generator.state)
        return self._snapshot

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._rng.bit_generator.state = dict(state["rng"])
