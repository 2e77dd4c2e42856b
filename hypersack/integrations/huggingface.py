"""Hugging Face ``transformers.Trainer`` inside a trial (extra ``huggingface``).

Two ways in:

- ``HFTrainable(trainer_factory)`` (or ``run_hf_search(trainer_factory, space, ...)``, Optuna's
  ``hyperparameter_search`` in one call): a trainable that builds ``trainer_factory(config)``,
  points its ``output_dir`` into the trial's folder, adds the callback and trains, resuming from
  the trial's checkpoint.
- ``HyperSackCallback(ctx, monitor="eval_loss")`` added to a Trainer you build inside ``train(
  config, ctx)``; then ``trainer.train(resume_from_checkpoint=callback.resume_from_checkpoint)``.

Callback contract: each evaluation during ``train`` (``eval_strategy`` "epoch" or "steps"; an
``evaluate()`` outside ``train`` is not reported) reports every numeric metric HF computed
(``monitor`` must be one: ConfigError otherwise) at ``step="epoch"`` (the epochs begun,
``ceil(state.epoch)``: 1 at the end of the first; a
step that does not grow, as with several evaluations per epoch, is a ConfigError naming
``step``) or ``step="global_step"`` (optimizer steps). With ``checkpoint_every`` n > 0 every n-th
evaluation also saves: the callback asks the Trainer to save at that step (whatever
``save_strategy`` says, "no" included), and the saved folder (weights, optimizer, scheduler,
trainer state, RNG) rides with the report as the trial's checkpoint; the folder itself is then
removed from ``output_dir`` unless ``load_best_model_at_end`` needs it. When HyperSack prunes or
pauses the trial (``ctx.report`` raises ``TrialStopped``, or a stop is asked between
evaluations), the callback sets ``control.should_training_stop``, so ``train()`` returns at the
end of the current step; ``stopped`` says so.
"""
from __future__ import annotations

import importlib
import math
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping

from hypersack.errors import ConfigError, MissingDependencyError, TrialStopped
from hypersack.integrations import check_trainer_options

__all__ = ["HyperSackCallback", "HFTrainable", "run_hf_search"]

_KEY = "hf_checkpoint"   # the trial checkpoint's key: {path inside the folder: bytes}


def _transformers() -> Any:
    try:
        return importlib.import_module("transformers")
    except ImportError:
        raise MissingDependencyError("hypersack.integrations.huggingface", "transformers",
                                     "huggingface") from None


transformers: Any = _transformers()


