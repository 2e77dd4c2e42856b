"""RASDA: milestones min_t * sf^k, devices base * sf^rung through GROW, learning-rate rules."""
from __future__ import annotations

import json
import math

import pytest

from hypersack.algorithms import RASDA, lr_scale, rasda_schedule, scaled_lr, warmup_factor
from hypersack.core.algorithms import ASHA, Decision, make_algorithm
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError

from mf_driver import Driver

OBJ = Objective("loss", "min")
SPACE = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0},
                     "y": {"type": "float", "low": 0.0, "high": 1.0}})
C, P, S, G = Decision.CONTINUE, Decision.PAUSE, Decision.STOP, Decision.GROW


def curve(config, step):
    return (config["x"] - 0.3) ** 2 + (config["y"] - 0.7) ** 2 + 1.0 / step


def rasda(**kw):
    options = dict(min_t=5, max_t=40, sf=2, rf=2)
    options.update(kw)
    return RASDA(SPACE, OBJ, **options)


# ---- the schedule of the paper --------------------------------------------------------------

def test_paper_milestones_and_allocations():
    assert rasda_schedule(5, 40, 2) == [(5, 1), (10, 2), (20, 4), (40, 8)]
    assert rasda_schedule(5, 40, 2, base_resources=2) == [(5, 2), (10, 4), (20, 8), (40, 16)]
    assert rasda_schedule(5, 40, 2, max_resources=4) == [(5, 1), (10, 2), (20, 4), (40, 4)]
    assert rasda_schedule(5, 20, 4) == [(5, 1), (20, 4)]
    assert rasda_schedule(5, 50, 2) == [(5, 1), (10, 2), (20, 4), (40, 8), (50, 16)]
    alg = rasda()
    assert alg.milestones == [5, 10, 20]                  # decision rungs; 40 is the end


def test_a_continuing_trial_grows_at_each_milestone_and_keeps_its_devices_between():
    alg = rasda()
    assert alg.suggest(0).info == {"rung": 0, "resources": 1}
    assert alg.resources(0) == 1
    devices, decisions = [], []
    for step in range(1, 41):
        decision = alg.on_result(0, step, {"loss": 1.0 / step})
        decisions.append(decision)
        devices.append(alg.resources(0))
    grows = [step for step, d in zip(range(1, 41), decisions) if d is G]
    assert grows == [5, 10, 20]                          # first at each rung: always goes on
    assert devices[4] == 2 and devices[9] == 4 and devices[19] == 8 and devices[-1] == 8
    assert all(d is C for step, d in zip(range(1, 41), decisions) if step not in grows)
    # relaunched from an older checkpoint: steps re-reported, no second GROW
    assert [alg.on_result(0, s, {"loss": 0.1}) for s in (9, 10, 11)] == [C, C, C]


def test_trials_below_the_cut_are_stopped_and_keep_their_allocation():
    alg = rasda()
    for t in range(3):
        alg.suggest(t)
    assert alg.on_result(0, 5, {"loss": 1.0}) is G
    assert alg.on_result(1, 5, {"loss": 2.0}) is S      # below the median of earlier results
    assert alg.resources(1) == 1
    assert alg.on_result(2, 5, {"loss": 0.5}) is G and alg.resources(2) == 2


def test_max_resources_caps_growth_and_then_no_relaunch_is_asked():
    alg = rasda(max_resources=2)
    alg.suggest(0)
    got = [alg.on_result(0, step, {"loss": 1.0}) for step in (5, 10, 20)]
    assert got == [G, C, C] and alg.resources(0) == 2


def test_base_resources_and_pause_mode_resume_with_the_new_allocation():
    alg = rasda(base_resources=2, mode="pause", rf=2)
    for t in range(2):
        assert alg.suggest(t).info["resources"] == 2
    assert alg.on_result(0, 5, {"loss": 2.0}) is P       # n=1: top floor(1/2) is empty
    assert alg.on_result(1, 5, {"loss": 3.0}) is P       # n=2: top 1 is trial 0
    s = alg.suggest(2)
    assert s.resume == 0 and s.info == {"rung": 1, "resources": 4} and alg.resources(0) == 4
    assert alg.on_result(0, 6, {"loss": 1.9}) is C       # launched with 4 already: no GROW


def test_state_round_trip_keeps_allocations():
    alg = rasda()
    alg.suggest(0)
    alg.on_result(0, 5, {"loss": 1.0})
    restored = rasda()
    restored.load_state_dict(json.loads(json.dumps(alg.state_dict())))
    assert restored.resources(0) == 2
    assert restored.on_result(0, 10, {"loss": 0.5}) is G and restored.resources(0) == 4
    assert alg.on_result(0, 10, {"loss": 0.5}) is G


