"""Read-side views of a stored study, shared by the Python API and the CLI."""
from __future__ import annotations

import csv
import io
import json
import time
from typing import Any

from hypersack.core.controller import best_record
from hypersack.core.objective import Objective
from hypersack.core.pareto import pareto_front
from hypersack.core.stays import began_times, TrialTimes, trial_times
from hypersack.core.timeouts import NOT_RESPONDING
from hypersack.core.trial import TrialRecord, TrialState
from hypersack.errors import ConfigError
from hypersack.runtime.storage.sqlite import Storage

__all__ = ["best_trial", "best_trials", "status", "export"]


def _objective(storage: Storage, name: str) -> tuple[int, Objective]:
    row = storage.get_study(name)
    return row.study_id, Objective.parse(row.spec["objective"])


def objective_of(storage: Storage, name: str) -> Objective:
    """The stored study's objective (a MultiObjective when it has several)."""
    return _objective(storage, name)[1]


def best_trial(storage: Storage, name: str, complete: bool = False) -> dict[str, Any] | None:
    """``{"trial_id", "config", "metric", "value", "step", "state"}`` of the best trial, or None:
    the best last reported value of any trial that did not fail (``Controller.best``), or with
    ``complete`` of the COMPLETE trials only; ``step`` is the step of that value, ``state`` the
    trial's state. ConfigError for a multi-objective study, whose best trials are a Pareto
    front (``best_trials``)."""
    study_id, objective = _objective(storage, name)
    if objective.is_multi:
        raise ConfigError("objective", objective.to_spec(), (
            f"has {len(objective.parts)} objectives ({', '.join(objective.metrics)}), so study "
            f"{name!r} has no single best trial: its best trials are the Pareto front, "
            "best_trials() in Python, `hypersack best` on the command line"))
    trials = sorted(storage.load_trials(study_id), key=lambda t: t.trial_id)
    return _best_dict(best_record(trials, objective, complete=complete), objective)


def best_trials(storage: Storage, name: str) -> list[dict[str, Any]]:
    """The Pareto front of the study's COMPLETE trials (``core.pareto``, trial id order) as
    ``{"trial_id", "config", "values": {metric: value}, "step", "state"}``; a single-objective
    study's front is its best complete trial (``best_trial(complete=True)``), or nothing."""
    study_id, objective = _objective(storage, name)
    trials = sorted(storage.load_trials(study_id), key=lambda t: t.trial_id)
    complete: list[tuple[TrialRecord, list[float]]] = []
    if not objective.is_multi:
        best = best_record(trials, objective, complete=True)
        if best is not None and best.value is not None:
            complete = [(best, [best.value])]
    else:
        complete = [(t, t.values) for t in trials
                    if t.state is TrialState.COMPLETE and t.values is not None]
    front = pareto_front([t for t, _ in complete], [v for _, v in complete], objective)
    values = {t.trial_id: v for t, v in complete}
    return [{"trial_id": t.trial_id, "config": t.config,
             "values": dict(zip(objective.metrics, values[t.trial_id])), "step": t.last_step,
             "state": t.state.value} for t in front]


def _best_dict(best: TrialRecord | None, objective: Objective) -> dict[str, Any] | None:
    if best is None:
        return None
    return {"trial_id": best.trial_id, "config": best.config, "metric": objective.metric,
            "value": best.value, "step": best.step_of_value, "state": best.state.value}


def trial_dict(t: TrialRecord, times: TrialTimes | None = None) -> dict[str, Any]:
    """A trial as plain data. ``attempts``: its first launch and each retry after a failure
    (``retries``); ``resumes``: the launches that continued it without a failure (promotion,
    preemption, resume after Ctrl-C; ``TrialRecord.tries``/``resumes``). ``started_at`` is
    its last launch; with ``times``
    (``core.stays.trial_times``): ``first_started_at``, ``running_s`` (summed over attempts,
    a new worker's start-up left out: ``startup_s``)
    and ``waiting_s`` (paused, preempted, queued), else None."""
    return {"trial_id": t.trial_id, "state": t.state.value, "config": t.config, "value": t.value,
            **({} if t.values is None else {"values": t.values}), "value_step": t.step_of_value,
            "last_step": t.last_step, "metrics": t.metrics, "attempts": t.tries,
            "retries": t.retries, "resumes": t.resumes, "device": t.device, "error": t.error,
            "traceback": t.traceback, "not_responding": t.info.get(NOT_RESPONDING),
            "checkpoint": t.checkpoint, "started_at": t.started_at, "finished_at": t.finished_at,
            "first_started_at": times.first_start if times else None,
            "running_s": times.running_s if times else None,
            "waiting_s": times.waiting_s if times else None,
            "startup_s": times.startup_s if times else None,
            "time_sharing": t.info.get("time_sharing")}


def times_of(storage: Storage, study_id: int, trials: list[TrialRecord],
             now: float) -> dict[int, TrialTimes]:
    """Each stored trial's first start, running and waiting time (``core.stays.trial_times``);
    ``now``: where unfinished trials and open stays end."""
    return trial_times(storage.load_stays(study_id), {t.trial_id: t.finished_at for t in trials},
                       now, began=began_times(trials))


def study_now(status: str, updated_at: float) -> float:
    """Where a stored study's open times end: the present while it runs, else its last write."""
    return time.time() if status == "running" else updated_at


def status(storage: Storage, name: str) -> dict[str, Any]:
    """Counts by state (``complete``, ``running``, ``paused``, ``pending``, ``pruned``, ``failed``), the study's
    status (``Storage.shown_status``: running only while a live driver runs it), the best trial,
    the best complete trial (``best_complete``, often another in multi-fidelity studies) and every
    trial. A multi-objective study has ``best`` and ``best_complete`` None and its Pareto front
    in ``best_trials`` (``best_trials``)."""
    row = storage.get_study(name)
    trials = storage.load_trials(row.study_id)
    times = times_of(storage, row.study_id, trials, study_now(row.status, row.updated_at))
    multi = Objective.parse(row.spec["objective"]).is_multi
    info = {"name": name, "status": storage.shown_status(row.study_id, row.status),
            **storage.counts(row.study_id),
            "total": len(trials), "best": None if multi else best_trial(storage, name),
            "best_complete": None if multi else best_trial(storage, name, complete=True),
            "trials": [trial_dict(t, times.get(t.trial_id)) for t in trials]}
    if multi:
        info["best_trials"] = best_trials(storage, name)
    return info


def export(storage: Storage, name: str, fmt: str) -> str:
    """Every trial (json: with all its reported results) or one row per trial (csv), from a
    store the quick check finds intact (``StorageCorruptError`` otherwise)."""
    storage.verify_integrity(f"export study {name!r}")
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
        writer.writerow(["trial_id", "state", "value", "last_step", "attempts", "resumes", "error",
                         *[f"config.{p}" for p in params], *[f"metric.{m}" for m in metrics]])
        for t in trials:
            writer.writerow([t.trial_id, t.state.value, t.value, t.last_step, t.tries, t.resumes, t.error or "",
                             *[t.config.get(p) for p in params], *[t.metrics.get(m) for m in metrics]])
        return out.getvalue()
    from hypersack.errors import ConfigError
    raise ConfigError("--format", fmt, "must be 'csv', 'json' or 'parquet'")
