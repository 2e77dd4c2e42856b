"""The study specification and the objective: parsing, validation, round trip."""
from __future__ import annotations

import copy
import json

import pytest

from hypersack.core.controller import Budget
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.core.spec import ExecutorOptions, StudySpec, check_resumable
from hypersack.errors import ConfigError, SpaceError

FULL = {
    "name": "digits-mlp_v1.2",
    "description": "an MLP on digits",
    "trainable": "hypersack.workloads.digits:train",
    "space": {
        "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
        "hidden": {"type": "int", "low": 16, "high": 256, "step": 16},
        "act": ["relu", "tanh"],
        "epochs": 8,
    },
    "objective": {"metric": "val_acc", "mode": "max"},
    "budget": {"trials": 20, "time_s": 600},
    "algorithm": {"type": "tpe", "n_startup_trials": 5},
    "seed": 42,
    "executor": {"workers": 4, "max_retries": 1, "trial_timeout_s": 120.5},
    "max_steps": "epochs",
    "storage": "studies.db",
}

MINIMAL = {"name": "s", "space": {"x": [1, 2]}, "objective": {"metric": "loss", "mode": "min"}, "budget": {"trials": 1}}


def spec_error(d):
    with pytest.raises(ConfigError) as exc:
        StudySpec.from_dict(d)
    return exc.value


def with_(base, **changes):
    d = copy.deepcopy(base)
    d.update(changes)
    return d


def without(base, key):
    d = copy.deepcopy(base)
    del d[key]
    return d


# ---- happy path -------------------------------------------------------------------------------

def test_from_dict_full():
    spec = StudySpec.from_dict(FULL)
    assert spec.name == "digits-mlp_v1.2"
    assert spec.description == "an MLP on digits"
    assert spec.trainable == "hypersack.workloads.digits:train"
    assert spec.space == SearchSpace(FULL["space"])
    assert spec.objective == Objective("val_acc", "max")
    assert spec.budget == Budget(trials=20, time_s=600)
    assert spec.algorithm == {"type": "tpe", "n_startup_trials": 5}
    assert spec.seed == 42
    assert spec.executor == ExecutorOptions(workers=4, max_retries=1, trial_timeout_s=120.5)
    assert spec.max_steps == "epochs"
    assert spec.steps_for({"epochs": 8}) == 8


def test_from_dict_minimal_uses_defaults():
    spec = StudySpec.from_dict(MINIMAL)
    assert spec.objective == Objective("loss", "min")
    assert spec.budget == Budget(trials=1)
    assert spec.algorithm == {"type": "random"}
    assert spec.seed == 0 and spec.trainable is None and spec.max_steps is None
    assert spec.description == ""
    assert spec.executor == ExecutorOptions()
    assert spec.executor.to_dict() == {"workers": None, "max_retries": 2, "trial_timeout_s": None}
    assert spec.steps_for({"x": 1}) is None


def test_from_dict_does_not_mutate_its_input():
    d = copy.deepcopy(FULL)
    StudySpec.from_dict(d)
    assert d == FULL


def test_algorithm_given_as_a_name():
    assert StudySpec.from_dict(with_(MINIMAL, algorithm="grid")).algorithm == {"type": "grid"}


@pytest.mark.parametrize("base", [FULL, MINIMAL])
def test_to_dict_round_trip(base):
    spec = StudySpec.from_dict(base)
    d = spec.to_dict()
    assert json.loads(json.dumps(d)) == d            # stored as JSON
    again = StudySpec.from_dict(json.loads(json.dumps(d)))
    assert again == spec
    assert again.to_dict() == d
    assert "storage" not in d


def test_to_dict_content():
    d = StudySpec.from_dict(FULL).to_dict()
    assert d["objective"] == {"metric": "val_acc", "mode": "max"}
    assert d["budget"] == {"trials": 20, "time_s": 600}
    assert d["executor"] == {"workers": 4, "max_retries": 1, "trial_timeout_s": 120.5}
    assert d["space"]["lr"] == {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}
    assert d["space"]["epochs"] == {"type": "constant", "value": 8}


