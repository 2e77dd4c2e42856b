"""What a Launch carries that the executors act on: the pack and seat the controller chose
(``core.packs``; more in tests/core/test_controller_packs.py) and, for a grown data-parallel trial, devices that free up for the next trial when
it is stopped. The end-to-end runs are in tests/runtime/test_fused_study.py and
tests/runtime/test_placement_study.py."""
from __future__ import annotations

from hypersack.core.algorithms import Algorithm, Decision, Suggestion
from hypersack.core.controller import Budget, Controller
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.core.trial import ResultReported, Stop, StopReason, TrialFinished, TrialState

from controller_helpers import on_slots, slot

OBJ = Objective("acc", "max")
SPACE = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0}})


class TwoPacks(Algorithm):
    """Four trials: 0 and 1 in the algorithm's pack "a", 2 and 3 in "b"."""

    def __init__(self):
        super().__init__(SPACE, OBJ)
        self.made = 0

    @property
    def exhausted(self):
        return self.made >= 4

    def suggest(self, trial_id):
        self.made += 1
        return Suggestion({"x": 0.5})

    def trial_info(self, trial_id):
        return {"pack": "a" if trial_id < 2 else "b"}


def test_the_record_keeps_the_algorithms_pack_and_a_study_without_packs_launches_plain_trials():
    c = Controller(TwoPacks(), OBJ, Budget(trials=4), options=on_slots(4))
    launches = c.launches(now=0.0)
    assert [(l.trial_id, l.pack, l.seat) for l in launches] == [(t, None, None) for t in range(4)]
    assert [c.trials[t].info["pack"] for t in range(4)] == ["a", "a", "b", "b"]


def test_the_algorithms_packs_keep_their_members_apart_when_the_study_fuses():
    from hypersack.core.packs import PackBook
    policy = type("P", (), {"max_members": 4, "fuses": lambda self, config, size=None: True,
                            "key": lambda self, config: "k",
                            "member_memory": lambda self, config, device: None,
                            "device_memory": lambda self, device: None})()
    c = Controller(TwoPacks(), OBJ, Budget(trials=4), options=on_slots(1, packs=policy))
    assert isinstance(c.packs, PackBook)
    (first,) = c.launches(now=0.0)                  # one device, one trial at a time
    assert (first.pack, first.seat) == (1, 0)
    assert c.packs.packs[0].key == ("k", ("group", "a"))
    # its stay names the fused pack (the report draws a pack as one stay), its record the seat
    (stay,) = c.stays.take()
    assert stay.pack == 1 and c.trials[first.trial_id].info["fused"] == {"pack": 1, "seat": 0}


class GrowThenStop(Algorithm):
    """Trial 0 grows to two devices after step 1 and is pruned at step 2; four trials."""

    def __init__(self):
        super().__init__(SPACE, OBJ)
        self.made, self.grown = 0, False

    @property
    def exhausted(self):
        return self.made >= 4

    def suggest(self, trial_id):
        self.made += 1
        return Suggestion({"x": float(trial_id)})

    def on_result(self, trial_id, step, metrics):
        if trial_id == 0 and step == 1:
            self.grown = True
            return Decision.GROW
        return Decision.STOP if trial_id == 0 and step == 2 else Decision.CONTINUE

    def resources(self, trial_id):
        return 2 if trial_id == 0 and self.grown else 1


def test_a_grown_trial_pruned_mid_run_frees_both_devices_for_the_next_trials():
    c = Controller(GrowThenStop(), OBJ, Budget(trials=4), options=on_slots(2))
    assert [l.trial_id for l in c.launches(now=0.0)] == [0, 1]
    c.handle(ResultReported(1, 1, {"acc": 0.1}), 0.5)
    c.handle(TrialFinished(1), 0.5)
    assert c.handle(ResultReported(0, 1, {"acc": 0.5}), 1.0) == [Stop(0, StopReason.RESIZE)]
    c.handle(TrialFinished(0), 1.0)
    (grown,) = c.launches(now=1.0)
    assert grown.trial_id == 0 and grown.attempt == 2 and set(grown.devices) == {slot(0), slot(1)}
    assert c.handle(ResultReported(0, 2, {"acc": 0.6}), 2.0) == [Stop(0, StopReason.PRUNED)]
    c.handle(TrialFinished(0), 2.0)
    assert c.trials[0].state is TrialState.PRUNED
    nxt = c.launches(now=2.0)
    assert [l.trial_id for l in nxt] == [2, 3] and {l.devices for l in nxt} == {(slot(0),),
                                                                                 (slot(1),)}

