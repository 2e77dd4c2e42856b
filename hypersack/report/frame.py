"""A study's trials as a pandas DataFrame, shaped as Optuna's ``study.trials_dataframe()``.

Columns: ``number``, ``value``, ``datetime_start``, ``datetime_complete``, ``duration``,
``params_<name>`` for each parameter, ``state`` (HyperSack's: complete, pruned, failed, paused,
running, pending), ``metrics_<name>`` for each metric in the trial's last report,
``user_attrs_<key>`` for each attribute trials set (``ctx.set_attr``), then ``last_step``,
``attempts``, ``retries``, ``running``, ``waiting`` and ``error``. One row per trial, by number. ``datetime_start`` is the trial's first launch and
``datetime_complete`` its end: pandas Timestamps (local wall time, as Optuna's), absent (NaT)
where the trial has not started or finished; ``duration`` (their difference), ``running`` (time
on devices, summed over attempts: a promoted, preempted or retried trial ran several times) and
``waiting`` (paused, preempted or queued since its first launch) are Timedeltas. A
multi-objective study has, in place of ``value``, one ``values_<metric>`` column per objective
(objective order; Optuna's names once ``set_metric_names`` is called), empty where the trial
has not reported them all.
"""
from __future__ import annotations

import importlib
from typing import Any

from hypersack.core.objective import Objective
from hypersack.errors import MissingDependencyError

__all__ = ["trials_dataframe", "write_parquet"]


def _pandas() -> Any:
    try:
        pandas = importlib.import_module("pandas")     # Any: pandas ships no type information
    except ImportError:
        raise MissingDependencyError("trials_dataframe()", "pandas", "report") from None
    return pandas


def trials_dataframe(storage: Any, name: str) -> Any:
    """The trials of the stored study ``name`` (``storage``: a ``Storage``, read-only is enough)."""
    from hypersack.runtime.storage.queries import study_now, times_of
    pd = _pandas()
    row = storage.get_study(name)
    trials = storage.load_trials(row.study_id)
    times = times_of(storage, row.study_id, trials, study_now(row.status, row.updated_at))
    from hypersack.runtime.storage.user_attrs import load_attrs
    attrs = load_attrs(storage, row.study_id)
    params = sorted({k for t in trials for k in t.config})
    metrics = sorted({k for t in trials for k in t.metrics})
    keys = sorted({k for t in trials for k in attrs.get(t.trial_id, {})})
    objective = Objective.parse(row.spec["objective"])
    value_columns = [f"values_{m}" for m in objective.metrics] if objective.is_multi else ["value"]
    columns = ["number", *value_columns, "datetime_start", "datetime_complete", "duration",
               *[f"params_{p}" for p in params], "state", *[f"metrics_{m}" for m in metrics],
               *[f"user_attrs_{k}" for k in keys], "last_step", "attempts", "retries", "running",
               "waiting", "error"]
    rows = []
    for t in trials:
        spent = times.get(t.trial_id)
        start = _time(pd, spent.first_start if spent else t.started_at)
        end = _time(pd, t.finished_at)
        values = [t.value] if not objective.is_multi else (t.values or [None] * len(value_columns))
        rows.append([t.trial_id, *values, start, end,
                     end - start if start is not pd.NaT and end is not pd.NaT else pd.NaT,
                     *[t.config.get(p) for p in params], t.state.value,
                     *[t.metrics.get(m) for m in metrics],
                     *[attrs.get(t.trial_id, {}).get(k) for k in keys],
                     t.last_step, t.attempts, t.retries,
                     _span(pd, spent.running_s if spent else None),
                     _span(pd, spent.waiting_s if spent else None), t.error])
    frame = pd.DataFrame(rows, columns=columns)
    for column in ("datetime_start", "datetime_complete"):
        frame[column] = pd.to_datetime(frame[column])
    for column in ("duration", "running", "waiting"):   # all NaT (ask/tell): pandas reads datetimes
        frame[column] = (pd.to_timedelta(frame[column]) if frame[column].notna().any()
                         else pd.Series(pd.NaT, index=frame.index, dtype="timedelta64[ns]"))
    return frame


def _span(pd: Any, seconds: float | None) -> Any:
    return pd.NaT if seconds is None else pd.Timedelta(seconds=seconds)


def _time(pd: Any, seconds: float | None) -> Any:
    return pd.NaT if seconds is None else pd.Timestamp.fromtimestamp(seconds)


def write_parquet(storage: Any, name: str, path: Any) -> None:
    """Write ``trials_dataframe`` to a Parquet file (needs pyarrow)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise MissingDependencyError("export --format parquet", "pyarrow", "parquet") from None
    frame = trials_dataframe(storage, name)
    for column in frame.columns:       # mixed parameter types (a categorical of ints and str)
        if frame[column].dtype == object and column != "error":
            kinds = {type(v) for v in frame[column] if v is not None}
            if len(kinds) > 1:
                frame[column] = frame[column].map(lambda v: None if v is None else str(v))
    frame.to_parquet(path, index=False)
