"""Time-sharing of devices among trials (Hermes, Son et al. 2021): pure decisions.

Trials are *bound* to a device by a global level and take turns on it in *quanta*; a node level
decides, each time a running trial's quantum ends, whether it keeps the device or is preempted
(suspended after its current step, checkpoint kept) for a waiting trial. The controller
(``core/controller.py``) owns one :class:`TimeShare` and turns its answers into ``Launch`` and
``Preempt`` commands; nothing here does I/O or reads a clock (``now`` is passed in, seconds).

The paper, as implemented:

- Representative loss of a quantum (Eq. 2): ``loss = (max L + min L) / 2`` over the losses
  ``L`` the trial reported during that quantum.
- Convergence (Eq. 3): ``C(i) = (loss(i-1) - loss(i)) / |L(i)|``; after a trial's first quantum
  (Eq. 4): ``C(0) = (max L - min L) / |L|``. ``|L|`` is read as the number of losses in the
  quantum (the paper calls ``L`` a set): C is a loss drop per reported step.
- Global binding (Algorithms 1-2): a trial goes to the device holding the fewest bound trials
  among those holding fewer than ``G_thres = max_jobs_per_device``; ties go to the first such
  device in inventory order (Algorithm 2's strict "fewer than G_cand"). With every device full
  it waits unbound (the global queue); it is bound when a trial of some device ends.
- Node scheduling (Algorithm 3): the waiting trial with the largest C runs next.

Open points of the paper, decided here:

- The running trial competes: at the end of its quantum it is preempted only by a waiting trial
  whose priority is strictly higher (a trial still best keeps the device; ties keep it too).
- A new trial has no C before its first quantum: it ranks above every trial that has one (each
  trial gets one quantum first), new trials in bind order.
- A quantum ends no earlier than ``quantum_s`` after it began and no earlier than the trial's
  second report in it (Eq. 4 needs two losses; a step longer than the quantum would otherwise
  give C = 0 forever).
- Quantum growth: a trial's quantum is ``min(max_quantum_s, quantum_s * growth ** p)`` where p
  is how often it was preempted (the paper lengthens quanta "as the number of preemptions adds
  up"). The paper's loss milestones are not implemented.
- A trial is preemptible only when its last report carried a checkpoint (suspending it loses
  no work); a trainable that never checkpoints runs its quantum on, to its end.
- Loss: the ``metric`` option names a metric to minimise; without it, the objective's metric,
  sign-adjusted (an accuracy to maximise counts as a loss of ``-accuracy``).

Baselines (``policy``): ``fifo`` binds a trial only to a device that can start it at once and
never preempts (the usual queue); ``rr`` (Gandiva-like round-robin): the trial that has waited
longest runs next, and a running trial whose quantum ends goes to the back of the line when any
trial waits; ``slaq``: priority is the recent loss drop normalised by the largest drop the
trial has shown so far (SLAQ, Zhang et al. 2017), which favours trials still improving at their
own pace, however poor. rr and slaq use 30 s quanta without growth by default, hermes 10 s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from hypersack.errors import ConfigError
from hypersack.validation import check_integer, check_mapping, check_name, check_number

__all__ = ["POLICIES", "TimeSharing", "TimeShare", "JobShare", "representative_loss",
           "convergence", "slaq_priority", "find_device", "quantum_length"]

POLICIES = ("hermes", "rr", "slaq", "fifo")
Key = tuple[str, str]
MAX_QUANTUM_S = 366 * 24 * 3600.0
MAX_JOBS_PER_DEVICE = 1024
MIN_REPORTS = 2        # losses a quantum needs before it may end (Eq. 4 needs two)
_DEFAULT_QUANTUM = {"hermes": 10.0, "rr": 30.0, "slaq": 30.0, "fifo": 30.0}
_DEFAULT_GROWTH = {"hermes": 1.5, "rr": 1.0, "slaq": 1.0, "fifo": 1.0}
_FIELDS = {"policy", "quantum_s", "growth", "max_quantum_s", "max_jobs_per_device", "metric"}


# ---- options --------------------------------------------------------------------------------

@dataclass(frozen=True)
class TimeSharing:
    """The study's ``time_sharing`` section. ``quantum_s``: first quantum (seconds; default 10
    for hermes, 30 for rr and slaq); ``growth`` >= 1: a trial's quantum is multiplied by it at
    each of its preemptions (default 1.5 for hermes, 1 otherwise), up to ``max_quantum_s``
    (default 8 x quantum_s); ``max_jobs_per_device``: G_thres, trials bound to one device at
    most (default 4); ``metric``: a metric to minimise for the convergence (default: the
    objective's, sign-adjusted). None values take the defaults when the object is built."""
    policy: str = "hermes"
    quantum_s: float | None = None
    growth: float | None = None
    max_quantum_s: float | None = None
    max_jobs_per_device: int = 4
    metric: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.policy, str) or self.policy not in POLICIES:
            raise ConfigError("time_sharing.policy", self.policy,
                              f"must be one of {', '.join(POLICIES)}")
        q = self.quantum_s if self.quantum_s is not None else _DEFAULT_QUANTUM[self.policy]
        q = check_number("time_sharing.quantum_s", q, low=0.0, low_open=True,
                         high=MAX_QUANTUM_S, hint="(seconds)")
        g = self.growth if self.growth is not None else _DEFAULT_GROWTH[self.policy]
        g = check_number("time_sharing.growth", g, low=1.0, high=1000.0, hint="(1: fixed quanta)")
        top = self.max_quantum_s if self.max_quantum_s is not None else min(MAX_QUANTUM_S, 8 * q)
        top = check_number("time_sharing.max_quantum_s", top, low=q, high=MAX_QUANTUM_S,
                           hint="(seconds, at least quantum_s)")
        check_integer("time_sharing.max_jobs_per_device", self.max_jobs_per_device, low=1,
                      high=MAX_JOBS_PER_DEVICE)
        if self.metric is not None:
            check_name("time_sharing.metric", self.metric)
        object.__setattr__(self, "quantum_s", q)
        object.__setattr__(self, "growth", g)
        object.__setattr__(self, "max_quantum_s", top)

    @classmethod
    def parse(cls, value: Any) -> "TimeSharing | None":
        """None, a policy name, a mapping of the fields above, or a TimeSharing."""
        if value is None or isinstance(value, TimeSharing):
            return value
        if isinstance(value, str):
            return cls(policy=value)
        check_mapping("time_sharing", value, what="a policy name or a mapping with fields "
                      f"{', '.join(sorted(_FIELDS))}")
        for key in value:
            if key not in _FIELDS:
                raise ConfigError(f"time_sharing.{key}", value[key],
                                  f"is not a known field (known: {', '.join(sorted(_FIELDS))})")
        return cls(**dict(value))

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "quantum_s": self.quantum_s, "growth": self.growth,
                "max_quantum_s": self.max_quantum_s,
                "max_jobs_per_device": self.max_jobs_per_device, "metric": self.metric}


