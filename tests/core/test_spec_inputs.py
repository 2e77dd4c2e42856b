"""Bad inputs to the study spec (issue 10): every number checked for type, range and finiteness,
names without control characters, plain JSON data only; each a ConfigError naming field and value."""
from __future__ import annotations

import copy
import datetime
import json

import pytest

from hypersack.core.spec import (MAX_PACK_MEMBERS, MAX_SEED, MAX_WORKERS, ExecutorOptions,
                                 PackOptions, Resources, StudySpec)
from hypersack.errors import ConfigError

BASE = {"name": "s", "space": {"x": [1, 2], "epochs": 3}, "objective": {"metric": "loss", "mode": "min"},
        "budget": {"trials": 4}, "max_steps": "epochs"}
HUGE = 10**400


def spec_with(**changes):
    d = copy.deepcopy(BASE)
    for key, value in changes.items():
        section, _, sub = key.partition("__")
        if sub:
            d.setdefault(section, {})[sub] = value
        else:
            d[section] = value
    return d


def refused(**changes) -> ConfigError:
    with pytest.raises(ConfigError) as exc:
        StudySpec.from_dict(spec_with(**changes))
    return exc.value


def test_base_is_valid_and_round_trips_through_strict_json():
    spec = StudySpec.from_dict(BASE)
    stored = json.loads(json.dumps(spec.to_dict(), allow_nan=False))
    assert StudySpec.from_dict(stored) == spec


@pytest.mark.parametrize("changes, field, words", [
    ({"executor__workers": 10**9}, "executor.workers", f"in [1, {MAX_WORKERS}]"),
    ({"executor__workers": 0}, "executor.workers", "in [1,"),
    ({"executor__workers": True}, "executor.workers", "integer"),
    ({"executor__workers": 2.0}, "executor.workers", "integer"),
    ({"executor__max_retries": HUGE}, "executor.max_retries", "in [0, 100]"),
    ({"executor__trial_timeout_s": float("nan")}, "executor.trial_timeout_s", "finite number > 0"),
    ({"executor__trial_timeout_s": float("inf")}, "executor.trial_timeout_s", "finite number"),
    ({"executor__trial_timeout_s": 0}, "executor.trial_timeout_s", "> 0"),
    ({"executor__trial_timeout_s": HUGE}, "executor.trial_timeout_s", "finite number"),
    ({"pack__max_members": HUGE}, "pack.max_members", f"in [1, {MAX_PACK_MEMBERS}]"),
    ({"pack__max_members": 0}, "pack.max_members", "in [1,"),
    ({"oversubscription": 1e308}, "oversubscription", "in [1, 100]"),
    ({"oversubscription": float("nan")}, "oversubscription", "finite"),
    ({"oversubscription": 0.5}, "oversubscription", "(1: no oversubscription)"),
    ({"oversubscription": {"A100": HUGE}}, "oversubscription.A100", "in [1, 100]"),
    ({"oversubscription": {"A\n100": 2}}, "oversubscription (an architecture name)", "printable"),
    ({"resources__compute": 1e308}, "resources.compute", "percent of a device"),
    ({"resources__compute": 0}, "resources.compute", "> 0"),
    ({"resources__memory_gb": float("inf")}, "resources.memory_gb", "finite"),
    ({"resources__memory_gb": -1}, "resources.memory_gb", "in [0,"),
    ({"resources__cpus": HUGE}, "resources.cpus", "in [0, 4096]"),
    ({"seed": MAX_SEED + 1}, "seed", f"in [0, {MAX_SEED}]"),
    ({"seed": -1}, "seed", "integer"),
    ({"seed": datetime.date(2020, 1, 1)}, "seed", "integer"),
    ({"budget": {"trials": HUGE}}, "budget.trials", "integer in [1, 1000000000]"),
    ({"budget": {"trials": 0}}, "budget.trials", "integer in [1,"),
    ({"budget": {"time_s": HUGE}}, "budget.time_s", "finite number"),
    ({"budget": {"time_s": float("nan")}}, "budget.time_s", "finite number"),
    ({"budget": {"time_s": 1e12}}, "budget.time_s", "<= 3.16224e+07"),
    ({"max_steps": HUGE}, "max_steps", "integer in [1, 1000000000]"),
    ({"max_steps": float("inf")}, "max_steps", "integer"),
    ({"max_steps": 2.0}, "max_steps", "integer"),
    ({"max_steps": "nope"}, "max_steps", "name of a space parameter"),
    ({"name": "digits\n"}, "name", "letters, digits"),
    ({"name": "a\x00"}, "name", "letters, digits"),
    ({"name": "../x"}, "name", "letters, digits"),
    ({"name": "/abs"}, "name", "letters, digits"),
    ({"name": "x" * 129}, "name", "1-128"),
    ({"trainable": "mod:fn\n"}, "trainable", "printable"),
    ({"trainable": 5}, "trainable", "printable"),
    ({"description": "a\x00b"}, "description", "without NUL"),
    ({"description": ["a"]}, "description", "text"),
    ({"storage": 5}, "storage", "printable"),
    ({"storage": "a\x00.db"}, "storage", "printable"),
    ({"algorithm": {"type": ["asha"]}}, "algorithm.type", "name of an algorithm"),
    ({"algorithm": {"type": {"a": 1}}}, "algorithm.type", "name of an algorithm"),
    ({"algorithm": {"type": "asha", "max_t": float("nan")}}, "algorithm.max_t", "finite number"),
    ({"algorithm": {"type": "asha", "max_t": datetime.date(2020, 1, 1)}}, "algorithm.max_t", "quote a date"),
    ({"algorithm": {"type": "asha", 5: 1}}, "algorithm", "option names that are strings"),
    ({"objective": {"metric": "a", 1: 2, None: 3}}, "objective.1", "not a known field"),
])
def test_bad_inputs_name_field_and_value(changes, field, words):
    exc = refused(**changes)
    assert exc.field == field
    assert words in exc.problem


