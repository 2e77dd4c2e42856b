"""Hyperband (Li et al., JMLR 2017): successive halving over brackets of different aggressiveness.

With ``R`` the maximum resource in units of the minimum one and ``eta`` the reduction factor:
``s_max = floor(log_eta(R))`` (an exact integer loop, no float log), and for ``s = s_max..0`` a
bracket of ``n = ceil((s_max + 1) / (s + 1) * eta**s)`` configs starting at ``r = R * eta**-s``;
inside it, rung i trains ``n_i = floor(n * eta**-i)`` configs to ``r_i = r * eta**i``.

Steps: one unit is ``min_t`` steps, so ``R = max_t / min_t`` and a rung trains to
``round(r_i * min_t)`` steps (>= 1). Brackets are interleaved as :class:`BracketSearch` documents:
each bracket is synchronous, and a later one starts while earlier ones wait on running trials.

Iterations (the whole set of brackets) follow one another until the study's trial or time budget
ends, as Optuna's HyperbandPruner, Ray Tune's HyperBandScheduler and Syne Tune's synchronous
Hyperband do; ``repeat`` caps their number.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Any, Mapping

from hypersack.core.algorithms.base import register_algorithm
from hypersack.core.algorithms.rung_model import build_rung_model
from hypersack.core.algorithms.sha import (BracketSearch, check_horizon, floor_log,
                                           round_steps)
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.validation import INT53, check_integer, check_number

__all__ = ["Hyperband", "hyperband_brackets", "hyperband_steps"]


def _exact_brackets(R: Fraction, eta: int) -> list[list[tuple[int, Fraction]]]:
    s_max = floor_log(R, eta)
    brackets = []
    for s in range(s_max, -1, -1):
        n = -(-(s_max + 1) * eta**s // (s + 1))          # ceil((s_max+1)/(s+1) * eta^s)
        brackets.append([(n // eta**i, R / eta ** (s - i)) for i in range(s + 1)])
    return brackets


def _check_R_eta(R: Any, eta: Any) -> tuple[Fraction, int]:
    eta = check_integer("eta", eta, low=2)
    check_number("R", R, low=1.0)               # kept exact: an int, a float or a Fraction
    return Fraction(R), eta


def hyperband_brackets(R: float, eta: int = 3) -> list[list[tuple[int, float]]]:
    """Per bracket (most aggressive first), the ``(n_i, r_i)`` of each rung.

    ``R``: maximum resource per config in units of the minimum resource (>= 1); ``eta``: integer
    >= 2. ``hyperband_brackets(81, 3)[0] == [(81, 1.0), (27, 3.0), (9, 9.0), (3, 27.0), (1, 81.0)]``.
    """
    exact_R, eta = _check_R_eta(R, eta)
    return [[(n, float(r)) for n, r in rungs] for rungs in _exact_brackets(exact_R, eta)]


def hyperband_steps(min_t: int, max_t: int, eta: int) -> list[list[tuple[int, int]]]:
    """The brackets with each ``r_i`` mapped to steps: ``round(r_i * min_t)``, at least 1."""
    R = Fraction(max_t, min_t)
    return [[(n, round_steps(r * min_t)) for n, r in rungs] for rungs in _exact_brackets(R, eta)]


@register_algorithm("hyperband")
class Hyperband(BracketSearch):
    """Hyperband with random configs.

    Options: ``min_t`` (steps per resource unit, >= 1), ``max_t`` (steps a config trains at most,
    R = max_t / min_t), ``reduction_factor`` (eta, integer >= 2), ``repeat`` (how many times the
    whole set of brackets runs, >= 1; None, the default: iterations go on until the study's
    ``n_trials`` or ``time_budget_s`` ends). With ``repeat``, exhausted once every bracket of
    those iterations has finished; without, never (the budget ends the study).

    ``sampler`` (an Optuna sampler name or ``{type: name, options: {...}}``, see
    ``optuna_search``; ``options`` go with a bare name): new configs come from that sampler fitted
    as BOHB does, on the largest rung (the top fidelity included) with ``min_points_in_model``
    results (default: searched parameters + 1), random until then (``rung_model``); ``fit:
    all``: one model fed every rung's results instead.
    """

    _feature = "Hyperband with a sampler"

    def __init__(self, space: SearchSpace, objective: Objective, seed: int = 0, min_t: int = 1,
                 max_t: int = 81, reduction_factor: int = 3, repeat: int | None = None,
                 sampler: Any = None, options: Mapping[str, Any] | None = None,
                 min_points_in_model: int | None = None, random_fraction: float = 0.0,
                 fit: str = "largest"):
        min_t, max_t = check_horizon(min_t, max_t)
        eta = check_integer("algorithm.reduction_factor", reduction_factor, low=2, high=INT53)
        if repeat is not None:
            repeat = check_integer("algorithm.repeat", repeat, low=1, high=INT53)
        model = build_rung_model(sampler, options, space, seed, min_points_in_model,
                                 random_fraction, self._feature, fit)
        super().__init__(space, objective, seed, hyperband_steps(min_t, max_t, eta), model,
                         repeat=repeat)
