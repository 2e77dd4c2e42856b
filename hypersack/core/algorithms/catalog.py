"""Build a search algorithm by name: the built-in algorithms and any registered with
``register_algorithm``. The built-in modules are imported here (they register themselves on
import), so ``base`` never imports an algorithm and no import cycle exists."""
from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping

from hypersack.core.algorithms import (asha, bohb, grid, hyperband, optuna_search,  # noqa: F401
                                       pack_hyperband, random_search, rasda, sha, tpe)
from hypersack.core.algorithms.base import Algorithm, is_optuna_sampler, registered
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError

__all__ = ["make_algorithm", "algorithm_names"]


def algorithm_names() -> list[str]:
    """The names ``make_algorithm`` accepts, sorted."""
    return sorted(registered())


def make_algorithm(spec: Any, space: SearchSpace, objective: Objective, seed: int = 0) -> Algorithm:
    """Build an algorithm from an instance, an Optuna sampler object, a name, or
    ``{"type": name, **options}``."""
    if isinstance(spec, Algorithm):
        return spec
    factories = registered()
    if is_optuna_sampler(spec):
        return factories["optuna"](space, objective, seed=seed, sampler=spec)
    if isinstance(spec, str):
        spec = {"type": spec}
    if not isinstance(spec, Mapping) or "type" not in spec:
        raise ConfigError("algorithm", spec, "must be a name or a mapping with a 'type'")
    options = dict(spec)
    name = options.pop("type")
    if name not in factories:
        raise ConfigError("algorithm.type", name, f"must be one of {sorted(factories)}")
    seed = options.pop("seed", seed)
    if "rank_by" in options:
        objective = _ranking_objective(name, factories[name], objective, options.pop("rank_by"))
    _check_options(name, factories[name], options)
    try:
        return factories[name](space, objective, seed=seed, **options)
    except TypeError as exc:
        raise ConfigError("algorithm", dict(spec), f"has options {name!r} does not take ({exc})") from None


def _ranking_objective(name: str, factory: Callable[..., Any], objective: Objective,
                       rank_by: Any) -> Objective:
    """``rank_by``: the objective of a multi-objective study that an algorithm ranking trials
    by one metric (sha, hyperband, asha, bohb, rasda, pack_hyperband) ranks by; it is built
    with that objective alone (the study still stores, and ``best_trials`` still weighs, all)."""
    if not getattr(factory, "ranks_by_one_metric", False):
        raise ConfigError("algorithm.rank_by", rank_by, f"is only for algorithms that rank trials "
                          f"by one metric (sha, hyperband, asha, bohb, rasda...), not {name!r}")
    if not objective.is_multi:
        raise ConfigError("algorithm.rank_by", rank_by,
                          "is only for a multi-objective study (this one has one objective)")
    return objective.part(rank_by, "algorithm.rank_by")


def _check_options(name: str, factory: Callable[..., Any], options: Mapping[str, Any]) -> None:
    """ConfigError naming the first option ``factory`` does not take, and the ones it takes
    (a factory with ``**kwargs``, or one whose signature cannot be read, is not checked)."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    valid = sorted(p for p, spec in parameters.items()
                   if spec.kind in (inspect.Parameter.KEYWORD_ONLY,
                                    inspect.Parameter.POSITIONAL_OR_KEYWORD)
                   and p not in ("space", "objective", "seed", "self"))
    for option in options:
        if option not in parameters or option in ("space", "objective"):
            raise ConfigError(f"algorithm.{option}", options[option],
                              f"is not an option of {name!r} (its options: "
                              f"{', '.join(valid) or 'none'})")
