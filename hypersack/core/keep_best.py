"""Which trials keep their checkpoints (``keep_checkpoints_num``, Ray Tune's
``CheckpointConfig(num_to_keep=...)``). Pure: the runtime deletes the files.

Rule: among trials that ended COMPLETE or PRUNED, the ``n`` best by the objective value they
ended with (the value of their last report, as ``Controller.best`` ranks trials; ties: the
trial offered first) keep their checkpoints; every other ended trial (FAILED ones included)
loses its checkpoint when it ends or when a better trial pushes it out. Trials that may still
run (running, pending, paused) are never offered, so their checkpoints are kept.
"""
from __future__ import annotations

from hypersack.core.objective import Objective
from hypersack.errors import ConfigError
from hypersack.validation import check_integer

__all__ = ["KeepBest", "MAX_KEEP"]

MAX_KEEP = 10**6


class KeepBest:
    """The ``n`` best ended trials; :meth:`offer` answers which trials lose their checkpoint."""

    def __init__(self, objective: Objective, n: int):
        check_integer("keep_checkpoints_num", n, low=1, high=MAX_KEEP)
        self.objective, self.n = objective, n
        self.kept: list[tuple[float, int]] = []       # (value, trial), best first

    def offer(self, trial_id: int, value: float | None, state: str) -> list[int]:
        """An ended trial: the trials (it, or a kept one it displaces) whose checkpoints go."""
        if state not in ("complete", "pruned", "failed"):
            raise ConfigError("state", state, "must be complete, pruned or failed (an ended trial)")
        if state == "failed" or value is None:
            return [trial_id]
        sign = self.objective.sign()
        at = len(self.kept)
        while at > 0 and sign * value > sign * self.kept[at - 1][0]:
            at -= 1
        self.kept.insert(at, (value, trial_id))
        if len(self.kept) <= self.n:
            return []
        return [self.kept.pop()[1]]

    @property
    def trials(self) -> list[int]:
        """The trials keeping their checkpoints, best first."""
        return [t for _, t in self.kept]
