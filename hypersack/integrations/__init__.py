"""Integrations. Logging: study callbacks (``hypersack.callbacks``) that write each trial to a
tracking tool, offline by default. Training frameworks: callbacks that run inside a trial.

- :class:`~hypersack.integrations.tensorboard.TensorBoardCallback` (``pip install
  'hypersack[tensorboard]'``: tensorboardX): one TensorBoard run per trial, every reported
  metric by step, the config and final metrics as hparams.
- :class:`~hypersack.integrations.mlflow.MLflowCallback` (``pip install 'hypersack[mlflow]'``):
  one MLflow run per trial in an experiment named after the study, params, metrics by step,
  tags; a local file store by default.
- :class:`~hypersack.integrations.wandb.WandbCallback` (``pip install 'hypersack[wandb]'``): one
  W&B run per trial, config, metrics by step, the end state in the summary; offline by default.
- ``hypersack.integrations.lightning.HyperSackCallback`` (``pip install 'hypersack[lightning]'``)
  and ``hypersack.integrations.huggingface`` (``HyperSackCallback``, ``HFTrainable``,
  ``run_hf_search``; ``pip install 'hypersack[huggingface]'``): a Lightning or transformers
  Trainer inside ``train(config, ctx)`` reports, checkpoints and stops through ``ctx``. These
  import their framework when imported (MissingDependencyError naming the extra without it).

Each logging callback is built in the driver (a missing package raises MissingDependencyError
naming the extra at once) and runs on the callbacks' thread.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["STEPS", "check_trainer_options", "default_folder", "scalar_params"]

#: What a training framework's callback reports at: epochs done, or the global step.
STEPS = ("epoch", "global_step")


def default_folder(study: Any, leaf: str) -> Path:
    """``<store's folder>/hypersack-runs/<leaf>``: beside the study's run folders."""
    return Path(study.storage_path).resolve().parent / "hypersack-runs" / leaf


def scalar_params(config: dict[str, Any]) -> dict[str, Any]:
    """The config with every value a bool, int, float or str (others as their text)."""
    return {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in config.items()}


def check_trainer_options(step: Any, checkpoint_every: Any) -> tuple[str, int]:
    """A framework callback's ``step`` (one of :data:`STEPS`) and ``checkpoint_every`` (an
    integer >= 0; 0: never), checked (ConfigError naming the field and value)."""
    from hypersack.validation import check_choice, check_integer
    return check_choice("step", step, STEPS), check_integer("checkpoint_every", checkpoint_every,
                                                           low=0)
