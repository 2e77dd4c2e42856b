"""A study file is parsed once and its algorithm built once (issue 29 item 6): on
``hypersack run FILE`` in process, on ``Study.from_yaml(...).run()`` and on ``Study(...).run()``.
Counting wrappers around ``StudySpec.from_dict`` and ``make_algorithm`` count the calls."""
from __future__ import annotations

from pathlib import Path

import pytest

import hypersack
import hypersack.config
import hypersack.study
from hypersack.core.spec import StudySpec

QUICK = """
name: q
trainable: trainables:quick
objective: {metric: score, mode: max}
space:
  x: {type: float, low: 0.0, high: 1.0}
budget: {trials: 2}
executor: {workers: 1}
"""


@pytest.fixture
def counts(monkeypatch):
    """{"from_dict": n, "make_algorithm": n}: the calls made since the test began."""
    got = {"from_dict": 0, "make_algorithm": 0}
    original_from_dict = StudySpec.from_dict.__func__          # type: ignore[attr-defined]
    original_make = hypersack.study.make_algorithm

    def from_dict(cls, d):
        got["from_dict"] += 1
        return original_from_dict(cls, d)

    def make_algorithm(*args, **kwargs):
        got["make_algorithm"] += 1
        return original_make(*args, **kwargs)

    monkeypatch.setattr(StudySpec, "from_dict", classmethod(from_dict))
    monkeypatch.setattr(hypersack.config, "make_algorithm", make_algorithm)
    monkeypatch.setattr(hypersack.study, "make_algorithm", make_algorithm)
    return got


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "q.yaml"
    path.write_text(QUICK)
    return path


def test_hypersack_run_parses_the_file_once_and_builds_the_algorithm_once(tmp_path, counts, capsys):
    from hypersack._entry import main
    code = main(["run", str(_file(tmp_path)), "--progress", "none",
                 "--storage", str(tmp_path / "s.db")])
    assert code == 0, capsys.readouterr().err
    assert counts == {"from_dict": 1, "make_algorithm": 1}


def test_from_yaml_then_run_parses_once_and_builds_once(tmp_path, counts):
    study = hypersack.Study.from_yaml(_file(tmp_path), storage=tmp_path / "s.db")
    assert study.spec.source_dir == str(tmp_path.resolve())
    assert counts == {"from_dict": 1, "make_algorithm": 1}
    study.run(progress=False)
    assert counts == {"from_dict": 1, "make_algorithm": 1}
    study.run(if_exists="replace", progress=False)    # a second run gets a fresh algorithm
    assert counts == {"from_dict": 1, "make_algorithm": 2}


def test_a_study_made_in_python_builds_its_algorithm_once(tmp_path, counts):
    study = hypersack.Study(name="p", space={"x": hypersack.Float(0.0, 1.0)},
                            objective=("score", "max"), n_trials=2, workers=1,
                            storage=tmp_path / "s.db", algorithm="random")
    assert counts["make_algorithm"] == 1          # a bad option still fails at construction
    study.run("trainables:quick", progress=False)
    assert counts == {"from_dict": 0, "make_algorithm": 1}


def test_a_changed_spec_builds_its_algorithm_again(tmp_path, counts):
    study = hypersack.Study(name="e", space={"x": hypersack.Float(0.0, 1.0)},
                            objective=("score", "max"), n_trials=2, workers=1,
                            storage=tmp_path / "s.db")
    study.enqueue({"x": 0.5})                     # the spec changed: the built one is not reused
    study.run("trainables:quick", progress=False)
    assert counts["make_algorithm"] == 2


def test_errors_still_name_the_line_through_load_study(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(QUICK.replace("budget: {trials: 2}", "budget: {trials: 2}\nalgorithm: {type: nope}"))
    with pytest.raises(hypersack.ConfigError) as info:
        hypersack.config.load_study(path)
    assert info.value.location == f"{path}:8"
    with pytest.raises(hypersack.ConfigError, match=rf"{path}:8"):
        hypersack.Study.from_yaml(path)
