"""Search algorithms: grid, random, TPE, resume through state_dict, the registry."""
from __future__ import annotations

import json
import math
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypersack.core.algorithms import (Algorithm, Decision, GridSearch, RandomSearch, Suggestion,
                                       algorithm_names, make_algorithm, register_algorithm)
from hypersack.core.algorithms import base as algorithms_base
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError, HyperSackError, MissingDependencyError

OBJ = Objective("loss", "min")
SPACE = SearchSpace({
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "dropout": {"type": "float", "low": 0.0, "high": 0.5},
    "layers": {"type": "int", "low": 1, "high": 6},
    "width": {"type": "int", "low": 8, "high": 256, "log": True},
    "batch": {"type": "int", "low": 16, "high": 128, "step": 16},
    "opt": ["sgd", "adam"],
    "epochs": 5,
})


def loss(config):
    return (math.log10(config["lr"]) + 2) ** 2 + config["dropout"] + config["layers"] / 10


def json_round_trip(state):
    return json.loads(json.dumps(state))


def drain(alg, start=0, limit=10_000):
    out = []
    for t in range(start, start + limit):
        s = alg.suggest(t)
        if s is None:
            return out
        out.append(s)
    raise AssertionError("algorithm never ran dry")


# ---- grid -------------------------------------------------------------------------------------

GRID_SPACE = SearchSpace({"a": ["x", "y", "z"], "b": {"type": "int", "low": 0, "high": 1}, "k": 7})


def test_grid_visits_every_point_once_in_order_then_is_exhausted():
    alg = GridSearch(GRID_SPACE, OBJ)
    assert alg.size == 6 and not alg.exhausted
    got = drain(alg)
    assert [s.config for s in got] == GRID_SPACE.grid(3)
    assert len({tuple(sorted(s.config.items())) for s in got}) == 6
    assert [s.info["grid_index"] for s in got] == list(range(6))
    assert alg.exhausted
    assert alg.suggest(99) is None and alg.suggest(100) is None


def test_grid_points_per_axis():
    space = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0}, "c": ["a", "b"]})
    alg = GridSearch(space, OBJ, points_per_axis=5)
    configs = [s.config for s in drain(alg)]
    assert len(configs) == 10
    assert sorted({c["x"] for c in configs}) == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])


def test_grid_repeat_runs_each_point_that_many_times_in_a_row():
    alg = GridSearch(GRID_SPACE, OBJ, repeat=3)
    assert alg.size == 18
    configs = [s.config for s in drain(alg)]
    assert len(configs) == 18
    points = GRID_SPACE.grid(3)
    assert configs == [p for p in points for _ in range(3)]
    assert alg.exhausted and alg.suggest(18) is None


def test_grid_suggestions_are_copies():
    alg = GridSearch(GRID_SPACE, OBJ)
    first = alg.suggest(0)
    first.config["a"] = "mutated"
    alg.load_state_dict({"next": 0})
    assert alg.suggest(0).config["a"] == "x"


@pytest.mark.parametrize("repeat", [0, -1, 1.5, "2"])
def test_grid_rejects_bad_repeat(repeat):
    with pytest.raises(ConfigError) as exc:
        GridSearch(GRID_SPACE, OBJ, repeat=repeat)
    assert exc.value.field == "algorithm.repeat"
    assert repr(repeat) in str(exc.value)


def test_grid_rejects_bad_points_per_axis():
    with pytest.raises(ConfigError) as exc:
        GridSearch(GRID_SPACE, OBJ, points_per_axis=0)
    assert exc.value.field == "algorithm.points_per_axis"
    assert "0" in str(exc.value)


# ---- random -----------------------------------------------------------------------------------

@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_random_search_is_deterministic_per_seed_and_stays_in_the_space(seed):
    a = [RandomSearch(SPACE, OBJ, seed=seed).suggest(t).config for t in range(1)]
    one, two = RandomSearch(SPACE, OBJ, seed=seed), RandomSearch(SPACE, OBJ, seed=seed)
    xs = [one.suggest(t).config for t in range(8)]
    ys = [two.suggest(t).config for t in range(8)]
    assert xs == ys and xs[0] == a[0]
    for c in xs:
        SPACE.validate(c)
        assert c["epochs"] == 5


