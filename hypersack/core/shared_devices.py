"""The controller's time-sharing part: which bound trial starts on which device, who is preempted.

Pure glue between the controller's trial records and :class:`hypersack.core.timesharing.TimeShare`
(the decisions). The controller calls, in this order each turn: ``observe`` for every accepted
result, ``preemptions`` from ``tick`` (trials to send a ``Preempt``), then ``bind`` / ``starts``
from ``launches``. It reports what happened with ``started``, ``left`` (a trial left its device
but stays: preempted, retried, interrupted) and ``forget`` (finished or paused).

Capacity of a device: the trials running on it fit ``r x C`` compute and its memory (the
placement model's GPU; with the ``exclusive`` placement policy, one trial). The running trials
that are being suspended still count until they have left. Each trial uses one device: a
data-parallel demand (``resources`` > 1) is not time-shared (the trial runs on its bound device).

What status views show is kept in the trial's ``info["time_sharing"]``: ``state`` (running or
waiting), ``priority`` (None while new), ``device``, ``quanta`` and ``preemptions``.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from hypersack.core.objective import Objective
from hypersack.core.timesharing import Key, TimeShare, TimeSharing
from hypersack.core.trial import TrialRecord, TrialState

__all__ = ["SharedDevices", "INFO_KEY"]

INFO_KEY = "time_sharing"
_EPS = 1e-9


class SharedDevices:
    def __init__(self, options: TimeSharing, allocator: Any, objective: Objective,
                 state: Mapping[str, Any] | None = None):
        self.options = options
        self.allocator = allocator
        self.objective = objective
        self.share = TimeShare(options, self._inventory_keys())
        self._touched: set[int] = set()
        if state:
            self.share.load_state_dict(state)

    def _inventory_keys(self) -> list[Key]:
        return [(str(node.id), str(gpu.id)) for node, gpu in self.allocator.inventory.gpus()]

    def _gpu(self, key: Key) -> Any:
        for node, gpu in self.allocator.inventory.gpus():
            if (str(node.id), str(gpu.id)) == key:
                return gpu
        return None

    # ---- losses -------------------------------------------------------------------------

    def loss(self, metrics: Mapping[str, Any]) -> float | None:
        """The loss a report gives (see ``TimeSharing.metric``), or None when it has none."""
        name = self.options.metric or self.objective.metric
        value = metrics.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return float(value) if self.options.metric else -self.objective.sign() * float(value)

    def observe(self, record: TrialRecord, metrics: Mapping[str, Any]) -> None:
        loss = self.loss(metrics)
        if loss is not None:
            self.share.observe(record.trial_id, loss)

    # ---- capacity -----------------------------------------------------------------------

    def fits(self, key: Key, on_device: Sequence[TrialRecord], record: TrialRecord) -> bool:
        """Whether ``record`` may run on ``key`` beside ``on_device`` (see the module docstring)."""
        if not on_device:
            return True
        if self.allocator.policy == "exclusive":
            return False
        gpu = self._gpu(key)
        if gpu is None:
            return False
        compute = memory = 0.0
        for r in list(on_device) + [record]:
            demand = self.allocator.demand(r).demand(gpu.arch)
            compute, memory = compute + demand.compute, memory + demand.memory_gb
        return bool(compute <= gpu.capacity + _EPS and memory <= gpu.memory_gb + _EPS)

    def _running_on(self, running: Iterable[TrialRecord]) -> dict[Key, list[TrialRecord]]:
        out: dict[Key, list[TrialRecord]] = {key: [] for key in self.share.devices}
        for r in running:
            key = self.share.device_of(r.trial_id)
            if key in out:
                out[key].append(r)
        return out

    # ---- binding and starting -----------------------------------------------------------

    def bind(self, record: TrialRecord, running: Sequence[TrialRecord],
             waiting: Sequence[TrialRecord] = ()) -> Key | None:
        """Bind ``record`` (Algorithm 2; fifo: only to a device that starts it now)."""
        on = self._running_on(running)
        waits = {self.share.device_of(w.trial_id) for w in waiting if w is not record}

        def can_start(key: Key) -> bool:
            return key not in waits and self.fits(key, on.get(key, []), record)
        key = self.share.bind(record.trial_id, can_start)
        if key is not None:
            self._note(record, "waiting")
        return key

    def has_room(self, like: TrialRecord | None, running: Sequence[TrialRecord],
                 waiting: Sequence[TrialRecord]) -> bool:
        """Whether a new trial (demanding what ``like`` does) would be bound now."""
        if self.options.policy != "fifo":
            return any(n < self.options.max_jobs_per_device for _, n in self.share.load())
        on = self._running_on(running)
        waits = {self.share.device_of(w.trial_id) for w in waiting}
        probe = like if like is not None else None
        return any(key not in waits and (probe is None or self.fits(key, on[key], probe))
                   for key in self.share.devices)

    def starts(self, pending: Sequence[TrialRecord],
               running: Sequence[TrialRecord]) -> list[tuple[TrialRecord, Key]]:
        """Bound pending trials to launch now, each on its device: per device, best first
        (Algorithm 3's order), while they fit beside what runs there."""
        on = self._running_on(running)
        by_device: dict[Key, list[TrialRecord]] = {}
        for r in pending:
            key = self.share.device_of(r.trial_id)
            if key is not None:
                by_device.setdefault(key, []).append(r)
        out: list[tuple[TrialRecord, Key]] = []
        for key in self.share.devices:
            records = {r.trial_id: r for r in by_device.get(key, [])}
            for trial_id in self.share.ranked(records):
                record = records[trial_id]
                if not self.fits(key, on[key], record):
                    break                  # the best waiting trial waits for room: no overtaking
                on[key].append(record)
                out.append((record, key))
        return out

    def started(self, record: TrialRecord, now: float) -> None:
        self.share.started(record.trial_id, now)
        self._note(record, "running")

    def left(self, record: TrialRecord) -> None:
        """``record`` left its device but stays in the study (it waits, bound)."""
        if record.trial_id in self.share.jobs:
            self.share.suspended(record.trial_id)
            self._note(record, "waiting")

    def forget(self, record: TrialRecord) -> None:
        """``record`` finished, or was paused by its algorithm: it frees its binding."""
        self.share.forget(record.trial_id)
        record.info.pop(INFO_KEY, None)

    # ---- preemption ---------------------------------------------------------------------

    def preemptions(self, trials: Mapping[int, TrialRecord], running_ids: Iterable[int],
                    now: float) -> list[int]:
        """Running trials to preempt now (Algorithm 3 at the end of their quanta). A trial is
        preemptible when nothing else was asked of it and its last report carried a checkpoint."""
        running = [trials[t] for t in sorted(running_ids)]
        waiting: dict[Key, list[int]] = {}
        for job in self.share.jobs.values():
            record = trials.get(job.trial_id)
            if job.device is not None and record is not None and record.state is TrialState.PENDING:
                waiting.setdefault(job.device, []).append(job.trial_id)
        out: list[int] = []
        for record in running:
            if record.stop_reason is not None or not self.share.due(record.trial_id, now):
                continue
            key = self.share.device_of(record.trial_id)
            candidates = waiting.get(key, []) if key is not None else []
            pick = self.share.should_preempt(record.trial_id, candidates, now)
            self._note(record, "running")
            if pick is None or not _suspendable(record):
                continue
            candidates.remove(pick)           # one waiting trial takes one place
            self.share.preempted(record.trial_id)
            out.append(record.trial_id)
        return out

    # ---- views --------------------------------------------------------------------------

    def _note(self, record: TrialRecord, state: str) -> None:
        described = self.share.describe(record.trial_id)
        if described is not None:
            record.info[INFO_KEY] = {"state": state, **described}
            self._touched.add(record.trial_id)

    def take_touched(self) -> set[int]:
        """Trials whose ``info["time_sharing"]`` changed since the last call (to be stored)."""
        touched, self._touched = self._touched, set()
        return touched

    def state_dict(self) -> dict[str, Any]:
        return self.share.state_dict()

    def add_device(self, node_id: str, gpu_id: str) -> None:
        self.share.add_device((str(node_id), str(gpu_id)))

    def remove_device(self, node_id: str, gpu_id: str) -> list[int]:
        return self.share.remove_device((str(node_id), str(gpu_id)))


def _suspendable(record: TrialRecord) -> bool:
    """Its last report carried a checkpoint: suspending it after its next step loses nothing."""
    return record.checkpoint is not None and record.checkpoint_step == record.last_step