# ---- errors name the field --------------------------------------------------------------------

def test_unknown_top_level_field():
    err = spec_error(with_(MINIMAL, n_trials=5))
    assert err.field == "n_trials" and "5" in str(err)
    assert "budget" in str(err)                     # lists the known fields


def test_unknown_executor_field():
    err = spec_error(with_(MINIMAL, executor={"workers": 2, "gpus": 4}))
    assert err.field == "executor.gpus" and "4" in str(err)
    assert "workers" in str(err)


def test_unknown_budget_field():
    err = spec_error(with_(MINIMAL, budget={"trials": 3, "hours": 2}))
    assert err.field == "budget.hours" and "2" in str(err)


@pytest.mark.parametrize("executor, field, value_text", [
    ({"workers": 0}, "executor.workers", "0"),
    ({"workers": -2}, "executor.workers", "-2"),
    ({"workers": 1.5}, "executor.workers", "1.5"),
    ({"workers": "4"}, "executor.workers", "'4'"),
    ({"workers": True}, "executor.workers", "True"),
    ({"max_retries": -1}, "executor.max_retries", "-1"),
    ({"max_retries": False}, "executor.max_retries", "False"),
    ({"trial_timeout_s": 0}, "executor.trial_timeout_s", "0"),
    ({"trial_timeout_s": "1h"}, "executor.trial_timeout_s", "'1h'"),
    ("fast", "executor", "'fast'"),
])
def test_bad_executor_options(executor, field, value_text):
    err = spec_error(with_(MINIMAL, executor=executor))
    assert err.field == field and value_text in str(err)


def test_executor_none_means_defaults():
    assert StudySpec.from_dict(with_(MINIMAL, executor=None)).executor == ExecutorOptions()


@pytest.mark.parametrize("name", ["", "my study", "-lead", ".hidden", "a/b", "x" * 129, 12, None])
def test_bad_name(name):
    err = spec_error(with_(MINIMAL, name=name))
    assert err.field == "name" and repr(name) in str(err)


@pytest.mark.parametrize("name", ["a", "A1", "x" * 128, "run_3.b-2", "0start"])
def test_good_names(name):
    assert StudySpec.from_dict(with_(MINIMAL, name=name)).name == name


@pytest.mark.parametrize("key", ["name", "space", "objective", "budget"])
def test_missing_required_field(key):
    err = spec_error(without(MINIMAL, key))
    assert err.field == key and err.value is None
    assert "required" in str(err)


@pytest.mark.parametrize("seed", [-1, 1.0, "3", True, None])
def test_bad_seed(seed):
    err = spec_error(with_(MINIMAL, seed=seed))
    assert err.field == "seed" and repr(seed) in str(err)


def test_bad_trainable():
    err = spec_error(with_(MINIMAL, trainable=42))
    assert err.field == "trainable" and "42" in str(err)


@pytest.mark.parametrize("algorithm", [5, None, {"points_per_axis": 3}, ["grid"]])
def test_bad_algorithm(algorithm):
    err = spec_error(with_(MINIMAL, algorithm=algorithm))
    assert err.field == "algorithm"


@pytest.mark.parametrize("budget, field", [
    ({}, "budget"), ({"trials": 0}, "budget.trials"), ({"time_s": -5}, "budget.time_s"),
    (10, "budget"), ([10], "budget"),
])
def test_bad_budget(budget, field):
    assert spec_error(with_(MINIMAL, budget=budget)).field == field


def test_space_errors_keep_their_field():
    err = spec_error(with_(MINIMAL, space={"lr": {"type": "float", "low": 1, "high": 0}}))
    assert isinstance(err, SpaceError) and err.field == "space.lr.low"
    assert spec_error(with_(MINIMAL, space={})).field == "space"


