"""Read-side views of a stored study, shared by the Python API and the CLI."""
from __future__ import annotations

import csv
import io
import json
import time
from typing import Any

from hypersack.core.controller import best_record
from hypersack.core.objective import Objective
from hypersack.core.stays import TrialTimes, trial_times
from hypersack.core.trial import TrialRecord
from hypersack.runtime.storage.sqlite import Storage

__all__ = ["best_trial", "status", "export"]


def _objective(storage: Storage, name: str) -> tuple[int, Objective]:
    row = storage.get_study(name)
    return row.study_id, Objective.parse(row.spec["objective"])


def best_trial(storage: Storage, name: str, complete: bool = False) -> dict[str, Any] | None:
    """``{"trial_id", "config", "metric", "value", "step", "state"}`` of the best trial, or None:
    the best last reported value of any trial that did not fail (``Controller.best``), or with
    ``complete`` of the COMPLETE trials only; ``step`` is the step of that value, ``state`` the
    trial's state."""
    study_id, objective = _objective(storage, name)
    trials = sorted(storage.load_trials(study_id), key=lambda t: t.trial_id)
    return _best_dict(best_record(trials, objective, complete=complete), objective)


def _best_dict(best: TrialRecord | None, objective: Objective) -> dict[str, Any] | None:
    if best is None:
        return None
    return {"trial_id": best.trial_id, "config": best.config, "metric": objective.metric,
            "value": best.value, "step": best.last_step, "state": best.state.value}


def trial_dict(t: TrialRecord, times: TrialTimes | None = None) -> dict[str, Any]:
    """A trial as plain data. ``started_at`` is its last attempt's launch; with ``times``
    (``core.stays.trial_times``): ``first_started_at``, ``running_s`` (summed over attempts)
    and ``waiting_s`` (paused, preempted, queued), else None."""
    return {"trial_id": t.trial_id, "state": t.state.value, "config": t.config, "value": t.value,
            "last_step": t.last_step, "metrics": t.metrics, "attempts": t.attempts,
            "retries": t.retries, "device": t.device, "error": t.error, "traceback": t.traceback,
            "checkpoint": t.checkpoint, "started_at": t.started_at, "finished_at": t.finished_at,
            "first_started_at": times.first_start if times else None,
            "running_s": times.running_s if times else None,
            "waiting_s": times.waiting_s if times else None,
            "time_sharing": t.info.get("time_sharing")}


def times_of(storage: Storage, study_id: int, trials: list[TrialRecord],
             now: float) -> dict[int, TrialTimes]:
    """Each stored trial's first start, running and waiting time (``core.stays.trial_times``);
    ``now``: where unfinished trials and open stays end."""
    return trial_times(storage.load_stays(study_id), {t.trial_id: t.finished_at for t in trials},
                       now)


def study_now(status: str, updated_at: float) -> float:
    """Where a stored study's open times end: the present while it runs, else its last write."""
    return time.time() if status == "running" else updated_at


def status(storage: Storage, name: str) -> dict[str, Any]:
    """Counts by state (``complete``, ``running``, ``paused``, ``pending``, ``pruned``, ``failed``), the study's
    status (``Storage.shown_status``: running only while a live driver runs it), the best trial,
    the best complete trial (``best_complete``, often another in multi-fidelity studies) and every
    trial."""
    row = storage.get_study(name)
    trials = storage.load_trials(row.study_id)
    times = times_of(storage, row.study_id, trials, study_now(row.status, row.updated_at))
    return {"name": name, "status": storage.shown_status(row.study_id, row.status),
            **storage.counts(row.study_id),
            "total": len(trials), "best": best_trial(storage, name),
            "best_complete": best_trial(storage, name, complete=True),
            "trials": [trial_dict(t, times.get(t.trial_id)) for t in trials]}


def export(storage: Storage, name: str, fmt: str) -> str:
    """Every trial (json: with all its reported results) or one row per trial (csv)."""
    row = storage.get_study(name)
    trials = storage.load_trials(row.study_id)
    if fmt == "json":
        results = storage.load_results(row.study_id)
        by_trial: dict[int, list] = {}
        for r in results:
            by_trial.setdefault(r.pop("trial_id"), []).append(r)
        times = times_of(storage, row.study_id, trials, study_now(row.status, row.updated_at))
        payload = {"study": name, "spec": row.spec, "status": row.status,
                   "trials": [{**trial_dict(t, times.get(t.trial_id)),
                               "results": by_trial.get(t.trial_id, [])} for t in trials]}
        return json.dumps(payload, indent=2)
    if fmt == "csv":
        params = sorted({k for t in trials for k in t.config})
        metrics = sorted({k for t in trials for k in t.metrics})
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["trial_id", "state", "value", "last_step", "attempts", "error",
                         *[f"config.{p}" for p in params], *[f"metric.{m}" for m in metrics]])
        for t in trials:
            writer.writerow([t.trial_id, t.state.value, t.value, t.last_step, t.attempts, t.error or "",
                             *[t.config.get(p) for p in params], *[t.metrics.get(m) for m in metrics]])
        return out.getvalue()
    from hypersack.errors import ConfigError
    raise ConfigError("--format", fmt, "must be 'csv', 'json' or 'parquet'")
