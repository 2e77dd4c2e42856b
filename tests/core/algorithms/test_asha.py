"""ASHA on scripted streams of results: promotion (pause) and stop modes, out-of-order arrivals."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypersack.algorithms import ASHA
from hypersack.core.algorithms import Decision, make_algorithm
from hypersack.core.algorithms.asha import Rung, geometric_milestones
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError

from mf_driver import Driver

OBJ = Objective("loss", "min")
SPACE = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0},
                     "y": {"type": "float", "low": 0.0, "high": 1.0}})
C, P, S = Decision.CONTINUE, Decision.PAUSE, Decision.STOP


def curve(config, step):
    return (config["x"] - 0.3) ** 2 + (config["y"] - 0.7) ** 2 + 1.0 / step


def asha(**kw):
    options = dict(min_t=1, max_t=27, reduction_factor=3)
    options.update(kw)
    return ASHA(SPACE, OBJ, **options)


def feed(alg, stream):
    """Apply ``[(trial, step, loss)]``, creating trials on first sight; the decisions."""
    out = []
    for trial, step, value in stream:
        out.append(alg.on_result(trial, step, {"loss": value}))
    return out


def start(alg, n, first=0):
    for t in range(first, first + n):
        s = alg.suggest(t)
        assert s is not None and s.resume is None, s


# ---- milestones -------------------------------------------------------------------------------

def test_milestones_are_geometric_and_below_max_t():
    assert asha().milestones == [1, 3, 9]
    assert asha(max_t=10).milestones == [1, 3, 9]
    assert asha(min_t=2, max_t=32, reduction_factor=2).milestones == [2, 4, 8, 16]
    assert asha(min_t=5, max_t=5).milestones == []
    assert geometric_milestones(5, 40, 2) == [5, 10, 20, 40]


# ---- promotion (pause) mode -------------------------------------------------------------------

def test_a_trial_continues_only_when_in_the_top_third_of_its_rung_at_that_moment():
    alg = asha()
    start(alg, 6)
    # n=1 and n=2: top floor(n/3) is empty -> paused; n=3: the best of the three goes on
    assert feed(alg, [(0, 1, 5.0), (1, 1, 4.0), (2, 1, 1.0)]) == [P, P, C]
    assert feed(alg, [(3, 1, 6.0), (4, 1, 7.0)]) == [P, P]
    # n=6: top 2 = {2, 1}; trial 1 (paused) has become promotable; trial 5 is worse
    assert feed(alg, [(5, 1, 4.5)]) == [P]
    s = alg.suggest(6)
    assert s.resume == 1 and s.info == {"rung": 1}
    assert alg.suggest(6).resume is None          # nothing else promotable: a new config


def test_out_of_order_arrivals():
    alg = asha()
    start(alg, 4)
    # trial 2 passes rung 0 and reports step 3 before trial 1 has reported at all
    got = feed(alg, [(3, 1, 3.0), (0, 1, 2.0), (2, 1, 1.0), (2, 2, 0.9), (2, 3, 0.8),
                     (1, 1, 0.5)])
    assert got == [P, P, C, C, P, C]
    records = alg.state_dict()["records"]
    assert records[0] == {"3": -3.0, "0": -2.0, "2": -1.0, "1": -0.5} and records[1] == {"2": -0.8}
    assert alg.suggest(4).resume is None          # rung 1: n=1; rung 0: its top 1 went on


VALUES = [4.0, 1.0, 6.0, 2.0, 5.0, 3.0, 0.5, 7.0, 8.0]


@pytest.mark.parametrize("order", [list(range(9)), list(range(8, -1, -1)),
                                   [4, 7, 1, 0, 8, 3, 6, 2, 5]])
def test_any_arrival_order_ends_with_the_top_third_of_the_rung_promoted(order):
    alg = asha()
    start(alg, 9)
    went_on = {t for t, d in zip(order, feed(alg, [(t, 1, VALUES[t]) for t in order])) if d is C}
    while (s := alg.suggest(9)).resume is not None:
        went_on.add(s.resume)
    assert went_on == {6, 1, 3}                    # the 3 best of 9


def test_higher_rungs_are_promoted_first():
    alg = asha()
    start(alg, 6)
    state = alg.state_dict()
    state["records"] = [{"0": -1.0, "1": -2.0, "2": -9.0, "3": -9.0, "4": -9.0, "5": -3.0},
                        {"0": -0.5, "5": -0.1, "2": -3.0}, {}]
    state["trials"] = {"0": [1, "paused"], "1": [0, "paused"], "2": [1, "paused"],
                       "3": [0, "paused"], "4": [0, "paused"], "5": [1, "paused"]}
    alg.load_state_dict(state)
    first, second = alg.suggest(6), alg.suggest(6)
    assert (first.resume, first.info) == (5, {"rung": 2})    # rung 1's top 1
    assert (second.resume, second.info) == (1, {"rung": 1})  # rung 0's top 2: 0 moved on already
    assert alg.suggest(6).resume is None


def test_a_report_past_several_milestones_is_judged_at_each():
    alg = asha()
    start(alg, 3)
    feed(alg, [(0, 1, 3.0), (1, 1, 2.0)])
    assert feed(alg, [(2, 4, 1.0)]) == [P]       # rung 0: top 1 -> passes; rung 1 alone -> pause
    assert alg.state_dict()["trials"]["2"] == [1, "paused"]
    assert alg.state_dict()["records"][1] == {"2": -1.0}


def test_re_reported_steps_and_late_reports():
    alg = asha()
    start(alg, 3)
    assert feed(alg, [(0, 1, 3.0), (1, 1, 2.0), (2, 1, 1.0)]) == [P, P, C]
    before = alg.state_dict()
    assert feed(alg, [(2, 1, 1.0), (2, 2, 0.9), (2, 1, 1.0)]) == [C, C, C]   # restart from step 0
    assert alg.state_dict()["records"] == before["records"]
    assert feed(alg, [(0, 2, 2.9)]) == [P]        # late report from a paused trial
    assert feed(alg, [(7, 1, 0.1)]) == [C]        # unknown trial: left alone


def test_failed_and_pruned_trials_are_never_resumed():
    alg = asha()
    start(alg, 6)
    # each arrives worse than the first: all pause; the top 2 of 6 are trials 0 and 1
    assert feed(alg, [(t, 1, float(t)) for t in range(6)]) == [P] * 6
    alg.on_complete(0, None, "failed")
    alg.on_complete(1, 1.0, "pruned")
    assert alg.suggest(6).resume is None           # their records still count: no one moves up


def test_missing_metric_is_not_recorded():
    alg = asha()
    start(alg, 1)
    assert alg.on_result(0, 1, {"other": 1.0}) is C
    assert alg.state_dict()["records"][0] == {}
    assert alg.on_result(0, 2, {"loss": 1.0}) is P      # judged at the first report with it


def test_num_samples_bounds_new_configs_and_exhaustion_waits_for_promotions():
    alg = asha(num_samples=3)
    start(alg, 3)
    assert alg.suggest(3) is None and not alg.exhausted
    feed(alg, [(0, 1, 1.0), (1, 1, 2.0)])
    assert not alg.exhausted                        # trial 2 still runs
    feed(alg, [(2, 1, 3.0)])
    s = alg.suggest(3)
    assert s.resume == 0 and not alg.exhausted      # promoted late, now running
    assert feed(alg, [(0, 3, 0.5)]) == [P]          # alone at rung 1: floor(1/3) = 0
    # end game: all samples made, none running, none past the last rung: the leader goes on
    assert not alg.exhausted and alg.suggest(3).resume == 0
    assert feed(alg, [(0, 9, 0.4)]) == [P]
    assert alg.suggest(3).resume == 0
    assert feed(alg, [(0, 10, 0.3), (0, 27, 0.2)]) == [C, C]
    assert not alg.exhausted                        # still running
    alg.on_complete(0, 0.2, "complete")
    assert alg.exhausted and alg.suggest(3) is None


def test_end_game_resumes_only_until_one_trial_passed_the_last_rung():
    alg = asha(num_samples=4, max_t=3)              # one decision rung: step 1
    start(alg, 4)
    assert feed(alg, [(0, 1, 1.0), (1, 1, 2.0), (2, 1, 3.0), (3, 1, 0.5)]) == [P, P, P, C]
    alg.on_complete(3, 0.4, "complete")
    assert alg.exhausted and alg.suggest(4) is None   # trial 3 passed it: no end game


# ---- stop mode (Ray Tune's default) ----------------------------------------------------------

def test_stop_mode_stops_below_the_quantile_of_earlier_results():
    alg = asha(mode="stop", reduction_factor=2)
    start(alg, 5)
    # first at a rung always goes on; then below the median of the earlier ones stops
    got = feed(alg, [(0, 1, 2.0), (1, 1, 3.0), (2, 1, 1.0), (3, 1, 1.5), (4, 1, 1.8)])
    # trial 4: the median of 2.0, 3.0, 1.0, 1.5 is 1.75 and 1.8 is worse
    assert got == [C, S, C, C, S]
    assert alg.suggest(5).resume is None               # stop mode never resumes
    assert feed(alg, [(1, 2, 0.1)]) == [C]             # news from a stopped trial is ignored


# ---- state -----------------------------------------------------------------------------------

STREAM = [(0, 1, 3.0), (2, 1, 2.5), (1, 1, 2.0), (3, 1, 1.0), (2, 2, 2.4), (4, 1, 0.5),
          (5, 1, 4.0), (3, 3, 0.9), (4, 2, 0.4), (4, 3, 0.3), (6, 1, 0.2), (7, 1, 5.0)]


@pytest.mark.parametrize("mode", ["pause", "stop"])
@pytest.mark.parametrize("cut", [0, 3, 7, 12])
def test_state_round_trip_continues_exactly(mode, cut):
    def play(alg, stream, first):
        out = []
        for t, step, v in stream:
            while t >= first:
                s = alg.suggest(first)
                out.append((s.resume, s.config))
                if s.resume is None:
                    first += 1
            out.append(alg.on_result(t, step, {"loss": v}))
        return out, first

    whole, _ = play(asha(mode=mode, seed=5), STREAM, 0)
    original = asha(mode=mode, seed=5)
    head, first = play(original, STREAM[:cut], 0)
    restored = asha(mode=mode, seed=5)
    restored.load_state_dict(json.loads(json.dumps(original.state_dict())))
    tail, _ = play(restored, STREAM[cut:], first)
    assert head + tail == whole


# ---- end to end -----------------------------------------------------------------------------

def _duration(config):
    return 1.0 + 2 * config["y"]


@pytest.mark.parametrize("mode", ["pause", "stop"])
def test_asha_finds_the_best_config_with_fewer_steps(mode):
    alg = asha(num_samples=30, seed=11, mode=mode)
    driver = Driver(alg, curve, max_steps=27, devices=3, duration=_duration).run()
    assert alg.exhausted and len(driver.trials) == 30
    best_seen = min(driver.trials.values(), key=lambda t: driver.final_loss(t))
    assert driver.best() is best_seen and best_seen.step == 27
    assert driver.steps_trained < 30 * 27 / 3
    if mode == "pause":
        assert any(kind == "resume" for kind, *_ in driver.log)


def test_asha_resume_after_kill_continues_exactly():
    def make():
        return asha(num_samples=20, seed=2)
    whole = Driver(make(), curve, max_steps=27, devices=3, duration=_duration).run()
    for kill_at in (10, 33, 80):
        killed = Driver(make(), curve, max_steps=27, devices=3, duration=_duration,
                        kill_at=kill_at, rebuild=make).run()
        assert killed.log == whole.log


def test_asha_with_crashes_judges_each_trial_once_per_rung():
    alg = asha(num_samples=27, seed=3)
    driver = Driver(alg, curve, max_steps=27, devices=3, duration=_duration, checkpoint_every=5,
                    crash={(0, 2), (1, 4), (2, 9), (4, 2)}).run()
    assert alg.exhausted and driver.best() is not None
    judged = [(t, step) for kind, t, step, what in driver.log if kind == "report" and what == "pause"]
    assert len(judged) == len(set(judged))


# ---- options -------------------------------------------------------------------------------

@pytest.mark.parametrize("options, field", [
    ({"reduction_factor": 1}, "algorithm.reduction_factor"),
    ({"min_t": 0}, "algorithm.min_t"),
    ({"min_t": 3, "max_t": 2}, "algorithm.max_t"),
    ({"mode": "halt"}, "algorithm.mode"),
    ({"num_samples": 0}, "algorithm.num_samples"),
])
def test_bad_options(options, field):
    with pytest.raises(ConfigError) as exc:
        make_algorithm({"type": "asha", **options}, SPACE, OBJ)
    assert exc.value.field == field


def test_yaml_spec_of_the_issue():
    alg = make_algorithm({"type": "asha", "min_t": 1, "max_t": 27, "reduction_factor": 3},
                         SPACE, OBJ, seed=0)
    assert isinstance(alg, ASHA) and alg.milestones == [1, 3, 9] and alg.mode == "pause"
    assert alg.resources(0) == 1


def test_promote_names_the_promotable_trial_once():
    alg = asha()
    start(alg, 6)
    assert alg.promote() is None
    feed(alg, [(0, 1, 5.0), (1, 1, 4.0), (2, 1, 1.0), (3, 1, 6.0), (4, 1, 7.0), (5, 1, 4.5)])
    assert alg.promote() == 1 and alg.promote() is None
    assert alg.on_result(1, 2, {"loss": 3.9}) is C   # it runs towards rung 1 now


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=40), st.sampled_from([2, 3, 4]))
def test_rung_quantile_and_rank_match_numpy_and_sorting(values, rf):
    rung = Rung()
    for t, v in enumerate(values):
        rung.add(t, v)
    q = 1 - 1 / rf
    assert rung.quantile(q) == pytest.approx(np.percentile(values, q * 100), rel=1e-9, abs=1e-6)
    order = sorted(range(len(values)), key=lambda t: (-values[t], t))
    assert [rung.rank(t, values[t]) for t in order] == list(range(len(values)))
