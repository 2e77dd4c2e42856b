"""The executor on this machine: trials on the devices the controller picks, in warm workers.

Transport only. Each device (a GPU, or a share of the CPU cores without GPUs) keeps warm workers
(``pool``), so a trainable's imports (torch included) are paid once per worker. Several trials
may share a device (placement with oversubscription): a device then keeps more warm workers
(``core.devices.warm_workers``). A data-parallel trial placed on k devices runs as k workers
(ranks) that rendezvous through torch.distributed on a free port; rank 0 talks for the trial.
Fused packs are the ``PackHost``'s (``packs``). What a failure means, timeouts included, is the
controller's to decide: this executor reports facts (a worker died, a device was lost, the
trainable raised, ran out of memory or filled the disk) and ends trials it is told to cancel.
A ``Preempt`` is a Stop; on a GPU the preempted trial's workers are then ended (not kept warm),
so its process releases the device's memory, and a fresh warm worker takes its place.
"""
from __future__ import annotations

import dataclasses
import select
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from hypersack.core.devices import first_free_device, warm_workers
from hypersack.core.timeouts import straggling
from hypersack.core.trial import (Cancel, Command, DeviceLost, Event, FailureCause, Launch,
                                  Preempt, ResultReported, Stop, TrialFailed, TrialFinished,
                                  TrialHeartbeat, TrialProfiled, TrialStarted)
from hypersack.runtime.devices.slots import Slot, slots_cluster
from hypersack.runtime.executors.packs import PackHost, TaskPackPlan, describe_exit, failure_event
from hypersack.runtime.executors.pool import Worker, WorkerPool
from hypersack.runtime.worker.messages import (Ack, Alive, BadMessage, Done, Failed, Profiled, Reported,
                                               Reports, RunTrial, Started, StopTrial, TrialTask,
                                               WorldSpec)
from hypersack.runtime.worker.trainable import TrainableRef

__all__ = ["LocalExecutor"]

NODE_ID = "local"
LIVENESS_S = 0.5     # every worker's process is checked at least this often (see ``poll``)
#: Posted reports a plain trial's worker may have awaiting their acks at once (pipelining below
#: the trial's next decision point): a turn's commit then holds many reports per trial.
REPORT_WINDOW = 32


@dataclass(eq=False)
class _Job:
    """A running plain trial: its workers, rank 0 first."""
    trial_id: int
    workers: list[Worker]
    finished_ranks: set[int] = field(default_factory=set)
    rank0_done_at: float | None = None
    started: bool = False       # rank 0 said Started: heartbeats count from then on
    beats: set[int] = field(default_factory=set)   # ranks heard since the last TrialHeartbeat
    retire: bool = False        # preempted on a GPU: its workers end with it (memory freed)