@pytest.mark.parametrize("objective", ["val_mse", {"metric": "val_mse"}, ("val_mse", None)])
def test_objective_without_mode_is_refused(objective):
    """No silent default: a minimised metric must not be maximised because the mode was left out."""
    err = spec_error(with_(MINIMAL, objective=objective))
    assert err.field == "objective.mode" and "'min' or 'max'" in str(err)
    with pytest.raises(ConfigError, match="objective.mode"):
        Objective.parse(objective)


def test_objective_errors_keep_their_field():
    assert spec_error(with_(MINIMAL, objective=("acc", "up"))).field == "objective.mode"
    assert spec_error(with_(MINIMAL, objective={"metric": "acc", "goal": "max"})).field == "objective.goal"


@pytest.mark.parametrize("d", [None, [], "study.yaml", 3])
def test_spec_must_be_a_mapping(d):
    err = spec_error(d)
    assert err.field == "study"
    assert repr(d) in str(err)


# ---- max_steps --------------------------------------------------------------------------------

def test_max_steps_as_an_int():
    spec = StudySpec.from_dict(with_(MINIMAL, max_steps=30))
    assert spec.max_steps == 30 and spec.steps_for({"x": 1}) == 30


def test_max_steps_as_a_space_key():
    d = with_(MINIMAL, space={"epochs": {"type": "int", "low": 1, "high": 9}, "x": [1]},
              max_steps="epochs")
    spec = StudySpec.from_dict(d)
    assert spec.steps_for({"epochs": 7, "x": 1}) == 7
    assert spec.steps_for({"epochs": 7.0, "x": 1}) == 7
    assert spec.steps_for({"x": 1}) is None


@pytest.mark.parametrize("max_steps", [0, -1, 2.5, True, "epochs", "", [3]])
def test_bad_max_steps(max_steps):
    err = spec_error(with_(MINIMAL, max_steps=max_steps))
    assert err.field == "max_steps" and repr(max_steps) in str(err)


# ---- ExecutorOptions --------------------------------------------------------------------------

def test_executor_options_round_trip():
    opts = ExecutorOptions(workers=3, max_retries=0, trial_timeout_s=5)
    assert ExecutorOptions.from_dict(opts.to_dict()) == opts
    assert ExecutorOptions.from_dict(None) == ExecutorOptions()


# ---- Objective --------------------------------------------------------------------------------

@pytest.mark.parametrize("given, expected", [
    (("loss", "min"), Objective("loss", "min")),
    (["acc", "max"], Objective("acc", "max")),
    ({"metric": "loss", "mode": "min"}, Objective("loss", "min")),
])
def test_objective_parse_variants(given, expected):
    assert Objective.parse(given) == expected


def test_objective_parse_returns_an_objective_unchanged():
    o = Objective("f1", "max")
    assert Objective.parse(o) is o
    assert Objective.parse(o.to_dict()) == o


@pytest.mark.parametrize("given, field, value_text", [
    (("acc", "maximum"), "objective.mode", "'maximum'"),
    ({"metric": "acc", "mode": "MAX"}, "objective.mode", "'MAX'"),
    ({"metric": "acc", "direction": "max"}, "objective.direction", "'max'"),
    ({"mode": "min"}, "objective.metric", "None"),
    ("", "objective.metric", "''"),
    ((3, "min"), "objective.metric", "3"),
    (("acc",), "objective", "('acc',)"),
    (("acc", "max", "x"), "objective", "('acc', 'max', 'x')"),
    (42, "objective", "42"),
    (None, "objective", "None"),
])
def test_objective_parse_errors(given, field, value_text):
    with pytest.raises(ConfigError) as exc:
        Objective.parse(given)
    assert exc.value.field == field and value_text in str(exc.value)


@pytest.mark.parametrize("word, mode", [("minimize", "min"), ("maximize", "max")])
def test_optunas_directions_are_read_as_modes(word, mode):
    assert Objective.parse(("acc", word)).mode == mode
    assert Objective.parse({"metric": "acc", "mode": word}).to_dict() == {"metric": "acc",
                                                                          "mode": mode}


