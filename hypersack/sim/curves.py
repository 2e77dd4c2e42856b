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
* :class:`FunctionCurves`: a callable ``f(config, step)`` (``curves.function: module:attr``;
  ``curves.options`` are passed to ``attr`` first to build it) whose float is the metric at that
  step (a mapping: every metric of the report): a test function with a fidelity, such as
  ``hypersack.sim.functions``, run in simulated time.
* :class:`TableCurves`: learning curves from a CSV or parquet file, one row per config and step
  (columns: the study space's parameters, ``step``, the metrics), replayed as ``ReplayCurves``
  does: a config not in the table gets the curve of its NEAREST row (the distance above), so any
  space can be searched over a table of sampled configs (Syne Tune's blackbox repository
  interpolates likewise); steps run 1..n for every config.

``model.mean(config, step)`` is the metric without the scenario's noise and
``model.best_known(mode, step)`` the best value any config reaches at ``step`` when the model
knows it (a function's ``optimum``, a table's or a recording's best row; None for parametric
curves): what the regret of ``sim.quality`` is measured against.

Randomness comes only from ``numpy.random.default_rng([seed, trial_seed])``: the same scenario seed
and trial seed give the same curve, whatever the order trials are simulated in.
"""
from __future__ import annotations

import csv
import functools
import json
import math
import zlib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from hypersack.errors import ConfigError
from hypersack.validation import (check_integer, check_number, check_positive, import_reference,
                                  is_finite)

__all__ = ["Curve", "CurveModel", "FunctionCurves", "ParametricCurves", "ReplayCurves", "TableCurves",
           "curves_from_dict"]


class Curve:
    """Metrics per step of one trial; noise is drawn in step order, so ``at`` is order-free,
    from ``numpy.random.default_rng(seed)``, made at the first draw (never without noise)."""

    def __init__(self, values: Any, metric: str, noise: float, seed: Sequence[int],
                 clip: tuple[float, float] | None, extra: Any = None, every: Any = None):
        self._values = values          # callable step -> mean value of ``metric``
        self._extra = extra            # callable step -> other metrics (replay) or None
        self._every = every            # callable step -> a fresh dict of every metric, or None
        self.metric = metric
        self._noise = noise
        self._seed = seed
        self._rng: np.random.Generator | None = None
        self._drawn: list[float] = []
        self._clip = clip

    def at(self, step: int) -> dict[str, float]:
        """The report of ``step``: the other metrics (in their order), then ``metric`` with
        its noise, clipped."""
        if self._every is not None:    # one call for every metric (a function's curve)
            out = self._every(step)
            value = float(out.pop(self.metric))
            out[self.metric] = (self._noisy(value, step)
                                if self._noise > 0 or self._clip is not None else value)
            return out
        value = self._noisy(float(self._values(step)), step)
        out = dict(self._extra(step)) if self._extra is not None else {}
        out[self.metric] = value
        return out

    def _noisy(self, value: float, step: int) -> float:
        """``value`` plus this curve's noise draw of ``step``, clipped."""
        if self._noise > 0:
            if self._rng is None:
                self._rng = np.random.default_rng(self._seed)
            while len(self._drawn) < step:
                self._drawn.extend(self._rng.normal(0.0, self._noise, size=16).tolist())
            value += self._drawn[step - 1]
        if self._clip is not None:
            value = min(self._clip[1], max(self._clip[0], value))
        return value


class CurveModel:
    """Base: ``curve(config, trial_seed)``; ``describe()`` for reports."""
    metric: str = "accuracy"

    def curve(self, config: Mapping[str, Any], trial_seed: int) -> Curve:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def mean(self, config: Mapping[str, Any], step: int) -> float:
        """The metric of ``config`` at ``step`` without the scenario's noise."""
        return float(self.curve(config, 0)._values(step))

    def best_known(self, mode: str, step: int) -> float | None:
        """The best value (``mode`` "min" or "max") any config reaches at ``step``, when the
        model knows it; None when it does not."""
        return None


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
        seed = [self.seed, int(trial_seed)]
        return Curve(values, self.metric, self.noise, seed, self.clip)

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
        self._index = _NearestIndex(self._configs, self._scales)
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
            hit = self._index.nearest(config)
            self._match[key] = hit
        return hit

    def _row(self, config: Mapping[str, Any], step: int) -> Mapping[str, Any]:
        reports = self._reports[self.nearest(config)]
        return reports[min(max(step, 1), len(reports)) - 1]

    def mean(self, config: Mapping[str, Any], step: int) -> float:
        return float(self._row(config, step)[self.metric])

    def best_known(self, mode: str, step: int) -> float | None:
        ends = [float(r[min(max(step, 1), len(r)) - 1][self.metric]) for r in self._reports]
        return min(ends) if mode == "min" else max(ends)

    def curve(self, config: Mapping[str, Any], trial_seed: int) -> Curve:
        reports = self._reports[self.nearest(config)]
        metric = self.metric

        def row(step: int) -> Mapping[str, Any]:
            return reports[min(max(step, 1), len(reports)) - 1]

        def extra(step: int) -> dict[str, float]:
            return {k: float(v) for k, v in row(step).items() if k not in ("step", metric)}
        seed = [self.seed, int(trial_seed)]
        return Curve(lambda s: row(s)[metric], metric, self.noise, seed, None, extra)

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


class _NearestIndex:
    """The distance of a config to every recorded config at once (numpy), summed over the
    recorded config's keys: for a number of ``scales``, the squared difference (in log space when
    the scale says so) over its range, or 1 when the config's value is not a number; for any
    other key, 0 when the values are equal, else 1. The nearest is the first of the closest."""

    def __init__(self, configs: Sequence[Mapping[str, Any]], scales: Mapping[str, tuple[bool, float]]):
        self.n = len(configs)
        self.numeric: list[tuple[str, bool, float, np.ndarray]] = []
        self.categories: list[tuple[str, dict[Any, int], np.ndarray, np.ndarray]] = []
        for key in sorted(set().union(*(c.keys() for c in configs))):
            if key in scales:
                log, span = scales[key]
                xs = np.array([math.log(c[key]) if log else float(c[key]) for c in configs])
                self.numeric.append((key, log, span, xs))
            else:
                present = np.array([key in c for c in configs])
                codes: dict[Any, int] = {}
                column = np.array([codes.setdefault(_hashable(c.get(key)), len(codes))
                                   for c in configs])
                self.categories.append((key, codes, column, present))

    def nearest(self, config: Mapping[str, Any]) -> int:
        total = np.zeros(self.n)
        for key, log, span, xs in self.numeric:
            va = config.get(key)
            if is_finite(va):
                xa = math.log(va) if log and va > 0 else float(va)
                total += ((xa - xs) / span) ** 2
            else:
                total += 1.0
        for key, codes, column, present in self.categories:
            code = codes.get(_hashable(config.get(key)), -1)
            total += (column != code) & present
        return int(np.argmin(total))


def _hashable(value: Any) -> Any:
    """``value`` as a dict key that is equal where the values are (lists become tuples)."""
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)


