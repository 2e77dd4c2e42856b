"""Multi-objective studies run end to end on local workers: every objective stored, the Pareto
front as the best trials, samplers told every value, a trial missing an objective failed."""
from __future__ import annotations

import pytest

import hypersack
from hypersack.core.objective import Objective
from hypersack.core.pareto import non_dominated
from hypersack.errors import ConfigError, HyperSackError

pytestmark = pytest.mark.slow

SPACE = {"x": {"type": "float", "low": 0.0, "high": 1.0}, "y": {"type": "float", "low": 0.0, "high": 0.1}}
TWO = [("loss", "min"), ("latency_ms", "min")]


def make_study(store_path, algorithm, n_trials=8, space=SPACE, objective=TWO, **kwargs):
    return hypersack.Study(name=kwargs.pop("name", "mo"), space=space, objective=objective,
                           algorithm=algorithm, n_trials=n_trials, storage=store_path,
                           workers=kwargs.pop("workers", 2), **kwargs)


def _check_front(study, objective=TWO):
    """best_trials() is exactly the non-dominated complete trials, each with every value."""
    trials = [t for t in study.status()["trials"] if t["state"] == "complete"]
    modes = [mode for _, mode in objective]
    expected = [trials[i]["trial_id"] for i in non_dominated([t["values"] for t in trials], modes)]
    front = study.best_trials()
    assert [t["trial_id"] for t in front] == expected and front
    for t in front:
        assert list(t["values"]) == [metric for metric, _ in objective]
    return trials, front


def test_nsga2_runs_a_two_objective_study_and_is_told_every_value(store_path):
    study = make_study(store_path, {"type": "optuna", "sampler": "nsga2",
                                    "options": {"population_size": 4}})
    assert study.run("trainables:two_objectives", progress=False).status == "complete"
    trials, front = _check_front(study)
    assert len(trials) == 8
    for t in trials:      # the last report's values, objective order, and value is the first
        assert t["values"] == [t["metrics"]["loss"], t["metrics"]["latency_ms"]]
        assert t["value"] == t["values"][0]
    with pytest.raises(ConfigError, match="best_trials"):
        study.best_trial()
    from hypersack.runtime.storage.sqlite import Storage
    with Storage(store_path, readonly=True) as store:
        saved = store.get_study("mo").controller_state["algorithm"]["model"]["trials"]
    told = {e["t"]: e["v"] for e in saved if e.get("s") == "C"}
    assert told == {t["trial_id"]: t["values"] for t in trials}   # NSGA-II saw both objectives


@pytest.mark.filterwarnings("ignore::hypersack.errors.NoTrialCompletedWarning")
def test_random_search_with_three_objectives_and_a_max(store_path):
    objective = [("loss", "min"), ("latency_ms", "min"), ("x_back", "max")]
    study = make_study(store_path, "random", n_trials=6, objective=objective, max_failures=None,
                       space={"x": {"type": "float", "low": 0.0, "high": 1.0}})
    # x_back is never reported: every trial fails, naming it (the first report must hold all)
    study.run("trainables:two_objectives", progress=False)
    failed = [t for t in study.status()["trials"] if t["state"] == "failed"]
    assert len(failed) == 6 and all("'x_back'" in t["error"] for t in failed)
    assert study.best_trials() == []
    two = make_study(store_path, "random", n_trials=6, name="mo2",
                     objective=[("loss", "min"), ("latency_ms", "max")])
    two.run("trainables:two_objectives", progress=False)
    _check_front(two, [("loss", "min"), ("latency_ms", "max")])


@pytest.mark.filterwarnings("ignore::hypersack.errors.NoTrialCompletedWarning")
def test_a_trial_whose_last_report_lacks_an_objective_fails_naming_it(store_path):
    study = make_study(store_path, "random", n_trials=2, workers=1,
                       space={"x": 0.5, "y": {"type": "float", "low": 0.0, "high": 0.1}, "drop": 3})
    study.run("trainables:two_objectives", progress=False)
    trials = study.status()["trials"]
    assert [t["state"] for t in trials] == ["failed", "failed"]
    assert "'latency_ms' is missing from the trial's last report" in trials[0]["error"]
    first = make_study(store_path, "random", n_trials=1, workers=1, name="first",
                       space={"x": 0.5, "y": 0.0, "drop": 1})
    first.run("trainables:two_objectives", progress=False)
    error = first.status()["trials"][0]["error"]
    assert "'latency_ms' is missing from the trial's first report" in error


