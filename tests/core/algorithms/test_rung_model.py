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
    (lambda: asha(mode="stop"), 30), (lambda: asha(agreement=None), 30),
    (lambda: hyperband(), 30),
    (lambda: hyperband("CmaEsSampler"), 30),
    pytest.param(_bohb_gp, 12, marks=pytest.mark.slow),
], ids=["asha-tpe", "asha-random", "asha-stop-tpe", "asha-tpe-no-agreement", "hyperband-qmc", "hyperband-cmaes", "bohb-gp"])
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
    assert parts["F0"] == [0]
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


# ---- agreement: a rung that ranks trials unlike the higher rungs is left out (issue 41) -------

def test_kendall_tau_counts_concordant_minus_discordant_pairs():
    from hypersack.core.algorithms.rung_model import kendall_tau
    assert kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert kendall_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    assert kendall_tau([1.0], [2.0]) == 0.0
    with pytest.raises(ValueError):
        kendall_tau([1, 2], [1])


def _rungs(**by_rung):
    """steps -> {trial: value} from r<steps>=[values of trials 0, 1, ...]."""
    return {int(k[1:]): dict(enumerate(v)) for k, v in by_rung.items()}


UP = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]            # 6 trials (AGREEMENT_PAIRS) in the same order
DOWN = UP[::-1]


def test_the_cutoff_lies_above_the_highest_rung_that_disagrees():
    import numpy as np
    from hypersack.core.algorithms.rung_model import agreeing_cutoff
    assert agreeing_cutoff(_rungs(r1=UP, r3=UP, r9=UP), 0.3) == 0          # all agree
    assert agreeing_cutoff(_rungs(r1=DOWN, r3=UP, r9=UP), 0.3) == 3
    assert agreeing_cutoff(_rungs(r1=DOWN, r3=DOWN, r9=UP), 0.3) == 9
    # rung 3 disagrees, rung 1 agrees with the top: still nothing below rung 9
    assert agreeing_cutoff(_rungs(r1=UP, r3=DOWN, r9=UP, r27=UP), 0.3) == 9
    assert agreeing_cutoff({1: dict(enumerate(UP)), 3: {}}, 0.3) == 0        # an empty rung


def test_a_rung_is_judged_by_the_nearest_higher_rung_sharing_enough_trials():
    """Rung 3 shares 5 trials with rung 1 (too few): rung 9, reversing rung 1's ranking of 6,
    judges rung 1. With 5 enough, rung 3 (ranking as rung 1) judges it, and rung 9 judges rung
    3."""
    import numpy as np
    from hypersack.core.algorithms.rung_model import agreeing_cutoff
    rungs = {1: dict(enumerate(DOWN)), 3: dict(enumerate(DOWN[:5])), 9: dict(enumerate(UP))}
    assert agreeing_cutoff(rungs, 0.3) == 3
    assert agreeing_cutoff(rungs, 0.3, min_pairs=5) == 9


def test_a_rung_that_agrees_with_the_next_rung_is_not_judged_by_the_elite_above():
    """Rung 1 ranks the 14 trials of rung 3 as it does (tau 61/91) but the 6 elite trials that
    reached rung 9 in reverse: the widest sample, rung 3's, judges it: it agrees."""
    import numpy as np
    from hypersack.core.algorithms.rung_model import agreeing_cutoff
    ranks = [float(v) for v in range(14)]
    rungs = {1: dict(enumerate(DOWN + ranks[6:])), 3: dict(enumerate(ranks)),
             9: dict(enumerate(UP))}
    assert agreeing_cutoff(rungs, 0.3) == 0


def test_a_rung_that_agrees_with_the_top_but_not_with_a_rung_between_disagrees():
    """Rung 1 ranks the top's 6 trials as the top does but the 8 others at rung 3 in reverse
    (tau -61/91): one disagreement is enough."""
    from hypersack.core.algorithms.rung_model import agreeing_cutoff, kendall_tau
    ranks = [float(v) for v in range(14)]
    low = UP + [-1.0 - k for k in range(8)]
    rungs = {1: dict(enumerate(low)), 3: dict(enumerate(ranks)), 9: dict(enumerate(UP))}
    assert kendall_tau(low, ranks) < 0.3
    assert agreeing_cutoff(rungs, 0.3) == 3


