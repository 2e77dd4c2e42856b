"""The loop's heap: survivors frozen after a turn that promoted some, young cyclic garbage
freed (not frozen), what was frozen given back at the end; the study loop uses it."""
from __future__ import annotations

import gc
import weakref

import pytest

from hypersack.core.algorithms import make_algorithm
from hypersack.core.controller import Budget, Controller
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.core.trial import Launch, ResultReported, TrialFinished, TrialStarted
from hypersack.runtime.loop.heap import LoopHeap
from hypersack.runtime.loop.run import run_loop
from hypersack.runtime.storage.sqlite import Storage

from controller_helpers import on_slots, slots


class _Node:
    def __init__(self) -> None:
        self.me = self                     # a reference cycle: only the collector frees it


@pytest.fixture(autouse=True)
def _nothing_frozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def _walked() -> set[int]:
    """Ids of the objects a collection walks (every generation but the permanent one)."""
    return {id(o) for g in (0, 1, 2) for o in gc.get_objects(generation=g)}


def test_survivors_are_frozen_once_a_collection_promoted_some():
    with LoopHeap() as heap:
        kept = [[i] for i in range(1000)]
        heap.after_turn()                   # nothing promoted since the freeze: nothing to do
        assert heap.freezes == 1 and id(kept[0]) in _walked()
        gc.collect(1)                       # what the collector does by itself as objects pile up
        heap.after_turn()
        assert heap.freezes == 2
        assert id(kept[0]) not in _walked() and gc.get_freeze_count() >= len(kept)
    assert gc.get_freeze_count() == 0       # given back at the end
    assert id(kept[0]) in _walked()


def test_young_cyclic_garbage_is_freed_not_frozen():
    with LoopHeap() as heap:
        gc.collect(1)                       # a promotion: the next turn's end freezes
        node = _Node()
        alive = weakref.ref(node)
        del node                            # garbage, still young, when the turn ends
        heap.after_turn()
        assert heap.freezes == 2 and alive() is None


def test_what_the_caller_froze_stays_frozen():
    kept = [[1]]
    gc.freeze()
    with LoopHeap():
        pass
    assert id(kept[0]) not in _walked()


class _OneTrial:
    """One trial reporting twice; each poll piles up objects the executor keeps and lets the
    collector promote them; records what a collection would walk at each poll."""

    def __init__(self) -> None:
        self.queue: list = []
        self.kept: list = []
        self.walked_kept: list[bool] = []
        self.step = 0

    def start(self): pass
    def inventory(self): return slots(1)
    def shutdown(self, kill=False): pass

    def submit(self, command):
        if isinstance(command, Launch):
            self.queue.append(TrialStarted(command.trial_id, "cpu"))

    def poll(self, timeout):
        walked = _walked()
        self.walked_kept += [id(k) in walked for k in self.kept]
        self.kept.append([self.step])
        gc.collect(1)
        if self.queue:
            return [self.queue.pop(0)]
        self.step += 1
        return [ResultReported(0, self.step, {"loss": 1.0}) if self.step <= 2 else TrialFinished(0)]

    def acknowledge(self, trial_ids, free_below): pass


def test_the_loop_freezes_what_outlived_a_turn_and_gives_it_back(tmp_path):
    space = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0}})
    objective = Objective("loss", "min")
    controller = Controller(make_algorithm({"type": "random"}, space, objective, 0),
                                     objective, Budget(trials=1), options=on_slots(1))
    executor = _OneTrial()
    with Storage(tmp_path / "s.db") as store:
        run_loop(controller, executor, store, store.create_study("s", {}))
    assert executor.walked_kept and not any(executor.walked_kept)
    assert gc.get_freeze_count() == 0
