"""What a newcomer meets first in the Python API (issue 12): documented parameters, clear errors."""
from __future__ import annotations

import inspect

import pytest

import hypersack
from hypersack.errors import ConfigError


def test_help_documents_every_parameter():
    doc = hypersack.Study.__doc__
    params = [p for p in inspect.signature(hypersack.Study.__init__).parameters if p != "self"]
    assert len(params) >= 18
    assert [p for p in params if f"``{p}``" not in doc] == []


def test_an_empty_name_is_an_error_not_a_timestamp():
    with pytest.raises(ConfigError) as err:
        hypersack.Study(name="", space={"x": 1}, objective=("y", "max"), n_trials=1)
    assert err.value.field == "name" and err.value.value == ""
    assert hypersack.Study(space={"x": 1}, objective=("y", "max"), n_trials=1).name.startswith("study-")


def test_objective_without_mode_is_refused_in_python():
    with pytest.raises(ConfigError, match="objective.mode"):
        hypersack.Study(name="s", space={"x": 1}, objective="val_mse", n_trials=1)


def test_a_study_without_a_complete_trial_warns(tmp_path):
    study = hypersack.Study(name="f", space={"x": -1.0}, objective=("score", "max"), n_trials=2,
                            workers=1, storage=tmp_path / "s.db")
    with pytest.warns(RuntimeWarning, match=r"no trial completed \(2 failed"):
        study.run("trainables:raises_for_negative", progress=False)
