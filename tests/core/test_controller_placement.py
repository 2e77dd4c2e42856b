"""The controller with an inventory: placement, pause and promotion, growth, devices coming and going."""
from __future__ import annotations

from hypersack.core.algorithms import Algorithm, Decision, Suggestion
from hypersack.core.allocator import Demand
from hypersack.core.controller import Budget, Controller, ControllerOptions
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.core.trial import (FailureCause, DeviceAdded, DeviceLost, ResultReported, Stop, TrialFailed,
                                  TrialFinished, TrialState)
from hypersack.placement import GPU, Cluster, Node

from controller_helpers import count_placement_runs

OBJ = Objective("acc", "max")
SPACE = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0}})


class Scripted(Algorithm):
    """Proposes {"x": id}; scripted decisions per (trial, step); promotes what it is told to."""

    def __init__(self, decisions=None, limit=None, grow_to=None):
        super().__init__(SPACE, OBJ)
        self.decisions = decisions or {}
        self.limit = limit
        self.to_promote: list[int] = []
        self.grow_to = grow_to or {}
        self.grown: set[int] = set()
        self.made = 0

    @property
    def exhausted(self):
        return self.limit is not None and self.made >= self.limit

    def suggest(self, trial_id):
        if self.exhausted:
            return None
        self.made += 1
        return Suggestion({"x": float(trial_id)})

    def on_result(self, trial_id, step, metrics):
        decision = self.decisions.get((trial_id, step), Decision.CONTINUE)
        if decision is Decision.GROW:
            self.grown.add(trial_id)
        return decision

    def promote(self):
        return self.to_promote.pop(0) if self.to_promote else None

    def resources(self, trial_id):
        return self.grow_to.get(trial_id, 1) if trial_id in self.grown else 1


def cluster(n=2, ratio=1.0, memory=16.0):
    return Cluster([Node("n0", 8, [GPU(f"g{i}", "A100", memory, oversubscription=ratio) for i in range(n)])])


def make(algorithm, n=2, ratio=1.0, policy="wfd", demand=Demand(), trials=10):
    return Controller(algorithm, OBJ, Budget(trials=trials), options=ControllerOptions(
        inventory=cluster(n, ratio), placement=policy, demand=demand.job))


def test_placement_oversubscribes_each_device_up_to_its_ratio():
    c = make(Scripted(), n=2, ratio=3.0, demand=Demand(compute=100.0))
    launches = c.launches(now=0.0)
    assert len(launches) == 6
    per_device = {}
    for launch in launches:
        (device,) = launch.devices
        per_device[device] = per_device.get(device, 0) + 1
    assert per_device == {("n0", "g0"): 3, ("n0", "g1"): 3}
    assert all(launch.compute_share is None for launch in launches)   # 100%: a whole device each


def test_small_demands_pack_and_get_their_share():
    c = make(Scripted(), n=1, ratio=1.0, demand=Demand(compute=25.0))
    launches = c.launches(now=0.0)
    assert len(launches) == 4 and {l.compute_share for l in launches} == {25.0}


def test_exclusive_runs_one_trial_per_device_whatever_the_ratio():
    c = make(Scripted(), n=2, ratio=3.0, policy="exclusive", demand=Demand(compute=10.0))
    assert len(c.launches(now=0.0)) == 2


def test_a_finished_trial_frees_its_place_for_the_next():
    c = make(Scripted(), n=1)
    (first,) = c.launches(now=0.0)
    assert c.launches(now=1.0) == []
    c.handle(ResultReported(0, 1, {"acc": 0.5}), 1.0)
    c.handle(TrialFinished(0), 2.0)
    (second,) = c.launches(now=2.0)
    assert second.trial_id == 1 and second.devices == first.devices


def test_a_trial_no_device_can_hold_fails_with_a_clear_error_instead_of_waiting():
    c = make(Scripted(limit=1), n=2, demand=Demand(memory_gb=64.0))
    assert c.launches(now=0.0) == []
    record = c.trials[0]
    assert record.state is TrialState.FAILED
    assert "no device can run this trial" in record.error and "64 GB" in record.error
    assert c.done(0.0)