def _numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {str(k): float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def pack_folder(folder: Path) -> dict[str, bytes]:
    """Every regular file under ``folder`` by its path relative to it (read no-follow:
    ``checkpoints.read_private``; a symbolic link is refused)."""
    from hypersack.runtime.worker.checkpoints import read_private
    return {p.relative_to(folder).as_posix(): read_private(p)
            for p in sorted(folder.rglob("*")) if p.is_file() or p.is_symlink()}


def unpack_folder(files: Mapping[str, bytes], folder: Path) -> Path:
    """Write ``pack_folder``'s files under ``folder`` (made afresh); returns it. A path that
    would leave the folder is a ConfigError."""
    shutil.rmtree(folder, ignore_errors=True)
    for name, data in files.items():
        path = (folder / name).resolve()
        if folder.resolve() not in path.parents:
            raise ConfigError("checkpoint", name, "names a file outside the checkpoint folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder


class HyperSackCallback(transformers.TrainerCallback):
    """``ctx``: the trial's context; ``monitor``: the metric the study optimises (HF names
    evaluation metrics ``eval_*``); ``step``: "epoch" or "global_step"; ``checkpoint_every``:
    checkpoint every n-th evaluation (0: never). See the module for the contract."""

    def __init__(self, ctx: Any, monitor: str = "eval_loss", *, step: str = "epoch",
                 checkpoint_every: int = 1):
        step, checkpoint_every = check_trainer_options(step, checkpoint_every)
        self.ctx, self.monitor, self.step = ctx, str(monitor), step
        self.checkpoint_every = checkpoint_every
        self.stopped = False
        self._training = False
        self._evaluations = 0
        self._last: int | None = None
        self._pending: tuple[int, dict[str, float]] | None = None   # waits for on_save
        self._resume_dir: Path | None = None

    @property
    def resume_from_checkpoint(self) -> str | None:
        """The trial's last durable checkpoint as a folder, for ``trainer.train(
        resume_from_checkpoint=...)``; None on a first start."""
        state = self.ctx.restore()
        if not isinstance(state, dict) or _KEY not in state:
            return None
        folder = Path(self.ctx.trial_dir) / f"hf-resume-r{self.ctx.world.rank}"
        self._resume_dir = unpack_folder(state[_KEY], folder)
        return str(folder)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._training = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._training = False
        if self._resume_dir is not None:
            shutil.rmtree(self._resume_dir, ignore_errors=True)
            self._resume_dir = None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self.stopped and self.ctx.should_stop():
            self._stop(control)

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: Mapping[str, Any] | None = None,
                    **kwargs: Any) -> None:
        if not self._training or self.stopped:
            return
        numbers = _numeric(metrics or {})
        if self.monitor not in numbers:
            raise ConfigError("monitor", self.monitor, "is not among the evaluation metrics "
                              f"({', '.join(sorted(numbers)) or 'none'})")
        step = self._step(state)
        self._evaluations += 1
        if self.checkpoint_every and self._evaluations % self.checkpoint_every == 0:
            self._pending = (step, numbers)
            control.should_save = True          # on_save reports, with the saved folder
        else:
            self._report(control, step, numbers, None)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._pending is None:
            return
        (step, numbers), self._pending = self._pending, None
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        files = pack_folder(folder) if folder.is_dir() else None
        self._report(control, step, numbers, None if files is None else {_KEY: files})
        if files is not None and not args.load_best_model_at_end:
            shutil.rmtree(folder, ignore_errors=True)

    def _report(self, control: Any, step: int, numbers: dict[str, float], checkpoint: Any) -> None:
        try:
            self.ctx.report(step, checkpoint=checkpoint, **numbers)
        except TrialStopped:
            self._stop(control)

    def _step(self, state: Any) -> int:
        if self.step == "epoch":      # the epochs begun: 1 for an evaluation within the first
            step = math.ceil(float(state.epoch or 0) - 1e-6)
        else:
            step = int(state.global_step)
        if self._last is not None and step <= self._last:
            raise ConfigError("step", self.step, f"gave step {step} again after {self._last} "
                              "(several evaluations per epoch?): use step='global_step'")
        self._last = step
        return step

    def _stop(self, control: Any) -> None:
        self.stopped = True
        control.should_training_stop = True


class HFTrainable:
    """A trainable ``train(config, ctx)`` around ``trainer_factory(config) -> Trainer``: the
    Trainer writes under ``<trial folder>/hf``, reports through ``HyperSackCallback(ctx,
    monitor, step=step, checkpoint_every=checkpoint_every)`` and resumes from the trial's
    checkpoint. Returns nothing (the reports are the results)."""

    def __init__(self, trainer_factory: Callable[[dict[str, Any]], Any], monitor: str = "eval_loss",
                 *, step: str = "epoch", checkpoint_every: int = 1):
        if not callable(trainer_factory):
            raise ConfigError("trainer_factory", trainer_factory, "must be a function config -> Trainer")
        HyperSackCallback(None, monitor, step=step, checkpoint_every=checkpoint_every)  # checks
        self.trainer_factory, self.monitor = trainer_factory, monitor
        self.step, self.checkpoint_every = step, checkpoint_every

    def __call__(self, config: dict[str, Any], ctx: Any) -> None:
        trainer = self.trainer_factory(config)
        trainer.args.output_dir = str(Path(ctx.trial_dir) / "hf")
        callback = HyperSackCallback(ctx, self.monitor, step=self.step,
                                     checkpoint_every=self.checkpoint_every)
        trainer.add_callback(callback)
        trainer.train(resume_from_checkpoint=callback.resume_from_checkpoint)


def run_hf_search(trainer_factory: Callable[[dict[str, Any]], Any], space: Mapping[str, Any], *,
                  objective: Any = ("eval_loss", "min"), n_trials: int | None = 8,
                  monitor: str | None = None, step: str = "epoch",
                  if_exists: str = "error", progress: Any = None, **study_options: Any) -> Any:
    """Run a study of ``n_trials`` over ``space`` with ``HFTrainable(trainer_factory)`` and
    return the ``hypersack.Study`` (``best_trial()``, ``best_checkpoint()``...). ``monitor``:
    the reported metric the trials must log (None: the objective's); ``study_options``: any
    other ``hypersack.Study`` argument (``name``, ``algorithm``, ``workers``, ``storage``...)."""
    from hypersack.core.objective import Objective
    from hypersack.study import Study
    parsed = Objective.parse(objective)
    trainable = HFTrainable(trainer_factory, monitor or parsed.metric, step=step)
    study = Study(space, objective, n_trials=n_trials, **study_options)
    study.run(trainable, if_exists=if_exists, progress=progress)
    return study