def test_random_search_differs_between_seeds_and_between_trials():
    runs = [[RandomSearch(SPACE, OBJ, seed=s).suggest(t).config["lr"] for t in range(1)] for s in range(5)]
    assert len({r[0] for r in runs}) == 5
    alg = RandomSearch(SPACE, OBJ, seed=0)
    assert len({alg.suggest(t).config["lr"] for t in range(20)}) == 20
    assert not alg.exhausted


# ---- resume: state_dict -> JSON -> load_state_dict continues identically ----------------------

def test_grid_state_round_trip_continues_identically():
    alg = GridSearch(GRID_SPACE, OBJ, repeat=2)
    for t in range(5):
        alg.suggest(t)
    state = json_round_trip(alg.state_dict())
    fresh = GridSearch(GRID_SPACE, OBJ, repeat=2)
    fresh.load_state_dict(state)
    rest_a, rest_b = drain(alg, 5), drain(fresh, 5)
    assert [s.config for s in rest_a] == [s.config for s in rest_b]
    assert [s.info for s in rest_a] == [s.info for s in rest_b]
    assert len(rest_b) == 12 - 5 and fresh.exhausted


def test_random_state_round_trip_continues_identically():
    alg = RandomSearch(SPACE, OBJ, seed=11)
    for t in range(7):
        alg.suggest(t)
    state = json_round_trip(alg.state_dict())
    fresh = RandomSearch(SPACE, OBJ, seed=11)
    fresh.load_state_dict(state)
    assert [alg.suggest(t).config for t in range(7, 17)] == [fresh.suggest(t).config for t in range(7, 17)]
    # Without the state, a fresh instance would start over instead.
    assert RandomSearch(SPACE, OBJ, seed=11).suggest(7).config != fresh.suggest(17).config


# ---- TPE --------------------------------------------------------------------------------------

@pytest.fixture
def optuna():
    return pytest.importorskip("optuna")


def tpe(space=SPACE, objective=OBJ, seed=0, **options):
    from hypersack.core.algorithms import TPESearch
    return TPESearch(space, objective, seed=seed, **options)


def test_tpe_proposes_configs_within_the_space_and_honours_constants(optuna):
    alg = tpe(n_startup_trials=4)
    for t in range(14):
        config = alg.suggest(t).config
        SPACE.validate(config)
        assert list(config) == list(SPACE)
        assert config["epochs"] == 5
        assert config["batch"] % 16 == 0
        alg.on_complete(t, loss(config), "complete")


def test_tpe_works_on_a_space_of_constants_only(optuna):
    alg = tpe(SearchSpace({"a": 1, "b": "x"}))
    assert alg.suggest(0).config == {"a": 1, "b": "x"}
    alg.on_complete(0, 1.0, "complete")
    assert alg.suggest(1).config == {"a": 1, "b": "x"}


def _distances(mode, seed):
    space = SearchSpace({"x": {"type": "float", "low": -10.0, "high": 10.0}, "k": 7})
    alg = tpe(space, Objective("y", mode), seed=seed, n_startup_trials=10)
    xs = []
    for t in range(40):
        config = alg.suggest(t).config
        assert config["k"] == 7
        xs.append(config["x"])
        y = (config["x"] - 2.0) ** 2
        alg.on_complete(t, y if mode == "min" else -y, "complete")
    d = [abs(x - 2.0) for x in xs]
    return sum(d[:10]) / 10, sum(d[-15:]) / 15


@pytest.mark.parametrize("mode", ["min", "max"])
def test_tpe_concentrates_near_the_optimum(optuna, mode):
    pairs = [_distances(mode, seed) for seed in range(3)]
    first = sum(p[0] for p in pairs) / len(pairs)
    last = sum(p[1] for p in pairs) / len(pairs)
    # Uniform draws on [-10, 10] are on average 5.2 from x = 2.
    assert last < 0.75 * first
    assert last < 4.0


def test_tpe_handles_failed_trials(optuna):
    alg = tpe(n_startup_trials=3)
    for t in range(12):
        config = alg.suggest(t).config
        SPACE.validate(config)
        value = None if t % 3 == 0 else (float("nan") if t % 3 == 1 else loss(config))
        alg.on_complete(t, value, "failed" if value is None else "complete")
    state = alg.state_dict()
    trials = state["model"]["trials"]
    assert [e["t"] for e in trials] == list(range(12))
    assert [e["s"] == "F" for e in trials] == [t % 3 != 2 for t in range(12)]
    assert all(("v" in e) == (e["s"] == "C") for e in trials)
    json.dumps(state)
    SPACE.validate(alg.suggest(12).config)


