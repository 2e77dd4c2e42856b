"""The controller seats fusing trials in packs (``core.packs.PackBook``) and names the pack and
seat in each Launch; executors obey it. Driven directly, with scripted events."""
from __future__ import annotations

from hypersack.core.algorithms import Algorithm, Decision, Suggestion
from hypersack.core.allocator import Demand
from hypersack.core.controller import Budget, Controller, ControllerOptions
from hypersack.core.objective import Objective
from hypersack.core.packs import fusibility_key, member_demand, runs_fused
from hypersack.core.space import SearchSpace
from hypersack.core.trial import PackCapped, ResultReported, TrialFailed, TrialFinished
from hypersack.placement import GPU, Cluster, Node

OBJ = Objective("acc", "max")
SPACE = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0}})


class Groups(Algorithm):
    """Proposes ``{"x": id, "hidden": hidden[id]}`` with ``info[id]`` (an algorithm pack)."""

    def __init__(self, hidden=None, info=None, decisions=None):
        super().__init__(SPACE, OBJ)
        self.hidden, self.info, self.decisions = hidden or {}, info or {}, decisions or {}

    def suggest(self, trial_id):
        return Suggestion({"x": float(trial_id), "hidden": self.hidden.get(trial_id, 8)},
                          dict(self.info.get(trial_id, {})))

    def on_result(self, trial_id, step, metrics):
        return self.decisions.get((trial_id, step), Decision.CONTINUE)

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class Policy:
    """Every config fuses in ``fused`` mode, keyed by its "hidden" width; memory unknown."""
    max_members = 2

    def fuses(self, config, pack_size=None):
        return runs_fused("fused", lambda: True, pack_size)

    def key(self, config):
        return fusibility_key(config, ["hidden"])

    def member_memory(self, config, device):
        return None

    def device_memory(self, device):
        return None


def make(algorithm=None, trials=4, per_device=4, devices=1, packs=True, policy=None):
    """A controller whose devices take ``per_device`` members each (a member's demand), fusing
    with ``policy`` (default ``Policy()``) unless ``packs`` is false."""
    cluster = Cluster([Node("n0", 64, tuple(GPU(f"g{i}", "A100", 40.0) for i in range(devices)))])
    demand = member_demand(Demand(100.0, 0.0, 1), per_device)
    options = ControllerOptions(inventory=cluster, placement="ff", demand=demand.job,
                                packs=(policy or Policy()) if packs else None)
    return Controller(algorithm or Groups(), OBJ, Budget(trials=trials), options=options)


def seats(launches):
    return [(l.trial_id, l.pack, l.seat) for l in launches]


def test_launches_name_the_pack_and_seat_of_each_member():
    c = make()
    assert seats(c.launches(0.0)) == [(0, 1, 0), (1, 1, 1), (2, 2, 0), (3, 2, 1)]


def test_without_packs_every_launch_is_a_plain_trial():
    assert seats(make(packs=False).launches(0.0)) == [(t, None, None) for t in range(4)]


def test_a_lone_algorithm_pack_runs_alone_and_algorithm_packs_stay_apart():
    info = {0: {"pack": 7, "pack_size": 1}, 1: {"pack": 8, "pack_size": 3},
            2: {"pack": 9, "pack_size": 3}, 3: {"pack": 8, "pack_size": 3}}
    assert seats(make(Groups(info=info)).launches(0.0)) == [
        (0, None, None), (1, 1, 0), (2, 2, 0), (3, 1, 1)]


def test_architectures_never_share_a_pack():
    c = make(Groups(hidden={1: 16, 2: 16}))
    assert seats(c.launches(0.0)) == [(0, 1, 0), (1, 2, 0), (2, 2, 1), (3, 1, 1)]


def test_an_ended_members_seat_takes_the_next_turns_launch_and_an_emptied_pack_ends_with_it():
    c = make(trials=6)
    c.launches(0.0)
    c.handle(ResultReported(0, 1, {"acc": 0.5}), 1.0)
    c.handle(TrialFinished(0), 1.0)
    assert seats(c.launches(1.0)) == [(4, 1, 0)]         # trial 0's seat
    for t in (1, 4):
        c.handle(ResultReported(t, 1, {"acc": 0.5}), 2.0)
        c.handle(TrialFinished(t), 2.0)
    c.launches(2.0)          # pack 1 is empty now: launched into this turn, or else ended
    assert [p.pack_id for p in c.packs.packs] == [1, 2] and c.packs.packs[0].seats == {5: 0}


def test_a_member_stopped_with_its_ack_frees_its_seat_in_the_same_turn():
    c = make(Groups(decisions={(0, 1): Decision.STOP}), trials=5)
    c.launches(0.0)
    stops = c.handle(ResultReported(0, 1, {"acc": 0.5}), 1.0)     # pruned at its report
    assert [s.trial_id for s in stops] == [0]
    c.allocator.release(0)    # as if placement had room (the executor frees it at the ack)
    assert seats(c.launches(1.0)) == [(4, 1, 0)]
    c.handle(TrialFinished(0), 2.0)                      # the seat is not freed twice
    assert c.packs.packs[0].seats == {1: 1, 4: 0}


def test_a_continuing_member_keeps_its_seat():
    c = make(trials=5)
    c.launches(0.0)
    c.handle(ResultReported(0, 1, {"acc": 0.5}), 1.0)
    c.launches(1.0)
    assert c.packs.packs[0].seats == {0: 0, 1: 1}


def test_a_measured_cap_and_a_failed_pack_are_obeyed():
    c = make(trials=8, per_device=8, policy=type("Four", (Policy,), {"max_members": 4})())
    assert seats(c.launches(0.0)) == [(t, 1 + t // 4, t % 4) for t in range(8)]
    c.handle(PackCapped(2, 0), 1.0)                      # pack 2 failed: it takes no member
    for t in (4, 5, 6, 7):
        c.handle(TrialFailed(t, "boom"), 1.0)
    c.handle(PackCapped(1, 1), 1.0)                      # pack 1 measured room for one
    c.handle(TrialFinished(3), 1.0)
    c.budget = Budget(trials=10)
    assert seats(c.launches(1.0)) == [(8, 3, 0), (9, 3, 1)]   # not pack 1 (3 of 1), nor 2