def test_pause_then_promotion_resumes_from_the_checkpoint_without_a_new_trial():
    algo = Scripted(decisions={(0, 3): Decision.PAUSE}, limit=2)
    c = make(algo, n=1, trials=2)
    (launch,) = c.launches(now=0.0)
    assert c.handle(ResultReported(0, 3, {"acc": 0.9}), 1.0) == [Stop(0, "paused")]
    c.handle(TrialFinished(0), 1.0)
    assert c.trials[0].state is TrialState.PAUSED
    (other,) = c.launches(now=1.0)                  # the device goes to the next trial
    assert other.trial_id == 1
    c.handle(ResultReported(1, 3, {"acc": 0.1}), 2.0)
    c.handle(TrialFinished(1), 2.0)
    algo.to_promote = [0]                            # the budget of 2 trials is spent: still promoted
    (resumed,) = c.launches(now=2.0)
    assert resumed.trial_id == 0 and resumed.attempt == 2 and len(c.trials) == 2
    c.handle(ResultReported(0, 9, {"acc": 0.95}), 3.0)
    c.handle(TrialFinished(0), 3.0)
    assert c.trials[0].state is TrialState.COMPLETE and c.done(3.0)


def test_paused_trials_never_promoted_end_pruned_when_the_study_ends():
    algo = Scripted(decisions={(0, 1): Decision.PAUSE}, limit=2)
    c = make(algo, n=1, trials=2)
    c.launches(now=0.0)
    c.handle(ResultReported(0, 1, {"acc": 0.3}), 1.0)
    c.handle(TrialFinished(0), 1.0)
    (other,) = c.launches(now=1.0)
    c.handle(ResultReported(other.trial_id, 1, {"acc": 0.1}), 1.0)
    c.handle(TrialFinished(other.trial_id), 1.0)     # it completes: no end-game is needed
    assert c.launches(now=1.0) == [] and c.done(1.0)
    c.finalize(1.0)
    assert c.trials[0].state is TrialState.PRUNED and c.trials[0].value == 0.3


def test_a_promotion_that_arrives_before_the_pause_lands_relaunches_at_once():
    algo = Scripted(decisions={(0, 1): Decision.PAUSE}, limit=1)
    c = make(algo, n=1, trials=1)
    c.launches(now=0.0)
    c.handle(ResultReported(0, 1, {"acc": 0.3}), 1.0)
    algo.to_promote = [0]
    assert c.launches(now=1.0) == []                 # still running until its stop lands
    c.handle(TrialFinished(0), 1.5)
    (again,) = c.launches(now=1.5)
    assert again.trial_id == 0 and again.attempt == 2


def test_grow_relaunches_the_trial_on_more_devices_once_they_are_free():
    algo = Scripted(decisions={(0, 2): Decision.GROW}, limit=3, grow_to={0: 2})
    c = make(algo, n=2, trials=3)
    first = c.launches(now=0.0)
    assert [l.trial_id for l in first] == [0, 1]
    assert c.handle(ResultReported(0, 2, {"acc": 0.5}), 1.0) == [Stop(0, "resize")]
    c.handle(TrialFinished(0), 1.0)
    assert c.trials[0].state is TrialState.PENDING and c.trials[0].resources == 2
    assert c.launches(now=1.0) == []                 # one device is still busy with trial 1
    assert len(c.trials) == 2                        # and no new trial takes the free one first
    c.handle(ResultReported(1, 1, {"acc": 0.1}), 2.0)
    c.handle(TrialFinished(1), 2.0)
    (grown,) = c.launches(now=2.0)
    assert grown.trial_id == 0 and len(grown.devices) == 2 and len(set(grown.devices)) == 2


def test_growth_is_capped_at_the_devices_there_are():
    algo = Scripted(decisions={(0, 1): Decision.GROW}, limit=1, grow_to={0: 8})
    c = make(algo, n=2, trials=1)
    c.launches(now=0.0)
    c.handle(ResultReported(0, 1, {"acc": 0.5}), 1.0)
    c.handle(TrialFinished(0), 1.0)
    (grown,) = c.launches(now=1.0)
    assert len(grown.devices) == 2


def test_lost_device_requeues_its_trial_without_charging_a_retry_and_a_new_one_gets_work():
    c = make(Scripted(limit=3), n=2, trials=3)
    launches = c.launches(now=0.0)
    on_g0 = next(l.trial_id for l in launches if l.devices == (("n0", "g0"),))
    c.handle(DeviceLost("n0", "g0"), 1.0)
    c.handle(TrialFailed(on_g0, "device g0 was lost", cause=FailureCause.DEVICE_LOST), 1.0)
    assert c.trials[on_g0].state is TrialState.PENDING and c.trials[on_g0].retries == 0
    assert c.launches(now=1.0) == []                 # the other device is busy
    c.handle(DeviceAdded("n0", GPU("g2", "H100", 80.0)), 2.0)
    (moved,) = c.launches(now=2.0)
    assert moved.trial_id == on_g0 and moved.devices == (("n0", "g2"),)


