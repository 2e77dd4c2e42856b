"""The study's objective: one metric, minimised or maximised.

The mode is required, as in Ray Tune: HyperSack never guesses whether a metric (``val_mse``,
``accuracy``) is better high or low. Optuna's words ``minimize`` and ``maximize`` are read as
``min`` and ``max``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hypersack.errors import ConfigError

__all__ = ["Objective"]


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
        metric name or a missing mode is a ConfigError naming ``objective.mode``."""
        if isinstance(spec, Objective):
            return spec
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
        raise ConfigError("objective", spec, "must be (metric, 'min'|'max') or {metric, mode}")

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