# ---- function and table ---------------------------------------------------------------------

class FunctionCurves(CurveModel):
    """``fn(config, step)``: a float (the ``metric``) or a mapping of metrics; see the module
    docstring. ``fn.optimum``, when the callable has one, is its best value at the top step."""

    def __init__(self, fn: Any, metric: str, *, noise: float = 0.0, seed: int = 0,
                 clip: tuple[float, float] | None = None, source: str = "a function"):
        if not callable(fn):
            raise ConfigError("curves.function", source, "must name a callable (config, step) -> metrics")
        check_number("curves.noise", noise, low=0.0)
        self.fn, self.metric, self.noise, self.seed = fn, metric, float(noise), seed
        self.clip, self.source = clip, source
        optimum = getattr(fn, "optimum", None)
        self.optimum = float(optimum) if is_finite(optimum) else None

    def _metrics(self, config: Mapping[str, Any], step: int) -> dict[str, float]:
        out = self.fn(config, step)
        if type(out) is float and out - out == 0.0:      # a finite float: the common answer
            return {self.metric: out}
        if isinstance(out, Mapping):
            if self.metric not in out:
                raise ConfigError("curves.metric", self.metric,
                                  f"is not among the metrics {self.source} returns ({', '.join(map(str, out))})")
            return {str(k): float(v) for k, v in out.items()}
        if not is_finite(out):
            raise ConfigError("curves.function", self.source,
                              f"must return a finite number or a mapping of metrics, not {out!r} "
                              f"(config {dict(config)}, step {step})")
        return {self.metric: float(out)}

    def curve(self, config: Mapping[str, Any], trial_seed: int) -> Curve:
        metrics = self._metrics
        seed = [self.seed, int(trial_seed)]
        return Curve(lambda s: metrics(config, s)[self.metric], self.metric, self.noise, seed,
                     self.clip, every=functools.partial(metrics, config))

    def mean(self, config: Mapping[str, Any], step: int) -> float:
        return self._metrics(config, step)[self.metric]

    def best_known(self, mode: str, step: int) -> float | None:
        return self.optimum

    def describe(self) -> str:
        return f"function {self.source} as {self.metric} (noise sd {self.noise:g})"