class LocalExecutor:
    def __init__(self, slots: list[Slot], trainable: TrainableRef, *,
                 trial_dir: Callable[[int], Path], metric: str,
                 steps_for: Callable[[dict[str, Any]], int | None] = lambda config: None,
                 clock: Callable[[], float] = time.monotonic,
                 cluster: Any = None, share_env: Callable[[Slot, float | None], dict[str, Any]] | None = None,
                 profile: Callable[[dict[str, Any]], bool] = lambda config: False,
                 device_events: Callable[[], list[Event]] | None = None,
                 packs: TaskPackPlan | None = None, unsafe_checkpoints: bool = False,
                 report_window: int = REPORT_WINDOW, max_log_bytes: int | None = None):
        self._slots = {slot.key: slot for slot in slots}
        self._trainable = trainable
        self._trial_dir = trial_dir
        self._metric = metric
        self._steps_for = steps_for
        self._clock = clock
        self._cluster = cluster
        self._profile = profile
        self._device_events = device_events
        self._unsafe_checkpoints = unsafe_checkpoints
        self._window = report_window
        self._max_log_bytes = max_log_bytes
        self._pool = WorkerPool(self._slots, share_env)
        self._packs = PackHost(packs, self._pool, trial_dir=trial_dir, steps_for=steps_for,
                               unsafe_checkpoints=unsafe_checkpoints) if packs else None
        self._jobs: dict[int, _Job] = {}
        self._awaiting: dict[int, Worker] = {}   # trial -> the worker waiting for its ack
        self._unacked: dict[int, int] = {}       # trial -> its reports read, not yet acked
        self._pending: list[Event] = []          # events made by commands, for the next poll
        self._swept = time.monotonic()           # the last liveness check of every worker
        self._poller = _Poller()                 # every busy pipe and every worker's sentinel

    # ---- lifecycle -------------------------------------------------------------------------

    def inventory(self) -> Any:
        """The devices, as a placement Cluster (built from the slots unless one was given)."""
        if self._cluster is None:
            self._cluster = slots_cluster(list(self._slots.values()), node_id=NODE_ID)
        return self._cluster

    def start(self) -> None:
        """Spawn the warm workers: as many per device as trials may share it."""
        ratios = {g.id: g.oversubscription for _, g in self._cluster.gpus()} if self._cluster else {}
        self._pool.start({key: warm_workers(ratios.get(key, 1.0)) for key in self._slots})

    def _busy_workers(self) -> list[Worker]:
        """Workers running a plain trial or a pack, each once."""
        seen: dict[int, Worker] = {}
        for job in self._jobs.values():
            for w in job.workers:
                seen.setdefault(id(w), w)
        for pack in self._packs.packs if self._packs else ():
            seen.setdefault(id(pack.worker), pack.worker)
        return list(seen.values())

    def shutdown(self, kill: bool = False) -> None:
        self._pool.shutdown(self._busy_workers(), kill)
        self._jobs, self._awaiting, self._unacked = {}, {}, {}
        if self._packs:
            self._packs.packs, self._packs.members = [], {}

    def worker_pids(self) -> list[int]:
        """Process ids of every live worker, idle or busy (diagnostics and tests)."""
        return sorted(w.process.pid for w in self._pool.idle + self._busy_workers()
                      if w.process.is_alive())

    # ---- commands --------------------------------------------------------------------------

    def submit(self, command: Command) -> None:
        if isinstance(command, Launch):
            if command.pack is not None:
                self._launch_member(command)
            else:
                self._launch(command)
        elif isinstance(command, Stop):
            job = self._jobs.get(command.trial_id)
            if job is not None and isinstance(command, Preempt):
                job.retire = any(w.slot.gpu is not None for w in job.workers)
            for w in self._job_workers(command.trial_id):
                w.send(StopTrial(command.trial_id))
            if self._packs is not None:
                self._packs.stop(command.trial_id)
        elif isinstance(command, Cancel):
            self._cancel(command)

    def _cancel(self, command: Cancel) -> None:
        trial_id = command.trial_id
        if trial_id in self._jobs:
            self._end_job(trial_id, kill=True)
        elif self._packs is not None and trial_id in self._packs.members:
            # not responding (WORKER_DIED): its whole pack went silent; the pack process goes
            self._pending.extend(self._packs.forget(
                trial_id, kill=command.cause is FailureCause.WORKER_DIED))
        else:
            return
        self._awaiting.pop(trial_id, None)
        self._unacked.pop(trial_id, None)
        self._pending.append(TrialFailed(trial_id, command.reason, cause=command.cause))

    def _job_workers(self, trial_id: int) -> list[Worker]:
        job = self._jobs.get(trial_id)
        return job.workers if job else []

    def _launch_member(self, launch: Launch) -> None:
        """A member joins the pack its Launch names, or starts it on its placed device (a
        Launch without devices: on a free one)."""
        if self._packs is None:         # a loop bug: the controller seats no member then
            raise RuntimeError(f"trial {launch.trial_id} has a pack, but the study has no pack plan")
        key = launch.devices[0][1] if launch.devices else None
        self._packs.launch(launch, lambda: self._slot(
            key if key is not None else self._any_free_slot(launch.trial_id), launch.trial_id))

    def _launch(self, launch: Launch) -> None:
        keys = [gpu for _, gpu in launch.devices] or [self._any_free_slot(launch.trial_id)]
        port = _free_port() if len(keys) > 1 else None
        self.launch_ranks(launch, keys, list(range(len(keys))), WorldSpec(len(keys), 0, port))

    def launch_ranks(self, launch: Launch, keys: list[str], ranks: list[int],
                     world: WorldSpec) -> None:
        """Start the ranks ``ranks`` of ``launch``, one on each device of ``keys``, in the group
        ``world`` (its size, rank 0's host and port). The trial's other ranks, if any, run
        elsewhere (an executor spanning machines); this executor reports its own ranks only."""
        workers = [self._pool.take(self._slot(key, launch.trial_id), launch.compute_share)
                   for key in keys]
        self._jobs[launch.trial_id] = _Job(launch.trial_id, workers)
        for rank, worker in zip(ranks, workers):
            worker.trial_id, worker.rank = launch.trial_id, rank
            ranked = world if world.rank == rank else dataclasses.replace(world, rank=rank)
            worker.send(RunTrial(self._task(launch, worker, ranked)))
            worker.has_trainable = True

    def _task(self, launch: Launch, worker: Worker, world: WorldSpec) -> TrialTask:
        ref = self._trainable
        trainable = (ref.key, None, None) if worker.has_trainable else (ref.key, ref.reference, ref.payload)
        return TrialTask(launch.trial_id, launch.config, launch.seed, launch.attempt,
                         worker.slot.device, str(self._trial_dir(launch.trial_id)), self._metric,
                         self._steps_for(launch.config), world, bool(self._profile(launch.config)),
                         launch.checkpoint, self._unsafe_checkpoints, trainable, self._window,
                         launch.free_below, self._max_log_bytes)

    def _slot(self, key: str, trial_id: int) -> Slot:
        if key not in self._slots:
            raise RuntimeError(f"trial {trial_id} placed on unknown device {key!r}")  # a loop bug
        return self._slots[key]

    def _any_free_slot(self, trial_id: int) -> str:
        busy = {w.slot.key for job in self._jobs.values() for w in job.workers}
        key = first_free_device(list(self._slots), busy)
        if key is None:
            raise RuntimeError(f"no free slot for trial {trial_id}")   # a loop bug, not user input
        return key

    def acknowledge(self, trial_ids: Iterable[int], free_below: Mapping[int, int]) -> None:
        """Ack every report read of each waiting trial of ``trial_ids`` (the others keep
        waiting; one Ack per trial covers them all: the loop calls this once the turn holding
        them is durable, with no poll in between) with its ``free_below`` (the loop's; a trial
        it leaves out: 0), below which its worker need not wait (pipelining). An executor that
        relays this one's events (a Ray node's agent) must build it with ``report_window=1``:
        its driver acks the results it has seen, and with one report in flight per trial those
        are all read here."""
        for trial_id in trial_ids:
            worker = self._awaiting.pop(trial_id, None)
            if worker is not None:
                worker.send(Ack(trial_id, free_below.get(trial_id, 0),
                                self._unacked.pop(trial_id, 1)))

    # ---- events ----------------------------------------------------------------------------

    def poll(self, timeout: float) -> list[Event]:
        """Events since the last poll, waiting up to ``timeout`` seconds for the first (none
        when some are already known). One ``poll(2)`` over every busy worker's pipe and every
        worker's exit sentinel; only the pipes it finds readable are read and only the workers
        whose sentinel fired are checked for death (all of them at least every
        ``LIVENESS_S``, for a worker that died while a child it forked keeps its sentinel)."""
        events: list[Event] = self._pending + self._stragglers() + self._devices_changed()
        self._pending = []
        if self._packs is not None:
            events = self._packs.end_empty() + events
        busy = self._busy_workers()
        idle = self._pool.idle
        pipes = [w.pipe.fileno() for w in busy]
        ready = self._poller.ready(pipes + [w.process.sentinel for w in busy + idle],
                                   0 if events else timeout)
        now = time.monotonic()
        sweep = now - self._swept >= LIVENESS_S
        if sweep:
            self._swept = now
        host = self._packs
        pack_of = {id(p.worker): p for p in host.packs} if host is not None else {}
        for w, fd in zip(busy, pipes):
            pack = pack_of.get(id(w)) if pack_of else None
            if pack is not None and host is not None:
                events.extend(self._watch(host.drain(pack)))
                continue
            exited = sweep or w.process.sentinel in ready
            if fd not in ready and not exited:          # most workers, most turns
                continue
            job = self._jobs.get(w.trial_id) if w.trial_id is not None else None
            if job is None or w not in job.workers:
                continue
            if fd in ready:
                events.extend(self._drain(job, w))
            if job.trial_id in self._jobs and exited and not w.process.is_alive():
                events.extend(self._worker_died(job, w))
        dead = [w for w in idle if sweep or w.process.sentinel in ready]
        self._pool.replace_dead_idle({w.slot.key for w in self._busy_workers()}, dead)
        return events

    def _watch(self, events: list[Event]) -> list[Event]:
        """Note which pack members wait for an ack."""
        for event in events:
            if isinstance(event, ResultReported) and self._packs is not None:
                self._awaiting[event.trial_id] = self._packs.members[event.trial_id].worker
                self._unacked[event.trial_id] = 1      # a member waits at every report
        return events

    def _drain(self, job: _Job, w: Worker) -> list[Event]:
        """The messages waiting in ``w``'s pipe (found readable by ``poll``) as events (a
        report is read as its ``ResultReported`` at once, a ``Reports`` as theirs). A
        message that cannot be used (``BadMessage``) fails the trial and kills its workers
        (they may wait for an ack that will never come); a pipe closed under a worker that
        still runs (its trainable closed the descriptor) is that worker's death. Neither stops
        the driver, nor leaves it polling a dead pipe."""
        events: list[Event] = []
        pipe = w.pipe
        try:
            while True:
                got = pipe.recv(_AS_EVENTS)
                if type(got) is tuple:            # a Reports: its results, oldest first
                    if got[0].trial_id == job.trial_id and w.rank == 0:
                        self._reported(job, w, len(got))
                        events.extend(got)
                else:
                    event = self._event(job, w, got)
                    if event is not None:
                        events.append(event)
                if job.trial_id not in self._jobs or not pipe.poll(0):
                    break
        except (EOFError, OSError):     # its end of the pipe is closed: it cannot go on
            if job.trial_id in self._jobs:
                w.process.kill()
                w.process.join(1.0)
                events.extend(self._worker_died(job, w))
        except BadMessage as exc:
            if job.trial_id in self._jobs:
                self._end_job(job.trial_id, kill=True)
                events.append(TrialFailed(job.trial_id, f"its worker sent {exc}",
                                          cause=FailureCause.ERROR))
        return events

    def _event(self, job: _Job, w: Worker, message: Any) -> Event | None:
        """The event a message read from ``w`` makes (a report comes as its event), or None."""
        kind = type(message)
        if kind is Alive:
            return self._alive(job, w)
        if getattr(message, "trial_id", None) != job.trial_id:
            return None
        if kind is ResultReported:                          # most messages: asked first
            if w.rank != 0:
                return None
            self._reported(job, w, 1)
            return message                                  # type: ignore[no-any-return]
        if kind is Done or kind is Failed:
            return self._rank_ended(job, w, message)
        if w.rank != 0:
            return None
        if kind is Started:
            job.started = True
            return TrialStarted(job.trial_id, w.slot.label if len(job.workers) == 1
                                else "+".join(x.slot.label for x in job.workers))
        if kind is Profiled:
            return TrialProfiled(job.trial_id, message.profile)
        return None

    def _alive(self, job: _Job, w: Worker) -> TrialHeartbeat | None:
        """A heartbeat of ``w``: the trial's, once every one of its workers has sent one since
        its last (a stopped rank keeps its trial silent while the others still beat), after
        its TrialStarted (one sent before comes from the worker's previous trial)."""
        if not job.started:
            return None
        job.beats.add(w.rank)
        if len(job.beats) < len(job.workers):
            return None
        job.beats.clear()
        return TrialHeartbeat(job.trial_id)

    def _reported(self, job: _Job, w: Worker, reports: int) -> None:
        """Rank 0 sent ``reports`` reports: they await their ack."""
        self._awaiting[job.trial_id] = w
        self._unacked[job.trial_id] = self._unacked.get(job.trial_id, 0) + reports

    def _rank_ended(self, job: _Job, w: Worker, message: Done | Failed) -> Event | None:
        if isinstance(message, Failed):
            # One rank failed: the others would hang in their collectives.
            self._end_job(job.trial_id, kill=len(job.workers) > 1, keep=w)
            return failure_event(message)
        job.finished_ranks.add(w.rank)
        if w.rank == 0:
            job.rank0_done_at = self._clock()
        if len(job.finished_ranks) == len(job.workers):
            self._end_job(job.trial_id, kill=job.retire)
            return TrialFinished(job.trial_id)
        return None

    def _end_job(self, trial_id: int, *, kill: bool, keep: Worker | None = None) -> None:
        """Forget the job; its workers go back idle, or are killed (``keep`` survives a kill)."""
        job = self._jobs.pop(trial_id)
        self._awaiting.pop(trial_id, None)
        self._unacked.pop(trial_id, None)
        for w in job.workers:
            w.trial_id = None
            if kill and w is not keep:
                w.kill()
            else:
                self._pool.give_back(w)

    def _worker_died(self, job: _Job, w: Worker) -> list[Event]:
        code = w.process.exitcode
        w.pipe.close()
        self._end_job(job.trial_id, kill=True, keep=w)
        self._pool.forget(w)
        return [TrialFailed(job.trial_id, f"worker process died ({describe_exit(code)})",
                            cause=FailureCause.WORKER_DIED)]

    def _devices_changed(self) -> list[Event]:
        """Device events from the monitor; trials on a lost device are killed and reported
        (they restart from their checkpoints elsewhere)."""
        if self._device_events is None:
            return []
        events: list[Event] = []
        for event in self._device_events():
            events.append(event)
            if isinstance(event, DeviceLost):
                reason = f"device {event.gpu_id} was lost"
                if self._packs is not None:
                    events.extend(self._packs.kill_on(event.gpu_id, reason))
                for job in list(self._jobs.values()):
                    if any(w.slot.key == event.gpu_id for w in job.workers):
                        self._end_job(job.trial_id, kill=True)
                        events.append(TrialFailed(job.trial_id, reason,
                                                  cause=FailureCause.DEVICE_LOST))
        return events

    def _stragglers(self) -> list[Event]:
        """Ranks still running ``RANK_GRACE_S`` after rank 0 finished are ended: the trial is
        finished (``core.timeouts.straggling``)."""
        events: list[Event] = []
        now = self._clock()
        for job in list(self._jobs.values()):
            if straggling(job.rank0_done_at, now):
                self._end_job(job.trial_id, kill=True)
                events.append(TrialFinished(job.trial_id))
        return events