def test_tpe_ignores_completion_of_unknown_trials(optuna):
    alg = tpe()
    alg.on_complete(42, 1.0, "complete")
    assert alg.state_dict()["model"]["trials"] == []


def test_tpe_state_round_trip_continues_identically(optuna):
    alg = tpe(seed=5, n_startup_trials=4)
    for t in range(10):
        config = alg.suggest(t).config
        alg.on_complete(t, loss(config), "complete")
    state = json_round_trip(alg.state_dict())
    fresh = tpe(seed=5, n_startup_trials=4)
    fresh.load_state_dict(state)
    for t in range(10, 16):
        a, b = alg.suggest(t).config, fresh.suggest(t).config
        assert a == b
        alg.on_complete(t, loss(a), "complete")
        fresh.on_complete(t, loss(b), "complete")
    assert json_round_trip(alg.state_dict()) == json_round_trip(fresh.state_dict())


def test_tpe_state_round_trip_with_trials_still_running(optuna):
    alg = tpe(seed=2, n_startup_trials=3)
    for t in range(6):
        config = alg.suggest(t).config
        alg.on_complete(t, loss(config), "complete")
    running = {t: alg.suggest(t).config for t in (6, 7)}
    state = json_round_trip(alg.state_dict())
    assert state["live"] == [6, 7]
    assert [e["s"] for e in state["model"]["trials"]] == ["C"] * 6 + ["R", "R"]
    fresh = tpe(seed=2, n_startup_trials=3)
    fresh.load_state_dict(state)
    for alg_ in (alg, fresh):       # completed out of order, after the save
        alg_.on_complete(7, loss(running[7]), "complete")
        alg_.on_complete(6, None, "failed")
    assert alg.state_dict() == fresh.state_dict()
    assert [alg.suggest(t).config for t in range(8, 12)] == [fresh.suggest(t).config for t in range(8, 12)]


def test_tpe_resumes_a_state_saved_before_the_incremental_model(optuna):
    alg = tpe(seed=3, n_startup_trials=2)
    configs = [alg.suggest(t).config for t in range(5)]
    for t in (1, 0, 3):
        alg.on_complete(t, loss(configs[t]) if t != 3 else None, "complete" if t != 3 else "failed")
    old = {"journal": [{"config": configs[t], "value": None if t == 3 else loss(configs[t])}
                       for t in (1, 0, 3)],
           "running": {"2": configs[2], "4": configs[4]}}
    legacy = tpe(seed=3, n_startup_trials=2)
    legacy.load_state_dict(json_round_trip(old))
    trials = legacy.model.trials()
    assert [e["s"] for e in trials] == ["C", "C", "F", "R", "R"]   # the order the old code replayed
    assert [e.get("t") for e in trials] == [None, None, None, 2, 4]
    legacy.on_complete(2, loss(configs[2]), "complete")
    assert legacy.model.trials()[3]["s"] == "C"
    SPACE.validate(legacy.suggest(5).config)


def test_tpe_is_deterministic_per_seed(optuna):
    def run(seed):
        alg = tpe(seed=seed, n_startup_trials=3)
        out = []
        for t in range(8):
            config = alg.suggest(t).config
            out.append(config)
            alg.on_complete(t, loss(config), "complete")
        return out
    assert run(1) == run(1)
    assert run(1) != run(2)


def test_tpe_rejects_unknown_sampler_options(optuna):
    with pytest.raises(ConfigError) as exc:
        make_algorithm({"type": "tpe", "n_startup": 3}, SPACE, OBJ)
    assert exc.value.field == "algorithm"
    assert "n_startup" in str(exc.value)


def test_tpe_missing_optuna_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)     # makes `import optuna` raise ImportError
    with pytest.raises(MissingDependencyError) as exc:
        make_algorithm("tpe", SPACE, OBJ)
    assert "pip install 'hypersack[tpe]'" in str(exc.value)
    assert "optuna" in str(exc.value)
    assert isinstance(exc.value, ImportError) and isinstance(exc.value, HyperSackError)
    # The other algorithms do not need it.
    assert isinstance(make_algorithm("random", SPACE, OBJ), RandomSearch)


