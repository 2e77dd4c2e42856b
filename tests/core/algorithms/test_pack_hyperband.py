"""Pack-aware Hyperband (Pack, Algorithm 2): packing of each rung, promotions, determinism, resume."""
from __future__ import annotations

import json
import math
from collections import defaultdict

import pytest

from hypersack.algorithms import Hyperband, PackHyperband
from hypersack.core.algorithms import Decision, make_algorithm
from hypersack.core.objective import Objective
from hypersack.core.packs import distance_matrix
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError

from mf_driver import Driver

OBJ = Objective("loss", "min")
SPACE = SearchSpace({
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "batch_size": {"type": "categorical", "choices": [16, 32, 64, 128]},
    "hidden": {"type": "categorical", "choices": [32, 64]},
    "optimizer": {"type": "categorical", "choices": ["adam", "sgd", "rmsprop"]},
})
OPTIONS = dict(min_t=1, max_t=27, reduction_factor=3, max_pack=4, threshold=2.0,
               fusibility_keys=["hidden"])


def curve(config, step):
    """A floor set by the config (best near lr = 1e-2, batch 32, adam) plus 1/step."""
    floor = (math.log10(config["lr"]) + 2) ** 2 + abs(config["batch_size"] - 32) / 64
    return floor + (0.0 if config["optimizer"] == "adam" else 0.3) + 1.0 / step


def build(**extra):
    return PackHyperband(SPACE, OBJ, seed=7, **{**OPTIONS, **extra})


def run(alg, **kwargs):
    return Driver(alg, curve, max_steps=27, devices=4, **kwargs).run()


def created(driver):
    """Per new trial: (trial id, its config, the info of its suggestion)."""
    return [(t, driver.trials[t].config, info) for kind, t, _, info in driver.log
            if kind == "suggest"]


# ---- packs ------------------------------------------------------------------------------------

def test_rung0_packs_respect_cap_threshold_and_fusibility():
    alg = build()
    driver = run(alg)
    packs = defaultdict(list)
    for _, config, info in created(driver):
        packs[info["pack"]].append((config, info))
    assert len(packs) < len(created(driver))          # some trials do share a pack
    keys = ["batch_size", "lr", "optimizer"]
    levels = {k: SPACE[k].grid(5) for k in keys}
    for members in packs.values():
        configs = [c for c, _ in members]
        assert len(members) == members[0][1]["pack_size"] <= 4
        assert all(info["fuse_key"] == {"hidden": c["hidden"]} for c, info in members)
        dist = distance_matrix(configs, keys, levels)
        # kNN: some member (the centroid) has every other member within the threshold.
        assert any((dist[i] <= 2.0 + 1e-12).all() for i in range(len(configs)))


def test_members_of_a_pack_are_handed_out_consecutively():
    driver = run(build())
    order = [info["pack"] for _, _, info in created(driver)]
    runs = [p for i, p in enumerate(order) if i == 0 or order[i - 1] != p]
    assert len(runs) == len(set(runs))


def test_threshold_zero_packs_only_equal_encodings():
    driver = run(build(threshold=0.0))
    levels = {k: SPACE[k].grid(5) for k in ("batch_size", "lr", "optimizer")}
    packs = defaultdict(list)
    for _, config, info in created(driver):
        packs[info["pack"]].append(config)
    for configs in packs.values():
        dist = distance_matrix(configs, ["batch_size", "lr", "optimizer"], levels)
        assert (dist == 0).all()


def test_batch_size_and_random_groupings():
    for grouping in ("batch_size", "random"):
        driver = run(build(grouping=grouping, max_pack=3))
        packs = defaultdict(list)
        for _, config, info in created(driver):
            packs[info["pack"]].append(config)
        assert all(len(p) <= 3 for p in packs.values())
        assert all(len({c["hidden"] for c in p}) == 1 for p in packs.values())
        if grouping == "batch_size":
            assert all(len({c["batch_size"] for c in p}) == 1 for p in packs.values())


def test_packs_below_min_pack_are_split_into_singletons():
    sizes = [info["pack_size"] for _, _, info in created(run(build(min_pack=3)))]
    assert all(size == 1 or size >= 3 for size in sizes) and 1 in sizes and max(sizes) >= 3


def test_max_pack_one_is_plain_hyperband_with_singleton_packs():
    driver = run(build(max_pack=1))
    assert all(info["pack_size"] == 1 for _, _, info in created(driver))


# ---- Hyperband semantics ----------------------------------------------------------------------

def test_every_config_of_every_bracket_is_trained_and_the_configs_are_hyperbands():
    alg = build()
    driver = run(alg)
    per_bracket = defaultdict(list)
    for t, _, info in created(driver):
        per_bracket[info["bracket"]].append(t)
        assert driver.trials[t].step >= alg.brackets[info["bracket"]][0][1]   # reached rung 0
    assert {b: len(ts) for b, ts in per_bracket.items()} == \
        {b: rungs[0][0] for b, rungs in enumerate(alg.brackets)}
    plain = run(Hyperband(SPACE, OBJ, seed=7, min_t=1, max_t=27, reduction_factor=3, repeat=1))
    key = lambda c: json.dumps(c, sort_keys=True)                               # noqa: E731
    assert sorted(key(c) for _, c, _ in created(driver)) == \
        sorted(key(c) for _, c, _ in created(plain))
    assert curve(driver.best().config, 27) == curve(plain.best().config, 27)