def _results(trial_id: int, results: tuple[tuple[int, dict[str, Any]], ...]
             ) -> tuple[ResultReported, ...]:
    """A ``Reports``'s results as events, oldest first (none carries a checkpoint). Each is
    made by ``_new_result``: the burst's events are most of what a burst costs the reader."""
    return tuple([_new_result(trial_id, step, metrics) for step, metrics in results])


def _fast_result(trial_id: int, step: int, metrics: dict[str, Any],
                 checkpoint: str | None = None) -> ResultReported:
    """``ResultReported(trial_id, step, metrics, checkpoint)``, its fields set as its
    ``__init__`` sets them but without the frozen dataclass's ``object.__setattr__`` per field
    (most of its cost). Only for a class whose ``__init__`` does nothing else (``_new_result``)."""
    event = _NEW(ResultReported)
    fields = event.__dict__
    fields["trial_id"] = trial_id
    fields["step"] = step
    fields["metrics"] = metrics
    fields["checkpoint"] = checkpoint
    return event


_NEW = object.__new__


def _plain_init(cls: type, names: tuple[str, ...]) -> bool:
    """Whether ``cls`` is a dataclass of exactly the fields ``names`` (in that order, each set
    by ``__init__``, no init-only or class variable beside them) whose ``__init__`` does
    nothing else: no ``__post_init__``, no slots."""
    if (not dataclasses.is_dataclass(cls) or hasattr(cls, "__post_init__")
            or hasattr(cls, "__slots__")):
        return False
    found = dataclasses.fields(cls)
    return (tuple(f.name for f in found) == names and all(f.init for f in found)
            and len(getattr(cls, "__dataclass_fields__")) == len(names))


