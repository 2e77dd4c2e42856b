"""Scripted search algorithms for studies in tests."""
from __future__ import annotations

from typing import Any

from hypersack.core.algorithms import Algorithm, Decision, Suggestion


class GrowOnce(Algorithm):
    """One trial with ``config``; after its report of step ``at_step`` it grows from 1 to 2
    data-parallel workers (RASDA's GROW)."""

    def __init__(self, space: Any, objective: Any, config: dict[str, Any], at_step: int):
        super().__init__(space, objective)
        self.config, self.at_step = dict(config), at_step
        self.made, self.grown = 0, False

    @property
    def exhausted(self) -> bool:
        return self.made >= 1

    def suggest(self, trial_id: int) -> Suggestion:
        self.made += 1
        return Suggestion(dict(self.config))

    def on_result(self, trial_id: int, step: int, metrics: dict) -> Decision:
        if step == self.at_step and not self.grown:
            self.grown = True
            return Decision.GROW
        return Decision.CONTINUE

    def resources(self, trial_id: int) -> int:
        return 2 if self.grown else 1
