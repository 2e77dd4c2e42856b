"""Grid search: every point of the space's grid, in a fixed order, once."""
from __future__ import annotations

from typing import Any, Mapping

from hypersack.core.algorithms.base import NO_DECISION, Algorithm, Suggestion, register_algorithm
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError
from hypersack.validation import check_integer


@register_algorithm("grid")
class GridSearch(Algorithm):
    """Visits ``space.grid(points_per_axis)`` in order; ``repeat`` runs each point that many times.
    ``points_per_axis`` unset: every value of an Int axis (up to ``INT_GRID_LIMIT`` = 100, else a
    ConfigError asking for it), 3 points of a Float axis; set: that many points on every axis."""

    def __init__(self, space: SearchSpace, objective: Objective, seed: int = 0,
                 points_per_axis: int | None = None, repeat: int = 1):
        super().__init__(space, objective, seed)
        repeat = check_integer("algorithm.repeat", repeat, low=1)
        try:
            self._points = space.grid(points_per_axis)
        except ConfigError as exc:
            raise ConfigError("algorithm.points_per_axis", points_per_axis, exc.problem) from None
        self._repeat = repeat
        self._next = 0

    @property
    def size(self) -> int:
        return len(self._points) * self._repeat

    @property
    def exhausted(self) -> bool:
        return self._next >= self.size

    def suggest(self, trial_id: int) -> Suggestion | None:
        if self.exhausted:
            return None
        config = dict(self._points[self._next // self._repeat])
        self._next += 1
        return Suggestion(config, {"grid_index": self._next - 1})

    def next_decision_step(self, trial_id: int) -> int:
        """None: every result CONTINUEs (no trial of this algorithm is stopped early)."""
        return NO_DECISION

    def state_dict(self) -> dict[str, Any]:
        return {"next": self._next}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._next = int(state["next"])