#: ``_fast_result`` while ``ResultReported`` stays a plain dataclass, else the class itself.
_new_result: Callable[..., ResultReported] = (
    _fast_result if _plain_init(ResultReported, ("trial_id", "step", "metrics", "checkpoint"))
    else ResultReported)


#: How ``_drain`` reads reports: straight into their events (``Pipe.recv``'s ``make``).
_AS_EVENTS: dict[type, Callable[..., Any]] = {Reported: _new_result, Reports: _results}


class _Poller:
    """A ``poll(2)`` set kept from one call to the next: ``ready`` registers only the
    descriptors new since the last call and drops those gone (a set built per call, as
    ``multiprocessing.connection.wait`` builds a selector, costs a registration per worker
    per turn). A descriptor number closed and reused between calls is simply polled again:
    ``select.poll`` keeps numbers, not open files."""

    def __init__(self) -> None:
        self._poll = select.poll()
        self._fds: set[int] = set()

    def ready(self, fds: list[int], timeout: float) -> set[int]:
        """The descriptors of ``fds`` that are readable (or closed) within ``timeout`` seconds:
        one ``poll(2)`` call."""
        wanted = set(fds)
        if wanted != self._fds:
            for fd in self._fds - wanted:
                self._poll.unregister(fd)
            for fd in wanted - self._fds:
                self._poll.register(fd, _READABLE)
            self._fds = wanted
        if not wanted:
            if timeout > 0:
                time.sleep(timeout)
            return set()
        return {fd for fd, _ in self._poll.poll(max(0, int(timeout * 1000 + 0.999)))}


_READABLE = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR


def _free_port() -> int:
    """A free TCP port on this host for a data-parallel trial's rendezvous store."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
