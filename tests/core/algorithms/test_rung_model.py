"""A sampler behind ASHA and Hyperband (BOHB's rung model): the sampler proposes, the
multi-fidelity algorithm stops and promotes; a killed driver resumes the same run."""
from __future__ import annotations

import json

import pytest

from hypersack.core.algorithms import ASHA, BOHB, Decision, Hyperband, make_algorithm
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError

from mf_driver import Driver

pytest.importorskip("optuna")

OBJ = Objective("loss", "min")
SPACE = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0},
                     "opt": ["sgd", "adam"], "epochs": 9})


def curve(config, step):
    return (config["x"] - 0.3) ** 2 + (0.0 if config["opt"] == "adam" else 0.2) + 1.0 / step


def asha(sampler="TPESampler", **kw):
    return make_algorithm({"type": "asha", "min_t": 1, "max_t": 9, "num_samples": 40,
                           "sampler": sampler, "seed": 2, **kw}, SPACE, OBJ)


def hyperband(sampler="QMCSampler", **kw):
    return make_algorithm({"type": "hyperband", "min_t": 1, "max_t": 9, "sampler": sampler,
                           "seed": 2, "repeat": 1, **kw}, SPACE, OBJ)


def _bohb_gp():
    return make_algorithm({"type": "bohb", "min_t": 1, "max_t": 9, "seed": 5, "repeat": 1,
                           "sampler": "GPSampler", "options": {"n_startup_trials": 2}}, SPACE, OBJ)


# bohb-gp is killed at 12 reports (its GP proposes from the 3rd trial on, so the rebuilt model
# is used after the kill): each GP fit costs tens of ms, and the run after a later kill refits.
@pytest.mark.parametrize("build, kill_at", [
    (lambda: asha(), 30), (lambda: asha({"type": "RandomSampler"}), 30),
    (lambda: asha(mode="stop"), 30), (lambda: hyperband(), 30),
    (lambda: hyperband("CmaEsSampler"), 30),
    pytest.param(_bohb_gp, 12, marks=pytest.mark.slow),
], ids=["asha-tpe", "asha-random", "asha-stop-tpe", "hyperband-qmc", "hyperband-cmaes", "bohb-gp"])
def test_a_killed_driver_resumes_the_same_run(build, kill_at):
    whole = Driver(build(), curve, max_steps=9, devices=3).run()
    killed = Driver(build(), curve, max_steps=9, devices=3, kill_at=kill_at, rebuild=build).run()
    assert killed.log == whole.log
    state = killed.alg.state_dict()
    assert json.loads(json.dumps(state)) == state
    assert state["model"]["counts"]               # rung results reached the model


def test_the_sampler_proposes_once_a_rung_has_enough_results():
    alg = asha(min_points_in_model=4, fit="largest")
    random_twin = make_algorithm({"type": "asha", "min_t": 1, "max_t": 9, "num_samples": 40,
                                  "seed": 2}, SPACE, OBJ)
    first = [alg.suggest(t).config for t in range(4)]
    assert first == [random_twin.suggest(t).config for t in range(4)]   # no model yet: random
    for t, config in enumerate(first):
        alg.on_result(t, 1, {"loss": curve(config, 1)})
    assert alg._rung_model.model_steps() == 1
    proposed = alg.suggest(4).config
    assert proposed != random_twin.suggest(4).config
    assert alg._rung_model.models[1].trials()[-1]["s"] == "F"   # the ask is no observation


def test_existing_yaml_is_unchanged_and_bohb_keeps_its_options():
    assert type(make_algorithm({"type": "asha"}, SPACE, OBJ)) is ASHA
    assert make_algorithm({"type": "asha"}, SPACE, OBJ)._rung_model is None
    assert make_algorithm({"type": "hyperband"}, SPACE, OBJ)._rung_model is None
    bohb = make_algorithm({"type": "bohb", "n_startup_trials": 0}, SPACE, OBJ)
    assert isinstance(bohb, Hyperband) and isinstance(bohb, BOHB)
    assert bohb._rung_model.sampler.options == {"n_startup_trials": 0, "multivariate": True}


@pytest.mark.parametrize("spec, field", [
    ({"type": "asha", "sampler": "Nope"}, "algorithm.sampler"),
    ({"type": "hyperband", "sampler": "tpe", "options": {"bad": 1}}, "algorithm.options"),
    ({"type": "asha", "sampler": {"type": "tpe", "options": {"bad": 1}}}, "algorithm.sampler.options"),
    ({"type": "asha", "sampler": "tpe", "random_fraction": 2}, "algorithm.random_fraction"),
    ({"type": "hyperband", "sampler": "tpe", "min_points_in_model": 0}, "algorithm.min_points_in_model"),
    ({"type": "bohb", "sampler": "Nope"}, "algorithm.sampler"),
])
def test_bad_samplers_name_the_field(spec, field):
    with pytest.raises(ConfigError) as exc:
        make_algorithm(spec, SPACE, OBJ)
    assert exc.value.field == field