def test_a_device_of_a_joining_node_brings_the_node_with_its_cores():
    c = make(Scripted(limit=3), n=1, trials=3)
    (first,) = c.launches(now=0.0)
    c.handle(DeviceAdded("n1", GPU("g0", "H100", 80.0), node_cpus=8), 1.0)
    (second,) = c.launches(now=1.0)
    assert second.devices == (("n1", "g0"),)
    assert [n.cpus for n in c.allocator.inventory.nodes if n.id == "n1"] == [8]


def test_an_algorithm_that_keeps_naming_the_same_promotion_does_not_hang_the_study():
    class Sticky(Scripted):
        def promote(self):
            return 0
    c = make(Sticky(limit=1), n=1, trials=1)
    (launch,) = c.launches(now=0.0)
    assert launch.trial_id == 0 and c.launches(now=1.0) == []


def test_room_for_a_new_trial_is_asked_of_real_trials_only_and_stops_creation():
    seen = []

    def demand(record):
        seen.append(record.trial_id)
        return Demand().job(record)
    c = Controller(Scripted(limit=5), OBJ, Budget(trials=5),
                   options=ControllerOptions(inventory=cluster(2, 1.0), demand=demand))
    launches = c.launches(now=0.0)
    assert [launch.trial_id for launch in launches] == [0, 1]
    assert sorted(c.trials) == [0, 1]             # no third trial made while both devices are full
    assert set(seen) <= set(c.trials)             # no made-up record was ever asked about


def test_a_promoted_trial_is_placed_with_the_pack_it_resumes_in():
    """Its demand is asked with the algorithm's info for its next launch (a pack of one runs as
    a plain trial and demands as one), and its Launch seats it in a pack, or in none alone."""
    class Packed(Scripted):
        def __init__(self):
            super().__init__(decisions={(0, 1): Decision.PAUSE}, limit=1)
            self.size = 2

        def trial_info(self, trial_id):
            return {"pack": self.size, "pack_size": self.size}

    seen: list[tuple[int, int | None]] = []

    def demand(record):
        seen.append((record.trial_id, record.info.get("pack_size")))
        return Demand().job(record)

    algo = Packed()
    from hypersack.core.packs import runs_fused
    packs = type("P", (), {"max_members": 4, "key": lambda self, config: "k",
                           "fuses": lambda self, config, size=None: runs_fused("fused", bool, size),
                           "member_memory": lambda self, config, device: None,
                           "device_memory": lambda self, device: None})()
    c = Controller(algo, OBJ, Budget(trials=1), options=ControllerOptions(
        inventory=cluster(1), demand=demand, packs=packs))
    (first,) = c.launches(now=0.0)
    assert (first.pack, first.seat) == (1, 0) and c.trials[0].info["pack_size"] == 2
    c.handle(ResultReported(0, 1, {"acc": 0.5}), 1.0)
    c.handle(TrialFinished(0), 1.0)
    algo.size, algo.to_promote = 1, [0]
    seen.clear()
    (resumed,) = c.launches(now=1.0)
    assert (resumed.pack, resumed.seat) == (None, None)     # alone in its algorithm pack
    assert seen and all(size == 1 for _, size in seen)


def test_each_new_trial_costs_one_placement_run_its_room_check():
    c = make(Scripted(limit=10), n=3)
    runs = count_placement_runs(c.allocator)
    launches = c.launches(now=0.0)
    assert [(launch.trial_id, launch.devices) for launch in launches] == [
        (0, (("n0", "g0"),)), (1, (("n0", "g1"),)), (2, (("n0", "g2"),))]
    # trial 0 (no room check: no trial yet), the room of trials 1 and 2 (placed from it), and
    # the "no" for a fourth
    assert runs == [1, 1, 1, 1]
    assert sorted(c.trials) == [0, 1, 2]
    c.handle(ResultReported(1, 1, {"acc": 0.5}), now=1.0)
    c.handle(TrialFinished(1), now=1.0)
    assert [(launch.trial_id, launch.devices) for launch in c.launches(now=1.0)] == [
        (3, (("n0", "g1"),))]
    assert len(runs) == 6                    # its room, and the "no" after it


def test_a_study_that_may_create_no_trial_asks_no_room():
    c = make(Scripted(limit=10), n=3, trials=2)
    runs = count_placement_runs(c.allocator)
    assert [launch.trial_id for launch in c.launches(now=0.0)] == [0, 1]
    assert runs == [1, 1]                    # trial 0, the room of trial 1; none for a third
    c.handle(ResultReported(0, 1, {"acc": 0.5}), now=1.0)
    c.handle(TrialFinished(0), now=1.0)
    assert c.launches(now=1.0) == [] and runs == [1, 1]
    assert not c.done(1.0) and c.running() == 1
