"""Logging integrations: study callbacks (``hypersack.callbacks``) that write each trial to a
tracking tool, offline by default.

- :class:`~hypersack.integrations.tensorboard.TensorBoardCallback` (``pip install
  'hypersack[tensorboard]'``: tensorboardX): one TensorBoard run per trial, every reported
  metric by step, the config and final metrics as hparams.
- :class:`~hypersack.integrations.mlflow.MLflowCallback` (``pip install 'hypersack[mlflow]'``):
  one MLflow run per trial in an experiment named after the study, params, metrics by step,
  tags; a local file store by default.

Each is built in the driver (a missing package raises MissingDependencyError naming the extra
at once) and runs on the callbacks' thread.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["default_folder", "scalar_params"]


def default_folder(study: Any, leaf: str) -> Path:
    """``<store's folder>/hypersack-runs/<leaf>``: beside the study's run folders."""
    return Path(study.storage_path).resolve().parent / "hypersack-runs" / leaf


def scalar_params(config: dict[str, Any]) -> dict[str, Any]:
    """The config with every value a bool, int, float or str (others as their text)."""
    return {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in config.items()}
