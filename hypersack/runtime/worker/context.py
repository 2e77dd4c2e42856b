"""The object a trainable receives: ``train(config, ctx)``.

Contract for trainables:
- ``ctx.report(step, checkpoint=state, **metrics)``: one result per step (an epoch, an
  iteration...), steps increasing. A step is an integer in ``[0, 2**53]``; a metric is a number
  (a 0-d tensor or numpy scalar becomes a Python number). Both are checked here, in the worker,
  before anything is sent: anything else raises ``ReportError`` (naming the metric and its
  type), which fails the trial like any exception of the trainable. ``checkpoint`` (optional) is the trial's state after this step; the result and the
  checkpoint become durable together, in one transaction of the study store, before ``report``
  returns. A restore returns the checkpoint of the last durable report, never a newer one, so a
  trial killed anywhere resumes from a state whose step is stored, recomputes the next step
  from it, and no step is skipped. A step reported again after such a restart (a trainable that
  checkpoints less often than it reports) is acknowledged and ignored: the first value stands.
  Once the study has asked the trial to stop, ``report`` still stores its result and then raises
  ``TrialStopped`` (a BaseException: let it propagate); the worker ends the trial cleanly. A stop
  decided on a report (the algorithm pauses or prunes the trial at this step) is raised by that
  very report, once the result is durable: no work is wasted past it.
- Pipelining: a report that carries no checkpoint and no NaN or infinite metric, at a step
  below the trial's next decision point (the algorithm's milestones for ASHA, SHA, Hyperband;
  none for random, grid and Optuna searches, which never stop a trial early; every step for
  the others), does not wait: ``report`` returns at once. Up to the executor's report window
  (32 for the local executor, 1 on a Ray node) such reports may await their acks (with the
  window full, a report waits for room); one made while earlier ones await theirs may be held
  in the worker to leave with the next ones as one message, for at most 10 ms
  (``runtime.worker.process.HOLD_S``) and never past a report that waits, the trial's end or
  its failure (a worker killed meanwhile loses it with the attempt's other unstored steps,
  which the retry recomputes from the checkpoint); a report that must wait (a checkpoint, a
  decision point, a non-finite metric) waits until it and every earlier one are durable, so a
  checkpoint never becomes durable before the results it follows. The first
  report of an attempt is pipelined like the others (the launch carries the trial's decision
  point), unless it lacks the objective metric: that one waits, and the driver fails the trial
  on it.
  A decision the algorithm takes at a decision point stops the trial at that very report: no
  step past it is run or stored. A stop no report decides (a time budget, Ctrl-C, a
  preemption, another trial's failure) is raised at the trial's first report after the stop
  reaches its worker; the reports it had posted before (at most the window) are stored.
- ``ctx.checkpoint(state)``: for trainables that checkpoint between reports. The state is
  written at once (a new private file) and rides with the *next* ``report``: it becomes the
  trial's checkpoint when that report is durable, labelled with that report's step. So call it
  after a step's work and before that step's ``report`` (the order the digits trainables use).
- ``ctx.restore()``: the checkpoint of this trial's last durable report, or None on a first
  start. A trial that is retried after its worker died, or resumed after the driver died, starts
  from here. Only the file the study store names is read; any other file in the folder is
  ignored. Checkpoints are read safely (``torch.load(weights_only=True)``, or a plain-data
  unpickler): tensors, numbers, strings, lists, dicts and numpy arrays, plus the classes
  registered with ``hypersack.allow_checkpoint_types``; a study with ``unsafe_checkpoints:
  true`` reads any pickle.
- ``ctx.should_stop()``: True once a stop was asked; long steps may poll it.
- ``ctx.set_attr(key, value)``: a JSON value attached to the trial (``runtime.storage.user_attrs``).
- ``ctx.shared``: the study's shared objects (``Study(shared=...)``, ``runtime.worker.shared``), or None.
- ``ctx.profiler``: wrap training iterations in ``with ctx.profiler.iteration():`` so the Profiler
  measures the trial's first iterations (time, memory, GPU utilisation) for the job history.
- ``ctx.device`` ("cpu" or "cuda:0": the trial's GPU is the only one it sees), ``ctx.seed``
  (Python's ``random``, numpy's and torch's global generators are seeded with it before
  ``train`` runs, or the moment the trial first imports numpy or torch: ``worker.seeding``),
  ``ctx.trial_id``, ``ctx.attempt`` (1 on first launch), ``ctx.trial_dir``, ``ctx.max_steps``
  (the study's planned steps per trial, or None), ``ctx.world`` (rank and size).
- Data-parallel trials (``ctx.world.size > 1``): every rank calls ``report`` at the same steps
  (only rank 0's result and checkpoint are sent; all ranks stop together); only rank 0's
  checkpoint is written; every rank may ``restore``. The torch.distributed process group is
  initialised before ``train`` is called (gloo on CPU, NCCL on GPU).
"""
from __future__ import annotations

