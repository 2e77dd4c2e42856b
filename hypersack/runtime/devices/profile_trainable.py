"""Profile an unmodified ``train(config, ctx)`` outside a study (``profile_trainable``): a
TrialContext with no driver whose reports mark iterations, stopped once the Profiler has measured
enough. Kept apart from ``profiler`` (the profilers), which ``context`` imports."""
from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from hypersack.errors import TrialStopped
from hypersack.runtime.worker.context import TrialContext
from hypersack.runtime.worker.messages import Reported
from hypersack.runtime.devices.profiler import Profile, Profiler

__all__ = ["profile_trainable"]


class _ProfilingChannel:
    """A TrialContext channel with no driver: reports mark iterations; stop once profiled."""

    def __init__(self, profiler: Profiler, owner: list):
        self._profiler = profiler
        self._owner = owner      # [context], filled once the context exists

    def send(self, message: Any) -> None:
        pass

    def request(self, message: Any) -> None:
        ctx = self._owner[0]
        if isinstance(message, Reported) and not ctx.profiler_used:
            self._profiler.mark()

    def stop_requested(self) -> bool:
        return self._profiler.done


def profile_trainable(fn: Callable[[dict, Any], Any], config: dict[str, Any], n_iters: int = 10, *,
                      warmup: int = 1, device: str = "cpu", profiler: Profiler | None = None) -> Profile:
    """Run ``fn(config, ctx)`` until ``warmup + n_iters`` iterations were measured, then stop it
    (``ctx.report`` raises TrialStopped, as when a study stops a trial) and return the profile.

    The trainable may time its own iterations with ``ctx.profiler.iteration()``; otherwise each
    ``ctx.report`` ends one iteration (the time from the call of ``fn`` to the first report is
    the first iteration). Checkpoints go to a temporary directory, deleted afterwards.
    """
    profiler = profiler or Profiler(iterations=n_iters, warmup=warmup, device=device)
    owner: list = []
    with tempfile.TemporaryDirectory(prefix="hypersack-profile-") as tmp:
        ctx = TrialContext(trial_id=0, seed=0, device=device, attempt=1, trial_dir=Path(tmp),
                           channel=_ProfilingChannel(profiler, owner))
        ctx.profiler = _TrackedProfiler(profiler, ctx)
        ctx.profiler_used = False  # type: ignore[attr-defined]  # read by _ProfilingChannel
        owner.append(ctx)
        profiler.mark()
        try:
            fn(config, ctx)
        except TrialStopped:
            pass
    return profiler.profile()


class _TrackedProfiler:
    """``ctx.profiler`` for profile_trainable: notes that the trainable times its own iterations."""

    def __init__(self, profiler: Profiler, ctx: Any):
        self._profiler, self._ctx = profiler, ctx

    @contextlib.contextmanager
    def iteration(self) -> Iterator[Profiler]:
        """Times one iteration; stops the trainable (TrialStopped) once enough were measured."""
        self._ctx.profiler_used = True
        if self._profiler.done:
            raise TrialStopped()
        with self._profiler.iteration() as s:
            yield s

    def data_loaded(self) -> None:
        self._profiler.data_loaded()

    @property
    def done(self) -> bool:
        return self._profiler.done
