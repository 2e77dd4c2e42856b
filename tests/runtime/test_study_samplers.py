"""Optuna samplers in real studies: a resumed study proposes what an uninterrupted one would,
and a sampler object is accepted by the Python API."""
from __future__ import annotations

import pytest

import hypersack

optuna = pytest.importorskip("optuna")

SPACE = {"x": {"type": "float", "low": 0.0, "high": 1.0}, "k": [1, 2, 3]}


def study(store_path, name, n_trials, algorithm):
    return hypersack.Study(name=name, space=SPACE, objective=("score", "max"), n_trials=n_trials,
                           storage=store_path, workers=1, algorithm=algorithm)


def configs(s):
    return [t["config"] for t in sorted(s.status()["trials"], key=lambda t: t["trial_id"])]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", [
    {"type": "tpe", "n_startup_trials": 2},
    {"type": "optuna", "sampler": "QMCSampler", "options": {"scramble": True}},
])
def test_a_resumed_study_proposes_what_an_uninterrupted_one_would(store_path, algorithm):
    whole = study(store_path, "whole", 6, algorithm)
    whole.run("trainables:quick", progress=False)
    part = study(store_path, "part", 3, algorithm)
    part.run("trainables:quick", progress=False)
    study(store_path, "part", 6, algorithm).resume("trainables:quick", progress=False)
    assert configs(part) == configs(whole)
    assert len({c["x"] for c in configs(whole)}) == 6


def test_a_sampler_object_runs_and_is_stored_as_type_optuna(store_path):
    s = study(store_path, "obj", 3, optuna.samplers.RandomSampler(seed=1))
    assert s.spec.algorithm == {"type": "optuna", "sampler": "RandomSampler"}
    s.run("trainables:quick", progress=False)
    assert s.status()["complete"] == 3


def test_a_bad_sampler_in_a_study_file_fails_before_anything_is_stored(store_path):
    spec = {"name": "bad", "space": SPACE, "objective": {"metric": "score", "mode": "max"},
            "budget": {"trials": 2},
            "algorithm": {"type": "optuna", "sampler": "GPSampler", "options": {"n_startup": 1}}}
    with pytest.raises(hypersack.errors.ConfigError) as exc:
        hypersack.Study.from_spec(spec, storage=store_path).run("trainables:quick", progress=False)
    assert exc.value.field == "algorithm.options" and exc.value.value == {"n_startup": 1}
    assert not store_path.exists()                 # nothing stored: not even an empty file
    with pytest.raises(hypersack.errors.StorageError, match="No study store"):
        hypersack.Study.load("bad", storage=store_path)
