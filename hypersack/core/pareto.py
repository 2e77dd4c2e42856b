"""The Pareto front of a multi-objective study: the trials no other trial dominates.

Point ``a`` dominates ``b`` when ``a`` is at least as good in every objective and strictly
better in one (each objective's own mode: "min" or "max"). Equal points dominate neither, so
ties are all on the front; a point only weakly dominated (equal in one objective, worse in
another) is not. Pure and deterministic: the front keeps the input order.
"""
from __future__ import annotations

from typing import Sequence, TypeVar

from hypersack.core.objective import Objective

__all__ = ["dominates", "non_dominated", "pareto_front"]

T = TypeVar("T")


def _signed(values: Sequence[float], modes: Sequence[str]) -> list[float]:
    """Values signed so that larger is better in every objective."""
    return [v if m == "max" else -v for v, m in zip(values, modes)]


def dominates(a: Sequence[float], b: Sequence[float], modes: Sequence[str]) -> bool:
    """True when ``a`` dominates ``b`` under ``modes`` (one "min"/"max" per objective)."""
    if not (len(a) == len(b) == len(modes)):
        raise ValueError(f"points of {len(a)} and {len(b)} values for {len(modes)} objectives")
    sa, sb = _signed(a, modes), _signed(b, modes)
    return all(x >= y for x, y in zip(sa, sb)) and any(x > y for x, y in zip(sa, sb))


def non_dominated(points: Sequence[Sequence[float]], modes: Sequence[str]) -> list[int]:
    """The indices of the points no other point dominates, in increasing order (O(n² k))."""
    return [i for i, p in enumerate(points)
            if not any(dominates(q, p, modes) for j, q in enumerate(points) if j != i)]


def pareto_front(items: Sequence[T], values: Sequence[Sequence[float]],
                 objective: Objective) -> list[T]:
    """The ``items`` whose ``values`` (every objective's, objective order) are non-dominated
    under ``objective.parts``' modes, in the order given."""
    modes = [str(p.mode) for p in objective.parts]
    return [items[i] for i in non_dominated(values, modes)]