class _Held:
    """A proposal runner whose jobs run only when ``release``d (a slow proposal thread)."""

    def __init__(self):
        self.jobs = []

    def submit(self, fn):
        from concurrent.futures import Future
        future = Future()
        self.jobs.append((fn, future))
        return future

    def release(self):
        jobs, self.jobs = self.jobs, []
        for fn, future in jobs:
            future.set_result(fn())


def test_a_slow_proposal_never_holds_a_trial_back_and_is_taken_once_ready():
    alg, runner = asha(min_points_in_model=4, mode="stop"), _Held()      # no promotions
    alg.use_background(runner)
    for t in range(4):
        alg.on_result(t, 1, {"loss": curve(alg.suggest(t).config, 1)})
    model = alg._rung_model
    fallback = [alg.suggest(t).config for t in (4, 5)]     # the ask is still running
    assert all(c is not None for c in fallback) and model.fallbacks == 2
    assert len(runner.jobs) == 1                           # one ask in flight, not one per trial
    runner.release()
    taken = alg.suggest(6).config
    asked = model.models[0].trials()[-1]          # fit: all: one model, key 0
    assert asked["s"] == "F" and asked["p"][0] == taken["x"]   # the model's proposal
    assert model.fallbacks == 2 and len(runner.jobs) == 1  # and the next one is asked at once
    state = json.loads(json.dumps(alg.state_dict()))
    assert state["model"]["ahead"] == [0, 6] and state["model"]["fallbacks"] == 2


# ---- what the model is fitted on (issue 41: search quality) ----------------------------------

LINE = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0}})


def _rung_model(fit):
    from hypersack.core.algorithms.rung_model import build_rung_model
    return build_rung_model("TPESampler", {"n_startup_trials": 0}, LINE, 7, 4, 0.0, "test", fit)


def _fed(fit):
    """12 results at rung 1 (the best of them near x = 0.9) and 3 at the top fidelity (9 steps,
    near x = 0.1, worse values than rung 1's: values at a low fidelity are on another scale)."""
    model = _rung_model(fit)
    for t in range(15):
        x = 0.9 + 0.005 * t if t < 9 else (0.5 - 0.03 * t if t < 12 else 0.08 + 0.01 * (t - 12))
        model.pin(t, {"x": x})
        if t < 12:
            model.observe(t, 1, 10.0 - abs(x - 0.9))
        else:
            model.observe_top(t, 9, -5.0 - abs(x - 0.1))
    return model


def test_fit_all_ranks_top_results_first_then_by_rung_and_value():
    """Optuna's TPE beside a pruner: complete (top) trials first, then pruned ones by the step
    they reached: the proposals follow the 3 top results, not rung 1's larger values; BOHB's
    ``largest`` fit uses rung 1 (the top has fewer than min_points results)."""
    import numpy as np
    rng = np.random.default_rng(0)
    near_top = [_fed("all").propose(100 + k, rng, False)["x"] for k in range(9)]
    assert np.median(near_top) < 0.45
    assert _fed("largest").model_steps() == 1
    near_rung1 = [_fed("largest").propose(100 + k, rng, False)["x"] for k in range(9)]
    assert np.median(near_rung1) > 0.6
    journal = _fed("all").models[0].trials()
    assert [e["s"] for e in journal] == ["P"] * 12 + ["C"] * 3
    assert journal[0]["i"] == {"1": 10.0} and journal[-1]["v"] == pytest.approx(-5.0)


def test_a_top_result_reaches_the_model_once():
    model = _rung_model("largest")
    model.pin(0, {"x": 0.5})
    for _ in range(2):                                # e.g. re-reported after a restart
        model.observe_top(0, 9, 1.0)
    assert model.counts == {9: 1} and model.tops == {0}
    head, parts = model.state_delta()
    assert parts["f0"] == 1
    again = _rung_model("largest")
    again.load_state_dict(head, parts)
    again.observe_top(0, 9, 1.0)
    assert again.counts == {9: 1}


def test_asha_feeds_its_model_every_milestone_and_the_top():
    alg = asha(mode="stop", min_points_in_model=100)       # no proposals: random configs
    for t in range(3):
        alg.suggest(t)
        for step in range(1, 10):
            if alg.on_result(t, step, {"loss": 1.0 - 0.01 * step - 0.1 * t}) != Decision.CONTINUE:
                break
    journal = alg._rung_model.models[0].trials()
    states = [(e["s"], tuple(e.get("i", {}))) for e in journal]
    assert states.count(("C", ())) == 3                  # each trial's step-9 result
    assert ("P", ("1",)) in states and ("P", ("3",)) in states
    assert alg._rung_model.counts == {1: 3, 3: 3, 9: 3}


def test_bohb_fits_on_the_top_fidelity_once_it_has_enough_results():
    alg = make_algorithm({"type": "bohb", "min_t": 1, "max_t": 9, "seed": 3, "repeat": 1,
                          "min_points_in_model": 2}, SPACE, OBJ)
    done = Driver(alg, curve, max_steps=9, devices=1).run()
    model = done.alg._rung_model
    assert model.counts[9] == 1 + 1 + 3                 # the last rung of each bracket (9: 1, 1, 3)
    assert done.alg.model_rung() == 9 and len(model.tops) == 5
