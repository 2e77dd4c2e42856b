"""Trial records, the study's trial states, events from executors and commands to them.

Events flow executor -> controller; commands flow controller -> executor. All are plain data.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class TrialState(str, enum.Enum):
    PENDING = "pending"      # created, waiting for a device (new, retried or resumed)
    RUNNING = "running"
    PAUSED = "paused"        # stopped at a rung by the algorithm, checkpoint kept, may be resumed
    COMPLETE = "complete"
    PRUNED = "pruned"        # stopped early by the algorithm
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        return self in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAILED)


@dataclass
class TrialRecord:
    """Everything the study knows about one trial. Mirrored to storage after every change."""

    trial_id: int
    config: dict[str, Any]
    seed: int
    state: TrialState = TrialState.PENDING
    attempts: int = 0             # launches so far (shown as ``launches``; see ``tries``)
    retries: int = 0              # relaunches after a worker died
    last_step: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)   # the last reported metrics
    value: float | None = None    # objective value: the metric in the last report that held it
    value_step: int | None = None  # the step of that report (``last_step`` or an earlier one):
    # the step shown beside ``value`` wherever it is shown (best trial, status, report)
    # Multi-objective studies: every objective's value in the last report that held them all
    # (objective order; ``value`` is the first); None in a single-objective study.
    values: list[float] | None = None
    error: str | None = None
    traceback: str | None = None
    checkpoint: str | None = None
    checkpoint_step: int | None = None
    device: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    resources: int = 1            # devices for the next launch (data-parallel world size)
    devices: list[tuple[str, str]] = field(default_factory=list)  # (node_id, gpu_id) while running
    started_at: float | None = None
    finished_at: float | None = None
    stop_reason: StopReason | None = None   # set while a stop was asked and not yet honoured

    @property
    def step_of_value(self) -> int | None:
        """The step shown beside ``value``: ``value_step``, or ``last_step`` where that was not
        kept (a record built by hand, a store written before it); None without a value."""
        if self.value is None:
            return None
        return self.value_step if self.value_step is not None else self.last_step

    @property
    def tries(self) -> int:
        """Attempts at running it, as people count them: the first launch and each retry after a
        failure (0 before its first launch); a resume (promotion, preemption, Ctrl-C) is not one."""
        return 0 if self.attempts == 0 else 1 + self.retries

    @property
    def resumes(self) -> int:
        """Launches that continued it without a failure: a promotion, a preempted trial's turn,
        a resume after an interruption or a lost device."""
        return max(0, self.attempts - self.tries)


# ---- events: executor -> controller ---------------------------------------------------------

@dataclass(frozen=True)
class TrialStarted:
    trial_id: int
    device: str


@dataclass(frozen=True)
class TrialHeartbeat:
    """Every worker of a running trial was heard from (``core.timeouts.silence``): a fact an
    executor whose workers send heartbeats reports, at most once per ``HEARTBEAT_S``."""
    trial_id: int


@dataclass(frozen=True)
class ResultReported:
    """A step's result; ``checkpoint`` names the state after the step that rides with it (a
    file name in the trial's folder): it is the trial's checkpoint once the result is durable."""
    trial_id: int
    step: int
    metrics: dict[str, Any]
    checkpoint: str | None = None


@dataclass(frozen=True)
class TrialFinished:
    """The trainable returned (or honoured a stop request at a report)."""
    trial_id: int


class FailureCause(str, enum.Enum):
    """What an executor saw when a trial ended badly: facts, not decisions. The controller
    decides what each means (``Controller._on_failed``): a trial's own ERROR or TIMEOUT fails
    it; WORKER_DIED and OOM retry it (OOM alone, once its profile is corrected); DEVICE_LOST and
    CANCELLED of an interrupted study requeue it without charging a retry; DISK_FULL stops the
    study and keeps the trial for a resume."""
    ERROR = "error"                # the trainable raised (or reported a bad metric)
    OOM = "oom"                    # out of device memory
    WORKER_DIED = "worker_died"    # its process died under it (a signal, a crash)
    DEVICE_LOST = "device_lost"    # its device failed or vanished
    TIMEOUT = "timeout"            # it ran past its time limit and was ended
    CANCELLED = "cancelled"        # the controller ended it (Cancel)
    DISK_FULL = "disk_full"        # a write failed with ENOSPC


@dataclass(frozen=True)
class TrialFailed:
    """A trial ended badly; ``cause`` says how (see FailureCause)."""
    trial_id: int
    reason: str
    traceback: str | None = None
    cause: FailureCause = FailureCause.ERROR

    @property
    def oom(self) -> bool:
        return self.cause is FailureCause.OOM


@dataclass(frozen=True)
class TrialProfiled:
    """What the Profiler measured over the trial's first steps (``Profile.to_dict()``)."""
    trial_id: int
    profile: dict[str, Any]


