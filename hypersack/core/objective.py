"""The study's objective: one metric, minimised or maximised, or several (multi-objective).

The mode is required, as in Ray Tune: HyperSack never guesses whether a metric (``val_mse``,
``accuracy``) is better high or low. Optuna's words ``minimize`` and ``maximize`` are read as
``min`` and ``max``.

A multi-objective study (``objective=[("loss", "min"), ("latency_ms", "min")]``) has a
:class:`MultiObjective`: it *is* its first objective for everything that ranks by one metric
(progress lines, history charts, time-sharing's loss) and holds every objective in ``parts``;
the study's best trials are then its Pareto front (``core.pareto``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from hypersack.errors import ConfigError

__all__ = ["Objective", "MultiObjective", "Value"]

#: What an algorithm is told a trial reached: the objective value, or in a multi-objective
#: study the tuple of every objective's value (objective order).
Value = float | tuple[float, ...]


#: Other spellings of a mode (Optuna's ``direction``), read as the mode they mean.
MODE_ALIASES = {"minimize": "min", "maximize": "max"}

_MODE_MISSING = ("must be 'min' or 'max': set it, e.g. objective: {metric: val_loss, mode: min} "
                 "in YAML or objective=(\"val_loss\", \"min\") in Python")


@dataclass(frozen=True)
class Objective:
    """``metric``: the reported metric to optimise; ``mode``: "min" or "max" (required;
    "minimize" and "maximize" are kept as "min" and "max")."""
    metric: str
    mode: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.metric, str) or not self.metric:
            raise ConfigError("objective.metric", self.metric, "must be a non-empty metric name")
        if self.mode is None:
            raise ConfigError("objective.mode", None, _MODE_MISSING)
        if isinstance(self.mode, str) and self.mode in MODE_ALIASES:
            object.__setattr__(self, "mode", MODE_ALIASES[self.mode])
        if self.mode not in ("min", "max"):
            raise ConfigError("objective.mode", self.mode,
                              "must be 'min' or 'max' (or 'minimize' / 'maximize')")

    @classmethod
    def parse(cls, spec: Any) -> "Objective":
        """From ``("accuracy", "max")``, ``{"metric": ..., "mode": ...}`` or an Objective; a bare
        metric name or a missing mode is a ConfigError naming ``objective.mode``. A list of
        such objectives (``[("loss", "min"), {"metric": "latency_ms", "mode": "min"}]``) is a
        :class:`MultiObjective` (one element: that objective alone)."""
        if isinstance(spec, Objective):
            return spec
        if _is_list_of_objectives(spec):
            return MultiObjective.of(spec)
        if isinstance(spec, dict):
            unknown = set(spec) - {"metric", "mode"}
            if unknown:
                field = sorted(unknown)[0]
                raise ConfigError(f"objective.{field}", spec[field], "is not a field (metric, mode)")
            return cls(spec.get("metric"), spec.get("mode"))  # type: ignore[arg-type]  # checked by __post_init__
        if isinstance(spec, (tuple, list)) and len(spec) == 2:
            return cls(spec[0], spec[1])
        if isinstance(spec, str):
            return cls(spec)          # raises: the mode is missing
        raise ConfigError("objective", spec, "must be (metric, 'min'|'max'), {metric, mode}, or a "
                          "list of them (a multi-objective study)")

    def better(self, a: float, b: float) -> bool:
        """True when value ``a`` is strictly better than ``b``."""
        return a > b if self.mode == "max" else a < b

    def sign(self) -> float:
        """+1 when larger is better: ``sign() * value`` is always to be maximised."""
        return 1.0 if self.mode == "max" else -1.0

    def best(self, values: list[float]) -> float | None:
        finite = [v for v in values if v is not None and math.isfinite(v)]
        if not finite:
            return None
        return max(finite) if self.mode == "max" else min(finite)

    def to_dict(self) -> dict[str, str]:
        return {"metric": self.metric, "mode": str(self.mode)}

    # ---- the multi-objective view (one objective: itself) ---------------------------------

    @property
    def parts(self) -> tuple["Objective", ...]:
        """Every objective of the study, in order: ``(self,)`` here."""
        return (self,)

    @property
    def is_multi(self) -> bool:
        """Whether ``parts`` holds several objectives (asked at every report: no tuple built)."""
        return False

    @property
    def metrics(self) -> tuple[str, ...]:
        """Every objective's metric, in order (``parts``' metrics)."""
        return (self.metric,)

    def to_spec(self) -> Any:
        """The stored form: ``{metric, mode}``, or a list of them for several objectives."""
        return self.to_dict()

    def missing(self, metrics: Mapping[str, Any]) -> list[str]:
        """The objective metrics absent from ``metrics`` (objective order)."""
        return [m for m in self.metrics if m not in metrics]

    def values_of(self, metrics: Mapping[str, Any]) -> tuple[float, ...] | None:
        """Every objective's value in ``metrics`` (objective order), or None when one is absent."""
        if self.missing(metrics):
            return None
        return tuple(float(metrics[m]) for m in self.metrics)

    def part(self, metric: str, field: str = "rank_by") -> "Objective":
        """The objective of ``metric`` (a plain Objective); ConfigError naming ``field``."""
        for p in self.parts:
            if p.metric == metric:
                return Objective(p.metric, p.mode)
        raise ConfigError(field, metric, f"must name an objective metric ({', '.join(self.metrics)})")


@dataclass(frozen=True)
class MultiObjective(Objective):
    """Several objectives (``parts``, two or more, distinct metrics). As an Objective it is its
    first part (``metric``, ``mode``, ``better``, ``sign``...), which single-metric views use;
    build it with :meth:`of`."""
    objectives: tuple[Objective, ...] = ()

    @property
    def parts(self) -> tuple[Objective, ...]:
        return self.objectives

    @property
    def is_multi(self) -> bool:
        return len(self.objectives) > 1

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(p.metric for p in self.objectives)

    @classmethod
    def of(cls, specs: Sequence[Any]) -> Objective:
        """From a list of objective specs; ConfigError naming ``objective[i].field`` for a bad
        element or a repeated metric, ``objective`` for an empty list. One element: that
        objective, plain."""
        if not specs:
            raise ConfigError("objective", list(specs), "must list at least one objective "
                              "(e.g. [{metric: loss, mode: min}, {metric: latency_ms, mode: min}])")
        parts: list[Objective] = []
        for i, spec in enumerate(specs):
            try:
                part = Objective.parse(spec)
            except ConfigError as exc:
                raise ConfigError(exc.field.replace("objective", f"objective[{i}]", 1),
                                  exc.value, exc.problem) from None
            if part.is_multi:
                raise ConfigError(f"objective[{i}]", spec, "must be one objective, not a list")
            seen = [p.metric for p in parts]
            if part.metric in seen:
                raise ConfigError(f"objective[{i}].metric", part.metric,
                                  f"repeats objective[{seen.index(part.metric)}]'s metric: "
                                  "each objective needs its own metric")
            parts.append(part)
        if len(parts) == 1:
            return parts[0]
        return cls(parts[0].metric, parts[0].mode, tuple(parts))

    def to_spec(self) -> Any:
        return [p.to_dict() for p in self.parts]


def _is_list_of_objectives(spec: Any) -> bool:
    """A list of objectives, not the pair ``(metric, mode)``: a list or tuple that is empty or
    holds an objective (a pair, a mapping, an Objective), so ``[loss, {metric: ..}]`` names
    its element ``objective[0]`` in errors."""
    if not isinstance(spec, (list, tuple)):
        return False
    return not spec or any(isinstance(e, (list, tuple, Mapping, Objective)) for e in spec)
