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
from typing import Any, Mapping

from hypersack.core.objective import Objective
from hypersack.core.stays import Stay
from hypersack.report import series

__all__ = ["StudyData", "from_storage", "from_simulation", "payload"]

_TRACEBACK_CHARS = 4000       # a traceback longer than this keeps its end (where the error is)


@dataclass
class StudyData:
    """One study's facts. ``results``: ``(trial_id, step, t, metrics)`` with ``t`` the wall
    (or simulated) time of the report, None where unknown; ``trials``: ``queries.trial_dict``
    rows plus ``info``; ``now``: where open stays end (a running study: the present)."""
    name: str
    status: str
    objective: Objective
    trials: list[dict[str, Any]]
    results: list[tuple[int, int, float | None, Mapping[str, Any]]]
    stays: list[Stay]
    samples: list[dict[str, Any]] = field(default_factory=list)
    now: float | None = None
    source: str = "store"
    extra: dict[str, Any] = field(default_factory=dict)


def from_storage(storage: Any, name: str, now: float | None = None) -> StudyData:
    """The study ``name`` from a ``Storage`` (opened read-only by the caller is enough)."""
    from hypersack.runtime.queries import trial_dict
    row = storage.get_study(name)
    trials = []
    for t in storage.load_trials(row.study_id):
        d = trial_dict(t)
        d["pack"] = t.info.get("pack")
        trials.append(d)
    results = storage.load_result_times(row.study_id)
    if now is None:
        now = time.time() if row.status == "running" else row.updated_at
    return StudyData(name, row.status, Objective.parse(row.spec["objective"]), trials,
                     results, storage.load_stays(row.study_id), storage.load_samples(row.study_id),
                     now=now, source="store")


def from_simulation(result: Any, store: Any) -> StudyData:
    """A finished simulation (``sim.run.simulate`` with ``keep_results``): its controller's
    trials, the memory store's results (no report times: the trial's end stands in) and stays."""
    from hypersack.runtime.queries import trial_dict
    controller = result.controller
    trials = []
    for record in controller.trials.values():
        d = trial_dict(record)
        d["pack"] = record.info.get("pack")
        trials.append(d)
    results = [(tid, step, None, m) for tid, step, m in store.results]
    return StudyData(result.scenario, "complete", controller.objective, trials, results,
                     store.load_stays(1), [], now=result.makespan_s, source="simulation",
                     extra={"policy": result.policy, "algorithm": result.algorithm,
                            "makespan_s": result.makespan_s})


def _r(x: float | None) -> float | None:
    """``x`` to 5 significant digits (None and non-finite: None)."""
    if x is None or not math.isfinite(x):
        return None
    return float(f"{x:.5g}")


def _origin(data: StudyData) -> float:
    starts = [s.start for s in data.stays] + [t["started_at"] for t in data.trials if t["started_at"]]
    return min(starts) if starts else 0.0


def _reached_at(data: StudyData) -> dict[int, float]:
    """When each trial reached its current value: its end, else its last report's time."""
    last: dict[int, float] = {}
    for trial_id, _step, t, _m in data.results:
        if t is not None:
            last[trial_id] = t
    out = {}
    for t in data.trials:
        at = t["finished_at"] if t["finished_at"] is not None else last.get(t["trial_id"])
        if at is not None:
            out[t["trial_id"]] = at
    return out


def payload(data: StudyData, *, per_curve: int = 60, total_points: int = 80_000) -> dict[str, Any]:
    """The JSON-ready views of one study (see the module doc)."""
    origin = _origin(data)
    now = (data.now if data.now is not None else origin) - origin
    metric, mode = data.objective.metric, data.objective.mode
    reached = _reached_at(data)
    valued = [t for t in data.trials if t["value"] is not None and t["state"] != "failed"]
    points = [(reached[t["trial_id"]] - origin, t["value"], t["trial_id"])
              for t in valued if t["trial_id"] in reached]
    best = series.best_so_far(points, mode)
    stays = data.stays
    bars = series.lanes(stays, now + origin)
    occ = series.occupancy(stays, now + origin)
    curves = series.learning_curves(((tid, step, m) for tid, step, _t, m in data.results), metric,
                                    per_curve=per_curve, total=total_points)
    scores, method = series.importance([t["config"] for t in valued], [t["value"] for t in valued])
    return {
        "name": data.name, "status": data.status, "metric": metric, "mode": mode,
        "source": data.source, "extra": data.extra, "now": _r(now),
        "summary": _summary(data, valued, occ, origin, now),
        "best": _columns(best, ("t", "v", "id"), origin=0.0),
        "points": {"t": [_r(p[0]) for p in points], "v": [_r(p[1]) for p in points],
                   "id": [p[2] for p in points]},
        "curves": _curves(curves, data),
        "lanes": _lanes(bars, origin),
        "occupancy": {d: [[_r(t - origin) for t in ts], [_r(v) for v in vs]]
                      for d, (ts, vs) in occ.items()},
        "utilization": _utilization(data.samples, origin),
        "importance": {"method": method, "scores": {k: _r(v) for k, v in scores.items()}},
        "parallel": _parallel(valued, metric),
        "table": _table(data.trials, origin),
    }