class TableCurves(ReplayCurves):
    """Learning curves from a table (module docstring); nearest row for configs not in it."""

    @classmethod
    def from_table(cls, path: str | Path, config_keys: Sequence[str], *, metric: str,
                   step_column: str = "step", **kw: Any) -> "TableCurves":
        rows = _read_table(Path(path))
        return cls(_curves_from_rows(rows, str(path), list(config_keys), metric, step_column),
                   metric=metric, source=str(path), **kw)

    def describe(self) -> str:
        return f"table of {len(self._configs)} learning curves ({self.source}, nearest row)"


def _read_table(path: Path) -> list[dict[str, Any]]:
    """Rows of a CSV (numbers parsed; the rest kept as text) or parquet file (needs pyarrow)."""
    if path.suffix.lower() in (".parquet", ".pq"):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ConfigError("curves.file", str(path), "is parquet, which needs pyarrow "
                              "(pip install pyarrow), or give a CSV file") from None
        try:
            return list(pq.read_table(path).to_pylist())
        except (OSError, ValueError) as exc:
            raise ConfigError("curves.file", str(path), f"must be a readable parquet file ({exc})") from None
    try:
        with path.open(newline="") as handle:
            return [{k: _cell(v) for k, v in row.items()} for row in csv.DictReader(handle)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError("curves.file", str(path), f"must be a readable CSV file ({exc})") from None


def _cell(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _curves_from_rows(rows: list[dict[str, Any]], source: str, config_keys: list[str],
                      metric: str, step_column: str) -> dict[str, Any]:
    """``ReplayCurves``' form: one curve per distinct config, its reports in step order."""
    if not rows:
        raise ConfigError("curves.file", source, "must hold at least one row")
    for column in [step_column, metric, *config_keys]:
        if column not in rows[0]:
            raise ConfigError("curves.file", source, f"must have a column {column!r} "
                              f"(its columns: {', '.join(map(str, rows[0]))})")
    groups: dict[tuple[Any, ...], list[tuple[int, dict[str, Any]]]] = {}
    for i, row in enumerate(rows):
        step = row[step_column]
        if not isinstance(step, int) or isinstance(step, bool) or step < 1 or not is_finite(row[metric]):
            raise ConfigError(f"curves.file[{i}]", {step_column: step, metric: row[metric]},
                              f"must have an integer {step_column} >= 1 and a number {metric} ({source})")
        key = tuple(_hashable(row[k]) for k in config_keys)
        groups.setdefault(key, []).append((step, row))
    curves = []
    for key, steps in groups.items():
        steps.sort(key=lambda item: item[0])
        if [s for s, _ in steps] != list(range(1, len(steps) + 1)):
            raise ConfigError("curves.file", source, f"must have steps 1..n for each config; the config "
                              f"{dict(zip(config_keys, key))} has steps {[s for s, _ in steps][:10]}")
        config = {k: steps[0][1][k] for k in config_keys}
        reports = [{k: v for k, v in row.items() if k not in config_keys} for _, row in steps]
        curves.append({"config": config, "reports": reports})
    return {"metric": metric, "curves": curves}


# ---- from a scenario ----------------------------------------------------------------------

_COMMON = {"type", "metric", "noise", "seed"}
_PARAMETRIC = _COMMON | _PARAM_FIELDS | {"family", "clip", "lr_key", "batch_size_key", "models"}
_REPLAY = _COMMON | {"file"}
_ALLOWED = {"parametric": _PARAMETRIC, "replay": _REPLAY,
            "function": _COMMON | {"function", "options", "clip"},
            "table": _COMMON | {"file", "step_column"}}


def curves_from_dict(d: Mapping[str, Any], *, base_dir: Path = Path("."), seed: int = 0,
                     model_key: str | None = None, batch_size_key: str | None = None,
                     objective_metric: str | None = None,
                     config_keys: Sequence[str] = ()) -> CurveModel:
    """The ``curves`` section of a scenario; relative ``file`` paths are read from ``base_dir``.
    ``objective_metric`` is the metric of function and table curves unless ``metric`` is given;
    ``config_keys`` (the study space's parameters) are a table's config columns."""
    if not isinstance(d, Mapping) or d.get("type") not in _ALLOWED:
        raise ConfigError("curves.type", d.get("type") if isinstance(d, Mapping) else d,
                          f"must be one of {', '.join(repr(t) for t in _ALLOWED)}")
    allowed = _ALLOWED[d["type"]]
    for key in d:
        if key not in allowed:
            raise ConfigError(f"curves.{key}", d[key], f"is not a known field (known: {', '.join(sorted(allowed))})")
    seed = d.get("seed", seed)
    check_integer("curves.seed", seed, low=0)
    if d["type"] in ("replay", "table"):
        if "file" not in d:
            raise ConfigError("curves.file", None, f"is required for {d['type']} curves")
        path = Path(d["file"])
        path = path if path.is_absolute() else base_dir / path
        if d["type"] == "table":
            return TableCurves.from_table(path, config_keys, metric=d.get("metric", objective_metric or "accuracy"),
                                          step_column=d.get("step_column", "step"),
                                          noise=d.get("noise", 0.0), seed=seed)
        return ReplayCurves.from_file(path, metric=d.get("metric"), noise=d.get("noise", 0.0), seed=seed)
    if d["type"] == "function":
        return _function_curves(d, seed, objective_metric)
    return _parametric_curves(d, seed, model_key, batch_size_key)


def _function_curves(d: Mapping[str, Any], seed: int, objective_metric: str | None) -> FunctionCurves:
    if "function" not in d:
        raise ConfigError("curves.function", None, "is required for function curves ('module:attr')")
    fn = import_reference("curves.function", d["function"])
    options = d.get("options")
    if options is not None:
        if not isinstance(options, Mapping):
            raise ConfigError("curves.options", options, "must be a mapping of keyword arguments")
        try:
            fn = fn(**options)
        except (TypeError, ValueError) as exc:
            raise ConfigError("curves.options", dict(options),
                              f"are not accepted by {d['function']} ({exc})") from None
    return FunctionCurves(fn, str(d.get("metric", objective_metric or "accuracy")),
                          noise=d.get("noise", 0.0), seed=seed, clip=_clip(d.get("clip")),
                          source=str(d["function"]))


def _clip(clip: Any) -> tuple[float, float] | None:
    if clip is not None and (not isinstance(clip, (list, tuple)) or len(clip) != 2
                             or not all(is_finite(c) for c in clip) or clip[0] >= clip[1]):
        raise ConfigError("curves.clip", clip, "must be [low, high] with low < high")
    return (float(clip[0]), float(clip[1])) if clip is not None else None


def _parametric_curves(d: Mapping[str, Any], seed: int, model_key: str | None,
                       batch_size_key: str | None) -> ParametricCurves:
    base = CurveParams(**{k: d[k] for k in _PARAM_FIELDS if k in d})
    models = {}
    for name, overrides in (d.get("models") or {}).items():
        unknown = sorted(set(overrides) - _PARAM_FIELDS)
        if unknown:
            raise ConfigError(f"curves.models.{name}.{unknown[0]}", overrides[unknown[0]],
                              f"is not a curve parameter (known: {', '.join(sorted(_PARAM_FIELDS))})")
        models[str(name)] = replace(base, **overrides)
    return ParametricCurves(d.get("metric", "accuracy"), base, family=d.get("family", "power_law"),
                            noise=d.get("noise", 0.0), clip=_clip(d.get("clip")), seed=seed,
                            lr_key=d.get("lr_key", "lr"),
                            batch_size_key=d.get("batch_size_key", batch_size_key),
                            model_key=model_key, models=models)
