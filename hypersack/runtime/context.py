"""The object a trainable receives: ``train(config, ctx)``.

Contract for trainables:
- ``ctx.report(step, **metrics)``: one result per step (an epoch, an iteration...). Metrics are
  numbers (tensors and numpy scalars are converted). Returns once the result is durable in the
  study store. Once the study has asked the trial to stop, the next ``report`` raises
  ``TrialStopped`` (a BaseException: let it propagate) and the worker ends the trial cleanly.
  A stop decided on a report (the algorithm pauses or prunes the trial at this step) is raised by
  that very report, once the result is durable: no work is wasted past it.
- ``ctx.checkpoint(state)``: saves ``state`` (anything ``torch.save`` or pickle can write)
  atomically as the trial's latest checkpoint. Call it before the ``report`` of the same step.
- ``ctx.restore()``: the latest checkpoint of this trial, or None on a first start. A trial that is
  retried after its worker died, or resumed after the driver died, starts from here.
- ``ctx.should_stop()``: True once a stop was asked; long steps may poll it.
- ``ctx.sampler``: wrap training iterations in ``with ctx.sampler.iteration():`` so the Sampler
  measures the trial's first iterations (time, memory, GPU utilisation) for the job history.
- ``ctx.device`` ("cpu" or "cuda:0": the trial's GPU is the only one it sees), ``ctx.seed``,
  ``ctx.trial_id``, ``ctx.attempt`` (1 on first launch), ``ctx.trial_dir``, ``ctx.max_steps``
  (the study's planned steps per trial, or None), ``ctx.world`` (rank and size).
- Data-parallel trials (``ctx.world.size > 1``): every rank calls ``report`` at the same steps
  (only rank 0's result is sent; all ranks stop together); only rank 0's ``checkpoint`` is
  written; every rank may ``restore``. The torch.distributed process group is initialised
  before ``train`` is called (gloo on CPU, NCCL on GPU).
"""
from __future__ import annotations

import os
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from hypersack.errors import TrialStopped

__all__ = ["TrialContext", "World", "to_number"]


class Channel(Protocol):
    """How a context talks to the driver. ``send`` is fire-and-forget; ``request`` waits for the
    driver's acknowledgement; ``stop_requested`` polls for a stop without blocking."""

    def send(self, message: tuple) -> None: ...
    def request(self, message: tuple) -> None: ...
    def stop_requested(self) -> bool: ...


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1


def to_number(value: Any) -> Any:
    """Tensors and numpy scalars to Python numbers; anything else unchanged."""
    if hasattr(value, "item") and callable(value.item):
        try:
            return value.item()
        except (ValueError, RuntimeError):
            return value
    return value


class TrialContext:
    def __init__(self, *, trial_id: int, seed: int, device: str, attempt: int, trial_dir: Path,
                 channel: Channel, max_steps: int | None = None, world: World = World(),
                 sync_stop: Callable[[bool], bool] | None = None, meter: Any = None):
        self.trial_id = trial_id
        self.seed = seed
        self.device = device
        self.attempt = attempt
        self.trial_dir = Path(trial_dir)
        self.max_steps = max_steps
        self.world = world
        self._channel = channel
        self._sync_stop = sync_stop
        self._meter = meter          # the worker's Sampler: each report ends one measured step
        self._fine_grained = False   # the trainable delimits iterations itself (ctx.sampler)
        self._sampler_override: Any = None
        self._last_step: int | None = None
        self._stopped = False

    @property
    def sampler(self) -> Any:
        """The Sampler profiling this trial's first iterations (a no-op when it is not being
        profiled). A trainable that wraps each training iteration in ``with
        ctx.sampler.iteration():`` (and calls ``ctx.sampler.data_loaded()`` once its batch is
        ready) is profiled per iteration; otherwise each report counts as one iteration."""
        if self._sampler_override is not None:
            return self._sampler_override
        if self._meter is None:
            from hypersack.runtime.profiler import NullSampler
            return NullSampler()
        self._fine_grained = True
        return self._meter

    @sampler.setter
    def sampler(self, value: Any) -> None:
        """A sampler of the caller's (``profiler.profile_trainable`` installs its own)."""
        self._sampler_override = value

    @property
    def last_step(self) -> int | None:
        return self._last_step

    def report(self, step: int, **metrics: Any) -> None:
        if self._stopped or self._stop_now(before=True):
            self._stopped = True
            raise TrialStopped()
        if not metrics:
            raise TypeError("ctx.report() needs at least one metric, e.g. ctx.report(step, loss=0.1)")
        clean = {name: to_number(v) for name, v in metrics.items()}
        if self._meter is not None and not self._fine_grained:
            self._meter.mark()
        self._last_step = int(step)
        if self.world.rank == 0:
            self._channel.request(("report", self.trial_id, int(step), clean))
        if self._stop_now(before=False):
            self._stopped = True
            raise TrialStopped()

    def _stop_now(self, before: bool) -> bool:
        """Whether to stop; with several ranks, only after a report and as rank 0 says."""
        if self._sync_stop is None:
            return self._channel.stop_requested()
        if before:
            return False
        return self._sync_stop(self.world.rank == 0 and self._channel.stop_requested())

    def should_stop(self) -> bool:
        """True once a stop was asked. With several ranks, only the stop agreed at the last
        report counts (every rank must take the same path)."""
        if self._sync_stop is None:
            self._stopped = self._stopped or self._channel.stop_requested()
        return self._stopped

    def checkpoint(self, state: Any) -> Path:
        """Atomically replace the trial's checkpoint with ``state``; returns its path.
        Ranks other than 0 write nothing."""
        if self.world.rank != 0:
            return self.trial_dir / "checkpoint.pt"
        self.trial_dir.mkdir(parents=True, exist_ok=True)
        save, suffix = _serializer()
        path = self.trial_dir / f"checkpoint{suffix}"
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        for stale in self.trial_dir.glob("checkpoint.*"):
            if stale != path and not stale.name.endswith(".tmp"):
                stale.unlink(missing_ok=True)
        self._channel.send(("checkpoint", self.trial_id, str(path), self._last_step))
        return path

    def restore(self) -> Any:
        """The latest checkpoint, or None if this trial never saved one."""
        for suffix, load in _loaders():
            path = self.trial_dir / f"checkpoint{suffix}"
            if path.exists():
                with open(path, "rb") as f:
                    return load(f)
        return None


def _serializer() -> tuple[Callable[[Any, Any], None], str]:
    if "torch" in sys.modules:
        import torch
        return torch.save, ".pt"
    return (lambda obj, f: pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)), ".pkl"


def _loaders():
    def torch_load(f):
        import torch
        return torch.load(f, map_location="cpu", weights_only=False)
    yield ".pt", torch_load
    yield ".pkl", pickle.load