def test_the_threshold_less_one_standard_error_is_inclusive_and_decides():
    import math
    from hypersack.core.algorithms.rung_model import agreeing_cutoff, kendall_tau, tau_error
    assert tau_error(6) == pytest.approx(math.sqrt(34 / 270)) and tau_error(1) == math.inf
    swapped = [1.0, 0.0, 2.0, 3.0, 4.0, 5.0]             # one discordant pair of 15
    tau = kendall_tau(swapped, UP)
    assert tau == pytest.approx(13 / 15)
    rungs = _rungs(r1=swapped, r3=UP)
    bound = tau + tau_error(6)
    assert agreeing_cutoff(rungs, bound) == 0            # tau + error == threshold: agrees
    assert agreeing_cutoff(rungs, bound + 1e-9) == 3
    assert agreeing_cutoff(rungs, 0.3) == 0 and agreeing_cutoff(rungs, 1.3) == 3


def test_a_few_near_tied_trials_do_not_condemn_a_rung():
    """7 trials at a high rung ranked with tau 5/21 (0.24) by rung 1: below a threshold of 0.3
    but within one standard error (0.32) of it: rung 1 still agrees. 20 trials as far apart
    (tau -0.05) condemn it."""
    from hypersack.core.algorithms.rung_model import agreeing_cutoff, kendall_tau
    order = [0.0, 1.0, 4.0, 6.0, 5.0, 3.0, 2.0]
    assert kendall_tau(order, sorted(order)) == pytest.approx(5 / 21)
    assert agreeing_cutoff({1: dict(enumerate(order)), 81: dict(enumerate(sorted(order)))},
                           0.3) == 0
    many = [float(k) for k in range(10, 20)] + [float(k) for k in range(10)]
    assert kendall_tau(many, sorted(many)) == pytest.approx(-10 / 190)
    assert agreeing_cutoff({1: dict(enumerate(many)), 81: dict(enumerate(sorted(many)))},
                           0.3) == 81


def _fed_misleading(agreement):
    """Rung 1 ranks trials in reverse of the top fidelity (9 steps): 8 trials spread over [0, 0.9]
    reach the top, the best there near x = 0.1; 12 more stop at rung 1, the best there near
    x = 0.9."""
    from hypersack.core.algorithms.rung_model import build_rung_model
    model = build_rung_model("TPESampler", {"n_startup_trials": 0}, LINE, 7, 4, 0.0, "test",
                             "all", agreement)
    for t in range(20):
        x = 0.02 + 0.12 * t if t < 8 else 0.88 + 0.005 * (t - 8)
        model.pin(t, {"x": x})
        model.observe(t, 1, 10.0 + abs(x - 0.1))         # larger is better: rung 1 likes x = 0.9
        if t < 8:
            model.observe_top(t, 9, -abs(x - 0.1))       # the top likes x = 0.1
    return model


def test_agreement_leaves_a_misleading_rung_out_of_the_model():
    import numpy as np
    rng = np.random.default_rng(0)
    plain, agreeing = _fed_misleading(None), _fed_misleading(0.3)
    assert agreeing.model_steps() == 9                   # the model of the top alone
    assert 9 not in agreeing.models                      # built when first asked
    agreeing.propose(100, rng, False)
    assert sorted(agreeing.models) == [0, 9]
    fed = [e["s"] for e in agreeing.models[9].trials() if e["s"] != "F"]   # F: its ask
    assert fed == ["C"] * 8                              # the top results, no rung-1 result
    assert len(plain.models[0].trials()) == 28           # without agreement: every result
    assert _fed_misleading(-1.0).model_steps() == 0      # a threshold of -1 keeps every rung