def _summary(data: StudyData, valued: list[dict], occ: Mapping, origin: float,
             now: float) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for t in data.trials:
        counts[t["state"]] = counts.get(t["state"], 0) + 1
    sign = data.objective.sign()
    best = max(valued, key=lambda t: (sign * t["value"], -t["trial_id"]), default=None)
    mean = series.occupancy_mean(occ, 0.0 + origin, now + origin) if now > 0 else {}
    return {"trials": len(data.trials), "counts": counts, "duration_s": _r(now),
            "devices": len(occ), "stays": len(data.stays),
            "mean_occupancy": _r(sum(mean.values()) / len(mean)) if mean else None,
            "best": None if best is None else {"trial_id": best["trial_id"], "value": best["value"],
                                               "config": best["config"], "state": best["state"]}}


def _columns(rows: list[tuple], names: tuple[str, ...], origin: float) -> dict[str, list]:
    out: dict[str, list] = {n: [] for n in names}
    for row in rows:
        for n, x in zip(names, row):
            out[n].append(_r(x - origin) if n == "t" else (_r(x) if isinstance(x, float) else x))
    return out


def _curves(curves: Mapping[int, tuple[list[float], list[float]]], data: StudyData) -> list[dict]:
    state = {t["trial_id"]: t["state"] for t in data.trials}
    return [{"id": tid, "state": state.get(tid, "running"), "x": [_r(x) for x in xs],
             "y": [_r(y) for y in ys]} for tid, (xs, ys) in sorted(curves.items())]


def _lanes(bars: list[series.LaneBar], origin: float) -> dict[str, list]:
    out: dict[str, list] = {k: [] for k in ("device", "lane", "start", "end", "trial", "attempt",
                                             "outcome", "pack", "share")}
    for b in bars:
        s = b.stay
        for k, v in (("device", b.device), ("lane", b.lane), ("start", _r(b.start - origin)),
                     ("end", _r(b.end - origin)), ("trial", s.trial_id), ("attempt", s.attempt),
                     ("outcome", s.outcome.value if s.outcome else "running"),
                     ("pack", None if s.pack is None else str(s.pack)), ("share", _r(s.share))):
            out[k].append(v)
    return out


def _utilization(samples: list[dict[str, Any]], origin: float) -> dict[str, list]:
    out: dict[str, list] = {}
    for s in samples:
        ts, us = out.setdefault(f"{s['node']}/{s['gpu']}", [[], []])
        ts.append(_r(s["t"] - origin))
        us.append(_r(s["utilization"]))
    return out


def _parallel(valued: list[dict], metric: str) -> list[dict[str, Any]]:
    dims = series.parallel_coordinates([t["config"] for t in valued], [t["value"] for t in valued], metric)
    for d in dims:
        d["values"] = [_r(v) for v in d["values"]]
    return dims


def _table(trials: list[dict[str, Any]], origin: float) -> dict[str, list]:
    keys = ("id", "state", "value", "step", "attempts", "start", "duration", "config", "error",
            "traceback")
    out: dict[str, list] = {k: [] for k in keys}
    for t in trials:
        start, end = t["started_at"], t["finished_at"]
        tb = t["traceback"]
        row = (t["trial_id"], t["state"], _r(t["value"]), t["last_step"], t["attempts"],
               _r(start - origin) if start is not None else None,
               _r(end - start) if start is not None and end is not None else None,
               json.dumps(t["config"], default=str), t["error"],
               tb[-_TRACEBACK_CHARS:] if tb else None)
        for k, v in zip(keys, row):
            out[k].append(v)
    return out
