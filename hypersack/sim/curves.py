"""Learning curves for simulated trials: what each report says, so HPO decisions mean something.

Two families behind one interface, ``model.curve(config, seed) -> Curve`` and ``Curve.at(step)``
(``step`` >= 1, the report's step) returning the metrics of that report:

* :class:`ReplayCurves` replays curves recorded from real runs (``examples/sim/curves/*.json``,
  written by ``examples/sim/record_digits_curves.py``): a trial gets the recorded curve whose config
  is nearest to its own (numbers compared in log space when positive, normalised by the recorded
  range; categories 0 when equal, else 1), held at its last value past its end, plus optional noise.
* :class:`ParametricCurves`: a saturating curve whose asymptote depends on the hyperparameters::

      lr*(b)  = lr_optimum * (b / batch_ref)          (linear scaling rule; b = batch size)
      a_inf   = worst + (best - worst) * exp(-0.5 * (log10(lr / lr*(b)) / lr_width) ** 2) + o(config)
      tau'    = tau * clip(sqrt(lr*(b) / lr), 0.5, 10)   (a small lr converges slowly)
      v(t)    = a_inf + (start - a_inf) * g(t),   g = (1 + t / tau') ** -rate  (power_law)
                                                   or exp(-t / tau')       (exponential)
      report  = clip(v(t) + N(0, noise), clip_low, clip_high)

  ``o(config)`` is a fixed offset in [-config_spread, config_spread] from a stable hash of the
  config's other hyperparameters (optimizer, activation...), so they matter too. Works for metrics
  to maximise (start < best) and to minimise (start > best). ``models`` overrides any of these per
  workload model.

Randomness comes only from ``numpy.random.default_rng([seed, trial_seed])``: the same scenario seed
and trial seed give the same curve, whatever the order trials are simulated in.
"""
from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from hypersack.errors import ConfigError
from hypersack.validation import check_number, check_positive, is_finite

__all__ = ["Curve", "CurveModel", "ParametricCurves", "ReplayCurves", "curves_from_dict"]


class Curve:
    """Metrics per step of one trial; noise is drawn in step order, so ``at`` is order-free."""

    def __init__(self, values: Any, metric: str, noise: float, rng: np.random.Generator,
                 clip: tuple[float, float] | None, extra: Any = None):
        self._values = values          # callable step -> mean value of ``metric``
        self._extra = extra            # callable step -> other metrics (replay) or None
        self.metric = metric
        self._noise = noise
        self._rng = rng
        self._drawn: list[float] = []
        self._clip = clip

    def at(self, step: int) -> dict[str, float]:
        value = float(self._values(step))
        if self._noise > 0:
            while len(self._drawn) < step:
                self._drawn.extend(self._rng.normal(0.0, self._noise, size=16).tolist())
            value += self._drawn[step - 1]
        if self._clip is not None:
            value = min(self._clip[1], max(self._clip[0], value))
        out = dict(self._extra(step)) if self._extra is not None else {}
        out[self.metric] = value
        return out


class CurveModel:
    """Base: ``curve(config, trial_seed)``; ``describe()`` for reports."""
    metric: str = "accuracy"

    def curve(self, config: Mapping[str, Any], trial_seed: int) -> Curve:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


# ---- parametric ---------------------------------------------------------------------------

@dataclass(frozen=True)
class CurveParams:
    """One model's parametric curve (see the module docstring)."""
    start: float = 0.1
    best: float = 0.9
    worst: float = 0.1
    lr_optimum: float = 0.01
    lr_width: float = 1.0
    batch_ref: float | None = None
    tau: float = 3.0
    rate: float = 1.0
    config_spread: float = 0.01

    def __post_init__(self) -> None:
        for name in ("lr_optimum", "lr_width", "tau", "rate"):
            check_positive(f"curves.{name}", getattr(self, name))
        for name in ("start", "best", "worst", "config_spread"):
            check_number(f"curves.{name}", getattr(self, name))
        if self.batch_ref is not None:
            check_positive("curves.batch_ref", self.batch_ref)


_PARAM_FIELDS = {f.name for f in fields(CurveParams)}