def test_agreement_waits_for_enough_results_above_the_cutoff():
    import numpy as np
    model = _fed_misleading(0.3)
    model.min_points = 9                                 # 8 top results: not enough
    assert model.model_steps() is None
    assert 9 not in model.models
    model.propose(100, np.random.default_rng(0), False)  # a random config, no model built
    assert 9 not in model.models


def test_agreement_state_resumes_from_its_parts():
    """The observed results are parts; a model of a cutoff built after a resume holds what the
    uninterrupted one holds, and proposes the same."""
    import numpy as np
    from hypersack.core.algorithms.rung_model import build_rung_model
    whole = _fed_misleading(0.3)
    head, parts = _fed_misleading(0.3).state_delta()
    assert [k for k in parts if k[0] == "o"] == ["o0"] and len(parts["o0"]) == 28   # one part
    again = build_rung_model("TPESampler", {"n_startup_trials": 0}, LINE, 7, 4, 0.0, "test",
                             "all", 0.3)
    again.load_state_dict(json.loads(json.dumps(head)), json.loads(json.dumps(parts)))
    assert again.results == whole.results and again.log == whole.log
    rng1, rng2 = np.random.default_rng(3), np.random.default_rng(3)
    assert again.propose(50, rng1, False) == whole.propose(50, rng2, False)
    assert again.models[9].trials() == whole.models[9].trials()
    assert again.state_dict() == whole.state_dict()


def test_agreement_is_checked():
    for bad in (2.0, "high", True):
        with pytest.raises(ConfigError, match="algorithm.agreement"):
            asha(agreement=bad)
    with pytest.raises(ConfigError, match="fit: all"):
        asha(agreement=0.3, fit="largest")
    assert asha(agreement=0.5)._rung_model.agreement == 0.5
    assert asha()._rung_model.agreement == 0.3           # the default: "auto"
    assert asha(fit="largest")._rung_model.agreement is None
    assert asha(agreement=None)._rung_model.agreement is None


def _misleading(config, step):
    """Rung 1 and 3 rank x in reverse of the top (9 steps)."""
    value = (config["x"] - 0.3) ** 2 + (0.0 if config["opt"] == "adam" else 0.2)
    return value if step >= 9 else 2.0 - value


@pytest.mark.parametrize("kill_at", [40, 150])
def test_a_killed_driver_resumes_the_same_run_when_a_rung_is_left_out(kill_at):
    """Killed before the cutoff's model exists (it is built from the results restored as
    parts; here after 45 results) or after (its journal is restored): the resumed run proposes
    what the uninterrupted one does."""
    build = lambda: asha(num_samples=60, min_points_in_model=3)  # noqa: E731
    whole = Driver(build(), _misleading, max_steps=9, devices=3).run()
    assert [k for k in whole.alg._rung_model.models if k > 0]    # a rung was left out
    killed = Driver(build(), _misleading, max_steps=9, devices=3, kill_at=kill_at,
                    rebuild=build).run()
    assert killed.log == whole.log
    assert killed.alg.state_dict() == whole.alg.state_dict()


# ---- skip_disagreeing: ASHA does not decide at a rung that disagrees (issue 41) --------------

def _skipping(skip, **kw):
    """ASHA (milestones 1 and 3, top 9) whose rung 1 ranks 8 trials in reverse of rung 3: the
    agreeing cutoff is 3. Trials 0-7 were resumed past rung 1 by hand (the test's setup)."""
    alg = asha(num_samples=100, skip_disagreeing=skip, **kw)
    for t in range(8):
        alg.suggest(t)
        alg._put(t, 1, "RUNNING")
        alg._rungs[0].add(t, float(t))
        alg._rung_model.observe(t, 1, float(t))           # larger is better: rung 1 likes t = 7
        alg._rung_model.observe(t, 3, float(-t))          # rung 3 likes t = 0
    return alg