def test_objective_comparisons():
    hi, lo = Objective("acc", "max"), Objective("loss", "min")
    assert hi.better(2.0, 1.0) and not hi.better(1.0, 2.0) and not hi.better(1.0, 1.0)
    assert lo.better(1.0, 2.0) and not lo.better(2.0, 1.0) and not lo.better(1.0, 1.0)
    assert hi.sign() == 1.0 and lo.sign() == -1.0
    values = [0.3, None, float("nan"), 0.9, float("inf"), 0.1]
    assert hi.best(values) == 0.9 and lo.best(values) == 0.1
    assert hi.best([]) is None and hi.best([None, float("nan")]) is None


def test_max_failures_is_an_option_kept_with_the_study_only_when_set():
    base = {"name": "s", "space": {"x": 1}, "objective": ["y", "max"], "budget": {"trials": 1}}
    assert StudySpec.from_dict(base).max_failures == 5
    assert "max_failures" not in StudySpec.from_dict(base).to_dict()     # older specs compare equal
    never = StudySpec.from_dict({**base, "max_failures": None})
    assert never.max_failures is None and never.to_dict()["max_failures"] is None
    assert StudySpec.from_dict(never.to_dict()).max_failures is None
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(ConfigError) as exc:
            StudySpec.from_dict({**base, "max_failures": bad})
        assert exc.value.field == "max_failures"
    check_resumable(StudySpec.from_dict(base).to_dict(), never.to_dict())   # may change on resume


def test_graphs_is_a_pack_option_and_precision_the_study_s():
    from hypersack.core.spec import PackOptions, split_precision
    options = PackOptions.from_dict({"max_members": 16, "graphs": "off"})
    assert options.graphs == "off"
    assert options.to_dict() == {"max_members": 16, "graphs": "off"}
    assert PackOptions().to_dict() == {"max_members": 8}     # older stored specs compare equal
    with pytest.raises(ConfigError) as info:
        PackOptions.from_dict({"graphs": True})
    assert info.value.field == "pack.graphs" and info.value.value is True
    assert split_precision(None, None) == ("fp32", None)
    assert split_precision("bf16", {"max_members": 2}) == ("bf16", {"max_members": 2})
    with pytest.warns(DeprecationWarning):
        assert split_precision(None, {"precision": "fp16", "graphs": "off"}) == \
            ("fp16", {"graphs": "off"})


def test_conv_is_a_pack_option_grouped_by_default_and_checked():
    from hypersack.core.spec import PackOptions
    assert PackOptions().conv == "grouped" and "conv" not in PackOptions().to_dict()
    options = PackOptions.from_dict({"conv": "bmm"})
    assert options.conv == "bmm" and options.to_dict() == {"max_members": 8, "conv": "bmm"}
    with pytest.raises(ConfigError) as info:
        PackOptions.from_dict({"conv": "winograd"})
    assert info.value.field == "pack.conv"

def test_heartbeat_timeout_and_log_cap_are_validated_executor_options():
    from hypersack.core.spec import ExecutorOptions
    default = ExecutorOptions()
    assert default.heartbeat_timeout_s == 60.0 and default.max_log_bytes == 32_000_000
    chosen = ExecutorOptions.from_dict({"heartbeat_timeout_s": 5, "max_log_mb": 0.5})
    assert chosen.heartbeat_timeout_s == 5 and chosen.max_log_bytes == 500_000
    assert ExecutorOptions.from_dict(chosen.to_dict()) == chosen
    off = ExecutorOptions(heartbeat_timeout_s=None, max_log_mb=None)
    assert off.max_log_bytes is None and ExecutorOptions.from_dict(off.to_dict()) == off
    for field, value in (("heartbeat_timeout_s", 2), ("heartbeat_timeout_s", "60"),
                         ("heartbeat_timeout_s", float("nan")), ("max_log_mb", 0),
                         ("max_log_mb", True)):
        with pytest.raises(ConfigError, match=f"executor.{field} is {value!r}"):
            ExecutorOptions.from_dict({field: value})
