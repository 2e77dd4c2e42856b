"""Synchronous successive halving and Hyperband: bracket tables, rung mechanics, end to end."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypersack.algorithms import Hyperband, SuccessiveHalving, hyperband_brackets
from hypersack.core.algorithms import Decision, make_algorithm
from hypersack.core.algorithms.hyperband import hyperband_steps
from hypersack.core.algorithms.sha import floor_log, sha_rungs
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError

from mf_driver import Driver

OBJ = Objective("loss", "min")
SPACE = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0},
                     "y": {"type": "float", "low": 0.0, "high": 1.0}})


def curve(config, step):
    """Converges as 1/step towards a config-dependent floor; the ranking never changes."""
    return (config["x"] - 0.3) ** 2 + (config["y"] - 0.7) ** 2 + 1.0 / step


def loss(v):
    return {"loss": v}


# ---- bracket tables ---------------------------------------------------------------------------

def test_hyperband_brackets_R81_eta3_is_the_papers_table():
    assert hyperband_brackets(81, 3) == [
        [(81, 1.0), (27, 3.0), (9, 9.0), (3, 27.0), (1, 81.0)],
        [(34, 3.0), (11, 9.0), (3, 27.0), (1, 81.0)],
        [(15, 9.0), (5, 27.0), (1, 81.0)],
        [(8, 27.0), (2, 81.0)],
        [(5, 81.0)],
    ]


@pytest.mark.parametrize("eta, power", [(3, 5), (10, 3), (2, 10), (5, 4), (7, 3)])
def test_s_max_is_exact_for_powers_where_float_log_rounds_down(eta, power):
    # e.g. math.log(1000, 10) == 2.9999999999999996
    R = eta**power
    assert floor_log(R, eta) == power and floor_log(R - 1, eta) == power - 1
    brackets = hyperband_brackets(R, eta)
    assert len(brackets) == power + 1
    assert brackets[0][0] == (R, 1.0) and brackets[0][-1] == (1, float(R))
    assert all(rungs[-1][1] == R for rungs in brackets)


def test_non_power_R_and_float_R():
    assert hyperband_brackets(10, 3) == [[(9, 10 / 9), (3, 10 / 3), (1, 10.0)],
                                         [(5, 10 / 3), (1, 10.0)], [(3, 10.0)]]
    assert len(hyperband_brackets(2.5, 2)) == 2
    assert hyperband_brackets(1, 3) == [[(1, 1.0)]]


@pytest.mark.parametrize("R, eta, field", [(81, 1, "eta"), (81, 2.5, "eta"), (0.5, 3, "R"),
                                           (float("nan"), 3, "R"), ("81", 3, "R")])
def test_hyperband_brackets_rejects_bad_arguments(R, eta, field):
    with pytest.raises(ConfigError) as exc:
        hyperband_brackets(R, eta)
    assert exc.value.field == field


def test_steps_scale_with_min_t():
    assert hyperband_steps(5, 40, 2)[0] == [(8, 5), (4, 10), (2, 20), (1, 40)]
    assert hyperband_steps(1, 10, 3)[0] == [(9, 1), (3, 3), (1, 10)]


def test_sha_rungs():
    assert sha_rungs(27, 1, 27, 3) == [(27, 1), (9, 3), (3, 9), (1, 27)]
    assert sha_rungs(10, 1, 10, 3) == [(10, 1), (3, 3), (1, 10)]
    assert sha_rungs(2, 1, 27, 3) == [(2, 1), (1, 3), (1, 9), (1, 27)]
    assert sha_rungs(4, 7, 7, 2) == [(4, 7)]


# ---- synchronous successive halving, scripted ---------------------------------------------

def test_sha_pauses_at_the_milestone_and_promotes_the_top_third_when_the_rung_is_complete():
    alg = SuccessiveHalving(SPACE, OBJ, seed=1, n=9, min_t=1, max_t=9, reduction_factor=3)
    assert alg.brackets == [[(9, 1), (3, 3), (1, 9)]]
    configs = [alg.suggest(t) for t in range(9)]
    assert all(s.resume is None and s.info == {"bracket": 0, "rung": 0} for s in configs)
    assert alg.suggest(9) is None and not alg.exhausted     # waits on the running rung
    values = [5, 3, 8, 1, 9, 2, 7, 6, 4]
    order = [4, 0, 8, 2, 6, 1, 7, 5, 3]                      # out of creation order
    for t in order[:-1]:
        assert alg.on_result(t, 1, loss(values[t])) is Decision.PAUSE
        assert alg.suggest(9) is None
    assert alg.on_result(3, 1, loss(values[3])) is Decision.PAUSE
    resumes = [alg.suggest(9) for _ in range(3)]
    assert [s.resume for s in resumes] == [3, 5, 1]           # best first (values 1, 2, 3)
    assert all(s.info == {"bracket": 0, "rung": 1} for s in resumes)
    assert alg.suggest(9) is None


def _run_rung0(alg, values):
    for t, v in enumerate(values):
        alg.suggest(t)
    for t, v in enumerate(values):
        if v is not None:
            alg.on_result(t, 1, loss(v))


def test_sha_failed_trial_does_not_block_the_rung_and_is_never_promoted():
    alg = SuccessiveHalving(SPACE, OBJ, n=3, min_t=1, max_t=3, reduction_factor=3)
    _run_rung0(alg, [4.0, None, 6.0])
    assert alg.suggest(3) is None
    alg.on_complete(1, None, "failed")
    assert alg.suggest(3).resume == 0
    assert alg.on_result(0, 2, loss(3.0)) is Decision.CONTINUE
    assert alg.on_result(0, 3, loss(2.0)) is Decision.CONTINUE   # last rung: trains to max_t
    assert not alg.exhausted
    alg.on_complete(0, 2.0, "complete")
    assert alg.exhausted and alg.suggest(3) is None


def test_sha_rung_with_every_trial_failed_closes_the_bracket():
    alg = SuccessiveHalving(SPACE, OBJ, n=3, min_t=1, max_t=9, reduction_factor=3)
    _run_rung0(alg, [None, None, None])
    for t in range(3):
        alg.on_complete(t, None, "failed")
    assert alg.exhausted


def test_sha_re_reported_steps_and_late_reports():
    alg = SuccessiveHalving(SPACE, OBJ, n=3, min_t=1, max_t=9, reduction_factor=3)
    _run_rung0(alg, [4.0, 5.0, 6.0])
    assert alg.on_result(2, 2, loss(6.5)) is Decision.PAUSE       # late: it was told to pause
    assert alg.suggest(3).resume == 0
    assert alg.on_result(0, 2, loss(3.5)) is Decision.CONTINUE
    assert alg.on_result(0, 1, loss(4.0)) is Decision.CONTINUE    # restarted from an old checkpoint
    assert alg.on_result(0, 3, loss(3.0)) is Decision.PAUSE       # rung 1 (3 steps) recorded
    assert alg.suggest(3).resume == 0                             # sole member: promoted to 9
    assert alg.on_result(0, 3, loss(3.0)) is Decision.CONTINUE    # re-reported: not judged again
    assert alg.state_dict()["brackets"][0]["records"] == [
        {"0": -4.0, "1": -5.0, "2": -6.0}, {"0": -3.0}, {}]


def test_discarded_paused_trial_completed_by_the_study_is_harmless():
    alg = SuccessiveHalving(SPACE, OBJ, n=3, min_t=1, max_t=3, reduction_factor=3)
    _run_rung0(alg, [4.0, 5.0, 6.0])
    for t in (1, 2):
        alg.on_complete(t, 5.0, "pruned")
    assert alg.suggest(3).resume == 0


def test_max_metric_ranks_the_largest_first():
    alg = SuccessiveHalving(SPACE, Objective("acc", "max"), n=3, min_t=1, max_t=3,
                            reduction_factor=3)
    for t in range(3):
        alg.suggest(t)
    for t, v in enumerate([0.2, 0.9, 0.5]):
        alg.on_result(t, 1, {"acc": v})
    assert alg.suggest(3).resume == 1


# ---- Hyperband end to end ---------------------------------------------------------------------

def _hyperband(**kw):
    options = dict(min_t=1, max_t=27, reduction_factor=3, seed=7, repeat=1)   # one iteration
    options.update(kw)
    return Hyperband(SPACE, OBJ, **options)


def _duration(config):
    return 1.0 + config["x"]           # trials run at different speeds: results interleave


def test_hyperband_runs_every_bracket_and_finds_the_best_config_with_fewer_steps():
    alg = _hyperband()
    driver = Driver(alg, curve, max_steps=27, devices=3, duration=_duration).run()
    assert alg.exhausted
    table = hyperband_brackets(27, 3)
    created = [e for e in driver.log if e[0] == "suggest"]
    assert len(created) == sum(rungs[0][0] for rungs in table) == len(driver.trials)
    finals = [rungs[-1][0] for rungs in table]
    assert len(driver.completed()) == sum(finals)
    # every completed trial trained to max_t; every resume came after its pause
    assert all(t.step == 27 for t in driver.completed())
    best_seen = min(driver.trials.values(), key=lambda t: driver.final_loss(t))
    assert driver.best() is best_seen
    full_training = len(driver.trials) * 27
    assert driver.steps_trained < full_training / 3
    assert all(t.state in ("complete", "pruned") for t in driver.trials.values())


def test_hyperband_on_one_device_runs_brackets_one_after_another():
    alg = _hyperband(max_t=9)
    driver = Driver(alg, curve, max_steps=9, devices=1).run()
    bracket_of = {t: info["bracket"] for kind, t, _, info in driver.log if kind == "suggest"}
    handed_out = [bracket_of[t] for kind, t, _, _ in driver.log if kind != "report"]
    sizes = [rungs[0][0] for rungs in hyperband_brackets(9, 3)]
    assert len(driver.trials) == sum(sizes)
    assert handed_out == sorted(handed_out)
    assert handed_out.count(0) == sum(n for n, _ in hyperband_brackets(9, 3)[0])


def test_hyperband_is_deterministic_for_a_seed():
    logs = [Driver(_hyperband(max_t=9, seed=3), curve, max_steps=9, devices=2,
                   duration=_duration).run().log for _ in range(2)]
    assert logs[0] == logs[1]
    other = Driver(_hyperband(max_t=9, seed=4), curve, max_steps=9, devices=2,
                   duration=_duration).run().log
    assert other != logs[0]


def test_resume_after_a_driver_kill_mid_bracket_continues_exactly():
    def run(kill_at):
        return Driver(_hyperband(), curve, max_steps=27, devices=3, duration=_duration,
                      kill_at=kill_at, rebuild=_hyperband).run()
    whole = run(None)
    for kill_at in (5, 40, 97, 150):
        assert run(kill_at).log == whole.log


def test_resume_after_kill_with_older_checkpoints_and_crashes_still_finishes_right():
    whole = Driver(_hyperband(), curve, max_steps=27, devices=3, duration=_duration).run()
    killed = Driver(_hyperband(), curve, max_steps=27, devices=3, duration=_duration,
                    checkpoint_every=4, crash={(0, 1), (2, 3), (5, 2)}, kill_at=60,
                    rebuild=_hyperband).run()
    assert killed.alg.exhausted
    assert killed.steps_trained > whole.steps_trained          # steps were redone
    assert [t.config for t in killed.completed()] == [t.config for t in whole.completed()]
    state = killed.alg.state_dict()
    assert json.loads(json.dumps(state)) == state


# ---- options, registry ----------------------------------------------------------------------

@pytest.mark.parametrize("spec, field, value", [
    ({"type": "hyperband", "reduction_factor": 1}, "algorithm.reduction_factor", 1),
    ({"type": "hyperband", "min_t": 0}, "algorithm.min_t", 0),
    ({"type": "hyperband", "min_t": 10, "max_t": 5}, "algorithm.max_t", 5),
    ({"type": "hyperband", "max_t": 2.5}, "algorithm.max_t", 2.5),
    ({"type": "hyperband", "repeat": 0}, "algorithm.repeat", 0),
    ({"type": "sha", "n": 0}, "algorithm.n", 0),
    ({"type": "sha", "reduction_factor": True}, "algorithm.reduction_factor", True),
])
def test_bad_options_name_the_field_and_value(spec, field, value):
    with pytest.raises(ConfigError) as exc:
        make_algorithm(spec, SPACE, OBJ)
    assert exc.value.field == field and exc.value.value == value


def test_error_message_reads_like_the_others():
    with pytest.raises(ConfigError) as exc:
        make_algorithm({"type": "hyperband", "reduction_factor": 1}, SPACE, OBJ)
    assert str(exc.value) == "The value of algorithm.reduction_factor is 1, but must be an integer in [2, 2**53]"


def test_built_from_yaml_style_specs():
    alg = make_algorithm({"type": "hyperband", "max_t": 9, "reduction_factor": 3, "repeat": 2},
                         SPACE, OBJ, seed=1)
    assert isinstance(alg, Hyperband) and len(alg.brackets) == 6
    sha = make_algorithm({"type": "sha", "n": 8, "min_t": 1, "max_t": 8, "reduction_factor": 2},
                         SPACE, OBJ)
    assert sha.brackets == [[(8, 1), (4, 2), (2, 4), (1, 8)]]


# ---- properties ------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.integers(1, 100_000), st.integers(2, 12))
def test_bracket_table_properties(R, eta):
    brackets = hyperband_brackets(R, eta)
    s_max = len(brackets) - 1
    assert eta**s_max <= R < eta ** (s_max + 1)
    for s, rungs in zip(range(s_max, -1, -1), brackets):
        assert len(rungs) == s + 1 and rungs[-1][1] == pytest.approx(R)
        n = rungs[0][0]
        assert n == -(-(s_max + 1) * eta**s // (s + 1))            # ceil, exactly
        assert [n_i for n_i, _ in rungs] == [n // eta**i for i in range(s + 1)]
        assert all(n_i >= 1 for n_i, _ in rungs)
        for (_, r0), (_, r1) in zip(rungs, rungs[1:]):
            assert r1 == pytest.approx(r0 * eta)


@settings(max_examples=50, deadline=None)
@given(st.permutations(range(9)), st.lists(st.floats(0, 10), min_size=9, max_size=9))
def test_sha_promotes_the_top_third_whatever_the_arrival_order(order, values):
    alg = SuccessiveHalving(SPACE, OBJ, n=9, min_t=1, max_t=9, reduction_factor=3)
    for t in range(9):
        alg.suggest(t)
    for t in order:
        assert alg.on_result(t, 1, loss(values[t])) is Decision.PAUSE
    resumed = [alg.suggest(9).resume for _ in range(3)]
    assert resumed == sorted(range(9), key=lambda t: (values[t], t))[:3]
    assert alg.suggest(9) is None


def test_promote_hands_out_the_promotions_before_suggest_does():
    alg = SuccessiveHalving(SPACE, OBJ, n=9, min_t=1, max_t=9, reduction_factor=3)
    assert alg.promote() is None
    _run_rung0(alg, [5, 3, 8, 1, 9, 2, 7, 6, 4])
    assert [alg.promote() for _ in range(4)] == [3, 5, 1, None]
    assert alg.suggest(9) is None                   # nothing left to hand out: rung 1 runs
    assert alg.on_result(3, 2, loss(1.0)) is Decision.CONTINUE
    assert alg.on_result(3, 3, loss(0.5)) is Decision.PAUSE


@pytest.mark.parametrize("name", ["sha", "hyperband", "asha", "bohb", "pack_hyperband"])
@pytest.mark.parametrize("max_t", [2 ** 53 + 1, 10 ** 400])
def test_a_horizon_beyond_2_to_the_53_is_a_clear_error(name, max_t):
    with pytest.raises(ConfigError) as exc:
        make_algorithm({"type": name, "min_t": 1, "max_t": max_t}, SPACE, OBJ)
    assert exc.value.field == "algorithm.max_t" and "2**53" in str(exc.value)


def test_a_horizon_of_2_to_the_53_is_accepted():
    algorithm = make_algorithm({"type": "hyperband", "min_t": 1, "max_t": 2 ** 53}, SPACE, OBJ)
    assert algorithm.suggest(0) is not None