def test_a_rung_below_the_cutoff_decides_nothing():
    """A trial ranking last at rung 1 goes on when rung 1 disagrees with rung 3 (cutoff 3);
    without the option, or with a threshold rung 1 passes (-1), it is paused."""
    for skip, expected in ((0.3, Decision.CONTINUE), (None, Decision.PAUSE),
                           (-1.0, Decision.PAUSE)):
        alg = _skipping(skip)
        assert alg._rung_model.cutoff(0.3) == 3 and alg._rung_model.cutoff(-1.0) == 0
        alg.suggest(8)
        assert alg.on_result(8, 1, {"loss": 100.0}) == expected, skip
        assert alg._rungs[0].values[8] == -100.0           # the result is recorded either way
    alg = _skipping(0.3)
    alg.suggest(8)
    alg.on_result(8, 1, {"loss": 100.0})
    assert alg.on_result(8, 3, {"loss": 100.0}) == Decision.PAUSE   # rung 3 still decides


def test_no_paused_trial_is_promoted_from_a_rung_below_the_cutoff():
    for skip, promoted in ((0.3, None), (None, 8)):
        alg = _skipping(skip)
        alg.suggest(8)
        alg._put(8, 0, "PAUSED")
        alg._rungs[0].add(8, 50.0)                        # the best at rung 1: promotable
        alg._rungs[0].pause(8)
        assert alg.promote() == promoted, skip


def test_the_cutoff_follows_the_results_as_they_arrive():
    alg = _skipping(0.3)
    model = alg._rung_model
    assert model.cutoff(0.3) == 3
    for t in range(8, 40):                                # rung 1 now agrees with rung 3
        model.pin(t, {"x": 0.5, "opt": "adam", "epochs": 9})
        model.observe(t, 1, float(t))
        model.observe(t, 3, float(t))
    assert model.cutoff(0.3) == 0


def test_skip_disagreeing_is_checked():
    for bad in (2.0, "yes", True):
        with pytest.raises(ConfigError, match="algorithm.skip_disagreeing"):
            asha(skip_disagreeing=bad)
    with pytest.raises(ConfigError, match="agreement on"):
        asha(skip_disagreeing=0.3, agreement=None)
    with pytest.raises(ConfigError, match="agreement on"):
        make_algorithm({"type": "asha", "skip_disagreeing": 0.3}, SPACE, OBJ)
    assert asha().skip_disagreeing is None                # off by default


@pytest.mark.parametrize("kill_at", [40, 150])
def test_a_killed_driver_resumes_the_same_run_when_asha_skips_a_rung(kill_at):
    build = lambda: asha(num_samples=60, min_points_in_model=3, skip_disagreeing=0.3)  # noqa: E731
    whole = Driver(build(), _misleading, max_steps=9, devices=3).run()
    plain = Driver(asha(num_samples=60, min_points_in_model=3), _misleading, max_steps=9,
                   devices=3).run()
    assert whole.log != plain.log                                # a rung was skipped
    killed = Driver(build(), _misleading, max_steps=9, devices=3, kill_at=kill_at,
                    rebuild=build).run()
    assert killed.log == whole.log
    assert killed.alg.state_dict() == whole.alg.state_dict()


def test_the_models_kept_pair_taus_give_the_cutoff_computed_afresh():
    """The pair taus a model keeps as results arrive (new trials join in O(n), a replaced
    value drops the rung's pairs) give, after every result, the cutoff computed afresh from
    the same results, at several thresholds; the kept taus equal kendall_tau bit for bit."""
    import numpy as np
    from hypersack.core.algorithms.rung_model import agreeing_cutoff, kendall_tau
    rng = np.random.default_rng(5)
    model = asha(agreement=0.3)._rung_model
    added = 0
    for _ in range(600):
        trial = int(rng.integers(80))
        model.pin(trial, {"x": 0.5, "opt": "adam", "epochs": 9})
        rung = [1, 3, 9, 27][min(3, int(rng.integers(trial % 4 + 1)))]
        value = float(rng.normal()) if rung > 3 else float(trial % 7 + rng.normal() * 0.1)
        kept = dict(model._pairs)
        model.observe(trial, rung, value)
        added += any(k in model._pairs and model._pairs[k] is v and v.n for k, v in kept.items())
        for threshold in (0.3, 0.0, 0.9):
            assert model.cutoff(threshold) == agreeing_cutoff(model.results, threshold)
        for (low, high), stats in model._pairs.items():
            shared = [t for t in model.results[low] if t in model.results[high]]
            assert stats.n == len(shared)
            assert stats.tau == kendall_tau([model.results[low][t] for t in shared],
                                            [model.results[high][t] for t in shared])
    assert model._pairs and added > 300          # kept and grown, not rebuilt at every call