@dataclass(frozen=True)
class DeviceAdded:
    """A device joined the inventory (``gpu`` is a ``hypersack.placement.GPU``). ``node_cpus``:
    the host cores of its node, for a node the inventory does not have yet (a joining machine)."""
    node_id: str
    gpu: Any
    trial_id: None = None
    node_cpus: float | None = None


@dataclass(frozen=True)
class DeviceLost:
    """A device failed or disappeared; its trials are reported TrialFailed(DEVICE_LOST) separately."""
    node_id: str
    gpu_id: str
    trial_id: None = None


@dataclass(frozen=True)
class PackCapped:
    """A running pack takes at most ``cap`` members from now on: what it measured (>= 1, on
    CUDA), or 0 once it ended (empty at a poll), failed or its process died (its members fail
    separately). The controller's ``core.packs.PackBook`` seats by it."""
    pack_id: int
    cap: int
    trial_id: None = None


@dataclass(frozen=True)
class InterruptRequested:
    """The driver was asked to stop (Ctrl-C or SIGTERM): launch nothing more; running trials
    stop at their next report and stay resumable. The loop makes it; an executor never does."""
    trial_id: None = None


Event = (TrialStarted | ResultReported | TrialFinished | TrialFailed | TrialHeartbeat
         | TrialProfiled | DeviceAdded | DeviceLost | PackCapped | InterruptRequested)


# ---- commands: controller -> executor -------------------------------------------------------

@dataclass(frozen=True)
class Launch:
    trial_id: int
    config: dict[str, Any]
    seed: int
    attempt: int
    checkpoint: str | None = None
    # Where it runs: one (node_id, gpu_id) per data-parallel rank, rank 0 first. Empty: any slot.
    devices: tuple[tuple[str, str], ...] = ()
    # Percent of each device's compute given to this job (MPS thread percentage); None: all.
    compute_share: float | None = None
    # Fused execution (``core.packs.PackBook``): the pack it joins, started by this launch when
    # it is not running (ids unique over the controller's life), and its seat there (0-based).
    # None: a plain trial.
    pack: int | None = None
    seat: int | None = None
    # The step below which its reports need not wait for an ack (``Controller.free_below`` at
    # launch): so the first report of an attempt is pipelined too. 0: every report waits.
    free_below: int = 0


class StopReason(str, enum.Enum):
    """Why the controller asks a trial to stop at its next report. Executors treat every reason
    alike (stop at the next report, or the next ``should_stop()`` check); the controller decides
    what the trial becomes once it has stopped."""
    PAUSED = "paused"              # the algorithm pauses it at a rung (checkpoint kept)
    PRUNED = "pruned"              # the algorithm stops it for good
    RESIZE = "resize"              # relaunched at once on another number of devices (GROW)
    PREEMPTED = "preempted"        # time-sharing gives its device to another trial
    INTERRUPTED = "interrupted"    # Ctrl-C or a halted study: back to pending, resumable
    TIME_BUDGET = "time budget"    # the study's time is spent: it ends with its last value
    FAILED = "failed"              # it reported a bad metric and is failed already


@dataclass(frozen=True)
class Stop:
    """Ask a running trial to stop at its next report (or ``should_stop()`` check)."""
    trial_id: int
    reason: StopReason


@dataclass(frozen=True)
class Preempt(Stop):
    """Time-sharing: suspend a running trial after its current step (at its next report). It is
    a Stop to every executor (the trial ends at that report, its checkpoint kept); an executor
    that knows it may also free the device's memory (end the worker process) or charge the
    suspension's cost. The controller makes the trial wait, bound to its device."""
    reason: StopReason = StopReason.PREEMPTED


@dataclass(frozen=True)
class Cancel:
    """End a running trial at once (its worker is killed); the executor reports it as
    ``TrialFailed(reason, cause)``: CANCELLED, or WORKER_DIED for a worker killed because it
    stopped responding (the controller then retries the trial as a dead worker's)."""
    trial_id: int
    reason: str = "cancelled"
    cause: FailureCause = FailureCause.CANCELLED


Command = Launch | Stop | Cancel
