"""A pool of worker processes on this machine, running trials on the devices the controller picks.

Each device (a GPU, or a share of the CPU cores without GPUs) keeps warm workers: spawned once,
so a trainable's imports (torch included) are paid once per worker, and reused for later trials.
Several trials may share a device (placement with oversubscription): a device then gets more
workers. A data-parallel trial placed on k devices runs as k workers (ranks) that rendezvous
through torch.distributed; rank 0 talks for the trial. A worker that dies under a trial is replaced
and its trial reported as a retryable failure; a trial over its time limit is killed.

Fused packs (``packs``: a ``PackPlan``, for ``execution: fused | auto``): a launch whose config
fuses joins a running pack on its device with the same fusibility key and a free seat (fewer
than ``max_members``, or the pack's measured memory cap), else starts a new pack in a worker of
that device. To the study a member is an ordinary trial: its own events, acks, stop and
checkpoint. A member that ends frees its seat and the next launch routed there is loaded
without restarting the pack; a pack with no members left is ended at the next poll (launches of
the turn in between have joined it) and its process returns to the idle pool. A pack process
that dies fails every member as retryable (they restart from their checkpoints). A member that
is cancelled or times out is asked to stop (its pack keeps running) and reported failed at once.
"""
from __future__ import annotations

import math
import signal
import socket
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from hypersack.core.trial import (Cancel, CheckpointSaved, Command, DeviceLost, Event, Launch,
                                  ResultReported, Stop, TrialFailed, TrialFinished, TrialProfiled,
                                  TrialStarted)
from hypersack.runtime.devices import Slot, slots_cluster
from hypersack.runtime.trainable import TrainableRef
from hypersack.runtime.worker_entry import WorkerProcess

if TYPE_CHECKING:
    from hypersack.runtime.pack_worker import PackPlan

__all__ = ["LocalExecutor"]

NODE_ID = "local"
RANK_GRACE_S = 60.0     # other ranks must finish this soon after rank 0 is done


@dataclass
class _Worker:
    slot: Slot
    env_key: tuple
    process: Any
    conn: Any
    trial_id: int | None = None
    rank: int = 0
    has_trainable: bool = False


@dataclass
class _Pack:
    """A pack process: ``members`` are the trials it holds (sent and not yet done or failed)."""
    pack_id: int
    worker: _Worker
    key: tuple            # (device key, fusibility key)
    cap: int
    members: set[int] = field(default_factory=set)
    failed: bool = False


@dataclass
class _Job:
    """A running trial: its workers, rank 0 first (a pack member: its pack's worker)."""
    trial_id: int
    workers: list[_Worker]
    started_at: float
    finished_ranks: set[int] = field(default_factory=set)
    rank0_done_at: float | None = None
    pack: _Pack | None = None
    awaiting_ack: bool = False


