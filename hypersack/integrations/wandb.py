"""Weights & Biases runs per trial (``WandbCallback``; extra ``wandb``).

One W&B run per trial (``name`` ``trial-NNNNN``, ``group`` the study's name, ``job_type``
"trial", project the study's name unless given): the config when it starts, every reported
metric by step (``run.log(metrics, step=step)``), and when it ends the summary keys
``hypersack.state`` (complete, pruned or failed), ``hypersack.trial_id`` and
``hypersack.error`` (failed), a tag of the state, and exit code 0 (1 for failed).
``mode="offline"`` (the default) needs no network and no login: runs are written under
``DIR/wandb/offline-run-*`` (``dir`` None: ``hypersack-runs/wandb`` beside the study store) and
``wandb sync DIR/wandb/offline-run-*`` uploads them later; ``mode="online"`` logs live (needs
``wandb login``). Runs stay open from a trial's start to its end (a paused trial's too).
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Mapping, Sequence

from hypersack.callbacks import Callback, FrozenTrial
from hypersack.errors import ConfigError, MissingDependencyError
from hypersack.integrations import default_folder, scalar_params

__all__ = ["WandbCallback"]

_MODES = ("offline", "online", "disabled")


def _wandb() -> Any:
    try:
        return importlib.import_module("wandb")
    except ImportError:
        raise MissingDependencyError("WandbCallback", "wandb", "wandb") from None


class WandbCallback(Callback):
    """``project``: the W&B project (None: the study's name); ``dir``: the folder W&B writes
    under (None: ``hypersack-runs/wandb`` beside the store); ``mode``: "offline", "online" or
    "disabled"; ``entity``, ``tags``: passed to every run; ``init_kwargs``: any other
    ``wandb.init`` argument."""

    def __init__(self, project: str | None = None, *, dir: str | Path | None = None,
                 mode: str = "offline", entity: str | None = None, tags: Sequence[str] = (),
                 init_kwargs: Mapping[str, Any] | None = None):
        if mode not in _MODES:
            raise ConfigError("mode", mode, f"must be one of {', '.join(_MODES)}")
        self._wandb = _wandb()
        self.project, self.mode, self.entity = project, mode, entity
        self.dir = None if dir is None else Path(dir)
        self.tags, self.init_kwargs = tuple(tags), dict(init_kwargs or {})
        self._runs: dict[int, Any] = {}

    def _run(self, study: Any, trial: FrozenTrial) -> Any:
        run = self._runs.get(trial.trial_id)
        if run is None:
            folder = self.dir if self.dir is not None else default_folder(study, "wandb")
            folder.mkdir(parents=True, exist_ok=True)
            run = self._wandb.init(
                project=self.project or study.name, entity=self.entity, group=study.name,
                name=f"trial-{trial.trial_id:05d}", job_type="trial", dir=str(folder),
                mode=self.mode, config=scalar_params(trial.config), tags=list(self.tags),
                reinit="create_new", **self.init_kwargs)
            self._runs[trial.trial_id] = run
        return run

    def on_trial_start(self, study: Any, trial: FrozenTrial) -> None:
        self._run(study, trial)

    def on_trial_result(self, study: Any, trial: FrozenTrial, result: Mapping[str, Any]) -> None:
        metrics = {k: float(v) for k, v in result.items() if k != "step"}
        self._run(study, trial).log(metrics, step=int(result["step"]))

    def on_trial_complete(self, study: Any, trial: FrozenTrial) -> None:
        run = self._run(study, trial)
        run.summary["hypersack.state"] = trial.state
        run.summary["hypersack.trial_id"] = trial.trial_id
        if trial.error:
            run.summary["hypersack.error"] = trial.error[:5000]
        run.tags = tuple(run.tags or ()) + (trial.state,)
        run.finish(exit_code=1 if trial.state == "failed" else 0)
        del self._runs[trial.trial_id]

    on_trial_error = on_trial_complete

    def on_study_end(self, study: Any) -> None:
        """Runs of trials still open (an interrupted study) end here, their state unchanged."""
        for trial_id in list(self._runs):
            self._runs.pop(trial_id).finish()
