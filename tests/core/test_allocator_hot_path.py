"""The allocator's hot path: demands become Jobs without per-call validation (a checked template
renamed per trial), options are checked once at the boundary, and a built-in policy's answer is
occupied as it is."""
from __future__ import annotations

import pytest

from hypersack.core.allocator import Allocator, Demand
from hypersack.placement import GPU, Cluster, Node
from hypersack.core.trial import TrialRecord
from hypersack.errors import ConfigError

from controller_helpers import count_placement_runs


def _record(trial_id: int, resources: int = 1) -> TrialRecord:
    record = TrialRecord(trial_id, {"x": trial_id}, seed=0)
    record.resources = resources
    return record


def test_a_demand_gives_each_trial_its_own_job_with_the_declared_values():
    demand = Demand(compute=25.0, memory_gb=3.0, cpus=2)
    a, b, wide = demand.job(_record(1)), demand.job(_record(2)), demand.job(_record(3, resources=4))
    assert (a.id, b.id, wide.id) == (1, 2, 3)
    assert (a.compute, a.memory_gb, a.cpus, a.gpus) == (25.0, 3.0, 2.0, 1)
    assert (wide.compute, wide.gpus) == (25.0, 4) and b.gpus == 1
    other = Demand(compute=50.0).job(_record(1))
    assert other.compute == 50.0 and a.compute == 25.0      # templates are per demand
    assert demand.job(_record(1)) == a


def test_a_bad_demand_is_still_refused_naming_the_field():
    with pytest.raises(ConfigError, match="job.compute"):
        Demand(compute=-1.0).job(_record(0))


def test_bad_policy_options_are_refused_when_the_allocator_is_built():
    cluster = Cluster([Node("n", 8, (GPU("g0", "A100", 40.0),))])
    with pytest.raises(ConfigError, match="placement.w_frag"):
        Allocator(cluster, {"policy": "hay", "w_frag": -1})


def test_placed_trials_fill_devices_exactly_to_their_capacity():
    cluster = Cluster([Node("n", 64, tuple(GPU(f"g{i}", "A100", 40.0) for i in range(2)))])
    allocator = Allocator(cluster, "wfd", Demand(compute=40.0, memory_gb=1.0).job)
    placed = allocator.place([_record(i) for i in range(6)])
    assert len(placed) == 4                      # two 40% trials per device (80% <= 100%)
    assert sorted(g for devices in placed.values() for _, g in devices) == ["g0", "g0", "g1", "g1"]
    assert not allocator.has_room_for(_record(9), 1)
    allocator.release(next(iter(placed)))
    assert allocator.has_room_for(_record(9), 1)


def test_a_no_from_has_room_for_is_remembered_until_the_load_or_the_demand_changes():
    inventory = Cluster([Node("a", 8, (GPU("0", "A100", 40),))])
    demands = {"job": Demand(60.0, 4.0, 1)}
    alloc = Allocator(inventory, "wfd", lambda r: demands["job"].job(r))
    assigned = []
    real_assign = alloc._assign

    def counting(jobs):
        assigned.append(len(jobs))
        return real_assign(jobs)
    alloc._assign = counting
    running = _record(0)
    alloc.place([running])                            # 60% of the only device
    calls = len(assigned)
    assert not alloc.has_room_for(running, 1)
    assert not alloc.has_room_for(running, 1)         # nothing changed: answered from memory
    assert len(assigned) == calls + 1
    demands["job"] = Demand(30.0, 4.0, 1)             # a new demand (a profile came in)
    assert alloc.has_room_for(running, 1)
    demands["job"] = Demand(60.0, 4.0, 1)
    assert not alloc.has_room_for(running, 1)
    alloc.release(0)                                  # the load changed: asked again
    assert alloc.has_room_for(running, 1)
    alloc.place([_record(1)])
    assert not alloc.has_room_for(running, 1)
    alloc.lose_device("a", "0")                       # the inventory changed
    assert not alloc.has_room_for(running, 1)
    alloc.add_device("a", GPU("1", "A100", 40))
    assert alloc.has_room_for(running, 1)


def _two_devices() -> Cluster:
    """g0 with 80 GB, g1 with 40 GB (one architecture)."""
    return Cluster([Node("n", 16, (GPU("g0", "A100", 80.0), GPU("g1", "A100", 40.0)))])


