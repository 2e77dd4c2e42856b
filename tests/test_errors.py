"""The exception tree and its message formats."""
from __future__ import annotations

import pytest

from hypersack.errors import (ConfigError, HyperSackError, MissingDependencyError, SpaceError,
                              StorageError, StudyNotFoundError, TrainableError, TrialStopped)


def test_config_error_message_without_location():
    err = ConfigError("space.lr.low", 0.1, "must be <= high (0.01)")
    assert str(err) == "The value of space.lr.low is 0.1, but must be <= high (0.01)"
    assert (err.field, err.value, err.problem, err.location) == \
        ("space.lr.low", 0.1, "must be <= high (0.01)", None)


def test_config_error_message_with_location():
    err = ConfigError("executor.workers", 0, "must be an integer >= 1", location="study.yaml:12")
    assert str(err) == "study.yaml:12: The value of executor.workers is 0, but must be an integer >= 1"
    assert err.location == "study.yaml:12"


@pytest.mark.parametrize("value, shown", [("adam", "'adam'"), (None, "None"), ([1, 2], "[1, 2]"),
                                          ({"a": 1}, "{'a': 1}"), (float("nan"), "nan")])
def test_config_error_shows_the_value_with_repr(value, shown):
    assert str(ConfigError("f", value, "is wrong")) == f"The value of f is {shown}, but is wrong"


def test_config_errors_are_value_errors_and_hypersack_errors():
    err = SpaceError("space.x.type", "floaty", "must be one of [...]")
    assert isinstance(err, ConfigError) and isinstance(err, ValueError)
    assert isinstance(err, HyperSackError) and err.field == "space.x.type"
    with pytest.raises(ValueError):
        raise err


def test_study_not_found_error():
    err = StudyNotFoundError("mnist", "/data/studies.db")
    assert str(err) == "No study named 'mnist' in /data/studies.db"   # not KeyError's quoting
    assert err.name == "mnist"
    assert isinstance(err, StorageError) and isinstance(err, KeyError)
    assert isinstance(err, HyperSackError)
    with pytest.raises(KeyError):
        raise err


def test_missing_dependency_error():
    err = MissingDependencyError("The TPE algorithm", "optuna", "tpe")
    assert str(err) == "The TPE algorithm needs the package 'optuna': pip install 'hypersack[tpe]'"
    assert isinstance(err, ImportError) and isinstance(err, HyperSackError)


def test_trainable_error_and_trial_stopped():
    assert issubclass(TrainableError, HyperSackError)
    # A trainable's `except Exception` must not swallow a stop request.
    assert issubclass(TrialStopped, BaseException) and not issubclass(TrialStopped, Exception)


def test_config_error_message_never_fails_on_its_value():
    huge = 10**5000                       # more digits than Python's int -> str allows
    exc = ConfigError("budget.trials", huge, "must be an integer in [1, 1000000000]")
    assert "<int of 16610 bits>" in str(exc)
    assert exc.value is huge
    long = ConfigError("space.k.value", list(range(10_000)), "is too long")
    assert len(str(long)) < 400 and "characters)" in str(long)