def test_multi_fidelity_algorithms_refuse_several_objectives_unless_rank_by_names_one(store_path):
    for algorithm in ("asha", "hyperband", "bohb", "sha", "rasda", "pack_hyperband"):
        with pytest.raises(ConfigError, match="rank_by") as info:
            make_study(store_path, {"type": algorithm, "max_t": 9})
        assert isinstance(info.value, HyperSackError) and algorithm.replace("_", "") in \
            str(info.value).lower().replace("successivehalving", "sha")
    with pytest.raises(ConfigError, match="must name an objective metric"):
        make_study(store_path, {"type": "asha", "max_t": 3, "rank_by": "acc"})
    with pytest.raises(ConfigError, match="only for algorithms that rank"):
        make_study(store_path, {"type": "random", "rank_by": "loss"})
    with pytest.raises(ConfigError, match="only for a multi-objective study"):
        make_study(store_path, {"type": "asha", "max_t": 3, "rank_by": "loss"}, objective=("loss", "min"))
    study = make_study(store_path, {"type": "asha", "min_t": 1, "max_t": 3, "mode": "stop",
                                    "rank_by": "latency_ms"}, n_trials=6)
    study.run("trainables:two_objectives", progress=False)
    trials = study.status()["trials"]
    assert {t["state"] for t in trials} <= {"complete", "pruned"} and len(trials) == 6
    _check_front(study)


def test_ask_tell_and_add_trial_take_every_objective(store_path):
    study = make_study(store_path, {"type": "optuna", "sampler": "tpe"}, n_trials=3)
    trial = study.ask()
    with pytest.raises(ConfigError, match="every objective"):
        study.tell(trial, 0.5)
    with pytest.raises(ConfigError, match="one per objective"):
        study.tell(trial, [0.5])
    with pytest.raises(ConfigError, match="'latency_ms'"):
        study.tell(trial, {"loss": 0.5})
    study.tell(trial, [0.5, 2.0])
    other = study.ask()
    study.tell(other, {"loss": 0.4, "latency_ms": 3.0, "extra": 1.0})
    with pytest.raises(ConfigError, match="'latency_ms'"):
        study.add_trial({"x": 0.1, "y": 0.0}, {"loss": 1.0})
    added = study.add_trial({"x": 0.1, "y": 0.0}, {"loss": 0.1, "latency_ms": 9.0})
    assert added["values"] == [0.1, 9.0]
    assert [t["trial_id"] for t in study.best_trials()] == [0, 1, 2]     # a trade-off each
    assert [t["values"] for t in study.best_trials()] == [
        {"loss": 0.5, "latency_ms": 2.0}, {"loss": 0.4, "latency_ms": 3.0},
        {"loss": 0.1, "latency_ms": 9.0}]


def test_the_dataframe_has_one_column_per_objective(store_path):
    pytest.importorskip("pandas", reason="trials_dataframe needs pandas (hypersack[report])")
    study = make_study(store_path, "random", n_trials=2, workers=1)
    study.run("trainables:two_objectives", progress=False)
    frame = study.trials_dataframe()
    assert "value" not in frame.columns
    assert list(frame.columns[1:3]) == ["values_loss", "values_latency_ms"]
    assert list(frame["values_latency_ms"]) == list(frame["metrics_latency_ms"])


def test_a_single_objective_study_has_no_values_and_its_front_is_its_best(store_path):
    study = make_study(store_path, "random", n_trials=3, workers=1, objective=("loss", "min"))
    study.run("trainables:two_objectives", progress=False)
    trials = study.status()["trials"]
    assert all("values" not in t for t in trials)
    best = study.best_complete_trial()
    assert [t["trial_id"] for t in study.best_trials()] == [best["trial_id"]]
    assert Objective.parse(study.spec.to_dict()["objective"]) == Objective("loss", "min")