class ParametricCurves(CurveModel):
    def __init__(self, metric: str, params: CurveParams, *, family: str = "power_law",
                 noise: float = 0.0, clip: tuple[float, float] | None = None, seed: int = 0,
                 lr_key: str = "lr", batch_size_key: str | None = None, model_key: str | None = None,
                 models: Mapping[str, CurveParams] | None = None):
        if family not in ("power_law", "exponential"):
            raise ConfigError("curves.family", family, "must be 'power_law' or 'exponential'")
        check_number("curves.noise", noise, low=0.0)
        self.metric, self.params, self.family, self.noise = metric, params, family, float(noise)
        self.clip, self.seed, self.lr_key = clip, seed, lr_key
        self.batch_size_key, self.model_key = batch_size_key, model_key
        self.models = dict(models or {})

    def params_for(self, config: Mapping[str, Any]) -> CurveParams:
        if self.model_key is not None:
            return self.models.get(str(config.get(self.model_key)), self.params)
        return self.params

    def asymptote(self, config: Mapping[str, Any]) -> float:
        """a_inf of the module docstring (the value a trial converges to, without noise)."""
        p = self.params_for(config)
        lr = config.get(self.lr_key)
        quality = 1.0
        if is_finite(lr) and lr > 0:
            distance = math.log10(lr / self._lr_star(config, p)) / p.lr_width
            quality = math.exp(-0.5 * distance * distance)
        return p.worst + (p.best - p.worst) * quality + p.config_spread * _config_offset(config, self.lr_key)

    def _lr_star(self, config: Mapping[str, Any], p: CurveParams) -> float:
        batch = config.get(self.batch_size_key) if self.batch_size_key else None
        if p.batch_ref is not None and is_finite(batch) and batch > 0:
            return p.lr_optimum * batch / p.batch_ref
        return p.lr_optimum

    def curve(self, config: Mapping[str, Any], trial_seed: int) -> Curve:
        p = self.params_for(config)
        a_inf = self.asymptote(config)
        lr = config.get(self.lr_key)
        slow = math.sqrt(self._lr_star(config, p) / lr) if is_finite(lr) and lr > 0 else 1.0
        tau = p.tau * min(10.0, max(0.5, slow))
        if self.family == "power_law":
            def values(t: int) -> float:
                return a_inf + (p.start - a_inf) * (1.0 + t / tau) ** (-p.rate)
        else:
            def values(t: int) -> float:
                return a_inf + (p.start - a_inf) * math.exp(-t / tau)
        rng = np.random.default_rng([self.seed, int(trial_seed)])
        return Curve(values, self.metric, self.noise, rng, self.clip)

    def describe(self) -> str:
        return f"parametric {self.family} curves of {self.metric} (noise sd {self.noise:g})"


def _config_offset(config: Mapping[str, Any], skip: str) -> float:
    """A stable pseudo-random number in [-1, 1] from the config's items other than ``skip``."""
    items = sorted((k, repr(v)) for k, v in config.items() if k != skip)
    if not items:
        return 0.0
    return zlib.crc32(repr(items).encode()) / 0xFFFFFFFF * 2.0 - 1.0


# ---- replay ---------------------------------------------------------------------------------

class ReplayCurves(CurveModel):
    """Replays recorded curves: ``{"metric", "curves": [{"config", "reports": [{step, ...}]}]}``."""

    def __init__(self, recorded: Mapping[str, Any], *, metric: str | None = None,
                 noise: float = 0.0, seed: int = 0, source: str = "recorded curves"):
        curves = recorded.get("curves") if isinstance(recorded, Mapping) else None
        if not isinstance(curves, list) or not curves:
            raise ConfigError("curves.file", source, "must hold a non-empty 'curves' list")
        self.metric = metric or str(recorded.get("metric", "accuracy"))
        for i, c in enumerate(curves):
            if not c.get("reports") or self.metric not in c["reports"][0]:
                raise ConfigError(f"curves.file[{i}]", source, f"must have reports of {self.metric!r}")
        self._configs = [dict(c["config"]) for c in curves]
        self._reports = [list(c["reports"]) for c in curves]
        self.noise, self.seed, self.source = float(noise), seed, source
        self._scales = _key_scales(self._configs)
        self._match: dict[str, int] = {}

    @classmethod
    def from_file(cls, path: str | Path, **kw: Any) -> "ReplayCurves":
        try:
            recorded = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError("curves.file", str(path), f"must be a readable JSON file ({exc})") from None
        return cls(recorded, source=str(path), **kw)

    def nearest(self, config: Mapping[str, Any]) -> int:
        """Index of the recorded curve whose config is nearest to ``config``."""
        key = repr(sorted((k, repr(v)) for k, v in config.items()))
        hit = self._match.get(key)
        if hit is None:
            hit = min(range(len(self._configs)),
                      key=lambda i: (_distance(config, self._configs[i], self._scales), i))
            self._match[key] = hit
        return hit

    def curve(self, config: Mapping[str, Any], trial_seed: int) -> Curve:
        reports = self._reports[self.nearest(config)]
        metric = self.metric

        def row(step: int) -> Mapping[str, Any]:
            return reports[min(max(step, 1), len(reports)) - 1]

        def extra(step: int) -> dict[str, float]:
            return {k: float(v) for k, v in row(step).items() if k not in ("step", metric)}
        rng = np.random.default_rng([self.seed, int(trial_seed)])
        return Curve(lambda s: row(s)[metric], metric, self.noise, rng, None, extra)

    def describe(self) -> str:
        return f"replay of {len(self._configs)} recorded curves ({self.source})"


