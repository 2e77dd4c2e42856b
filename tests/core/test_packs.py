"""The pack decisions of ``core.packs``: which configs an algorithm groups (``pack_opt`` and its
baselines: pure, deterministic, every config in exactly one pack), whether a trial fuses, the
pack and seat it takes (``choose_pack``, ``PackBook``), a new pack's cap and a member's demand."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypersack.core.allocator import Demand
from hypersack.core.packs import (PACK_HEADROOM, PackBook, PackSeats, Seat, batch_size_packs,
                                  choose_pack, distance_matrix, encode_configs, fusibility_key,
                                  group_by_key, group_key, member_cap, member_demand, pack_cap,
                                  pack_opt, random_packs, runs_fused)
from hypersack.errors import ConfigError


# ---- grouping: the fusibility key, pack_opt and its baselines -----------------------------------

# The paper's Table 3 grid.
LEVELS = {"batch_size": [20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70],
          "lr": [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1]}
A = {"batch_size": 20, "optimizer": "SGD", "lr": 0.01, "activation": "ReLu"}
B = {"batch_size": 40, "optimizer": "Adagrad", "lr": 0.01, "activation": "ReLu"}


def test_paper_example_distance():
    """Sec. 5.2: A and B are 4 batch-size levels and one optimizer apart: distance 5 summed."""
    d = distance_matrix([A, B], levels=LEVELS, metric="manhattan")
    assert d[0, 1] == 5 and d[1, 0] == 5 and d[0, 0] == 0
    assert distance_matrix([A, B], levels=LEVELS)[0, 1] == pytest.approx(math.sqrt(17))


def test_encoding_uses_level_indices_and_categories():
    codes, numeric = encode_configs([A, B, {**A, "lr": 0.0009}], keys=["lr", "optimizer"],
                                    levels=LEVELS)
    assert numeric.tolist() == [True, False]
    assert codes[:, 0].tolist() == [4, 4, 3]  # 0.0009 is nearest the level 1e-3
    assert codes[0, 1] != codes[1, 1] and codes[0, 1] == codes[2, 1]
    # without levels, the distinct values present are the levels
    codes, _ = encode_configs([{"x": 10}, {"x": 1000}, {"x": 20}], keys=["x"])
    assert codes[:, 0].tolist() == [0, 2, 1]


def test_fusibility_key_and_groups():
    configs = [{"hidden": 64, "lr": 1}, {"hidden": 32, "lr": 1}, {"hidden": 64, "lr": 2}, {"lr": 3}]
    assert fusibility_key(configs[0], ["hidden"]) == (("hidden", 64),)
    assert fusibility_key({"layers": [1, 2]}, ["layers"]) == (("layers", (1, 2)),)
    assert group_by_key(configs, ["hidden"]) == [[0, 2], [1], [3]]


def configs_grid(n, seed=0):
    rng = np.random.default_rng(seed)
    return [{"batch_size": int(rng.choice(LEVELS["batch_size"])),
             "lr": float(rng.choice(LEVELS["lr"])),
             "optimizer": str(rng.choice(["adam", "sgd", "adagrad"])),
             "hidden": int(rng.choice([32, 64]))} for _ in range(n)]


def check_partition(packs, n):
    flat = sorted(i for p in packs for i in p)
    assert flat == list(range(n))


def test_pack_opt_respects_architecture_cap_and_threshold():
    configs = configs_grid(40)
    packs = pack_opt(configs, architecture_keys=["hidden"], max_members=6, seed=1, levels=LEVELS)
    check_partition(packs, 40)
    for p in packs:
        assert len(p) <= 6
        assert len({configs[i]["hidden"] for i in p}) == 1
    tight = pack_opt(configs, architecture_keys=["hidden"], max_members=6, seed=1,
                     threshold=0.0, levels=LEVELS)
    check_partition(tight, 40)
    for p in tight:  # threshold 0: only identical hyperparameters fuse
        assert len({tuple(sorted(configs[i].items())) for i in p}) == 1


def test_pack_opt_groups_near_neighbours():
    near = [{"lr": lr, "batch_size": 20} for lr in LEVELS["lr"]]
    packs = pack_opt(near, max_members=3, seed=0)
    check_partition(packs, 6)
    for p in packs:  # the nearest neighbours of a centroid are the adjacent levels
        assert max(p) - min(p) <= 2 * (len(p) - 1)


def test_pack_opt_is_deterministic_per_seed():
    configs = configs_grid(30)
    kwargs = dict(architecture_keys=["hidden"], max_members=4, levels=LEVELS)
    assert pack_opt(configs, seed=3, **kwargs) == pack_opt(configs, seed=3, **kwargs)
    assert any(pack_opt(configs, seed=s, **kwargs) != pack_opt(configs, seed=3, **kwargs)
               for s in range(4, 10))


def test_memory_capacity_caps_packs():
    configs = configs_grid(20)
    memory = [1.0 + (i % 3) for i in range(20)]
    for packs in (pack_opt(configs, member_memory=memory, capacity=5.0, seed=0),
                  random_packs(configs, member_memory=memory, capacity=5.0, seed=0),
                  batch_size_packs(configs, member_memory=memory, capacity=5.0)):
        check_partition(packs, 20)
        assert all(sum(memory[i] for i in p) <= 5.0 or len(p) == 1 for p in packs)


def test_baselines():
    configs = configs_grid(30)
    rnd = random_packs(configs, architecture_keys=["hidden"], max_members=4, seed=2)
    check_partition(rnd, 30)
    assert all(len(p) <= 4 and len({configs[i]["hidden"] for i in p}) == 1 for p in rnd)
    by_batch = batch_size_packs(configs, architecture_keys=["hidden"], max_members=4)
    check_partition(by_batch, 30)
    for p in by_batch:
        assert len({(configs[i]["batch_size"], configs[i]["hidden"]) for i in p}) == 1
    assert random_packs(configs, max_members=4, seed=2) == random_packs(configs, max_members=4,
                                                                        seed=2)


def test_member_cap():
    assert member_cap(80e9, 2.5e9, base_bytes=1e9) == 31
    assert member_cap(1e9, 4e9) == 1
    with pytest.raises(ConfigError, match="per_member_bytes"):
        member_cap(1e9, 0)


@pytest.mark.parametrize("kwargs, field", [
    ({"max_members": 0}, "packing.max_members"),
    ({"threshold": -1.0}, "packing.threshold"),
    ({"metric": "cosine"}, "packing.metric"),
    ({"capacity": 3.0}, "packing.capacity"),
    ({"member_memory": [1.0], "capacity": 3.0}, "packing.member_memory"),
])
def test_invalid_arguments_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as info:
        pack_opt(configs_grid(3), **kwargs)
    assert info.value.field == field


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 25), cap=st.integers(1, 6), seed=st.integers(0, 100),
       threshold=st.sampled_from([0.0, 1.0, 2.5, math.inf]))
def test_pack_opt_always_partitions(n, cap, seed, threshold):
    configs = configs_grid(n, seed)
    packs = pack_opt(configs, architecture_keys=["hidden"], max_members=cap, seed=seed,
                     threshold=threshold)
    check_partition(packs, n)
    assert all(1 <= len(p) <= cap for p in packs)

# ---- seating: whether a trial fuses, a new pack's cap, a member's demand -----------------------

def test_the_execution_mode_decides_and_auto_asks_the_task_only_then():
    asked = []

    def accepts(answer):
        def ask():
            asked.append(answer)
            return answer
        return ask
    assert runs_fused("fused", accepts(False)) is True
    assert runs_fused("separate", accepts(True)) is False
    assert asked == []
    assert runs_fused("auto", accepts(True)) is True
    assert runs_fused("auto", accepts(False)) is False
    assert asked == [True, False]
    with pytest.raises(ConfigError, match="execution"):
        runs_fused("both", accepts(True))


@pytest.mark.parametrize("mode", ["fused", "auto"])
def test_a_trial_alone_in_its_algorithm_pack_runs_as_a_plain_trial(mode):
    assert runs_fused(mode, lambda: True, pack_size=1) is False
    assert runs_fused(mode, lambda: True, pack_size=2) is True
    assert runs_fused(mode, lambda: True, pack_size=None) is True     # no algorithm packs


def test_a_pack_takes_what_fits_the_headroom_of_the_free_memory():
    assert PACK_HEADROOM == 0.9
    assert pack_cap(16, 100.0, 9.0) == 10                # floor(90 / 9)
    assert pack_cap(16, 100.0, 8.0, base=18.0) == 9      # floor((90 - 18) / 8)
    assert pack_cap(4, 100.0, 9.0) == 4                  # max_members first
    assert pack_cap(16, 10.0, 9.5) == 1                  # one member always (placement's question)
    assert pack_cap(16, -5.0, 1.0) == 1


def test_nothing_measured_leaves_max_members():
    assert pack_cap(8, None, None) == 8
    assert pack_cap(8, 100.0, None) == 8
    with pytest.raises(ConfigError, match="pack.max_members"):
        pack_cap(0, None, None)


def test_a_member_takes_its_share_of_a_device_unless_the_study_sets_compute():
    assert member_demand(Demand(100.0, 3.0, 8), 16) == Demand(6.25, 3.0, 0.5)
    assert member_demand(Demand(30.0, 3.0, 4), 4) == Demand(30.0, 3.0, 1.0)
    assert member_demand(Demand(100.0, 0.0, 1), 1) == Demand(100.0, 0.0, 1.0)
    with pytest.raises(ConfigError, match="pack.max_members"):
        member_demand(Demand(), 0)


# ---- seating: the pack a trial joins -----------------------------------------------------------

def test_a_trial_joins_the_first_pack_on_its_device_with_its_key_and_a_seat():
    packs = [PackSeats(1, "gpu0", "a", members=2, cap=2),          # full
             PackSeats(2, "gpu1", "a", members=0, cap=4),          # wrong device
             PackSeats(3, "gpu0", "b", members=0, cap=4),          # wrong key
             PackSeats(4, "gpu0", "a", members=1, cap=4, failed=True),
             PackSeats(5, "gpu0", "a", members=3, cap=4),
             PackSeats(6, "gpu0", "a", members=0, cap=4)]
    assert choose_pack(packs, "a", ["gpu0"]) == 5
    assert choose_pack(packs, "a", ["gpu1", "gpu0"]) == 2
    assert choose_pack(packs, "c", ["gpu0"]) is None
    assert choose_pack(packs[:1], "a", ["gpu0"]) is None


def test_an_algorithms_pack_group_keeps_its_trials_apart():
    assert group_key("k", None) == "k"
    assert group_key("k", 3) != group_key("k", 4) != "k"


class Policy:
    """A pack policy as the controller sees one: every config fuses (but a lone algorithm pack),
    keyed by its "hidden" width; memory known per device when ``memory`` is given."""

    def __init__(self, max_members=4, memory=None, device_gb=None):
        self.max_members, self._memory, self._device_gb = max_members, memory, device_gb

    def fuses(self, config, pack_size=None):
        return runs_fused("fused", lambda: True, pack_size)

    def key(self, config):
        return fusibility_key(config, ["hidden"])

    def member_memory(self, config, device):
        return None if self._memory is None else self._memory(config)

    def device_memory(self, device):
        return self._device_gb


D0, D1 = ("n0", "0"), ("n0", "1")


def _join(book, trial_id, device=D0, hidden=8, group=None, neighbours=()):
    return book.join(trial_id, {"hidden": hidden}, group, device, neighbours)


def test_members_fill_the_first_pack_with_their_key_and_a_seat_on_their_device():
    book = PackBook(Policy(max_members=2))
    assert _join(book, 0) == Seat(1, 0, True)
    assert _join(book, 1) == Seat(1, 1, False)
    assert _join(book, 2) == Seat(2, 0, True)            # pack 1 is full
    assert _join(book, 3, device=D1) == Seat(3, 0, True)  # another device: another pack
    assert _join(book, 4, hidden=16) == Seat(4, 0, True)  # another key: another pack
    assert _join(book, 5, group=7) == Seat(5, 0, True)    # another algorithm pack
    assert _join(book, 6, group=7) == Seat(5, 1, False)


def test_a_freed_seat_is_taken_again_lowest_first():
    book = PackBook(Policy(max_members=3))
    for t in range(3):
        _join(book, t)
    book.leave(0)
    book.leave(2)
    assert _join(book, 3) == Seat(1, 0, False)
    assert _join(book, 4) == Seat(1, 2, False)
    assert sorted(book.packs[0].seats.items()) == [(1, 1), (3, 0), (4, 2)]


def test_an_emptied_pack_takes_launches_of_the_same_turn_and_ends_with_it():
    book = PackBook(Policy())
    _join(book, 0)
    book.leave(0)
    assert _join(book, 1) == Seat(1, 0, False)      # the same turn: it joins the empty pack
    book.leave(1)
    book.end_turn()
    assert book.packs == [] and _join(book, 2) == Seat(2, 0, True)


def test_a_measured_cap_lowers_the_seats_and_a_failed_pack_takes_none():
    book = PackBook(Policy(max_members=4))
    _join(book, 0)
    _join(book, 1)
    book.capped(1, 2)
    assert _join(book, 2) == Seat(2, 0, True)
    book.capped(2, 0)                                # pack 2 failed
    assert _join(book, 3) == Seat(3, 0, True)


def test_a_new_packs_cap_is_the_headroom_of_the_memory_its_neighbours_leave():
    book = PackBook(Policy(max_members=8, memory=lambda c: c["gb"], device_gb=40.0))
    assert book.join(0, {"hidden": 8, "gb": 30}, None, D0, []).new
    assert book.packs[0].cap == 1                    # floor(0.9 * 40 / 30)
    book.join(1, {"hidden": 8, "gb": 4}, None, D1, [{"gb": 20}])
    assert book.packs[1].cap == 4                    # floor(0.9 * 20 / 4)
    book.join(2, {"hidden": 8, "gb": 4}, 3, D0, [])
    assert book.packs[2].cap == 8                    # floor(36 / 4) = 9 > max_members
    unknown = PackBook(Policy(max_members=5))
    _join(unknown, 0)
    assert unknown.packs[0].cap == 5                 # nothing known: the pack measures its own


def test_a_lone_algorithm_pack_does_not_fuse():
    book = PackBook(Policy())
    assert book.fuses({"hidden": 8}, 2) and book.fuses({"hidden": 8}, None)
    assert not book.fuses({"hidden": 8}, 1)