def test_promotions_are_the_top_of_each_rung():
    alg = build()
    driver = run(alg)
    home = {t: info["bracket"] for t, _, info in created(driver)}
    value_at = {(t, s): v for kind, t, s, v in driver.log if kind == "report"}
    for b, rungs in enumerate(alg.brackets):
        alive = sorted(t for t, h in home.items() if h == b)
        for (n, steps), (n_next, _) in zip(rungs, rungs[1:]):
            assert len(alive) == n
            best = sorted(alive, key=lambda t: (curve(driver.trials[t].config, steps), t))
            promoted = sorted(t for kind, t, s, _ in driver.log
                              if kind == "resume" and s == steps and home[t] == b)
            assert promoted == sorted(best[:n_next])
            assert all(value_at[(t, steps)] == Decision.PAUSE.value for t in alive)
            alive = promoted


def test_survivors_are_repacked_and_promoted_pack_by_pack():
    alg = build()
    handed = []                    # (trial, its pack info) at the moment it is promoted
    promote = alg.promote

    def recording_promote():
        trial_id = promote()
        if trial_id is not None:
            handed.append((trial_id, alg.pack_info(trial_id)))
        return trial_id
    alg.promote = recording_promote
    driver = Driver(alg, curve, max_steps=27, devices=64).run()
    assert handed
    rung0 = {info["pack"] for _, _, info in created(driver)}
    home = {t: info["bracket"] for t, _, info in created(driver)}
    by_pack = defaultdict(list)
    for t, info in handed:
        assert info["rung"] >= 1 and info["pack"] not in rung0 and info["bracket"] == home[t]
        by_pack[info["pack"]].append(driver.trials[t].config)
    for pack, configs in by_pack.items():
        assert len(configs) <= 4 and len({c["hidden"] for c in configs}) == 1
    order = [info["pack"] for _, info in handed]
    runs = [p for i, p in enumerate(order) if i == 0 or order[i - 1] != p]
    assert len(runs) == len(set(runs))        # each pack's promotions are consecutive


# ---- determinism, resume, options --------------------------------------------------------------

def test_deterministic_for_a_seed():
    a, b = run(build()), run(build())
    assert a.log == b.log
    c = run(PackHyperband(SPACE, OBJ, seed=8, **OPTIONS))
    assert c.log != a.log


@pytest.mark.parametrize("kill_at", [5, 40, 90])
def test_resume_mid_bracket_continues_as_uninterrupted(kill_at):
    plain = run(build())
    resumed = run(build(), kill_at=kill_at, rebuild=build)
    assert resumed.alg is not plain.alg and resumed.alg.exhausted
    assert [e for e in resumed.log if e[0] != "report"] == \
        [e for e in plain.log if e[0] != "report"]
    assert resumed.best().config == plain.best().config


def test_state_dict_round_trips_through_json():
    alg = build()
    for t in range(10):
        alg.suggest(t)
    alg.on_result(0, 1, {"loss": 1.0})
    state = json.loads(json.dumps(alg.state_dict()))
    other = build()
    other.load_state_dict(state)
    assert other.state_dict() == alg.state_dict()
    assert [other.suggest(t) for t in range(10, 20)] == [alg.suggest(t) for t in range(10, 20)]


def test_built_by_name():
    alg = make_algorithm({"type": "pack_hyperband", **OPTIONS, "threshold": None}, SPACE, OBJ, 3)
    assert isinstance(alg, PackHyperband) and alg.threshold == math.inf


@pytest.mark.parametrize("option, value", [
    ("grouping", "greedy"), ("max_pack", 0), ("max_pack", 2.5), ("threshold", -1.0),
    ("threshold", float("nan")), ("threshold", "far"), ("fusibility_keys", ["width"]),
    ("fusibility_keys", 3), ("metric", "cosine"), ("levels_per_axis", 1),
    ("reduction_factor", 1), ("max_t", 0), ("min_pack", 0), ("min_pack", 5),
    ("distance_keys", ["lr", "depth"])])
def test_bad_options_raise_config_error_naming_the_option(option, value):
    with pytest.raises(ConfigError) as exc:
        build(**{option: value})
    assert exc.value.field == f"algorithm.{option}"


def test_batch_key_must_be_a_parameter_for_batch_size_grouping():
    with pytest.raises(ConfigError) as exc:
        build(grouping="batch_size", batch_key="bs")
    assert exc.value.field == "algorithm.batch_key"


def _stored(alg, stored=None):
    """Apply ``alg.state_delta()`` to ``stored`` (head and parts by key) as a store does."""
    delta = json.loads(json.dumps(alg.state_delta()))
    parts = {**(stored or {}).get("parts", {}), **delta.pop("parts")}
    return {**delta, "parts": {k: v for k, v in parts.items() if v is not None}}


def test_state_in_parts_is_written_once_and_a_whole_state_resumes_into_parts():
    alg = build()
    for t in range(30):
        alg.suggest(t)
        alg.on_result(t, 1, {"loss": float(t % 7)})
    stored = _stored(alg)
    assert {k[:2] for k in stored["parts"]} >= {"pk", "pl", "pc"}
    assert "pack" not in stored                          # the head holds no pack state
    resumed = alg.suggest(30).resume                    # a promotion: nothing re-packed
    assert sorted(alg.state_delta()["parts"]) == ["b0", f"t{resumed}"]
    whole = json.loads(json.dumps(alg.state_dict()))     # a study stored whole by an older driver
    old = build()
    old.load_state_dict(whole)
    again = build()
    again.load_state_dict(_stored(old))
    assert again.state_dict() == whole
    assert [again.suggest(t) for t in range(31, 45)] == [alg.suggest(t) for t in range(31, 45)]