def _key_scales(configs: Sequence[Mapping[str, Any]]) -> dict[str, tuple[bool, float]]:
    """Per key: (compare in log space, range) over the recorded configs; absent for categories."""
    scales: dict[str, tuple[bool, float]] = {}
    keys = set().union(*(c.keys() for c in configs))
    for key in keys:
        values = [v for v in (c.get(key) for c in configs) if is_finite(v)]
        if len(values) == len(configs):
            log = all(v > 0 for v in values)
            xs = [math.log(v) if log else float(v) for v in values]
            scales[key] = (log, (max(xs) - min(xs)) or 1.0)
    return scales


def _distance(a: Mapping[str, Any], b: Mapping[str, Any], scales: Mapping[str, tuple[bool, float]]) -> float:
    total = 0.0
    for key, vb in b.items():
        va = a.get(key)
        if key in scales and is_finite(va):
            log, span = scales[key]
            xa = math.log(va) if log and va > 0 else float(va)
            xb = math.log(vb) if log else float(vb)
            total += ((xa - xb) / span) ** 2
        else:
            total += 0.0 if va == vb else 1.0
    return total


# ---- from a scenario ----------------------------------------------------------------------

_COMMON = {"type", "metric", "noise", "seed"}
_PARAMETRIC = _COMMON | _PARAM_FIELDS | {"family", "clip", "lr_key", "batch_size_key", "models"}
_REPLAY = _COMMON | {"file"}


def curves_from_dict(d: Mapping[str, Any], *, base_dir: Path = Path("."), seed: int = 0,
                     model_key: str | None = None, batch_size_key: str | None = None) -> CurveModel:
    """The ``curves`` section of a scenario; relative ``file`` paths are read from ``base_dir``."""
    if not isinstance(d, Mapping) or d.get("type") not in ("parametric", "replay"):
        raise ConfigError("curves.type", d.get("type") if isinstance(d, Mapping) else d,
                          "must be 'parametric' or 'replay'")
    allowed = _PARAMETRIC if d["type"] == "parametric" else _REPLAY
    for key in d:
        if key not in allowed:
            raise ConfigError(f"curves.{key}", d[key], f"is not a known field (known: {', '.join(sorted(allowed))})")
    seed = d.get("seed", seed)
    if d["type"] == "replay":
        if "file" not in d:
            raise ConfigError("curves.file", None, "is required for replay curves")
        path = Path(d["file"])
        return ReplayCurves.from_file(path if path.is_absolute() else base_dir / path,
                                      metric=d.get("metric"), noise=d.get("noise", 0.0), seed=seed)
    base = CurveParams(**{k: d[k] for k in _PARAM_FIELDS if k in d})
    models = {}
    for name, overrides in (d.get("models") or {}).items():
        unknown = sorted(set(overrides) - _PARAM_FIELDS)
        if unknown:
            raise ConfigError(f"curves.models.{name}.{unknown[0]}", overrides[unknown[0]],
                              f"is not a curve parameter (known: {', '.join(sorted(_PARAM_FIELDS))})")
        models[str(name)] = replace(base, **overrides)
    clip = d.get("clip")
    if clip is not None and (not isinstance(clip, (list, tuple)) or len(clip) != 2
                             or not all(is_finite(c) for c in clip) or clip[0] >= clip[1]):
        raise ConfigError("curves.clip", clip, "must be [low, high] with low < high")
    return ParametricCurves(d.get("metric", "accuracy"), base, family=d.get("family", "power_law"),
                            noise=d.get("noise", 0.0), clip=tuple(clip) if clip else None, seed=seed,
                            lr_key=d.get("lr_key", "lr"),
                            batch_size_key=d.get("batch_size_key", batch_size_key),
                            model_key=model_key, models=models)