def test_results_queued_behind_a_waiting_ask_are_stored_once_each_and_resume_exactly():
    """While an ask waits on the runner, the model's results queue: each commit stores the new
    ones as parts, never the whole queue in the head (which grew with every result, so each
    commit cost more than the last), and a store's head and parts resume the same state,
    before and after the queue drains."""
    alg, runner = asha(min_points_in_model=4, mode="stop"), _Held()
    alg.use_background(runner)
    stored: dict = {}
    heads = []

    def commit():
        delta = json.loads(json.dumps(alg.state_delta()))
        stored.update(delta.pop("parts"))
        heads.append(len(json.dumps(delta)))
        again = asha(min_points_in_model=4, mode="stop")
        again.load_state_dict({**delta, "parts": {k: v for k, v in stored.items()
                                                  if v is not None}})
        assert again.state_dict() == json.loads(json.dumps(alg.state_dict()))

    for t in range(39):
        alg.on_result(t, 1, {"loss": curve(alg.suggest(t).config, 1)})
        commit()
    assert runner.jobs and len(alg._rung_model.models[0]._queue) > 30    # all queued
    assert max(heads[10:]) - min(heads[10:]) < 200     # the head does not grow with them
    queued = [k for k, v in stored.items() if ".q" in k and v is not None]
    assert len(queued) == len(alg._rung_model.models[0]._queue)
    runner.release()
    alg.suggest(39)                                    # collected: the queue drains
    commit()
    assert not [k for k, v in stored.items() if ".q" in k and v is not None]


def test_a_store_of_one_part_per_result_still_resumes():
    """Stores written before results and configs were batched hold one ``o<i>`` part per
    result (a single result, not a list of them) and one ``c<trial>`` per config: they load
    the same log and configs."""
    whole = _fed_misleading(0.3)
    head, parts = _fed_misleading(0.3).state_delta()
    old = {k: v for k, v in parts.items() if k[0] not in "oC"}
    old.update({f"o{i}": entry for i, entry in enumerate(parts["o0"])})
    [configs] = [v for k, v in parts.items() if k[0] == "C"]
    old.update({f"c{t}": config for t, config in configs.items()})
    [tops] = [v for k, v in parts.items() if k[0] == "F"]
    old = {k: v for k, v in old.items() if k[0] != "F"}
    old.update({f"f{t}": 1 for t in tops})
    again = _fed_misleading(0.3)
    again.load_state_dict(json.loads(json.dumps(head)), json.loads(json.dumps(old)))
    assert again.log == whole.log and again.results == whole.results
    assert again.configs == whole.configs and len(configs) == 20
    assert again.tops == whole.tops and len(tops) == 8