# ---- the paper's formulas -------------------------------------------------------------------

def representative_loss(losses: Sequence[float]) -> float:
    """Eq. 2: the midpoint of the quantum's highest and lowest loss."""
    if not losses:
        raise ValueError("a quantum with no loss has no representative loss")
    return (max(losses) + min(losses)) / 2.0


def convergence(losses: Sequence[float], previous: float | None) -> float:
    """Eq. 3 (``previous`` = the representative loss of the trial's previous quantum) or, for a
    trial's first quantum (``previous`` None), Eq. 4; both divided by the number of losses."""
    if not losses:
        raise ValueError("a quantum with no loss has no convergence")
    if previous is None:
        return (max(losses) - min(losses)) / len(losses)
    return (previous - representative_loss(losses)) / len(losses)


def slaq_priority(drop: float, largest_drop: float) -> float:
    """SLAQ's normalised loss reduction: this quantum's drop over the largest seen for the trial
    (this one included); 0 when the trial never improved."""
    scale = max(abs(largest_drop), abs(drop))
    return drop / scale if scale > 0 else 0.0


def quantum_length(options: TimeSharing, preemptions: int) -> float:
    """A trial's quantum after ``preemptions`` preemptions (growth, capped)."""
    q0, top, g = float(options.quantum_s or 0), float(options.max_quantum_s or 0), float(options.growth or 1)
    if g == 1.0 or preemptions <= 0:
        return min(q0, top)
    exponent = min(preemptions, 4096)
    return min(top, q0 * math.exp(exponent * math.log(g)))


