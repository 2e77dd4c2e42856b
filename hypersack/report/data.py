"""What a report shows of one study, gathered from a store or a simulation, as plain JSON data.

``StudyData`` holds the study's facts (trials, results with their times, stays, utilisation
samples); ``payload(data)`` turns them into the series the page draws (``series`` does the
computing). The same payload feeds the HTML report and the live dashboard.

Times in a payload are seconds since the study's first launch; numbers are rounded to 5
significant digits (the page draws them, nobody reads 17 digits), so 10,000 trials stay small.
"""
from __future__ import annotations

import json

import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from hypersack.core.objective import Objective
from hypersack.core.pareto import pareto_front
from hypersack.core.stays import Stay, began_times, trial_times
from hypersack.report import series

__all__ = ["StudyData", "from_storage", "from_simulation", "payload"]

_TRACEBACK_CHARS = 4000       # a traceback longer than this keeps its end (where the error is)
IMPORTANCE_MIN_TRIALS = 10    # fewer trials with a value: a note, not an importance chart
IMPORTANCE_ROUGH_TRIALS = 30  # fewer: the chart carries a caveat
_FINISHED = ("complete", "pruned", "failed")
METRICS_MAX_RESULTS = 20_000  # more results: the per-trial details draw the objective alone
CONTOUR_MIN_TRIALS = 5        # fewer trials with a value: a note, not a contour plot
CONTOUR_PARAMS = 4            # the contour plot pairs at most this many parameters (6 pairs)
CONTOUR_GRID = 30             # grid points per axis of a contour
EDF_MIN_TRIALS = 2            # fewer trials with a value: a note, not a distribution
_EDF_STATES = ("complete", "pruned", "paused", "running")      # the EDF's lines, in this order


@dataclass
class StudyData:
    """One study's facts. ``results``: ``(trial_id, step, t, value)`` of the objective's metric,
    ``t`` the wall (or simulated) time of the report, None where unknown; ``trials``:
    ``queries.trial_dict`` rows plus ``pack``; ``now``: where open stays end (a running study:
    the present)."""
    name: str
    status: str
    objective: Objective
    trials: list[dict[str, Any]]
    results: list[tuple[int, int, float | None, Any]]
    stays: list[Stay]
    samples: list[dict[str, Any]] = field(default_factory=list)
    now: float | None = None
    source: str = "store"
    extra: dict[str, Any] = field(default_factory=dict)
    space: dict[str, Any] = field(default_factory=dict)
    target_trials: int | None = None
    metrics: list[dict[str, Any]] | None = None
    # (trial, attempt) -> when its worker began it (``core.stays.began_times``): the timeline
    # draws the time before as the worker's start-up
    began: dict[tuple[int, int], float] = field(default_factory=dict)


def from_storage(storage: Any, name: str, now: float | None = None) -> StudyData:
    """The study ``name`` from a ``Storage`` (opened read-only by the caller is enough)."""
    from hypersack.runtime.storage.queries import trial_dict
    row = storage.get_study(name)
    status = storage.shown_status(row.study_id, row.status)    # running only while driven
    if now is None:
        now = time.time() if status == "running" else row.updated_at
    records = storage.load_trials(row.study_id)
    stays = storage.load_stays(row.study_id)
    times = trial_times(stays, {t.trial_id: t.finished_at for t in records}, now,
                        began=began_times(records))
    from hypersack.runtime.storage.user_attrs import load_attrs
    attrs = load_attrs(storage, row.study_id)
    trials = []
    for t in records:
        d = trial_dict(t, times.get(t.trial_id))
        d.update(_pack_of(t.info))
        d["user_attrs"] = attrs.get(t.trial_id, {})
        trials.append(d)
    objective = Objective.parse(row.spec["objective"])
    results = storage.load_metric(row.study_id, objective.metric)
    every = storage.load_results(row.study_id) if len(results) <= METRICS_MAX_RESULTS else None
    from hypersack.runtime.devices.job_history import read_decisions, read_fusion_choices
    return StudyData(name, status, objective, trials, results, stays,
                     storage.load_samples(row.study_id), now=now, source="store",
                     extra={"decisions": read_decisions(storage.connection, name),
                            "execution_auto": read_fusion_choices(storage.connection, name)},
                     space=dict(row.spec.get("space") or {}),
                     target_trials=(row.spec.get("budget") or {}).get("trials"), metrics=every,
                     began=began_times(records))