def _by_config(record: TrialRecord):
    """A demand read from the config: ``{"c": compute, "m": memory_gb}``."""
    return Demand(record.config["c"], record.config["m"]).job(record)


def _trial(trial_id: int, compute: float, memory_gb: float) -> TrialRecord:
    record = TrialRecord(trial_id, {"c": compute, "m": memory_gb}, seed=0)
    record.resources = 1
    return record


def test_a_yes_of_has_room_for_places_the_next_trial_of_that_demand_without_a_second_run():
    alloc = Allocator(_two_devices(), "wfd", _by_config)
    fresh = Allocator(_two_devices(), "wfd", _by_config)       # the same steps, no room asked
    first = _trial(0, 30.0, 1.0)
    assert alloc.place([first]) == fresh.place([first]) == {0: (("n", "g0"),)}
    runs = count_placement_runs(alloc)
    assert alloc.has_room_for(first, 1)
    assert alloc.has_room_for(first, 1)                       # asked again: from memory
    new = _trial(1, 30.0, 1.0)                                 # the same demand, its own id
    assert alloc.place([new]) == fresh.place([new]) == {1: (("n", "g1"),)}
    assert runs == [1]                                         # one run: the room check's
    assert alloc.running() == fresh.running()
    assert alloc.cluster.free("n", "g1") == fresh.cluster.free("n", "g1") == (70.0, 39.0)


def test_a_new_trial_of_another_demand_is_placed_by_its_own_run():
    alloc = Allocator(_two_devices(), "wfd", _by_config)
    first = _trial(0, 30.0, 1.0)
    alloc.place([first])
    assert alloc.has_room_for(first, 1)                        # room on g1 (most compute left)
    runs = count_placement_runs(alloc)
    big = _trial(1, 30.0, 60.0)                                # 60 GB: only g0 can hold it
    assert alloc.place([big]) == {1: (("n", "g0"),)}
    assert runs == [1]


def test_the_room_found_is_not_reused_once_the_load_or_the_inventory_changed():
    alloc = Allocator(_two_devices(), "wfd", _by_config)
    first = _trial(0, 30.0, 1.0)
    alloc.place([first])
    assert alloc.has_room_for(first, 1)                        # g1 then
    alloc.release(0)                                           # both idle: wfd takes g0
    assert alloc.place([_trial(1, 30.0, 1.0)]) == {1: (("n", "g0"),)}
    assert alloc.has_room_for(first, 1)                        # g1 again
    alloc.lose_device("n", "g1")
    assert alloc.place([_trial(2, 30.0, 1.0)]) == {2: (("n", "g0"),)}
    assert alloc.has_room_for(first, 1)                        # g0: 40% left
    assert alloc.place([_trial(3, 30.0, 1.0)]) == {3: (("n", "g0"),)}
    assert not alloc.has_room_for(first, 1)                    # 10% left
    assert alloc.place([_trial(4, 30.0, 1.0)]) == {}


def test_a_no_is_never_taken_for_a_place_and_several_trials_are_placed_together():
    alloc = Allocator(_two_devices(), "wfd", _by_config)
    hog = _trial(0, 100.0, 1.0)                                # all of g0's r x C
    alloc.place([hog])
    full = _trial(1, 100.0, 1.0)
    alloc.place([full])
    assert not alloc.has_room_for(full, 1)
    assert alloc.place([_trial(2, 100.0, 1.0)]) == {}
    alloc.release(1)
    assert alloc.has_room_for(full, 1)
    runs = count_placement_runs(alloc)
    pair = [_trial(3, 50.0, 1.0), _trial(4, 50.0, 1.0)]
    assert alloc.place(pair) == {3: (("n", "g1"),), 4: (("n", "g1"),)}
    assert runs == [2]                                         # one run for both


def test_a_policy_outside_the_built_in_ones_runs_its_own_placement_for_each_trial():
    alloc = Allocator(_two_devices(), "wfd-ls", _by_config)
    first = _trial(0, 30.0, 1.0)
    alloc.place([first])
    assert alloc.has_room_for(first, 1)
    runs = count_placement_runs(alloc)
    assert alloc.place([_trial(1, 30.0, 1.0)])
    assert runs == [1]                                         # its answer may depend on ids