def find_device(load: Sequence[tuple[Key, int]], limit: int) -> Key | None:
    """Algorithm 2: of ``(device, bound trials)`` in inventory order, the first device with the
    fewest bound trials among those with fewer than ``limit``; None when every one is full."""
    best: tuple[Key, int] | None = None
    for key, count in load:
        if count < limit and (best is None or count < best[1]):
            best = (key, count)
    return best[0] if best is not None else None


# ---- the scheduler's state ------------------------------------------------------------------

@dataclass
class JobShare:
    """One trial's time-sharing state. ``priority`` None: never finished a quantum (new)."""
    trial_id: int
    order: int                      # bind order (fifo, and new trials' order)
    turn: int                       # rr: its place in the round (lower runs first)
    device: Key | None = None
    running: bool = False
    quanta: int = 0
    preemptions: int = 0
    priority: float | None = None
    last_loss: float | None = None  # representative loss of its previous quantum
    largest_drop: float = 0.0       # slaq's normaliser
    quantum_start: float | None = None
    losses: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"order": self.order, "turn": self.turn,
                "device": list(self.device) if self.device else None, "quanta": self.quanta,
                "preemptions": self.preemptions, "priority": self.priority,
                "last_loss": self.last_loss, "largest_drop": self.largest_drop}

    @classmethod
    def from_dict(cls, trial_id: int, d: Mapping[str, Any]) -> "JobShare":
        device = d.get("device")
        return cls(trial_id, int(d["order"]), int(d["turn"]),
                   (str(device[0]), str(device[1])) if device else None,
                   quanta=int(d.get("quanta", 0)), preemptions=int(d.get("preemptions", 0)),
                   priority=d.get("priority"), last_loss=d.get("last_loss"),
                   largest_drop=float(d.get("largest_drop", 0.0)))