class LocalExecutor:
    def __init__(self, slots: list[Slot], trainable: TrainableRef, *,
                 trial_dir: Callable[[int], Path], metric: str,
                 steps_for: Callable[[dict], int | None] = lambda config: None,
                 trial_timeout_s: float | None = None, clock: Callable[[], float] = time.monotonic,
                 cluster: Any = None, share_env: Callable[[Slot, float | None], dict] | None = None,
                 profile: Callable[[dict], bool] = lambda config: False,
                 device_events: Callable[[], list[Event]] | None = None,
                 packs: "PackPlan | None" = None):
        self._slots = {slot.key: slot for slot in slots}
        self._trainable = trainable
        self._trial_dir = trial_dir
        self._metric = metric
        self._steps_for = steps_for
        self._timeout = trial_timeout_s
        self._clock = clock
        self._cluster = cluster
        self._share_env = share_env
        self._profile = profile
        self._device_events = device_events
        self._idle: list[_Worker] = []
        self._jobs: dict[int, _Job] = {}
        self._pending: list[Event] = []     # events made by commands, handed out by the next poll
        self._plan = packs
        self._packs: list[_Pack] = []
        self._pack_count = 0

    # ---- lifecycle -------------------------------------------------------------------------

    def inventory(self) -> Any:
        """The devices, as a placement Cluster (built from the slots unless one was given)."""
        if self._cluster is None:
            self._cluster = slots_cluster(list(self._slots.values()), node_id=NODE_ID)
        return self._cluster

    def start(self) -> None:
        """Spawn the warm workers: as many per device as trials may share it (its ratio)."""
        self._idle = [self._spawn(slot, None) for slot in self._slots.values()
                      for _ in range(self._sharing(slot))]

    def _sharing(self, slot: Slot) -> int:
        if self._cluster is None:
            return 1
        ratios = [g.oversubscription for _, g in self._cluster.gpus() if g.id == slot.key]
        return max(1, math.ceil(ratios[0])) if ratios else 1

    def _spawn(self, slot: Slot, share: float | None) -> _Worker:
        env = dict(slot.env)
        if self._share_env is not None:
            env.update(self._share_env(slot, share))
        # Its own program (hypersack.runtime.worker_entry): never a re-run of the user's script.
        process = WorkerProcess(env, name=f"hypersack-worker-{slot.key}")
        return _Worker(slot, (slot.key, share), process, process.conn)

    def _busy_workers(self) -> list[_Worker]:
        """Workers running a plain trial or a pack, each once."""
        seen: dict[int, _Worker] = {}
        for job in self._jobs.values():
            for w in job.workers:
                seen.setdefault(id(w), w)
        for pack in self._packs:
            seen.setdefault(id(pack.worker), pack.worker)
        return list(seen.values())

    def shutdown(self, kill: bool = False) -> None:
        workers = self._idle + self._busy_workers()
        for w in workers:
            if kill:
                w.process.kill()
            else:
                self._send(w, ("shutdown",))
        deadline = time.monotonic() + 5.0
        for w in workers:
            w.process.join(max(0.0, deadline - time.monotonic()))
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
            w.conn.close()
        self._idle, self._jobs, self._packs = [], {}, []

    def worker_pids(self) -> list[int]:
        """Process ids of every live worker, idle or busy (diagnostics and tests)."""
        return sorted(w.process.pid for w in self._idle + self._busy_workers() if w.process.is_alive())

    def pack_pids(self) -> dict[int, list[int]]:
        """Process id of each running pack -> the trials it holds (diagnostics and tests)."""
        return {p.worker.process.pid: sorted(p.members) for p in self._packs}

    # ---- commands --------------------------------------------------------------------------

    def free_slots(self) -> int:
        """Devices with no trial on them (for a study without placement)."""
        busy = {w.slot.key for w in self._busy_workers()}
        return sum(1 for key in self._slots if key not in busy)

    def submit(self, command: Command) -> None:
        if isinstance(command, Launch):
            if self._plan is not None and self._plan.fuses(command.config):
                self._launch_member(command)
            else:
                self._launch(command)
        elif isinstance(command, Stop):
            for w in self._job_workers(command.trial_id):
                self._send(w, ("stop", command.trial_id))
        elif isinstance(command, Cancel):
            if command.trial_id in self._jobs:
                self._end_job(command.trial_id, kill=True)
                self._pending.append(TrialFailed(command.trial_id, command.reason))

    def _job_workers(self, trial_id: int) -> list[_Worker]:
        job = self._jobs.get(trial_id)
        return job.workers if job else []

    def _launch(self, launch: Launch) -> None:
        keys = [gpu for _, gpu in launch.devices] or [self._any_free_slot(launch.trial_id)]
        workers = [self._take_worker(self._slot(key, launch.trial_id), launch.compute_share)
                   for key in keys]
        job = _Job(launch.trial_id, workers, self._clock())
        self._jobs[launch.trial_id] = job
        world = {"size": len(workers), "port": _free_port() if len(workers) > 1 else None}
        for rank, worker in enumerate(workers):
            worker.trial_id, worker.rank = launch.trial_id, rank
            self._send(worker, ("run", self._task(launch, worker, dict(world, rank=rank))))
            worker.has_trainable = True

    # ---- packs -----------------------------------------------------------------------------

    def _launch_member(self, launch: Launch) -> None:
        """Route a fusing trial to a pack with a free seat on its device, or start one."""
        assert self._plan is not None
        fkey = self._plan.key(launch.config)
        if launch.group is not None:      # the algorithm's pack: fuse only with its own members
            fkey = (fkey, ("group", launch.group))
        if launch.devices:
            slots = [self._slot(launch.devices[0][1], launch.trial_id)]
        else:   # no placement: any device's pack with room, else a free device
            slots = [self._slots[p.key[0]] for p in self._packs] or []
        pack = next((p for p in self._packs if p.key[1] == fkey and not p.failed
                     and len(p.members) < p.cap and p.key[0] in {s.key for s in slots}), None)
        if pack is None:
            slot = slots[0] if launch.devices else self._slot(
                self._any_free_slot(launch.trial_id), launch.trial_id)
            pack = self._start_pack(slot, fkey, launch)
        pack.members.add(launch.trial_id)
        self._jobs[launch.trial_id] = _Job(launch.trial_id, [pack.worker], self._clock(), pack=pack)
        self._send(pack.worker, ("member", {
            "trial_id": launch.trial_id, "config": launch.config, "seed": launch.seed,
            "attempt": launch.attempt, "trial_dir": str(self._trial_dir(launch.trial_id)),
            "max_steps": self._steps_for(launch.config)}))

    def _start_pack(self, slot: Slot, fkey: tuple, launch: Launch) -> _Pack:
        assert self._plan is not None
        self._pack_count += 1
        worker = self._take_worker(slot, None)
        ref = self._plan.ref
        log = Path(self._trial_dir(launch.trial_id)).parent / "packs" / f"pack-{self._pack_count}.log"
        self._send(worker, ("pack", {
            "pack_id": self._pack_count, "task": (ref.key, ref.reference, ref.payload),
            "device": slot.device, "max_members": self._plan.max_members,
            "first": launch.config, "log": str(log)}))
        pack = _Pack(self._pack_count, worker, (slot.key, fkey), self._plan.max_members)
        self._packs.append(pack)
        return pack

    def _end_empty_packs(self) -> None:
        """Packs left without members go back to the idle pool (launches of the last turn,
        submitted before this poll, have joined them already)."""
        for pack in [p for p in self._packs if not p.members]:
            self._packs.remove(pack)
            if pack.worker.process.is_alive():
                self._send(pack.worker, ("end_pack",))
                self._idle.append(pack.worker)

    def _pack_event(self, pack: _Pack, message: tuple) -> list[Event]:
        kind = message[0]
        if kind == "pack_cap":
            pack.cap = max(1, int(message[1]))
            return []
        if kind == "pack_error":
            pack.failed = True
            oom = bool(message[3])
            return self._fail_members(pack, message[1], message[2], retryable=oom, oom=oom)
        trial_id = message[1]
        if kind in ("done", "error"):
            pack.members.discard(trial_id)
        job = self._jobs.get(trial_id)
        if job is None or job.pack is not pack:
            return []                     # a member cancelled or timed out: stale news
        if kind == "started":
            return [TrialStarted(trial_id, pack.worker.slot.label)]
        if kind == "report":
            job.awaiting_ack = True
            return [ResultReported(trial_id, message[2], message[3])]
        if kind == "checkpoint":
            return [CheckpointSaved(trial_id, message[2], message[3])]
        if kind == "done":
            del self._jobs[trial_id]
            return [TrialFinished(trial_id)]
        if kind == "error":
            del self._jobs[trial_id]
            oom = len(message) > 4 and bool(message[4])
            return [TrialFailed(trial_id, message[2], message[3], retryable=oom, oom=oom)]
        return []

    def _fail_members(self, pack: _Pack, reason: str, text: str | None, *, retryable: bool,
                      oom: bool = False) -> list[Event]:
        """Every member of ``pack`` failed with it; the pack holds none afterwards."""
        events: list[Event] = []
        for trial_id in sorted(pack.members):
            job = self._jobs.get(trial_id)
            if job is not None and job.pack is pack:
                del self._jobs[trial_id]
                events.append(TrialFailed(trial_id, reason, text, retryable=retryable, oom=oom))
        pack.members.clear()
        return events

    def _pack_died(self, pack: _Pack) -> list[Event]:
        self._packs.remove(pack)
        pack.worker.conn.close()
        reason = f"pack process died ({_describe_exit(pack.worker.process.exitcode)})"
        return self._fail_members(pack, reason, None, retryable=True)

    def _kill_pack(self, pack: _Pack, reason: str) -> list[Event]:
        pack.worker.process.kill()
        pack.worker.process.join()
        self._packs.remove(pack)
        pack.worker.conn.close()
        return self._fail_members(pack, reason, None, retryable=True)

    def _task(self, launch: Launch, worker: _Worker, world: dict) -> dict:
        ref = self._trainable
        return {
            "trial_id": launch.trial_id, "config": launch.config, "seed": launch.seed,
            "attempt": launch.attempt, "device": worker.slot.device,
            "trial_dir": str(self._trial_dir(launch.trial_id)), "metric": self._metric,
            "max_steps": self._steps_for(launch.config), "world": world,
            "profile": bool(self._profile(launch.config)),
            "trainable": (ref.key, None, None) if worker.has_trainable else (ref.key, ref.reference, ref.payload),
        }

    def _slot(self, key: str, trial_id: int) -> Slot:
        if key not in self._slots:
            raise RuntimeError(f"trial {trial_id} placed on unknown device {key!r}")  # a loop bug
        return self._slots[key]

    def _any_free_slot(self, trial_id: int) -> str:
        busy = {w.slot.key for job in self._jobs.values() for w in job.workers}
        for key in self._slots:
            if key not in busy:
                return key
        raise RuntimeError(f"no free slot for trial {trial_id}")   # a loop bug, not user input

    def _take_worker(self, slot: Slot, share: float | None) -> _Worker:
        key = (slot.key, share)
        for i, w in enumerate(self._idle):
            if w.env_key == key and w.process.is_alive():
                return self._idle.pop(i)
        return self._spawn(slot, share)

    def _send(self, worker: _Worker, message: tuple) -> None:
        try:
            worker.conn.send(message)
        except (OSError, BrokenPipeError):
            pass   # the worker died; poll() notices through its sentinel

    def acknowledge(self) -> None:
        for job in self._jobs.values():
            if job.awaiting_ack:
                job.awaiting_ack = False
                self._send(job.workers[0], ("ack", job.trial_id))

    # ---- events ----------------------------------------------------------------------------

    def poll(self, timeout: float) -> list[Event]:
        events: list[Event] = self._pending + self._enforce_timeouts() + self._devices_changed()
        self._pending = []
        self._end_empty_packs()
        busy = self._busy_workers()
        waitables = [w.conn for w in busy] + [w.process.sentinel for w in busy + self._idle]
        wait(waitables, timeout=0 if events else timeout)
        packs = {id(p.worker): p for p in self._packs}
        for w in busy:
            pack = packs.get(id(w))
            if pack is not None:
                events.extend(self._drain_pack(pack))
                continue
            job = self._jobs.get(w.trial_id) if w.trial_id is not None else None
            if job is None or w not in job.workers:
                continue
            events.extend(self._drain(job, w))
            if job.trial_id in self._jobs and not w.process.is_alive():
                events.extend(self._worker_died(job, w))
        self._replace_dead_idle()
        return events

    def _drain_pack(self, pack: _Pack) -> list[Event]:
        events: list[Event] = []
        try:
            while pack in self._packs and pack.worker.conn.poll():
                events.extend(self._pack_event(pack, pack.worker.conn.recv()))
        except (EOFError, OSError):
            pass
        if pack in self._packs and not pack.worker.process.is_alive():
            events.extend(self._pack_died(pack))
        return events

    def _drain(self, job: _Job, w: _Worker) -> list[Event]:
        events: list[Event] = []
        try:
            while job.trial_id in self._jobs and w.conn.poll():
                event = self._event(job, w, w.conn.recv())
                if event is not None:
                    events.append(event)
        except (EOFError, OSError):
            pass
        return events

    def _event(self, job: _Job, w: _Worker, message: tuple) -> Event | None:
        kind, trial_id = message[0], message[1]
        if trial_id != job.trial_id:
            return None
        if kind in ("done", "error"):
            return self._rank_ended(job, w, message)
        if w.rank != 0:
            return None
        if kind == "started":
            return TrialStarted(trial_id, w.slot.label if len(job.workers) == 1
                                else "+".join(x.slot.label for x in job.workers))
        if kind == "report":
            job.awaiting_ack = True
            return ResultReported(trial_id, message[2], message[3])
        if kind == "checkpoint":
            return CheckpointSaved(trial_id, message[2], message[3])
        if kind == "profile":
            return TrialProfiled(trial_id, message[2])
        return None

    def _rank_ended(self, job: _Job, w: _Worker, message: tuple) -> Event | None:
        if message[0] == "error":
            # One rank failed: the others would hang in their collectives.
            self._end_job(job.trial_id, kill=len(job.workers) > 1, keep=w)
            oom = len(message) > 4 and bool(message[4])
            return TrialFailed(job.trial_id, message[2], message[3], retryable=oom, oom=oom)
        job.finished_ranks.add(w.rank)
        if w.rank == 0:
            job.rank0_done_at = self._clock()
        if len(job.finished_ranks) == len(job.workers):
            self._end_job(job.trial_id, kill=False)
            return TrialFinished(job.trial_id)
        return None

    def _end_job(self, trial_id: int, *, kill: bool, keep: _Worker | None = None) -> None:
        """Forget the job; its workers go back idle, or are killed (``keep`` survives a kill).
        A pack member's pack is never killed for it: the member is asked to stop instead."""
        job = self._jobs.pop(trial_id)
        if job.pack is not None:
            if kill:
                self._send(job.pack.worker, ("stop", trial_id))
            return
        for w in job.workers:
            w.trial_id = None
            if kill and w is not keep:
                w.process.kill()
                w.process.join()
                w.conn.close()
            elif w.process.is_alive():
                self._idle.append(w)

    def _worker_died(self, job: _Job, w: _Worker) -> list[Event]:
        code = w.process.exitcode
        w.conn.close()
        self._end_job(job.trial_id, kill=True, keep=w)
        self._idle = [x for x in self._idle if x is not w]
        return [TrialFailed(job.trial_id, f"worker process died ({_describe_exit(code)})",
                            retryable=True)]

    def _replace_dead_idle(self) -> None:
        """Keep one warm worker per device: replace idle workers that died."""
        alive = []
        for w in self._idle:
            if w.process.is_alive():
                alive.append(w)
            else:
                w.conn.close()
        warm = {w.slot.key for w in alive}
        busy = {w.slot.key for w in self._busy_workers()}
        for key, slot in self._slots.items():
            if key not in warm and key not in busy:
                alive.append(self._spawn(slot, None))
        self._idle = alive

    def _devices_changed(self) -> list[Event]:
        """Device events from the monitor; trials on a lost device are killed and reported as
        retryable failures (they restart from their checkpoints elsewhere)."""
        if self._device_events is None:
            return []
        events: list[Event] = []
        for event in self._device_events():
            events.append(event)
            if isinstance(event, DeviceLost):
                for pack in [p for p in self._packs if p.worker.slot.key == event.gpu_id]:
                    events.extend(self._kill_pack(pack, f"device {event.gpu_id} was lost"))
                for job in list(self._jobs.values()):
                    if any(w.slot.key == event.gpu_id for w in job.workers):
                        self._end_job(job.trial_id, kill=True)
                        events.append(TrialFailed(job.trial_id, f"device {event.gpu_id} was lost",
                                                  retryable=True))
        return events

    def _enforce_timeouts(self) -> list[Event]:
        events: list[Event] = []
        now = self._clock()
        for job in list(self._jobs.values()):
            if self._timeout is not None and now - job.started_at > self._timeout:
                self._end_job(job.trial_id, kill=True)
                events.append(TrialFailed(job.trial_id, f"timed out after {self._timeout:g} s "
                                          "(executor.trial_timeout_s)"))
            elif job.rank0_done_at is not None and now - job.rank0_done_at > RANK_GRACE_S:
                self._end_job(job.trial_id, kill=True)      # stragglers after rank 0 finished
                events.append(TrialFinished(job.trial_id))
        return events


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
