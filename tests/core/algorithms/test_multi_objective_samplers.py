"""Optuna samplers in a multi-objective study: one direction per objective, every value told,
exact resume; random and grid ignore the values; samplers for one objective are refused."""
from __future__ import annotations

import json

import pytest

from hypersack.core.algorithms.catalog import make_algorithm
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError

pytest.importorskip("optuna", reason="Optuna samplers need optuna (hypersack[tpe])")

SPACE = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0},
                     "k": {"type": "int", "low": 1, "high": 4}})
OBJECTIVE = Objective.parse([("loss", "min"), ("acc", "max")])


def _values(config):
    return ((config["x"] - 0.3) ** 2 + config["k"] / 10, config["x"] * config["k"])


def _drive(algorithm, start, stop):
    """Propose trials start..stop-1, each told its values at once; the configs proposed."""
    configs = []
    for trial_id in range(start, stop):
        config = algorithm.suggest(trial_id).config
        configs.append(config)
        algorithm.on_complete(trial_id, _values(config), "complete")
    return configs


@pytest.mark.parametrize("sampler, options", [
    ("nsga2", {"population_size": 4}), ("nsga3", {"population_size": 4}),
    ("tpe", {"n_startup_trials": 3}), ("gp", {"n_startup_trials": 3}), ("random", {})])
def test_a_sampler_is_told_every_objective_and_resumes_exactly(sampler, options):
    spec = {"type": "optuna", "sampler": sampler, "options": options}
    whole = make_algorithm(spec, SPACE, OBJECTIVE, seed=3)
    first = _drive(whole, 0, 6)
    saved = json.loads(json.dumps(whole.state_dict()))
    rest = _drive(whole, 6, 9)
    told = [e["v"] for e in saved["model"]["trials"]]
    assert told == [list(_values(c)) for c in first]              # both objectives, in order
    assert whole.model._study.directions[1].name == "MAXIMIZE"
    resumed = make_algorithm(spec, SPACE, OBJECTIVE, seed=3)
    resumed.load_state_dict(saved)
    assert _drive(resumed, 6, 9) == rest


def test_a_failed_or_non_finite_trial_is_told_failed():
    algorithm = make_algorithm({"type": "optuna", "sampler": "nsga2"}, SPACE, OBJECTIVE)
    algorithm.suggest(0)
    algorithm.on_complete(0, (1.0, float("nan")), "complete")
    algorithm.suggest(1)
    algorithm.on_complete(1, None, "failed")
    assert [e["s"] for e in algorithm.state_dict()["model"]["trials"]] == ["F", "F"]


def test_a_sampler_for_one_objective_is_refused_at_construction():
    with pytest.raises(ConfigError) as info:
        make_algorithm({"type": "optuna", "sampler": "cmaes"}, SPACE, OBJECTIVE)
    assert info.value.field == "algorithm.sampler" and "NSGAIISampler" in str(info.value)


@pytest.mark.parametrize("spec", ["random", "grid"])
def test_random_and_grid_take_several_objectives(spec):
    space = SearchSpace({"k": {"type": "int", "low": 1, "high": 3}})
    algorithm = make_algorithm(spec, space, OBJECTIVE)
    configs = []
    for trial_id in range(3):
        configs.append(algorithm.suggest(trial_id).config)
        algorithm.on_complete(trial_id, (1.0, 2.0), "complete")
    assert len(configs) == 3
