"""TensorBoard event files per trial (``TensorBoardCallback``; extra ``tensorboard``).

Layout: ``LOGDIR/<study>/trial-NNNNN/`` holds the trial's scalars (one tag per reported metric,
by step); ``.../trial-NNNNN/hparams/`` its config and final metrics for TensorBoard's HParams
view, written when the trial ends. ``tensorboard --logdir LOGDIR`` shows every study. At most
``max_open`` writers stay open (a paused trial's writer is reopened when it resumes: a new event
file in the same run folder, which TensorBoard merges).
"""
from __future__ import annotations

import importlib
from collections import OrderedDict
from pathlib import Path
from typing import Any, Mapping

from hypersack.callbacks import Callback, FrozenTrial
from hypersack.errors import MissingDependencyError
from hypersack.integrations import default_folder, scalar_params

__all__ = ["TensorBoardCallback"]


def _summary_writer() -> Any:
    try:
        return importlib.import_module("tensorboardX").SummaryWriter
    except ImportError:
        raise MissingDependencyError("TensorBoardCallback", "tensorboardX", "tensorboard") from None


class TensorBoardCallback(Callback):
    """``logdir``: the root folder (None: ``hypersack-runs/tensorboard`` beside the store)."""

    def __init__(self, logdir: str | Path | None = None, max_open: int = 32):
        self._writer_class = _summary_writer()
        self.logdir = None if logdir is None else Path(logdir)
        self.max_open = max(1, int(max_open))
        self._open: OrderedDict[int, Any] = OrderedDict()
        self._opened = 0        # writers made: a suffix, so a reopened run never reuses a file

    def _folder(self, study: Any, trial_id: int) -> Path:
        root = self.logdir if self.logdir is not None else default_folder(study, "tensorboard")
        return root / study.name / f"trial-{trial_id:05d}"

    def _writer(self, study: Any, trial_id: int) -> Any:
        writer = self._open.pop(trial_id, None)
        if writer is None:
            self._opened += 1
            writer = self._writer_class(logdir=str(self._folder(study, trial_id)),
                                        filename_suffix=f".{self._opened}")
        self._open[trial_id] = writer
        while len(self._open) > self.max_open:
            self._open.popitem(last=False)[1].close()
        return writer

    def on_trial_result(self, study: Any, trial: FrozenTrial, result: Mapping[str, Any]) -> None:
        writer = self._writer(study, trial.trial_id)
        step = int(result["step"])
        for name, value in result.items():
            if name != "step":
                writer.add_scalar(name, float(value), step)

    def on_trial_complete(self, study: Any, trial: FrozenTrial) -> None:
        writer = self._writer(study, trial.trial_id)
        metrics = {f"final/{k}": float(v) for k, v in trial.metrics.items()}
        writer.add_hparams(scalar_params(trial.config), metrics or {"final/none": 0.0},
                           name="hparams", global_step=trial.step)
        self._close(trial.trial_id)

    on_trial_error = on_trial_complete

    def _close(self, trial_id: int) -> None:
        writer = self._open.pop(trial_id, None)
        if writer is not None:
            writer.close()

    def on_study_end(self, study: Any) -> None:
        for trial_id in list(self._open):
            self._close(trial_id)