# ---- registry ---------------------------------------------------------------------------------

def test_make_algorithm_by_name_dict_or_instance():
    assert isinstance(make_algorithm("grid", GRID_SPACE, OBJ), GridSearch)
    alg = make_algorithm({"type": "grid", "points_per_axis": 2, "repeat": 2}, SPACE, OBJ)
    assert isinstance(alg, GridSearch) and alg.size == 2 * 2 * 2 * 2 * 2 * 2 * 1 * 2
    rnd = make_algorithm({"type": "random"}, SPACE, OBJ, seed=4)
    assert isinstance(rnd, RandomSearch) and rnd.seed == 4
    assert make_algorithm({"type": "random", "seed": 9}, SPACE, OBJ, seed=4).seed == 9
    assert make_algorithm(rnd, SPACE, OBJ) is rnd
    assert {"grid", "random", "tpe"} <= set(algorithm_names())


def test_make_algorithm_does_not_mutate_the_spec():
    spec = {"type": "grid", "points_per_axis": 2}
    make_algorithm(spec, GRID_SPACE, OBJ)
    assert spec == {"type": "grid", "points_per_axis": 2}


def test_make_algorithm_unknown_name_names_algorithm_type():
    with pytest.raises(ConfigError) as exc:
        make_algorithm("hyperband9000", SPACE, OBJ)
    assert exc.value.field == "algorithm.type"
    assert "'hyperband9000'" in str(exc.value)
    assert "random" in str(exc.value)       # lists the known ones


@pytest.mark.parametrize("spec", [42, None, {"points_per_axis": 3}, ["grid"]])
def test_make_algorithm_rejects_malformed_specs(spec):
    with pytest.raises(ConfigError) as exc:
        make_algorithm(spec, SPACE, OBJ)
    assert exc.value.field == "algorithm"


def test_make_algorithm_bad_option_names_it():
    with pytest.raises(ConfigError) as exc:
        make_algorithm({"type": "random", "temperature": 3}, SPACE, OBJ)
    assert exc.value.field == "algorithm.temperature"
    assert "is not an option of 'random'" in str(exc.value)


class FirstChoice(Algorithm):
    """A user algorithm: always the first grid point; stops every trial at step 2."""

    def __init__(self, space, objective, seed=0, bias=0):
        super().__init__(space, objective, seed)
        self.bias = bias

    def suggest(self, trial_id):
        return Suggestion(dict(self.space.grid(1)[0]), {"bias": self.bias})

    def on_result(self, trial_id, step, metrics):
        return Decision.STOP if step >= 2 else Decision.CONTINUE


@pytest.fixture
def registry_snapshot():
    saved = dict(algorithms_base._REGISTRY)
    yield
    algorithms_base._REGISTRY.clear()
    algorithms_base._REGISTRY.update(saved)


def test_register_algorithm_makes_it_buildable_by_name(registry_snapshot):
    assert register_algorithm("first-choice", FirstChoice) is FirstChoice
    assert "first-choice" in algorithm_names()
    alg = make_algorithm({"type": "first-choice", "bias": 3}, GRID_SPACE, OBJ, seed=8)
    assert isinstance(alg, FirstChoice) and alg.bias == 3 and alg.seed == 8
    assert alg.suggest(0) == Suggestion({"a": "x", "b": 0, "k": 7}, {"bias": 3})
    assert alg.on_result(0, 2, {"loss": 1.0}) is Decision.STOP


def test_register_algorithm_as_a_decorator(registry_snapshot):
    @register_algorithm("always-x")
    def build(space, objective, seed=0):
        return FirstChoice(space, objective, seed, bias=-1)

    alg = make_algorithm("always-x", GRID_SPACE, OBJ)
    assert isinstance(alg, FirstChoice) and alg.bias == -1
    assert callable(build)


def test_base_algorithm_defaults():
    alg = FirstChoice(GRID_SPACE, OBJ)
    assert not alg.exhausted
    assert Algorithm.on_result(alg, 0, 1, {}) is Decision.CONTINUE
    assert alg.state_dict() == {} and alg.load_state_dict({}) is None
    with pytest.raises(NotImplementedError):
        Algorithm(GRID_SPACE, OBJ).suggest(0)
