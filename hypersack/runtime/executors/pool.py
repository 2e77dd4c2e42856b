"""Warm worker processes per device: spawned once, reused for trial after trial.

Transport only: which device a worker serves and how many stay warm are decided elsewhere
(``core.devices.warm_workers``, the controller's placement). A worker that dies while idle is
replaced; a busy one is reported by its owner (the executor), which ends its job.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from hypersack.runtime.devices.slots import Slot
from hypersack.runtime.worker.messages import Message, Pipe, Shutdown
from hypersack.runtime.worker.entry import WorkerProcess

__all__ = ["Worker", "WorkerPool"]


@dataclass(eq=False)
class Worker:
    """A worker process serving ``slot`` (``env_key``: the slot and compute share it was
    started with); ``trial_id`` and ``rank`` while it runs a trial."""
    slot: Slot
    env_key: tuple[Any, ...]
    process: Any
    pipe: Pipe
    trial_id: int | None = None
    rank: int = 0
    has_trainable: bool = False

    def send(self, message: Message) -> None:
        """Send, ignoring a dead worker (its sentinel tells the executor)."""
        try:
            self.pipe.send(message)
        except (OSError, BrokenPipeError):
            pass

    def kill(self) -> None:
        self.process.kill()
        self.process.join()
        self.pipe.close()


class WorkerPool:
    """Idle workers by slot; ``take`` one (spawning if none is warm), ``give_back`` it."""

    def __init__(self, slots: dict[str, Slot],
                 share_env: Callable[[Slot, float | None], dict[str, Any]] | None = None):
        self._slots = slots
        self._share_env = share_env
        self.idle: list[Worker] = []

    def start(self, warm: dict[str, int]) -> None:
        """Spawn ``warm[key]`` idle workers for each slot key."""
        self.idle = [self.spawn(slot, None) for key, slot in self._slots.items()
                     for _ in range(warm.get(key, 1))]

    def spawn(self, slot: Slot, share: float | None) -> Worker:
        env = dict(slot.env)
        if self._share_env is not None:
            env.update(self._share_env(slot, share))
        # Its own program (hypersack.runtime.worker.entry): never a re-run of the user's script.
        process = WorkerProcess(env, name=f"hypersack-worker-{slot.key}")
        return Worker(slot, (slot.key, share), process, Pipe(process.conn))

    def take(self, slot: Slot, share: float | None) -> Worker:
        """A live idle worker started for (slot, share), or a new one."""
        key = (slot.key, share)
        for i, w in enumerate(self.idle):
            if w.env_key == key and w.process.is_alive():
                return self.idle.pop(i)
        return self.spawn(slot, share)

    def give_back(self, worker: Worker) -> None:
        worker.trial_id = None
        if worker.process.is_alive():
            self.idle.append(worker)

    def forget(self, worker: Worker) -> None:
        self.idle = [w for w in self.idle if w is not worker]

    def replace_dead_idle(self, busy_keys: set[str], suspects: list[Worker] | None = None) -> None:
        """Keep one warm worker per slot that runs nothing: replace idle workers that died.
        ``suspects``: only these idle workers may have died (their exit sentinels fired), the
        others are not checked; None: every idle worker is checked."""
        alive = []
        checked = {id(w) for w in (self.idle if suspects is None else suspects)}
        for w in self.idle:
            if id(w) in checked and not w.process.is_alive():
                w.pipe.close()
            else:
                alive.append(w)
        warm = {w.slot.key for w in alive}
        for key, slot in self._slots.items():
            if key not in warm and key not in busy_keys:
                alive.append(self.spawn(slot, None))
        self.idle = alive

    def shutdown(self, busy: list[Worker], kill: bool) -> None:
        """End every worker, idle or ``busy``: at once with ``kill``, else asked, then killed
        after 5 s."""
        workers = self.idle + busy
        for w in workers:
            if kill:
                w.process.kill()
            else:
                w.send(Shutdown())
        deadline = time.monotonic() + 5.0
        for w in workers:
            w.process.join(max(0.0, deadline - time.monotonic()))
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
            w.pipe.close()
        self.idle = []
