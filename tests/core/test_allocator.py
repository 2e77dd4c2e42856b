"""The Allocator against a literal reading of its contract: each call answers what ``assign``
answers on a Cluster rebuilt from scratch with the running trials (so the incremental load and
index of the greedy policies change no decision), for every policy."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hypersack.core.allocator import Allocator
from hypersack.core.trial import TrialRecord
from hypersack.placement import GPU, Cluster, Job, Node, assign

POLICIES = ["ff", "ffd", "wf", "wfd", "exclusive"]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def demand(record: TrialRecord) -> Job:
    """Demand from the config: compute, memory, cores, runtime, and ``resources`` devices."""
    c = record.config
    return Job(record.trial_id, c["c"], c["m"], cpus=c["q"], runtime=c["t"],
               per_arch={"H100": {"compute": c["c"] / 2}}, gpus=max(1, record.resources))


@st.composite
def inventories(draw):
    nodes = []
    for k in range(draw(st.integers(1, 3))):
        gpus = tuple(GPU(str(g), draw(st.sampled_from(["A100", "H100"])), draw(st.sampled_from([16, 40])),
                         oversubscription=draw(st.sampled_from([1, 2, 3])))
                     for g in range(draw(st.integers(1, 4))))
        nodes.append(Node(f"n{k}", draw(st.sampled_from([4, 8, 16])), gpus))
    return Cluster(nodes)


@st.composite
def records(draw, first, count):
    return [TrialRecord(first + k, {"c": draw(st.sampled_from([20, 33.3, 50, 70, 100])),
                                    "m": draw(st.sampled_from([1, 4, 8, 12.5])),
                                    "q": draw(st.sampled_from([0, 1, 2])), "t": draw(st.integers(1, 9))},
                        seed=0, resources=draw(st.sampled_from([1, 1, 1, 2])))
            for k in range(count)]


class Reference:
    """The allocator as a literal reading: ``assign`` on ``Cluster(nodes, running)`` each time."""

    def __init__(self, cluster: Cluster, policy: str):
        self.nodes, self.policy, self.running = cluster.nodes, policy, {}

    def cluster(self) -> Cluster:
        return Cluster(self.nodes).with_jobs([job for job, _ in self.running.values()],
                                             {t: d for t, (_, d) in self.running.items()}, strict=False)

    def place(self, recs):
        chosen = assign([demand(r) for r in recs], self.cluster(), self.policy) if recs else {}
        for r in recs:
            if r.trial_id in chosen:
                self.running[r.trial_id] = (demand(r), chosen[r.trial_id])
        return {r.trial_id: chosen[r.trial_id] for r in recs if r.trial_id in chosen}

    def has_room(self, like):
        return bool(assign([demand(like)], self.cluster(), self.policy))


@SETTINGS
@given(inventories(), st.sampled_from(POLICIES), st.lists(st.integers(0, 4), min_size=1, max_size=12),
       st.data())
def test_allocator_answers_as_assign_on_a_cluster_rebuilt_from_scratch(inventory, policy, batches, data):
    alloc, ref = Allocator(inventory, policy, demand), Reference(inventory, policy)
    next_id = 0
    for size in batches:
        recs = data.draw(records(next_id, size))
        next_id += size
        if recs:
            probe = TrialRecord(-1, recs[0].config, 0, resources=recs[0].resources)
            assert alloc.has_room_for(recs[0], recs[0].resources) == ref.has_room(probe)
            wider = TrialRecord(-1, recs[0].config, 0, resources=2)
            assert alloc.has_room_for(recs[0], 2) == ref.has_room(wider)
        assert alloc.place(recs) == ref.place(recs)
        assert alloc.running() == {t: d for t, (_, d) in ref.running.items()}
        assert alloc.cluster == ref.cluster()
        for trial_id in data.draw(st.lists(st.sampled_from(sorted(ref.running) or [-5]), max_size=2,
                                           unique=True)):
            alloc.release(trial_id)
            ref.running.pop(trial_id, None)


@pytest.mark.parametrize("policy", ["wfd", "exclusive"])
def test_devices_come_and_go_and_the_count_follows(policy):
    inventory = Cluster([Node("a", 8, (GPU("0", "A100", 40), GPU("1", "A100", 40)))])
    alloc = Allocator(inventory, policy, demand)
    rec = TrialRecord(0, {"c": 50, "m": 4, "q": 1, "t": 1}, seed=0)
    assert alloc.device_count() == 2
    placed = alloc.place([rec])
    assert list(placed) == [0]
    alloc.add_device("a", GPU("2", "A100", 40))
    assert alloc.device_count() == 3 and alloc.cluster.jobs_on(*placed[0][0]) == [0]
    lost = alloc.lose_device(*placed[0][0])
    assert lost == [0] and alloc.device_count() == 2 and alloc.running() == {}
    assert alloc.cluster == Cluster(alloc.inventory.nodes)
    assert alloc.has_room_for(rec, 1) and alloc.unplaceable(rec) is None


def test_has_room_for_asks_the_demand_of_a_real_trial_only_and_places_nothing():
    asked = []

    def spying(record):
        asked.append(record.trial_id)
        return demand(record)
    inventory = Cluster([Node("a", 8, (GPU("0", "A100", 40), GPU("1", "A100", 40)))])
    alloc = Allocator(inventory, "wfd", spying)
    rec = TrialRecord(0, {"c": 60, "m": 4, "q": 1, "t": 1}, seed=0)
    assert alloc.place([rec]) == {0: (("a", "0"),)}
    assert alloc.has_room_for(rec, 1)             # the running trial itself is the model
    assert not alloc.has_room_for(rec, 2)         # 2 devices: one is 60% full
    assert asked == [0, 0, 0] and alloc.running() == {0: (("a", "0"),)}


def test_has_room_for_keeps_a_demands_own_device_floor():
    inventory = Cluster([Node("a", 8, tuple(GPU(str(i), "A100", 40) for i in range(3)))])
    rec = TrialRecord(0, {}, seed=0)
    two = TrialRecord(1, {}, seed=0, resources=2)
    floor = Allocator(inventory, "wfd", lambda r: Job(r.trial_id, 60, 4, gpus=max(2, r.resources)))
    plain = Allocator(inventory, "wfd", lambda r: Job(r.trial_id, 60, 4, gpus=max(1, r.resources)))
    for alloc in (floor, plain):
        assert alloc.has_room_for(rec, 1)
        alloc.place([two])                        # 60% of two devices; the third is idle
        assert not alloc.has_room_for(rec, 2)
    assert plain.has_room_for(rec, 1)             # one idle device is enough
    assert not floor.has_room_for(rec, 1)         # a model on 2 devices is, whatever is asked
