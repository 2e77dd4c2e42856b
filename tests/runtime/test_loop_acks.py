"""The loop decides what to acknowledge (``run.acknowledgements``): the trials whose reports a
turn made durable, each with the controller's ``free_below``; the executor only carries it."""
from __future__ import annotations

from hypersack.core.algorithms import Algorithm, Suggestion
from hypersack.core.controller import Budget, Controller, Turn
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.core.trial import (Launch, PackCapped, ResultReported, TrialFailed, TrialFinished,
                                  TrialStarted)
from hypersack.runtime.loop.run import Acks, acknowledgements, run_loop
from hypersack.runtime.storage.memory import MemoryStore, SimStudyRow

from controller_helpers import on_slots

OBJ = Objective("loss", "min")


def test_the_reporting_trials_are_acked_once_in_report_order_with_the_turns_free_below():
    events = [TrialStarted(2, "cpu0"), ResultReported(2, 1, {}), ResultReported(0, 1, {}),
              TrialFailed(1, "boom"), ResultReported(2, 2, {}), PackCapped(1, 2)]
    acks = acknowledgements(events, Turn(free_below={2: 5, 0: 1, 1: 9}))
    assert acks == Acks((2, 0), {2: 5, 0: 1})


def test_a_trial_the_turn_gives_no_free_below_waits_at_every_report():
    acks = acknowledgements([ResultReported(3, 1, {})], Turn())
    assert acks == Acks((3,), {3: 0})


def test_a_turn_without_reports_acks_nothing():
    assert acknowledgements([TrialStarted(0, "cpu0"), TrialFinished(0)], Turn(free_below={0: 4})) \
        == Acks((), {})


class _Every2(Algorithm):
    """Configs {"x": id}; decides at every second step (reports below it may pipeline)."""

    def __init__(self):
        super().__init__(SearchSpace({"x": [0, 1, 2, 3]}), OBJ)

    def suggest(self, trial_id):
        return Suggestion({"x": trial_id})

    def next_decision_step(self, trial_id):
        return 2


class _Reports:
    """Two trials, three reports each, then the end; records every acknowledge call."""

    def __init__(self):
        self.launched: list[int] = []
        self.steps: dict[int, int] = {}
        self.acks: list[tuple] = []
        self.waiting: set[int] = set()

    def start(self): pass
    def inventory(self): return None
    def shutdown(self, kill=False): pass

    def submit(self, command):
        if isinstance(command, Launch):
            self.launched.append(command.trial_id)
            self.steps[command.trial_id] = 0

    def poll(self, timeout):
        out = []
        for trial in list(self.steps):
            if trial in self.waiting:
                continue
            if self.steps[trial] == 3:
                del self.steps[trial]
                out.append(TrialFinished(trial))
                continue
            self.steps[trial] += 1
            self.waiting.add(trial)
            out.append(ResultReported(trial, self.steps[trial], {"loss": 0.1}))
        return out

    def acknowledge(self, trial_ids, free_below):
        self.acks.append((tuple(trial_ids), dict(free_below)))
        self.waiting -= set(trial_ids)


def test_the_loop_acks_each_turns_reports_with_the_controllers_free_below():
    controller = Controller(_Every2(), OBJ, Budget(trials=2), options=on_slots(2))
    executor = _Reports()
    store = MemoryStore()
    row = SimStudyRow(1, "s")
    run_loop(controller, executor, store, row)
    assert executor.launched == [0, 1]
    assert executor.acks == [((0, 1), {0: 2, 1: 2})] * 3     # one ack per turn that had reports
    assert store.result_count == 6