import math
import warnings

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

from hypersack.errors import TrialStopped
from hypersack.runtime.worker import checkpoints
from hypersack.runtime.worker.messages import Reported
from hypersack.runtime.devices.profiler import NullProfiler
from hypersack.validation import check_metric, check_step

__all__ = ["TrialContext", "World", "Channel", "PipelinedChannel"]


class Channel(Protocol):
    """How a context talks to the driver. ``send`` is fire-and-forget; ``request`` waits for the
    driver's acknowledgement; ``stop_requested`` polls for a stop without blocking. Messages
    are those of ``hypersack.runtime.worker.messages`` (a context sends ``Reported``)."""

    def send(self, message: Reported) -> None: ...
    def request(self, message: Reported) -> None: ...
    def stop_requested(self) -> bool: ...


@runtime_checkable
class PipelinedChannel(Channel, Protocol):
    """A channel that pipelines (the worker's pipe): ``post`` sends a report whose ack the next
    report that must wait waits for; ``may_post(step)``: whether a report at ``step`` may
    be posted (below the ack's decision point). A channel without them waits at every report."""

    def post(self, message: Reported) -> None: ...
    def may_post(self, step: int) -> bool: ...


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1


class TrialContext:
    """``ctx``, the second argument of a trainable ``train(config, ctx)``: what a trial reports
    and restores, and where it runs.

    ``report(step, checkpoint=None, **metrics)`` stores the step's metrics (and the state, if
    given) durably before it returns (a report without a checkpoint may be pipelined: see
    "Resume and faults"); ``checkpoint(state)`` rides with the next report; ``restore()``
    returns the checkpoint of the last durable report or None; ``should_stop()`` says whether
    the study stopped this trial. ``device`` is the torch device string, ``seed`` the trial's
    seed (numpy and torch are seeded with it), ``trial_id``, ``attempt`` (0 first),
    ``max_steps``, ``world`` (rank and size of a data-parallel trial), ``set_attr(key, value)``
    a user attribute, ``shared`` the study's shared objects, ``profiler`` the per-iteration
    profiler (``with ctx.profiler.iteration():``)."""

    def __init__(self, *, trial_id: int, seed: int, device: str, attempt: int, trial_dir: Path,
                 channel: Channel, max_steps: int | None = None, world: World = World(),
                 sync_stop: Callable[[bool], bool] | None = None, meter: Any = None,
                 committed_checkpoint: str | None = None, unsafe_checkpoints: bool = False,
                 objective: str | None = None):
        self.trial_id = trial_id
        self.seed = seed
        self.device = device
        self.attempt = attempt
        self.trial_dir = Path(trial_dir)
        self.max_steps = max_steps
        self.world = world
        self._channel = channel
        # the channel when it pipelines (checked once, not at every report), else None
        self._poster = channel if isinstance(channel, PipelinedChannel) else None
        self._sync_stop = sync_stop
        self._meter = meter          # the worker's Profiler: each report ends one measured step
        self._fine_grained = False   # the trainable delimits iterations itself (ctx.profiler)
        self._profiler_override: Any = None
        self._last_step: int | None = None
        # the objective metric: a first report without it waits (the driver fails the trial
        # on it), whatever the launch let be pipelined
        self._objective = objective
        self._stopped = False
        self._committed = committed_checkpoint   # the file the store names (last durable report)
        self._pending: str | None = None         # written, rides with the next report
        self._writes = 0
        self._unsafe = unsafe_checkpoints
        self.shared: Any = None                  # the study's shared objects (runtime.shared)

    @property
    def profiler(self) -> Any:
        """The Profiler profiling this trial's first iterations (a no-op when it is not being
        profiled). A trainable that wraps each training iteration in ``with
        ctx.profiler.iteration():`` (and calls ``ctx.profiler.data_loaded()`` once its batch is
        ready) is profiled per iteration; otherwise each report counts as one iteration."""
        if self._profiler_override is not None:
            return self._profiler_override
        if self._meter is None:
            return NullProfiler()
        self._fine_grained = True
        return self._meter

    @profiler.setter
    def profiler(self, value: Any) -> None:
        """A profiler of the caller's (``profile_offline.profile_trainable`` installs its own)."""
        self._profiler_override = value

    @property
    def sampler(self) -> Any:
        """Deprecated spelling of :attr:`profiler` (the paper calls the profiler "Sampler"; in
        HyperSack an Optuna sampler proposes configs): warns, then returns ``ctx.profiler``."""
        warnings.warn("ctx.sampler is deprecated: use ctx.profiler (a sampler proposes configs)",
                      DeprecationWarning, stacklevel=2)
        return self.profiler

    @property
    def last_step(self) -> int | None:
        return self._last_step

    def report(self, step: int, checkpoint: Any = None, **metrics: Any) -> None:
        """Store this step's result (and ``checkpoint``, the state after it) durably; see the
        module contract. Raises ``TrialStopped`` once the study asked the trial to stop, and
        ``ReportError`` (nothing sent) for a step or a metric that cannot be stored."""
        if self._stopped:
            raise TrialStopped()
        if not metrics:
            raise TypeError("ctx.report() needs at least one metric, e.g. ctx.report(step, loss=0.1)")
        step = check_step(step)
        clean = {name: check_metric(name, v) for name, v in metrics.items()}
        if checkpoint is not None:
            self.checkpoint(checkpoint)
        if self._meter is not None and not self._fine_grained:
            self._meter.mark()
        first, self._last_step = self._last_step is None, step
        if self.world.rank == 0:
            message = Reported(self.trial_id, step, clean, self._pending)
            poster = self._poster
            if (poster is not None and self._pending is None and _finite(clean)
                    and poster.may_post(step)
                    and not (first and self._objective is not None and self._objective not in clean)):
                poster.post(message)
            else:
                self._channel.request(message)
                if self._pending is not None:
                    self._commit(self._pending)
        if self._stop_now():
            self._stopped = True
            raise TrialStopped()

    def _commit(self, name: str) -> None:
        """``name`` rode with a durable report: it is the trial's checkpoint now."""
        self._committed, self._pending = name, None
        checkpoints.remove_other_checkpoints(self.trial_dir, [name])

    def _stop_now(self) -> bool:
        """Whether to stop after a report; with several ranks, as rank 0 says."""
        if self._sync_stop is None:
            return self._channel.stop_requested()
        return self._sync_stop(self.world.rank == 0 and self._channel.stop_requested())

    def should_stop(self) -> bool:
        """True once a stop was asked. With several ranks, only the stop agreed at the last
        report counts (every rank must take the same path)."""
        if self._sync_stop is None:
            return self._stopped or self._channel.stop_requested()
        return self._stopped

    def checkpoint(self, state: Any) -> Path:
        """Write ``state`` now; it becomes the trial's checkpoint with the next durable report
        (see the module contract). Returns the file's path. Ranks other than 0 write nothing."""
        if self.world.rank != 0:
            return self.trial_dir / (self._pending or self._committed or "")
        self._writes += 1
        name = checkpoints.write_checkpoint(self.trial_dir, state, attempt=self.attempt,
                                            sequence=self._writes)
        if self._pending is not None and self._pending != name:
            checkpoints.remove_other_checkpoints(self.trial_dir, [self._committed, name])
        self._pending = name
        return self.trial_dir / name

    def set_attr(self, key: str, value: Any) -> None:
        """Attach a JSON value to this trial (Optuna's ``trial.set_user_attr``): kept in the
        trial's folder at once, stored with the study when the trial stops (a column
        ``user_attrs_<key>`` of ``trials_dataframe()``). ConfigError naming the key otherwise.
        Only rank 0's are kept."""
        from hypersack.runtime.storage.user_attrs import check_attr, write_trial_attr
        check_attr(key, value)
        if self.world.rank == 0:
            write_trial_attr(self.trial_dir, key, value)

    def restore(self) -> Any:
        """The checkpoint of this trial's last durable report, or None if it has none."""
        return checkpoints.read_checkpoint(self.trial_dir, self._committed, unsafe=self._unsafe)


def _finite(metrics: dict[str, Any]) -> bool:
    """Whether every metric is a finite number. A report with a NaN or an infinity waits for its
    ack even where it could be pipelined: the driver may fail the trial on it (a non-finite
    objective), and the trial must then stop at this report, not run one step further."""
    return all(not isinstance(v, float) or math.isfinite(v) for v in metrics.values())
