"""PyTorch Lightning inside a trial (``HyperSackCallback``; extra ``lightning``).

Inside ``train(config, ctx)``, add ``HyperSackCallback(ctx, monitor="val_loss")`` to the
``Trainer`` and fit with ``ckpt_path=callback.ckpt_path``. Contract:

- Reports: at the end of each validation run (not the sanity check), every scalar in
  ``trainer.callback_metrics`` (``monitor`` must be one: ConfigError otherwise) goes to
  ``ctx.report(step, checkpoint=..., **metrics)``. ``step="epoch"``: the epochs completed so far
  (1 after the first epoch); ``step="global_step"``: ``trainer.global_step`` (optimizer steps),
  for several validations per epoch (``val_check_interval``). A step that does not grow is a
  ConfigError naming ``step``.
- Checkpoints: every ``checkpoint_every``-th report (0: never) carries the Trainer's whole state
  (``trainer.save_checkpoint``: weights, optimizers, schedulers, loops, callbacks) as the trial's
  checkpoint, durable with that report; ``export_best`` (``hypersack export-best``) writes the
  best trial's as ``best.ckpt``, which ``LightningModule.load_from_checkpoint`` loads. ``ckpt_path`` is the trial's last durable checkpoint
  written back as a Lightning file (None on a first start), so a trial resumed after a pause, a
  dead worker or a driver restart goes on from the epoch after it.
- Stops: when HyperSack prunes or pauses the trial (``ctx.report`` raises ``TrialStopped``), or
  a stop is asked between reports (``ctx.should_stop()``, polled after each training batch), the
  callback sets ``trainer.should_stop = True`` and ``stopped``; ``fit`` then returns normally
  (Lightning ends at the next check, ``min_epochs``/``min_steps`` permitting) and the trainable
  just returns. Reports after the stop are not sent.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from hypersack.errors import ConfigError, MissingDependencyError, TrialStopped
from hypersack.integrations import check_trainer_options
from hypersack.runtime.worker.checkpoints import LIGHTNING_KEY

__all__ = ["HyperSackCallback", "scalar_metrics"]

# The trial checkpoint's key holding the Lightning file's bytes (export_best writes it as .ckpt).
_KEY = LIGHTNING_KEY


def _lightning() -> Any:
    """``lightning.pytorch``, else the older ``pytorch_lightning`` package."""
    for name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise MissingDependencyError("hypersack.integrations.lightning", "lightning", "lightning")


pl: Any = _lightning()


def scalar_metrics(metrics: Any) -> dict[str, float]:
    """The entries of ``metrics`` that are numbers or one-element tensors, as floats."""
    out = {}
    for name, value in dict(metrics).items():
        if hasattr(value, "numel"):
            if value.numel() != 1:
                continue
            value = value.item()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[str(name)] = float(value)
    return out


class HyperSackCallback(pl.Callback):
    """``ctx``: the trial's context; ``monitor``: the metric the study optimises (reported with
    the others); ``step``: "epoch" or "global_step"; ``checkpoint_every``: checkpoint every n-th
    report (0: never). See the module for the contract."""

    def __init__(self, ctx: Any, monitor: str = "val_loss", *, step: str = "epoch",
                 checkpoint_every: int = 1):
        step, checkpoint_every = check_trainer_options(step, checkpoint_every)
        self.ctx, self.monitor, self.step = ctx, str(monitor), step
        self.checkpoint_every = checkpoint_every
        self.stopped = False
        self._reports = 0
        self._last: int | None = None
        self._resume_file: Path | None = None

    @property
    def ckpt_path(self) -> str | None:
        """The trial's last durable checkpoint as a Lightning file, for ``fit(ckpt_path=...)``;
        None when the trial has none (a first start) or it holds no Lightning state."""
        state = self.ctx.restore()
        if not isinstance(state, dict) or _KEY not in state:
            return None
        path = Path(self.ctx.trial_dir) / f"lightning-resume-r{self.ctx.world.rank}.ckpt"
        path.write_bytes(state[_KEY])
        self._resume_file = path
        return str(path)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """The resumed state is loaded by now: its file is not needed any more."""
        if self._resume_file is not None:
            self._resume_file.unlink(missing_ok=True)
            self._resume_file = None

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if not self.stopped and self.ctx.should_stop():
            self._stop(trainer)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking or self.stopped:
            return
        metrics = scalar_metrics(trainer.callback_metrics)
        if self.monitor not in metrics:
            raise ConfigError("monitor", self.monitor, "is not among the metrics logged at "
                              f"validation end ({', '.join(sorted(metrics)) or 'none'})")
        step = self._step(trainer)
        self._reports += 1
        due = self.checkpoint_every and self._reports % self.checkpoint_every == 0
        checkpoint = self._checkpoint(trainer) if due else None
        try:
            self.ctx.report(step, checkpoint=checkpoint, **metrics)
        except TrialStopped:
            self._stop(trainer)

    def _step(self, trainer: Any) -> int:
        step = int(trainer.current_epoch) + 1 if self.step == "epoch" else int(trainer.global_step)
        if self._last is not None and step <= self._last:
            raise ConfigError("step", self.step, f"gave step {step} again after {self._last} "
                              "(several validations per epoch?): use step='global_step'")
        self._last = step
        return step

    def _checkpoint(self, trainer: Any) -> dict[str, bytes] | None:
        """The Trainer's state as ``{"lightning_checkpoint": bytes}`` (None on ranks that do not
        write: Lightning saves on global rank 0)."""
        from hypersack.runtime.worker.checkpoints import read_private
        path = Path(self.ctx.trial_dir) / f"lightning-save-r{self.ctx.world.rank}.ckpt"
        path.unlink(missing_ok=True)        # a link planted there is removed, never written through
        trainer.save_checkpoint(path, weights_only=False)   # said: Lightning logs it otherwise
        try:
            return {_KEY: read_private(path)}
        except FileNotFoundError:
            return None
        finally:
            path.unlink(missing_ok=True)

    def _stop(self, trainer: Any) -> None:
        self.stopped = True
        trainer.should_stop = True
