"""BOHB-style search: Hyperband brackets with TPE proposals fitted on the largest ready rung."""
from __future__ import annotations

import json
import sys

import pytest

from hypersack.algorithms import BOHB, Hyperband
from hypersack.core.algorithms import make_algorithm
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError, MissingDependencyError

from mf_driver import Driver

OBJ = Objective("loss", "min")
SPACE = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0},
                     "opt": ["sgd", "adam"], "epochs": 9})


def curve(config, step):
    penalty = 0.0 if config["opt"] == "adam" else 0.2
    return (config["x"] - 0.3) ** 2 + penalty + 1.0 / step


def bohb(**kw):
    options = dict(min_t=1, max_t=9, reduction_factor=3, seed=5, repeat=1)   # one iteration
    options.update(kw)
    return BOHB(SPACE, OBJ, **options)


def test_missing_optuna_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(MissingDependencyError) as exc:
        make_algorithm({"type": "bohb"}, SPACE, OBJ)
    assert "BOHB" in str(exc.value) and "pip install 'hypersack[tpe]'" in str(exc.value)


def test_brackets_are_hyperbands():
    assert bohb().brackets == Hyperband(SPACE, OBJ, min_t=1, max_t=9).brackets
    assert bohb().min_points_in_model == 3           # two searched parameters + 1


def test_model_is_fitted_on_the_largest_rung_with_enough_results():
    alg = bohb(min_points_in_model=3)
    for t in range(9):
        alg.suggest(t)
    assert alg.model_rung() is None
    for t in range(9):
        alg.on_result(t, 1, {"loss": 1.0 + t})
    assert alg.model_rung() == 1
    for _ in range(3):                               # the top 3 resume, reach step 3
        alg.on_result(alg.suggest(9).resume, 3, {"loss": 0.5})
    assert alg.model_rung() == 3


def test_proposals_follow_the_model():
    alg = bohb(max_t=27, random_fraction=0.0)
    first = [alg.suggest(t).config for t in range(27)]       # bracket 0, rung 0: no model yet
    for t, config in enumerate(first):
        alg.on_result(t, 1, {"loss": curve(config, 1)})
    assert alg.model_rung() == 1
    while alg.suggest(27).resume is not None:                 # hand out bracket 0's promotions
        pass
    proposed = [alg.suggest(t).config for t in range(28, 38)]  # bracket 1: from TPE
    assert sum(c["opt"] == "adam" for c in proposed) >= 9        # random draws: 7 of 10
    assert sum(abs(c["x"] - 0.3) < 0.25 for c in proposed) >= 9  # random draws: 7 of 10
    assert sum(abs(c["x"] - 0.3) < 0.25 for c in first) < 27 * 0.6


def test_end_to_end_is_deterministic_and_finds_the_best_seen():
    def run(seed):
        return Driver(bohb(random_fraction=0.0, seed=seed), curve, max_steps=9, devices=2).run()
    first, again = run(5), run(5)
    assert first.log == again.log and first.alg.exhausted
    assert all(t.config["epochs"] == 9 for t in first.trials.values())
    best_seen = min(first.trials.values(), key=lambda t: first.final_loss(t))
    assert first.best() is best_seen
    assert run(6).log != first.log


def test_resume_after_kill_proposes_exactly_the_same_configs():
    whole = Driver(bohb(), curve, max_steps=9, devices=2).run()
    killed = Driver(bohb(), curve, max_steps=9, devices=2, kill_at=25, rebuild=bohb).run()
    assert killed.log == whole.log
    state = killed.alg.state_dict()
    assert json.loads(json.dumps(state)) == state


@pytest.mark.parametrize("options, field", [
    ({"random_fraction": 1.5}, "algorithm.random_fraction"),
    ({"min_points_in_model": 0}, "algorithm.min_points_in_model"),
    ({"reduction_factor": 1}, "algorithm.reduction_factor"),
    ({"bogus_sampler_option": 1}, "algorithm"),
])
def test_bad_options(options, field):
    with pytest.raises(ConfigError) as exc:
        make_algorithm({"type": "bohb", **options}, SPACE, OBJ)
    assert exc.value.field == field


def test_a_state_saved_before_the_incremental_models_still_resumes():
    alg = bohb(random_fraction=0.0)
    first = [alg.suggest(t).config for t in range(9)]
    for t, config in enumerate(first):
        alg.on_result(t, 1, {"loss": curve(config, 1)})
    state = alg.state_dict()
    old = {k: v for k, v in state.items() if k != "model"}
    old["configs"] = {str(t): c for t, c in enumerate(first)}    # the old format
    legacy = bohb(random_fraction=0.0)
    legacy.load_state_dict(json.loads(json.dumps(old)))
    assert legacy.model_rung() == alg.model_rung() == 1
    assert legacy._rung_model.counts == {1: 9}
    promoted = [alg.suggest(9).resume for _ in range(3)]
    assert [legacy.suggest(9).resume for _ in range(3)] == promoted
    assert legacy.suggest(9).config == alg.suggest(9).config   # same results, same order
