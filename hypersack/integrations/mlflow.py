"""MLflow runs per trial (``MLflowCallback``; extra ``mlflow``).

One experiment per study (named after it, created when missing), one run per trial (``run_name``
``trial-NNNNN``): the config as params when it starts, every reported metric by step, tags
``hypersack.study``, ``hypersack.trial_id`` and, at its end, ``hypersack.state``; the run ends
FINISHED (complete), KILLED (pruned) or FAILED. ``tracking_uri`` None: a local SQLite store
``hypersack-runs/mlflow.db`` beside the study store (``sqlite:///PATH``), no server: the store
MLflow 3 reads by default (it refuses a file store unless ``MLFLOW_ALLOW_FILE_STORE=true``).
Browse it with ``mlflow ui --backend-store-uri sqlite:///hypersack-runs/mlflow.db``, which needs
the full package (``pip install mlflow``): the ``mlflow`` extra's ``mlflow-skinny`` has no UI.
"""
from __future__ import annotations

import importlib
import time
from typing import Any, Mapping

from hypersack.callbacks import Callback, FrozenTrial
from hypersack.errors import MissingDependencyError
from hypersack.integrations import default_folder, scalar_params

__all__ = ["MLflowCallback"]

_STATUS = {"complete": "FINISHED", "pruned": "KILLED", "failed": "FAILED"}


def _mlflow() -> Any:
    try:
        return importlib.import_module("mlflow.tracking"), importlib.import_module("mlflow.entities")
    except ImportError:
        raise MissingDependencyError("MLflowCallback", "mlflow", "mlflow") from None


def default_tracking_uri(study: Any) -> str:
    """``sqlite:///<store's folder>/hypersack-runs/mlflow.db``, its folder made."""
    path = default_folder(study, "mlflow.db")
    path.parent.mkdir(parents=True, exist_ok=True)
    return "sqlite:///" + path.as_posix()


class MLflowCallback(Callback):
    """``tracking_uri``: where runs go (None: a local SQLite store, see the module);
    ``experiment``: the experiment's name (None: the study's name); ``tags``: added to every run."""

    def __init__(self, tracking_uri: str | None = None, experiment: str | None = None,
                 tags: Mapping[str, str] | None = None):
        self._tracking, self._entities = _mlflow()
        self.tracking_uri, self.experiment, self.tags = tracking_uri, experiment, dict(tags or {})
        self._client: Any = None
        self._experiment_id: str | None = None
        self._runs: dict[int, str] = {}

    def _setup(self, study: Any) -> Any:
        if self._client is None:
            uri = self.tracking_uri
            if uri is None:
                uri = default_tracking_uri(study)
            self._client = self._tracking.MlflowClient(tracking_uri=uri)
            name = self.experiment or study.name
            found = self._client.get_experiment_by_name(name)
            self._experiment_id = found.experiment_id if found else self._client.create_experiment(name)
        return self._client

    def _run(self, study: Any, trial: FrozenTrial) -> str:
        run_id = self._runs.get(trial.trial_id)
        if run_id is None:
            client = self._setup(study)
            tags = {**self.tags, "hypersack.study": study.name, "hypersack.trial_id": str(trial.trial_id)}
            run = client.create_run(self._experiment_id, run_name=f"trial-{trial.trial_id:05d}", tags=tags)
            run_id = self._runs[trial.trial_id] = run.info.run_id
            params = [self._entities.Param(k, str(v)) for k, v in scalar_params(trial.config).items()]
            client.log_batch(run_id, params=params)
        return run_id

    def on_trial_start(self, study: Any, trial: FrozenTrial) -> None:
        self._run(study, trial)

    def on_trial_result(self, study: Any, trial: FrozenTrial, result: Mapping[str, Any]) -> None:
        run_id = self._run(study, trial)
        now, step = int(time.time() * 1000), int(result["step"])
        metrics = [self._entities.Metric(k, float(v), now, step) for k, v in result.items() if k != "step"]
        self._client.log_batch(run_id, metrics=metrics)

    def on_trial_complete(self, study: Any, trial: FrozenTrial) -> None:
        run_id = self._run(study, trial)
        self._client.set_tag(run_id, "hypersack.state", trial.state)
        if trial.error:
            self._client.set_tag(run_id, "hypersack.error", trial.error[:5000])
        self._client.set_terminated(run_id, _STATUS.get(trial.state, "FINISHED"))
        del self._runs[trial.trial_id]

    on_trial_error = on_trial_complete
