"""pack_opt and its baselines: pure, deterministic, every config in exactly one pack."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypersack.core.packing import (batch_size_packs, distance_matrix, encode_configs,
                                    fusibility_key, group_by_key, member_cap, pack_opt,
                                    random_packs)
from hypersack.errors import ConfigError

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
