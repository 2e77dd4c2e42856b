"""The warm pool's upkeep: which idle workers it checks for death and replaces."""
from __future__ import annotations


from hypersack.runtime.devices.slots import default_slots
from hypersack.runtime.executors.pool import Worker, WorkerPool


class _Process:
    def __init__(self, alive: bool):
        self.alive, self.checked = alive, 0

    def is_alive(self) -> bool:
        self.checked += 1
        return self.alive


class _Pipe:
    closed = False

    def close(self) -> None:
        self.closed = True


def _pool() -> tuple[WorkerPool, list[Worker]]:
    slots = {s.key: s for s in default_slots(3, gpus=[])}
    pool = WorkerPool(slots)
    spawned: list[Worker] = []

    def spawn(slot, share):
        w = Worker(slot, (slot.key, share), _Process(True), _Pipe())
        spawned.append(w)
        return w
    pool.spawn = spawn                                  # type: ignore[method-assign]
    pool.idle = [Worker(s, (s.key, None), _Process(alive), _Pipe())  # type: ignore[arg-type]
                 for s, alive in zip(slots.values(), (True, False, False))]
    return pool, spawned


def test_only_the_suspects_are_checked_and_the_dead_among_them_replaced():
    pool, spawned = _pool()
    live, dead_suspect, dead_unchecked = pool.idle
    pool.replace_dead_idle(set(), [dead_suspect])
    assert live.process.checked == 0 and dead_unchecked.process.checked == 0
    assert dead_suspect.pipe.closed and dead_suspect not in pool.idle
    assert [w.slot.key for w in spawned] == [dead_suspect.slot.key]
    assert dead_unchecked in pool.idle                  # not suspected: kept until checked


def test_without_suspects_every_idle_worker_is_checked():
    pool, spawned = _pool()
    pool.replace_dead_idle(set())
    assert all(w.process.checked == 1 for w in pool.idle if w not in spawned)
    assert len(spawned) == 2 and len(pool.idle) == 3


def test_a_busy_slot_gets_no_warm_replacement():
    pool, spawned = _pool()
    dead = pool.idle[1]
    pool.replace_dead_idle({dead.slot.key}, [dead])
    assert spawned == [] and dead not in pool.idle


