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
    study = hypersack.Study(name="f", space={"x": hypersack.Float(-2, -1)}, objective=("score", "max"), n_trials=2,
                            workers=1, storage=tmp_path / "s.db")
    with pytest.warns(RuntimeWarning, match=r"no trial completed \(2 failed"):
        study.run("trainables:raises_for_negative", progress=False)


def test_from_yaml_puts_the_study_folder_and_working_directory_on_sys_path(tmp_path, monkeypatch):
    import sys
    from hypersack.runtime.worker.trainable import TrainableRef
    study_dir, cwd = tmp_path / "configs", tmp_path / "work"
    study_dir.mkdir()
    cwd.mkdir()
    (study_dir / "beside_study.py").write_text("def train(config, ctx): pass\n")
    (cwd / "in_cwd.py").write_text("def train(config, ctx): pass\n")
    (study_dir / "s.yaml").write_text(
        "name: s\ntrainable: beside_study:train\nobjective: {metric: y, mode: max}\n"
        "space: {x: 1}\nbudget: {trials: 1}\n")
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    hypersack.Study.from_yaml(study_dir / "s.yaml")
    assert sys.path[:2] == [str(study_dir), str(cwd)]
    TrainableRef.of("beside_study:train")          # found by the driver (workers get sys.path)
    TrainableRef.of("in_cwd:train")


# ---- issue 39: silent wrong answers ---------------------------------------------------------

def test_every_read_refuses_a_study_object_that_describes_another_stored_study(tmp_path):
    db = tmp_path / "s.db"
    a = hypersack.Study(name="same", space={"x": hypersack.Float(0, 1)}, objective=("y", "min"),
                        n_trials=2, storage=db)
    a.add_trial({"x": 0.5}, 1.0)
    b = hypersack.Study(name="same", space={"z": hypersack.Int(1, 4)}, objective=("y", "max"),
                        n_trials=2, storage=db)
    reads = [b.best_trial, b.best_trials, b.best_complete_trial, b.status, b.results,
             b.user_attrs, lambda: b.set_attr("k", 1), lambda: b.report(tmp_path / "r.html"),
             b.trials_dataframe, b.best_checkpoint, lambda: b.export_best(tmp_path / "out")]
    for read in reads:
        with pytest.raises(ConfigError, match="another study than the one stored") as err:
            read()
        assert err.value.field in ("objective", "space")
    # what may change on resume (the budget) does not stop a read, and the stored one reads
    again = hypersack.Study(name="same", space={"x": hypersack.Float(0, 1)}, objective=("y", "min"),
                            n_trials=9, storage=db)
    assert again.best_trial()["value"] == 1.0
    assert hypersack.Study.load("same", db).best_trial()["trial_id"] == again.best_trial()["trial_id"]


# ---- issue 39: messages a newcomer meets ----------------------------------------------------

def test_no_budget_says_to_set_n_trials_or_time_budget_s():
    with pytest.raises(ConfigError) as err:
        hypersack.Study(name="s", space={"x": 1}, objective=("y", "max"))
    assert err.value.field == "n_trials"
    assert "set n_trials or time_budget_s" in str(err.value) and "but or" not in str(err.value)


def test_a_name_in_any_script_is_accepted_and_a_bad_one_says_what_a_name_holds():
    assert hypersack.Study(name="café-中文_1", space={"x": 1}, objective=("y", "max"),
                           n_trials=1).name == "café-中文_1"
    with pytest.raises(ConfigError, match=r"letters, digits.*\(letters of any script: 'é' is one\).*no space"):
        hypersack.Study(name="my study", space={"x": 1}, objective=("y", "max"), n_trials=1)


def test_a_store_in_a_missing_folder_names_the_folder(tmp_path):
    from hypersack.errors import StorageError
    study = hypersack.Study(name="s", space={"x": hypersack.Float(0, 1)}, objective=("y", "max"),
                            n_trials=1, storage=tmp_path / "nowhere" / "s.db")
    with pytest.raises(StorageError, match="does not exist: '.*nowhere'") as err:
        study.add_trial({"x": 0.5}, 1.0)
    assert "unable to open" not in str(err.value)


def test_a_tab_in_a_study_file_is_named_with_its_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nobjective: {metric: y, mode: max}\nspace:\n\tx: 1\n")
    with pytest.raises(ConfigError, match=r"s\.yaml:4: the YAML has a tab at column 1"):
        hypersack.Study.from_yaml(path)