class TimeShare:
    """Bindings and priorities of every unfinished trial, per device (see the module docstring).

    The controller tells it what happens (``bind``, ``started``, ``observe``, ``suspended``,
    ``forget``, device changes) and asks it what to do (``due``, ``should_preempt``, ``ranked``).
    """

    def __init__(self, options: TimeSharing, devices: Iterable[Key]):
        self.options = options
        self.devices: list[Key] = list(dict.fromkeys((str(n), str(g)) for n, g in devices))
        self.jobs: dict[int, JobShare] = {}
        self._counter = 0

    def _next(self) -> int:
        self._counter += 1
        return self._counter

    # ---- binding (Algorithms 1-2) --------------------------------------------------------

    def bound(self, device: Key) -> list[JobShare]:
        """The trials bound to ``device``, in bind order."""
        return sorted((j for j in self.jobs.values() if j.device == device), key=lambda j: j.order)

    def load(self) -> list[tuple[Key, int]]:
        counts = {key: 0 for key in self.devices}
        for job in self.jobs.values():
            if job.device in counts:
                counts[job.device] += 1
        return list(counts.items())

    def bind(self, trial_id: int, can_start: Callable[[Key], bool] | None = None) -> Key | None:
        """Bind ``trial_id`` (Algorithm 2) and return its device, or None (it stays in the
        global queue). fifo binds only where ``can_start(device)`` says it would start now."""
        job = self.jobs.get(trial_id)
        if job is not None and job.device is not None:
            return job.device
        load = self.load()
        if self.options.policy == "fifo":
            load = [(k, c) for k, c in load if can_start is None or can_start(k)]
            limit = MAX_JOBS_PER_DEVICE
        else:
            limit = self.options.max_jobs_per_device
        device = find_device(load, limit)
        if device is None:
            return None
        if job is None:
            job = self.jobs[trial_id] = JobShare(trial_id, self._next(), self._counter)
        job.device = device
        return device

    def device_of(self, trial_id: int) -> Key | None:
        job = self.jobs.get(trial_id)
        return job.device if job else None

    def forget(self, trial_id: int) -> None:
        """The trial ended for good: its device has room for another binding."""
        self.jobs.pop(trial_id, None)

    def add_device(self, key: Key) -> None:
        if key not in self.devices:
            self.devices.append(key)

    def remove_device(self, key: Key) -> list[int]:
        """The device is gone: its trials are unbound (back to the global queue, priorities
        kept); returns them."""
        if key in self.devices:
            self.devices.remove(key)
        hit = [j for j in self.jobs.values() if j.device == key]
        for job in hit:
            job.device, job.running, job.losses = None, False, []
        return [j.trial_id for j in hit]

    # ---- quanta -------------------------------------------------------------------------

    def started(self, trial_id: int, now: float) -> None:
        """The trial was launched on its device: a quantum begins."""
        job = self.jobs[trial_id]
        job.running, job.quantum_start, job.losses = True, now, []

    def observe(self, trial_id: int, loss: float) -> None:
        """A loss the trial reported while running."""
        job = self.jobs.get(trial_id)
        if job is not None and job.running and math.isfinite(loss):
            job.losses.append(float(loss))

    def quantum(self, trial_id: int) -> float:
        return quantum_length(self.options, self.jobs[trial_id].preemptions)

    def due(self, trial_id: int, now: float) -> bool:
        """The running trial's quantum has ended (time and reports, see the module docstring)."""
        job = self.jobs.get(trial_id)
        if job is None or not job.running or job.quantum_start is None:
            return False
        return (now - job.quantum_start >= self.quantum(trial_id)
                and len(job.losses) >= MIN_REPORTS)

    def close_quantum(self, trial_id: int, now: float) -> None:
        """End the trial's quantum: its priority from the quantum's losses; a new one begins."""
        job = self.jobs[trial_id]
        losses, job.losses = job.losses, []
        job.quantum_start = now
        if not losses:
            return
        drop = convergence(losses, job.last_loss)
        if self.options.policy == "slaq":
            job.largest_drop = max(job.largest_drop, abs(drop))
            job.priority = slaq_priority(drop, job.largest_drop)
        else:
            job.priority = drop
        job.last_loss = representative_loss(losses)
        job.quanta += 1

    def suspended(self, trial_id: int) -> None:
        """The trial left its device (preempted, retried, interrupted): it waits, bound."""
        job = self.jobs.get(trial_id)
        if job is not None:
            job.running, job.losses, job.quantum_start = False, [], None

    # ---- node scheduling (Algorithm 3) ----------------------------------------------------

    def rank_key(self, job: JobShare) -> tuple[Any, ...]:
        """Sort key: lower runs first."""
        policy = self.options.policy
        if policy == "fifo":
            return (job.order,)
        if policy == "rr":
            return (job.turn, job.order)
        new = job.priority is None
        return (0 if new else 1, job.order if new else -float(job.priority or 0.0), job.order)

    def ranked(self, trial_ids: Iterable[int]) -> list[int]:
        """``trial_ids`` (bound, known) best first."""
        jobs = [self.jobs[t] for t in trial_ids if t in self.jobs]
        return [j.trial_id for j in sorted(jobs, key=self.rank_key)]

    def should_preempt(self, running_id: int, waiting: Sequence[int], now: float) -> int | None:
        """Called for a running trial whose quantum is ``due``: closes the quantum, and returns
        the waiting trial (of ``waiting``, bound to the same device) that takes its place, or
        None when the running trial keeps the device (it is still best, or nothing waits)."""
        self.close_quantum(running_id, now)
        if self.options.policy == "fifo":
            return None
        running = self.jobs[running_id]
        if self.options.policy == "rr":
            running.turn = self._next()        # to the back of the round
        best = self.ranked(waiting)
        if best and self.rank_key(self.jobs[best[0]]) < self.rank_key(running):
            return best[0]
        return None

    def preempted(self, trial_id: int) -> None:
        """The trial was asked to leave its device: its next quantum is longer (growth)."""
        job = self.jobs[trial_id]
        job.preemptions += 1
        if self.options.policy == "rr":
            job.turn = self._next()

    # ---- views and persistence -----------------------------------------------------------

    def describe(self, trial_id: int) -> dict[str, Any] | None:
        """What status displays show: device, priority (None: new), quanta, preemptions."""
        job = self.jobs.get(trial_id)
        if job is None:
            return None
        return {"device": "/".join(job.device) if job.device else None,
                "priority": job.priority, "quanta": job.quanta, "preemptions": job.preemptions}

    def state_dict(self) -> dict[str, Any]:
        return {"counter": self._counter,
                "jobs": {str(t): j.to_dict() for t, j in sorted(self.jobs.items())}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Take back bindings and priorities after a restart; bindings to devices that are not
        in the inventory any more are dropped (those trials go back to the global queue)."""
        self._counter = int(state.get("counter", 0))
        self.jobs = {}
        for key, d in (state.get("jobs") or {}).items():
            job = JobShare.from_dict(int(key), d)
            if job.device is not None and job.device not in self.devices:
                job.device = None
            self.jobs[job.trial_id] = job
