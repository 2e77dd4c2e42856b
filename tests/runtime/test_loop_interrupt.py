"""Ctrl-C reaches the controller whenever the signal lands, even in the middle of a turn's
commit: the running trials are asked to stop and the study ends interrupted."""
from __future__ import annotations

import signal

from hypersack.core.algorithms import make_algorithm
from hypersack.core.controller import Budget, Controller
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.core.trial import Launch, ResultReported, Stop, TrialFinished, TrialStarted
from hypersack.runtime.loop.run import run_loop
from hypersack.runtime.storage.sqlite import Storage

from controller_helpers import on_slots, slots


class _Held:
    """Trials start and report step 1, then run until a Stop comes (as a trial held in a long
    step that polls ``should_stop``); a Stop ends them at once."""

    def __init__(self):
        self.queue: list = []
        self.stopped: list[int] = []
        self.polls = 0

    def start(self): pass
    def inventory(self): return slots(2)
    def shutdown(self, kill=False): pass
    def acknowledge(self, trial_ids, free_below): pass

    def submit(self, command):
        if isinstance(command, Launch):
            self.queue += [TrialStarted(command.trial_id, "cpu"),
                           ResultReported(command.trial_id, 1, {"loss": 0.5})]
        elif isinstance(command, Stop):
            self.stopped.append(command.trial_id)
            self.queue.append(TrialFinished(command.trial_id))

    def poll(self, timeout):
        self.polls += 1
        assert self.polls < 500, "the study never stopped its trials: the interrupt was lost"
        out, self.queue = self.queue, []
        return out


def test_a_signal_landing_during_a_turns_commit_still_interrupts_the_study(tmp_path):
    space = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0}})
    objective = Objective("loss", "min")
    controller = Controller(make_algorithm({"type": "random"}, space, objective, 0),
                                     objective, Budget(trials=10), options=on_slots(2))
    store = Storage(tmp_path / "s.db")
    row = store.create_study("s", {})
    original, saved = store.save_batch, []

    def save_batch(study_id, trials, results, state=None, **kwargs):
        original(study_id, trials, results, state, **kwargs)
        saved.append(len(results))
        if sum(saved) == 2:               # both trials' first reports are durable: Ctrl-C now
            signal.raise_signal(signal.SIGINT)
    store.save_batch = save_batch         # type: ignore[method-assign]
    executor = _Held()
    run = run_loop(controller, executor, store, row)
    store.close()
    assert run.status == "interrupted"
    assert sorted(executor.stopped) == [0, 1] and controller.interrupted
    assert len(controller.trials) == 2    # nothing launched after the interrupt
