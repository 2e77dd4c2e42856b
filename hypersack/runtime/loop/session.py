"""Trials a caller runs outside the study loop: ``Study.add_trial`` (results obtained elsewhere),
``Study.ask`` / ``Study.tell`` (the caller trains). Each call is one short session: open the
store, take the study's lease, rebuild the controller from the store (as a resume does), make
one change, store it durably with the algorithm's state, release the lease. The study is created
on first use.
"""
from __future__ import annotations

import contextlib
import json
import time
from typing import Any, Iterator, Mapping, Sequence

from hypersack.core.controller import Controller
from hypersack.core.objective import Objective
from hypersack.core.spec import StudySpec, check_resumable
from hypersack.errors import ConfigError
from hypersack.validation import check_mapping, check_name, check_number
from hypersack.runtime.loop.run import build_controller
from hypersack.runtime.storage.sqlite import Storage

__all__ = ["session", "parse_results", "told_metrics"]


@contextlib.contextmanager
def session(spec: StudySpec, storage: Any, algorithm: Any) -> Iterator[Controller]:
    """The study's controller; what it changed is stored when the block ends without error."""
    with Storage(storage) as store:
        exists = store.has_study(spec.name)
        new_spec = json.loads(json.dumps(spec.to_dict()))
        if exists:
            row = store.get_study(spec.name)
            check_resumable(row.spec, new_spec)
        else:
            row = store.create_study(spec.name, new_spec)
        store.acquire_lease(row)
        try:
            now = time.time()
            controller = build_controller(spec, algorithm, row, store, now, resume=exists)
            controller.take_changes()          # restored trials stay as stored
            yield controller
            changes = controller.take_changes()
            store.save_batch(row.study_id, changes, controller.take_results(),
                             lambda: controller.state_dict(now, full=True))
        finally:
            store.release_lease(row.study_id)


def parse_results(values: Any, objective: Objective) -> list[tuple[int, dict[str, Any]]]:
    """``add_trial``'s ``values``: a number (the objective, at step 1; a single-objective study
    only), a mapping of metrics (step 1), or a sequence of such mappings (steps 1, 2, ...); the
    last must hold every objective metric. Every metric a finite number; ConfigError naming
    ``values`` otherwise."""
    if isinstance(values, (int, float)) and not isinstance(values, bool) and not objective.is_multi:
        values = {objective.metric: values}
    steps = [values] if isinstance(values, Mapping) else values
    if not isinstance(steps, Sequence) or isinstance(steps, str) or not steps:
        raise ConfigError("values", values, "must be a number, a mapping of metrics, or a "
                          "non-empty list of such mappings (one per step)")
    out = []
    for i, metrics in enumerate(steps, start=1):
        out.append((i, check_metrics(f"values[{i - 1}]", metrics)))
    missing = objective.missing(out[-1][1])
    if missing:
        raise ConfigError("values", values, f"must report the objective {missing[0]!r} (last step)")
    return out


def told_metrics(value: Any, objective: Objective) -> dict[str, float]:
    """``Study.tell``'s ``value`` as metrics: a number (single objective), a sequence of numbers
    (every objective's, in order) or a mapping of metrics holding every objective; ConfigError
    naming ``value`` otherwise."""
    if isinstance(value, Sequence) and not isinstance(value, str) and objective.is_multi:
        if len(value) != len(objective.parts):
            raise ConfigError("value", value, f"must hold {len(objective.parts)} values, one per "
                              f"objective ({', '.join(objective.metrics)})")
        value = dict(zip(objective.metrics, value))
    if not isinstance(value, Mapping):
        if objective.is_multi:
            raise ConfigError("value", value, "must be every objective's value (a list in "
                              f"objective order, or a mapping of {', '.join(objective.metrics)})")
        value = {objective.metric: value}
    metrics = check_metrics("value", value)
    missing = objective.missing(metrics)
    if missing:
        raise ConfigError("value", value, f"must hold the objective {missing[0]!r}")
    return metrics


def check_metrics(field: str, metrics: Any) -> dict[str, float]:
    """A mapping of metric names to finite numbers, as a dict."""
    what = "a non-empty mapping of metric names to numbers"
    if not check_mapping(field, metrics, what=what):        # a mapping, but an empty one
        raise ConfigError(field, metrics, f"must be {what}")
    for name in metrics:
        check_name(f"{field} (a metric name)", name)
    return {name: check_number(f"{field}.{name}", value) for name, value in metrics.items()}