def from_simulation(result: Any, store: Any) -> StudyData:
    """A finished simulation (``sim.run.simulate`` with ``keep_results``): its controller's
    trials, the memory store's results (no report times: the trial's end stands in) and stays;
    its space, so log-sampled parameters get log axes as a stored study's do."""
    from hypersack.runtime.storage.queries import trial_dict
    controller = result.controller
    stays = store.load_stays(1)
    times = trial_times(stays, {t.trial_id: t.finished_at for t in controller.trials.values()},
                        result.makespan_s)
    trials = []
    for record in controller.trials.values():
        d = trial_dict(record, times.get(record.trial_id))
        d.update(_pack_of(record.info))
        trials.append(d)
    metric = controller.objective.metric
    results: list[tuple[int, int, float | None, Any]] = [
        (tid, step, None, m.get(metric)) for tid, step, m in store.results]
    return StudyData(result.scenario, "complete", controller.objective, trials, results,
                     stays, [], now=result.makespan_s, source="simulation",
                     extra={"policy": result.policy, "algorithm": result.algorithm,
                            "makespan_s": result.makespan_s}, space=dict(result.space))


def _pack_of(info: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's ``pack`` and ``seat``: the fused pack it last sat in and its seat there
    (``info["fused"]``, the controller's), else the algorithm's pack (no seat), else None."""
    fused = info.get("fused")
    if isinstance(fused, Mapping):
        return {"pack": fused.get("pack"), "seat": fused.get("seat")}
    return {"pack": info.get("pack"), "seat": None}


def _r(x: float | None) -> float | None:
    """``x`` to 5 significant digits (None and non-finite: None)."""
    if x is None or not math.isfinite(x):
        return None
    return float(f"{x:.5g}")


def _rs(xs: Sequence[Any], shift: float = 0.0) -> list[float | None]:
    """``x - shift`` for each of ``xs`` to 5 significant digits, vectorised (None and
    non-finite: None). k/10^d is the double nearest the decimal, so JSON prints it short."""
    if not len(xs):
        return []
    a = np.array([np.nan if x is None else x for x in xs], dtype=float) - shift
    ok = np.isfinite(a)
    with np.errstate(divide="ignore", invalid="ignore"):
        digits = np.where(ok & (a != 0), 4 - np.floor(np.log10(np.abs(a))), 0.0)
        digits = np.clip(digits, -300, 300)
        up = np.round(a * 10.0 ** np.maximum(digits, 0)) / 10.0 ** np.maximum(digits, 0)
        down = np.round(a / 10.0 ** np.maximum(-digits, 0)) * 10.0 ** np.maximum(-digits, 0)
    out = np.where(digits >= 0, up, down).tolist()
    return [v if good else None for v, good in zip(out, ok.tolist())]


def _origin(data: StudyData) -> float:
    """The study's first launch; with none yet, ``now`` (so the study has lasted 0 s)."""
    starts = [s.start for s in data.stays] + [t["started_at"] for t in data.trials if t["started_at"]]
    return min(starts) if starts else (data.now or 0.0)


def _reached_at(data: StudyData) -> dict[int, float]:
    """When each trial reached its current value: its end, else its last report's time."""
    last: dict[int, float] = {}
    for trial_id, _step, t, _v in data.results:
        if t is not None:
            last[trial_id] = t
    out = {}
    for trial in data.trials:
        at = trial["finished_at"] if trial["finished_at"] is not None else last.get(trial["trial_id"])
        if at is not None:
            out[trial["trial_id"]] = at
    return out


def payload(data: StudyData, *, per_curve: int = 60, total_points: int = 80_000) -> dict[str, Any]:
    """The JSON-ready views of one study (see the module doc)."""
    origin = _origin(data)
    now = (data.now if data.now is not None else origin) - origin
    metric, mode = data.objective.metric, data.objective.mode or "min"
    reached = _reached_at(data)
    valued = [t for t in data.trials if t["value"] is not None and t["state"] != "failed"]
    points = [(reached[t["trial_id"]] - origin, t["value"], t["trial_id"], t["state"])
              for t in valued if t["trial_id"] in reached]
    best = series.best_so_far([p[:3] for p in points], mode)
    stays = data.stays
    bars = series.lanes(series.pack_stays(stays), now + origin)     # a pack: one stay
    occ = series.occupancy(stays, now + origin)
    curves = series.learning_curves(((tid, step, v) for tid, step, _t, v in data.results),
                                    per_curve=per_curve, total=total_points)
    importance = _importance(valued)
    return {
        "name": data.name, "status": data.status, "metric": metric, "mode": mode,
        "source": data.source, "extra": data.extra, "now": _r(now),
        "summary": _summary(data, valued, occ, origin, now),
        "best": _columns(best, ("t", "v", "id"), origin=0.0),
        "points": {"t": _rs([p[0] for p in points]), "v": _rs([p[1] for p in points]),
                   "id": [p[2] for p in points], "state": [p[3] for p in points]},
        "curves": _curves(curves, data),
        "curves_range": _robust_range([y for _xs, ys in curves.values() for y in ys]),
        "lanes": _lanes(bars, origin, data.began),
        "occupancy": {d: [_rs(ts, origin), _rs(vs)] for d, (ts, vs) in occ.items()},
        "utilization": _utilization(data.samples, origin),
        "importance": importance,
        "parallel": _parallel(valued, metric, _log_params(data.space)),
        "devices": _devices(occ, data.samples),
        "slices": _slices(valued, _log_params(data.space)),
        "contour": _contour(valued, _log_params(data.space), importance["scores"]),
        "edf": _edf(valued),
        "table": _table(data.trials, origin),
        "metrics": _metrics(data.metrics, per_curve),
        "pareto": _pareto(data),
    }


def _pareto(data: StudyData) -> dict[str, Any] | None:
    """A multi-objective study's front view (None for one objective): its complete trials with
    every objective's value, ``x`` and ``y`` their first two objectives (``metrics``, ``modes``:
    all of them), ``front`` whether each is on the Pareto front, which weighs every objective
    (``core.pareto``); the other views draw the first objective."""
    objective = data.objective
    if not objective.is_multi:
        return None
    done = [t for t in data.trials if t["state"] == "complete" and t.get("values")]
    front = {t["trial_id"] for t in pareto_front(done, [t["values"] for t in done], objective)}
    return {"metrics": list(objective.metrics), "modes": [p.mode for p in objective.parts],
            "x": _rs([t["values"][0] for t in done]), "y": _rs([t["values"][1] for t in done]),
            "id": [t["trial_id"] for t in done], "front": [t["trial_id"] in front for t in done]}


def _summary(data: StudyData, valued: list[dict], occ: Mapping, origin: float,
             now: float) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for t in data.trials:
        counts[t["state"]] = counts.get(t["state"], 0) + 1
    sign = data.objective.sign()
    best = max(valued, key=lambda t: (sign * t["value"], -t["trial_id"]), default=None)
    full = max((t for t in valued if t["state"] == "complete"),
               key=lambda t: (sign * t["value"], -t["trial_id"]), default=None)
    mean = series.occupancy_mean(occ, 0.0 + origin, now + origin) if now > 0 else {}
    finished = sum(counts.get(k, 0) for k in _FINISHED)
    front = _front_cards(data) if data.objective.is_multi else None
    if front is not None:          # several objectives: no one best, the front instead
        best = full = None
    return {"front": front,"trials": len(data.trials), "counts": counts, "duration_s": _r(now),
            "finished": finished, "target": data.target_trials,
            "eta_s": _eta(finished, data.target_trials, now, data.status),
            "devices": len(occ), "stays": len(data.stays),
            "mean_occupancy": _r(sum(mean.values()) / len(mean)) if mean else None,
            "best": _best_card(best), "best_complete": _best_card(full)}


def _front_cards(data: StudyData) -> list[dict[str, Any]]:
    """A multi-objective study's Pareto front for the header: each front trial's id, its
    values by objective and its config, by trial id (``core.pareto``, as ``best_trials()``)."""
    objective = data.objective
    done = [t for t in data.trials if t["state"] == "complete" and t.get("values")]
    front = pareto_front(done, [t["values"] for t in done], objective)
    return [{"trial_id": t["trial_id"], "config": t["config"],
             "values": {m: _r(v) for m, v in zip(objective.metrics, t["values"])}}
            for t in sorted(front, key=lambda t: t["trial_id"])]


def _eta(finished: int, target: int | None, elapsed: float, status: str) -> float | None:
    """Seconds left at the pace so far (elapsed / finished per trial); None without a trial
    budget, before the first trial ends, or once the study is no longer running."""
    if status != "running" or not target or finished <= 0 or elapsed <= 0:
        return None
    return _r(max(0.0, elapsed / finished * (target - finished)))


CURVE_FENCE = 10.0   # values farther from the median than this many scales: off the chart


def _robust_range(values: Sequence[float]) -> dict[str, Any] | None:
    """The y-range of the learning curves that outliers (a diverged trial's loss, orders of
    magnitude off) do not squash, while slow early epochs stay in: the values within
    ``CURVE_FENCE`` scales of the median, the scale being the span of the middle 90% of the
    values or half the median's size, whichever is larger; widened by 5% each side. Returns
    ``{"linear": [lo, hi], "log": [log10 lo, log10 hi] or None (values not all positive),
    "clipped": how many values lie outside}``; None without values."""
    a = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if not len(a):
        return None
    # the 5% and 95% points are values of ``a`` (nearest rank inward): one outlier in ten
    # values does not move them
    q05, q95 = float(np.quantile(a, 0.05, method="higher")), float(np.quantile(a, 0.95, method="lower"))
    middle = float(np.median(a))
    scale = max(abs(q95 - q05), 0.5 * abs(middle)) or 1.0
    kept = a[np.abs(a - middle) <= CURVE_FENCE * scale]
    lo, hi = float(kept.min()), float(kept.max())
    pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 0.5
    out: dict[str, Any] = {"linear": [_r(lo - pad), _r(hi + pad)], "log": None,
                           "clipped": int(len(a) - len(kept))}
    if float(a.min()) > 0:
        llo, lhi = math.log10(lo), math.log10(hi)
        lpad = (lhi - llo) * 0.05 or 0.05
        out["log"] = [_r(llo - lpad), _r(lhi + lpad)]
    return out


def _best_card(t: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if t is None else {"trial_id": t["trial_id"], "value": t["value"],
                                   "config": t["config"], "state": t["state"]}


def _columns(rows: list[tuple], names: tuple[str, ...], origin: float) -> dict[str, list]:
    out: dict[str, list] = {n: [] for n in names}
    for row in rows:
        for n, x in zip(names, row):
            out[n].append(_r(x - origin) if n == "t" else (_r(x) if isinstance(x, float) else x))
    return out


def _curves(curves: Mapping[int, tuple[list[float], list[float]]], data: StudyData) -> list[dict]:
    state = {t["trial_id"]: t["state"] for t in data.trials}
    ordered = sorted(curves.items())
    flat = _rs([y for _tid, (_xs, ys) in ordered for y in ys])     # one vectorised rounding
    out, at = [], 0
    for tid, (xs, ys) in ordered:
        out.append({"id": tid, "state": state.get(tid, "running"), "x": xs, "y": flat[at:at + len(ys)]})
        at += len(ys)
    return out


def _lanes(bars: list[series.LaneBar], origin: float,
           began: Mapping[tuple[int, int], float] | None = None) -> dict[str, list]:
    """The timeline's bars as columns; ``began``: when the bar's trial began in its worker
    (None for a pack, or where unknown): the part before is the worker's start-up."""
    stays = [b.stay for b in bars]
    starts = [None if isinstance(s, series.PackStay) else (began or {}).get((s.trial_id, s.attempt))
              for s in stays]
    return {"device": [b.device for b in bars], "lane": [b.lane for b in bars],
            "start": _rs([b.start for b in bars], origin), "end": _rs([b.end for b in bars], origin),
            "trial": [s.trial_id for s in stays], "attempt": [s.attempt for s in stays],
            "outcome": [s.outcome.value if s.outcome else "running" for s in stays],
            "pack": [None if s.pack is None else str(s.pack) for s in stays],
            "members": [[m.trial_id for m in s.members] if isinstance(s, series.PackStay) else None
                        for s in stays],
            "share": _rs([s.share for s in stays]),
            "began": _rs([None if b is None else min(max(b, bar.start), bar.end)
                          for b, bar in zip(starts, bars)], origin)}


def _utilization(samples: list[dict[str, Any]], origin: float) -> dict[str, list]:
    by_device: dict[str, tuple[list, list]] = {}
    for sample in samples:
        ts, us = by_device.setdefault(f"{sample['node']}/{sample['gpu']}", ([], []))
        ts.append(sample["t"])
        us.append(sample["utilization"])
    return {d: [_rs(ts, origin), _rs(us)] for d, (ts, us) in by_device.items()}


def _importance(valued: list[dict]) -> dict[str, Any]:
    """The importance view: ``scores`` and ``method``, ``n`` (the trials with a value it is
    computed from; parameters that never vary are left out) and ``note``: below ``IMPORTANCE_MIN_TRIALS`` no scores and a note saying
    why; below ``IMPORTANCE_ROUGH_TRIALS`` scores with a caveat; else None."""
    n = len(valued)
    if n < IMPORTANCE_MIN_TRIALS:
        return {"method": "none", "scores": {}, "n": n,
                "note": f"Parameter importance needs at least {IMPORTANCE_MIN_TRIALS} trials with "
                        f"a value; this study has {n}."}
    configs = [t["config"] for t in valued]
    varied = [k for k in configs[0] if len({repr(c.get(k)) for c in configs}) > 1]   # no constants
    if not varied:
        return {"method": "none", "scores": {}, "n": n,
                "note": f"No parameter varies across the {n} trials with a value: there is "
                        "nothing to rank."}
    scores, method = series.importance([{k: c.get(k) for k in varied} for c in configs],
                                       [t["value"] for t in valued])
    note = (f"Estimated from only {n} trials: a rough guide, not a ranking."
            if n < IMPORTANCE_ROUGH_TRIALS else None)
    return {"method": method, "scores": {k: _r(v) for k, v in scores.items()}, "n": n, "note": note}


def _slices(valued: list[dict], log: list[str]) -> dict[str, dict[str, Any]]:
    out = series.slices([t["config"] for t in valued], [t["value"] for t in valued],
                        [t["trial_id"] for t in valued], log)
    for view in out.values():
        view["v"] = _rs(view["v"])
        if not view["categorical"]:
            view["x"] = _rs(view["x"])
    return out


def _contour(valued: list[dict], log: list[str], scores: Mapping[str, Any]) -> dict[str, Any]:
    """The contour plot's view: ``params`` (numeric parameters that vary, the most important
    first, at most ``CONTOUR_PARAMS``), ``log`` (per param: sampled log-uniformly, all values
    positive), ``excluded`` (parameters that are not numbers, left out), ``trials`` (``id``,
    ``v`` and per param ``x``: the dots), ``pairs`` (``_contour_pairs``), ``n`` (the trials
    with a finite value) and ``note`` (why nothing is drawn, or what is left out; else None)."""
    valued = [t for t in valued if math.isfinite(t["value"])]
    n, configs = len(valued), [t["config"] for t in valued]
    order = sorted(scores, key=lambda k: (-(scores[k] or 0.0), k))
    params, excluded = series.contour_params(configs, order, CONTOUR_PARAMS) if n else ([], [])
    left_out = (f"Parameters that are not numbers are left out (see the slice plot): "
                f"{', '.join(excluded)}." if excluded else None)
    if n < CONTOUR_MIN_TRIALS or len(params) < 2:
        why = (f"A contour plot needs at least {CONTOUR_MIN_TRIALS} trials with a value; this study "
               f"has {n}." if n < CONTOUR_MIN_TRIALS else
               f"A contour plot needs two numeric parameters that vary; this study has {len(params)}.")
        return {"params": [], "log": {}, "excluded": excluded, "n": n, "pairs": [],
                "trials": {"id": [], "v": [], "x": {}}, "note": " ".join(filter(None, (why, left_out)))}
    logs = {p: p in log and min(c[p] for c in configs) > 0 for p in params}
    return {"params": params, "log": logs, "excluded": excluded, "n": n, "note": left_out,
            "pairs": _contour_pairs(configs, [t["value"] for t in valued], params, logs),
            "trials": {"id": [t["trial_id"] for t in valued], "v": _rs([t["value"] for t in valued]),
                       "x": {p: _rs([c[p] for c in configs]) for p in params}}}


def _contour_pairs(configs: list[dict], values: list[float], params: list[str],
                   logs: Mapping[str, bool]) -> list[dict[str, Any]]:
    """``{"x", "y", "grid"}`` for every pair of ``params`` in their order (the first pair: the
    two first params); ``grid``: ``series.contour_grid`` of the pair, rounded."""
    out = []
    for i, a in enumerate(params):
        for b in params[i + 1:]:
            grid = series.contour_grid([c[a] for c in configs], [c[b] for c in configs], values,
                                       xlog=logs[a], ylog=logs[b], size=CONTOUR_GRID)
            out.append({"x": a, "y": b, "grid": {"x": _rs(grid["x"]), "y": _rs(grid["y"]),
                                                 "z": [_rs(row) for row in grid["z"]]}})
    return out


def _edf(valued: list[dict]) -> dict[str, Any]:
    """The empirical distribution of the objective, one line per state (``_EDF_STATES``
    order; a stopped trial counts with the value it reached): ``lines`` of ``{"name", "n",
    "x", "y"}`` (``series.edf``) and ``note``: below ``EDF_MIN_TRIALS`` trials with a value
    no lines and a note saying why, else None."""
    n = len(valued)
    if n < EDF_MIN_TRIALS:
        return {"lines": [], "note": f"The empirical distribution needs at least {EDF_MIN_TRIALS} "
                                     f"trials with a value; this study has {n}."}
    states = sorted({t["state"] for t in valued},
                    key=lambda s: (_EDF_STATES.index(s) if s in _EDF_STATES else len(_EDF_STATES), s))
    lines = []
    for state in states:
        xs, ys = series.edf([t["value"] for t in valued if t["state"] == state])
        if xs:
            lines.append({"name": state, "n": sum(1 for t in valued if t["state"] == state),
                          "x": _rs(xs), "y": _rs(ys)})
    return {"lines": lines, "note": None}


def _metrics(rows: list[dict[str, Any]] | None, per_curve: int) -> dict[str, Any] | None:
    """Every reported metric of each trial by step, ``{trial id (text): {metric: [steps,
    values]}}``, each curve down-sampled to ``per_curve`` points; None where the results were
    too many to embed (the page then draws the objective alone)."""
    if rows is None:
        return None
    curves: dict[str, dict[str, tuple[list, list]]] = {}
    for row in rows:
        mine = curves.setdefault(str(row["trial_id"]), {})
        for name, value in row.items():
            if name not in ("trial_id", "step") and isinstance(value, (int, float)) \
                    and not isinstance(value, bool) and math.isfinite(value):
                xs, ys = mine.setdefault(name, ([], []))
                xs.append(row["step"])
                ys.append(value)
    return {tid: {name: [list(d[0]), _rs(d[1])] for name, xy in sorted(m.items())
                  for d in [series.downsample(xy[0], xy[1], max(2, per_curve))]}
            for tid, m in curves.items()}


def _log_params(space: Mapping[str, Any]) -> list[str]:
    """The parameters the space samples log-uniformly (Float/Int with ``log: true``)."""
    return sorted(k for k, v in space.items() if isinstance(v, Mapping) and v.get("log"))


def _devices(occ: Mapping[str, Any], samples: list[dict[str, Any]]) -> dict[str, Any]:
    """What the devices are: ``kind`` "gpu", "cpu" (CPU slots, ids ``cpu<N>``) or "mixed";
    ``measured``: whether any utilisation was sampled (NVML); ``lanes``: the devices in order."""
    names = sorted(occ)
    cpu = [d for d in names if d.rsplit("/", 1)[-1].startswith("cpu")]
    kind = "gpu" if not cpu else "cpu" if len(cpu) == len(names) else "mixed"
    return {"kind": kind, "measured": bool(samples), "names": names}


def _parallel(valued: list[dict], metric: str, log: list[str]) -> list[dict[str, Any]]:
    dims = series.parallel_coordinates([t["config"] for t in valued], [t["value"] for t in valued],
                                       metric, log)
    for d in dims:
        d["values"] = _rs(d["values"])
    return dims


def _table(trials: list[dict[str, Any]], origin: float) -> dict[str, Any]:
    """Columns of the trials table; ``start``: the trial's first launch; ``running``: its time
    on devices summed over attempts; ``waiting``: the rest since its first launch (paused,
    preempted, queued); ``params``: one column per parameter (values as they are, numbers
    rounded); ``traceback`` keeps its last characters."""
    starts = [t.get("first_started_at") or t["started_at"] for t in trials]
    names = sorted({k for t in trials for k in t["config"]})
    params = {}
    for name in names:
        column = [t["config"].get(name) for t in trials]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in column)
        params[name] = _rs(column) if numeric else [None if v is None else str(v) for v in column]
    for key in sorted({k for t in trials for k in t.get("user_attrs", {})}):   # after the params
        params[f"user_attrs_{key}"] = [_attr_text(t.get("user_attrs", {}).get(key)) for t in trials]
    return {
        "id": [t["trial_id"] for t in trials], "state": [t["state"] for t in trials],
        "value": _rs([t["value"] for t in trials]), "step": [t["last_step"] for t in trials],
        "attempts": [t["attempts"] for t in trials], "resumes": [t["resumes"] for t in trials],
        "pack": [None if t.get("pack") is None else str(t["pack"]) for t in trials],
        "seat": [t.get("seat") for t in trials],
        "start": _rs(starts, origin),
        "running": _rs([t.get("running_s") for t in trials]),
        "waiting": _rs([t.get("waiting_s") for t in trials]),
        "params": params, "error": [t["error"] for t in trials],
        "traceback": [t["traceback"][-_TRACEBACK_CHARS:] if t["traceback"] else None for t in trials],
    }


def _attr_text(value: Any) -> Any:
    """A user attribute as the table shows it: numbers and text as they are, else JSON."""
    if value is None or isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return value
    return json.dumps(value)