def test_each_commit_stores_the_new_results_and_entries_as_one_part_each_and_resumes():
    """Commit after commit, the results observed and the entries a model appended since the
    previous commit are one part each (``o<i>``, ``j<key>.b<i>``), an entry changed later is
    stored alone (``j<key>.<i>``, over its batch); every store, replayed, resumes the state."""
    import numpy as np
    alg = asha(min_points_in_model=4, mode="stop")
    model_parts: dict = {}
    rng = np.random.default_rng(1)
    batches = 0
    for t in range(30):
        alg.suggest(t)
        for step in (1, 3, 9):
            if alg.on_result(t, step, {"loss": float(rng.random())}) != Decision.CONTINUE:
                break
        head, parts = alg._rung_model.state_delta()
        assert sum(k[0] == "o" for k in parts) <= 1 and sum(k[0] == "C" for k in parts) <= 1
        assert not any(k[0] in "cf" for k in parts) and sum(k[0] == "F" for k in parts) <= 1
        journal = [k for k in parts if k[0] == "j"]
        assert sum(".b" in k for k in journal) <= len(alg._rung_model.models)
        batches += any(".b" in k for k in journal)
        model_parts.update(json.loads(json.dumps(parts)))
        again = asha(min_points_in_model=4, mode="stop")._rung_model
        again.load_state_dict(json.loads(json.dumps(head)), model_parts)
        assert again.state_dict() == alg._rung_model.state_dict()
    assert batches > 10


def test_journal_entries_put_a_later_single_entry_over_its_batch():
    from hypersack.core.algorithms.optuna_model import journal_entries
    got = journal_entries({0: ["a", "b"], 2: ["c"]}, {1: "B"})
    assert got == {0: "a", 1: "B", 2: "c"}


def test_pairs_are_ranked_in_full_once_not_at_every_result(monkeypatch):
    """A study's agreement check ranks each pair of rungs in full (O(n^2)) once, when first
    needed; later results join in O(n). (Re-ranking every changed pair made the default 10x
    plain asha at 10,000 trials: RESULTS, section "model".)"""
    import numpy as np
    from hypersack.core.algorithms import rung_model
    full = []
    real = rung_model._sign_sum
    monkeypatch.setattr(rung_model, "_sign_sum", lambda x, y: full.append(len(x)) or real(x, y))
    alg = asha(min_points_in_model=4, mode="stop", num_samples=400)
    rng = np.random.default_rng(3)
    for t in range(400):
        alg.suggest(t)
        for step in (1, 3, 9):
            if alg.on_result(t, step, {"loss": float(rng.random())}) != Decision.CONTINUE:
                break
    kept = alg._rung_model._pairs
    assert max(p.n for p in kept.values()) > 40           # pairs of many shared trials...
    assert len(full) <= len(kept) and max(full, default=0) < 20   # ...never ranked in full


def test_results_queued_in_one_commit_are_one_part_and_old_single_parts_are_replaced():
    """Results queued behind a waiting ask are one part per commit (``qb<first>``); a store of
    one part per queued result (``q<i>``, before batching) resumes, and its parts are removed
    at the next commit, so a later resume never reads them over the new ones."""
    alg, runner = asha(min_points_in_model=4, mode="stop"), _Held()
    alg.use_background(runner)
    stored: dict = {}

    def commit(into: dict) -> dict:
        delta = json.loads(json.dumps(alg.state_delta()))
        parts = delta.pop("parts")
        into.update(parts)
        for k in [k for k, v in into.items() if v is None]:
            del into[k]
        return {**delta, "parts": dict(into)}

    for t in range(0, 40, 4):
        for u in range(t, t + 4):
            alg.on_result(u, 1, {"loss": curve(alg.suggest(u).config, 1)})
        state = commit(stored)
        assert sum(".q" in k for k in state["parts"]) <= t // 4 + 1
    model = alg._rung_model.models[0]
    assert len(model._queue) > 20 and any(".qb" in k for k in stored)
    # the same store as one part per queued result, as written before batching
    singles = {k: v for k, v in stored.items() if ".q" not in k}
    singles.update({f"j0.q{i}": list(op) for i, op in enumerate(model._queue)})
    resumed = asha(min_points_in_model=4, mode="stop")
    resumed.load_state_dict({**{k: v for k, v in state.items() if k != "parts"}, "parts": singles})
    assert resumed.state_dict() == json.loads(json.dumps(alg.state_dict()))
    resumed.use_background(runner)
    after = json.loads(json.dumps(resumed.state_delta()))["parts"]
    assert all(after[f"j0.q{i}"] is None for i in range(len(model._queue)))   # old ones go
    assert after["j0.qb0"] == [list(op) for op in model._queue]
