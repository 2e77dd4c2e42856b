"""A damaged study store is an error naming the file, never a wrong answer (issue 37): garbage
over the root page of the ``results`` table went unnoticed (``status``, ``export`` and ``resume``
exited 0: none of them reads that table). ``resume`` and the exports run SQLite's quick check
first; ``hypersack check [STUDY]`` runs the full one and says what is damaged."""
from __future__ import annotations

import json
import sqlite3

import pytest

from hypersack import cli
from hypersack.core.trial import TrialRecord, TrialState
from hypersack.errors import StorageCorruptError
from hypersack.runtime.storage import queries
from hypersack.runtime.storage.sqlite import Storage, check_file
from hypersack.study import Study


def _stored_study(path) -> None:
    """A study of three complete trials with three results each, as a run leaves it (closed:
    the WAL is copied into the file)."""
    study = Study({"lr": {"type": "float", "low": 0.1, "high": 1.0}}, {"metric": "loss", "mode": "min"},
                  name="s", n_trials=3, storage=path, trainable="synthetic_chain")
    with Storage(path) as store:
        row = store.create_study("s", study.spec.to_dict())
        trials = [TrialRecord(i, {"lr": 0.5}, seed=i, state=TrialState.COMPLETE, last_step=3,
                              value=1.0 - i / 10, metrics={"loss": 1.0 - i / 10}) for i in range(3)]
        store.save_batch(row.study_id, trials,
                         [(i, s, {"loss": 1.0 - i / 10}) for i in range(3) for s in (1, 2, 3)])
        store.set_status(row.study_id, "complete")


def _overwrite_root_page(path, name: str) -> None:
    """Garbage over the root page of table or index ``name``."""
    db = sqlite3.connect(path)
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
    size = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * size)
        f.write(bytes((7 + 13 * i) % 256 for i in range(size)))


@pytest.fixture
def damaged(tmp_path):
    path = tmp_path / "s.db"
    _stored_study(path)
    _overwrite_root_page(path, "results")
    return path


def test_an_intact_store_passes_both_checks(tmp_path):
    path = tmp_path / "s.db"
    _stored_study(path)
    with Storage(path, readonly=True) as store:
        assert store.check_integrity() == [] and store.check_integrity(full=True) == []
        assert "trial_id" in queries.export(store, "s", "csv")


def test_an_export_of_a_damaged_store_is_an_error_naming_the_file(damaged):
    with Storage(damaged, readonly=True) as store:
        queries.status(store, "s")            # reads no result: still answers (as before)
        with pytest.raises(StorageCorruptError) as caught:
            queries.export(store, "s", "csv")  # was: the trials' CSV, exit 0
    message = str(caught.value)
    assert str(damaged) in message and "'results'" in message and "hypersack check" in message


def test_resuming_a_damaged_store_is_refused_before_anything_runs(damaged, capsys):
    code = cli.main(["resume", "s", "--storage", str(damaged), "--progress", "none"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_DAMAGED, err                      # was 0: the study ran on
    assert str(damaged) in err and "resume study 's'" in err


def test_check_says_which_table_and_which_rows_of_the_study_are_damaged(damaged, capsys):
    assert cli.main(["check", "s", "--storage", str(damaged)]) == cli.EXIT_DAMAGED
    out = capsys.readouterr().out
    assert "damaged" in out and "table 'results'" in out and "study 's': its results" in out
    assert cli.main(["check", "--storage", str(damaged), "--json"]) == cli.EXIT_DAMAGED
    report = json.loads(capsys.readouterr().out)
    assert report["intact"] is False and any("'results'" in p for p in report["problems"])


def test_check_of_an_intact_store_reads_the_study_back(tmp_path, capsys):
    path = tmp_path / "s.db"
    _stored_study(path)
    assert cli.main(["check", "s", "--storage", str(path)]) == 0
    assert "intact" in capsys.readouterr().out
    assert cli.main(["check", "s", "--storage", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["intact"] is True and report["rows_read"]["results"] == 9


def test_a_damaged_index_is_found_and_named(tmp_path):
    path = tmp_path / "s.db"
    _stored_study(path)
    _overwrite_root_page(path, "sqlite_autoindex_results_1")
    found = check_file(path, full=True)
    assert found and any("sqlite_autoindex_results_1" in line or "malformed" in line for line in found)


def test_check_of_a_missing_file_or_a_file_that_is_no_database_is_an_error(tmp_path, capsys):
    assert cli.main(["check", "--storage", str(tmp_path / "none.db")]) == cli.EXIT_ERROR
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 300)
    assert cli.main(["check", "--storage", str(junk)]) == cli.EXIT_DAMAGED
    assert str(junk) in capsys.readouterr().err
