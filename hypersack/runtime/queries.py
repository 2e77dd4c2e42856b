"""Read-side views of a stored study, shared by the Python API and the CLI."""
from __future__ import annotations

import csv
import io
import json
from typing import Any

from hypersack.core.controller import best_record
from hypersack.core.objective import Objective
from hypersack.core.trial import TrialRecord
from hypersack.runtime.storage import Storage

__all__ = ["best_trial", "status", "export"]


def _objective(storage: Storage, name: str) -> tuple[int, Objective]:
    row = storage.get_study(name)
    return row.study_id, Objective.parse(row.spec["objective"])


def best_trial(storage: Storage, name: str) -> dict[str, Any] | None:
    """``{"trial_id", "config", "metric", "value", "step", "state"}`` of the best trial, or None:
    the best last reported value of any trial that did not fail (``Controller.best``);
    ``step`` is the step of that value, ``state`` the trial's state."""
    study_id, objective = _objective(storage, name)
    best = best_record(sorted(storage.load_trials(study_id), key=lambda t: t.trial_id), objective)
    if best is None:
        return None
    return {"trial_id": best.trial_id, "config": best.config, "metric": objective.metric,
            "value": best.value, "step": best.last_step, "state": best.state.value}


def trial_dict(t: TrialRecord) -> dict[str, Any]:
    return {"trial_id": t.trial_id, "state": t.state.value, "config": t.config, "value": t.value,
            "last_step": t.last_step, "metrics": t.metrics, "attempts": t.attempts,
            "retries": t.retries, "device": t.device, "error": t.error, "traceback": t.traceback,
            "checkpoint": t.checkpoint, "started_at": t.started_at, "finished_at": t.finished_at,
            "time_sharing": t.info.get("time_sharing")}


def status(storage: Storage, name: str) -> dict[str, Any]:
    """Counts by state (``complete``, ``running``, ``paused``, ``pending``, ``pruned``, ``failed``), the study's
    status (``Storage.shown_status``: running only while a live driver runs it), the best trial
    and every trial."""
    row = storage.get_study(name)
    trials = storage.load_trials(row.study_id)
    return {"name": name, "status": storage.shown_status(row.study_id, row.status),
            **storage.counts(row.study_id),
            "total": len(trials), "best": best_trial(storage, name),
            "trials": [trial_dict(t) for t in trials]}


def export(storage: Storage, name: str, fmt: str) -> str:
    """Every trial (json: with all its reported results) or one row per trial (csv)."""
    row = storage.get_study(name)
    trials = storage.load_trials(row.study_id)
    if fmt == "json":
        results = storage.load_results(row.study_id)
        by_trial: dict[int, list] = {}
        for r in results:
            by_trial.setdefault(r.pop("trial_id"), []).append(r)
        payload = {"study": name, "spec": row.spec, "status": row.status,
                   "trials": [{**trial_dict(t), "results": by_trial.get(t.trial_id, [])} for t in trials]}
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