def test_options_and_errors():
    alg = make_algorithm({"type": "rasda", "min_t": 5, "max_t": 40, "sf": 2, "rf": 2,
                          "base_resources": 1}, SPACE, OBJ)
    assert isinstance(alg, RASDA) and isinstance(alg, ASHA) and alg.mode == "stop"
    for options, field in [({"rf": 1}, "algorithm.rf"), ({"sf": 1}, "algorithm.sf"),
                           ({"base_resources": 0}, "algorithm.base_resources"),
                           ({"base_resources": 4, "max_resources": 2}, "algorithm.max_resources"),
                           ({"min_t": 50}, "algorithm.max_t")]:
        with pytest.raises(ConfigError) as exc:
            make_algorithm({"type": "rasda", **options}, SPACE, OBJ)
        assert exc.value.field == field, options
    with pytest.raises(ConfigError, match=r"The value of algorithm.rf is 1, but must be an integer in \[2, 2\*\*53\]"):
        rasda(rf=1)


# ---- end to end: devices are honoured, trials finish sooner than with ASHA -----------------

def _run(alg, devices=4):
    return Driver(alg, curve, max_steps=40, devices=devices,
                  duration=lambda c: 1.0 + c["y"]).run()


def test_rasda_study_grows_trials_and_ends_sooner_than_asha():
    grown = _run(rasda(num_samples=8, max_resources=4, seed=3))
    plain = _run(ASHA(SPACE, OBJ, seed=3, min_t=5, max_t=40, reduction_factor=2, mode="stop",
                      num_samples=8))
    assert grown.best().config == plain.best().config          # same configs, same decisions
    for trial in grown.completed():
        # 1 device to step 5, 2 to 10, then 4 (8 capped at 4: no relaunch at 20)
        assert trial.launches == [(0, 1), (5, 2), (10, 4)]
    assert grown.now < plain.now


def test_grow_waits_for_devices_and_never_oversubscribes():
    driver = _run(rasda(num_samples=12, max_resources=8, seed=1), devices=8)
    assert driver.free == 8
    assert max(d for t in driver.trials.values() for _, d in t.launches) == 8


# ---- learning-rate scaling -----------------------------------------------------------------

def test_scaled_lr_is_linear_for_sgd_and_square_root_for_adam():
    assert scaled_lr(0.1, 8, "sgd") == pytest.approx(0.8)
    assert scaled_lr(0.1, 8, "SGD") == pytest.approx(0.8)
    assert scaled_lr(1e-3, 4, "adam") == pytest.approx(2e-3)
    assert scaled_lr(1e-3, 8, "adamw") == pytest.approx(1e-3 * math.sqrt(8))
    assert scaled_lr(0.05, 1, "sgd") == 0.05
    assert lr_scale(4, "none") == 1.0


def test_warmup_ramps_linearly_from_the_old_to_the_new_scale():
    assert warmup_factor(0.0, 2, 4, "linear") == pytest.approx(1.0)
    assert warmup_factor(1.0, 2, 4, "linear") == pytest.approx(2.5)
    assert warmup_factor(2.0, 2, 4, "linear") == pytest.approx(4.0)
    assert warmup_factor(7.5, 2, 4, "linear") == pytest.approx(4.0)
    assert warmup_factor(0.5, 1, 4, "sqrt") == pytest.approx(1.5)
    assert warmup_factor(0.5, 1, 4, "adam") == pytest.approx(1.5)      # optimizer name works
    assert warmup_factor(0.0, 1, 4, "sgd", from_workers=2) == pytest.approx(2.0)
    assert warmup_factor(0.25, 0, 4, "sgd") == pytest.approx(4.0)      # no warm-up


@pytest.mark.parametrize("call, field", [
    (lambda: scaled_lr(0.1, 2, "lbfgs"), "optimizer"),
    (lambda: scaled_lr(0.0, 2, "sgd"), "base_lr"),
    (lambda: scaled_lr(0.1, 0, "sgd"), "workers"),
    (lambda: warmup_factor(-1, 2, 2, "sgd"), "step_in_epochs"),
    (lambda: warmup_factor(0, float("nan"), 2, "sgd"), "warmup_epochs"),
    (lambda: warmup_factor(0, 1, 2, "sgd", from_workers=0), "from_workers"),
])
def test_lr_helpers_reject_bad_input(call, field):
    with pytest.raises(ConfigError) as exc:
        call()
    assert exc.value.field == field


def test_promote_in_pause_mode_gives_the_grown_allocation_without_a_second_grow():
    alg = rasda(mode="pause")
    for t in range(2):
        alg.suggest(t)
    alg.on_result(0, 5, {"loss": 2.0})
    alg.on_result(1, 5, {"loss": 3.0})
    assert alg.promote() == 0 and alg.resources(0) == 2
    assert alg.on_result(0, 6, {"loss": 1.9}) is C