@pytest.mark.parametrize("epochs", [float("inf"), float("nan"), 0, 2.5, "12", True,
                                    {"type": "float", "low": 1, "high": 9},
                                    {"type": "int", "low": 0, "high": 9},
                                    {"type": "categorical", "choices": [1, 2, "x"]},
                                    {"type": "categorical", "choices": [1, 2, 10**10]}])
def test_max_steps_must_name_a_parameter_of_positive_integers(epochs):
    d = spec_with(space={"x": [1, 2], "epochs": epochs})
    with pytest.raises(ConfigError) as exc:
        StudySpec.from_dict(d)
    assert exc.value.field.startswith("space.epochs")


@pytest.mark.parametrize("epochs", [12, [1, 3, 9], {"type": "int", "low": 1, "high": 27, "step": 2}])
def test_max_steps_accepts_integer_parameters(epochs):
    spec = StudySpec.from_dict(spec_with(space={"x": [1, 2], "epochs": epochs}))
    assert spec.steps_for(spec.space.sample(__import__("numpy").random.default_rng(0))) >= 1


def test_upper_bounds_are_inclusive():
    assert ExecutorOptions(workers=MAX_WORKERS).workers == MAX_WORKERS
    assert PackOptions(max_members=MAX_PACK_MEMBERS).max_members == MAX_PACK_MEMBERS
    assert StudySpec.from_dict(spec_with(seed=MAX_SEED, oversubscription=100)).seed == MAX_SEED
    assert Resources(compute=10_000.0, memory_gb=1e6, cpus=4096).cpus == 4096


def test_the_python_api_checks_the_budget_too():
    from hypersack.core.controller import Budget
    base = StudySpec.from_dict(BASE)
    with pytest.raises(ConfigError, match="budget.trials"):
        StudySpec(name="s", space=base.space, objective=base.objective, budget=Budget(10**12))
