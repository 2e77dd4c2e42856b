"""The SQLite study store: durable batches, reopening, several studies, bad files."""
from __future__ import annotations

import pytest

from hypersack.core.trial import TrialRecord, TrialState
from hypersack.errors import StorageError, StudyNotFoundError
from hypersack.runtime.storage.sqlite import Storage


def record(trial_id: int, state=TrialState.RUNNING, **kw) -> TrialRecord:
    return TrialRecord(trial_id, {"x": trial_id / 10}, seed=trial_id, state=state, **kw)


def test_batches_survive_reopening(store_path):
    with Storage(store_path) as s:
        study = s.create_study("a", {"objective": {"metric": "score", "mode": "max"}})
        s.save_batch(study.study_id, [record(0), record(1)], [(0, 1, {"score": 0.5})], {"elapsed_s": 3.0})
        s.save_batch(study.study_id, [record(0, TrialState.COMPLETE, value=0.7)],
                     [(0, 2, {"score": 0.7}), (1, 1, {"score": 0.1})])
    with Storage(store_path) as s:
        study = s.get_study("a")
        assert study.controller_state == {"elapsed_s": 3.0} and study.status == "running"
        trials = {t.trial_id: t for t in s.load_trials(study.study_id)}
        assert trials[0].state is TrialState.COMPLETE and trials[0].value == 0.7
        assert trials[1].state is TrialState.RUNNING and trials[1].config == {"x": 0.1}
        assert s.load_results(study.study_id, 0) == [
            {"trial_id": 0, "step": 1, "score": 0.5}, {"trial_id": 0, "step": 2, "score": 0.7}]
        assert s.counts(study.study_id)["complete"] == 1


def test_a_step_reported_again_after_a_restart_replaces_the_old_one(store_path):
    with Storage(store_path) as s:
        sid = s.create_study("a", {}).study_id
        s.save_batch(sid, [record(0)], [(0, 3, {"score": 0.1})])
        s.save_batch(sid, [record(0)], [(0, 3, {"score": 0.2})])
        assert s.load_results(sid) == [{"trial_id": 0, "step": 3, "score": 0.2}]


def test_record_round_trips_every_field(store_path):
    r = record(4, TrialState.FAILED, attempts=3, retries=2, last_step=7, metrics={"score": 1.5},
               value=1.5, error="boom", traceback="Traceback...", checkpoint="/c.pt",
               checkpoint_step=6, device="cpu/1", info={"grid_index": 2}, started_at=1.0,
               finished_at=2.0)
    with Storage(store_path) as s:
        sid = s.create_study("a", {}).study_id
        s.save_batch(sid, [r], [])
        assert s.load_trials(sid) == [r]


def test_studies_are_separate_and_names_unique(store_path):
    with Storage(store_path) as s:
        a = s.create_study("a", {}).study_id
        b = s.create_study("b", {}).study_id
        s.save_batch(a, [record(0)], [])
        assert s.load_trials(b) == []
        with pytest.raises(StorageError, match="already exists"):
            s.create_study("a", {})
        assert [x["name"] for x in s.list_studies()] == ["a", "b"]
        s.delete_study("a")
        assert not s.has_study("a") and s.has_study("b")
        with pytest.raises(StudyNotFoundError, match="No study named 'a'"):
            s.get_study("a")


def test_store_is_wal_and_fully_synchronous(store_path):
    with Storage(store_path) as s:
        assert s._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s._db.execute("PRAGMA synchronous").fetchone()[0] == 2   # FULL


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("not sqlite " * 100)
    with pytest.raises(StorageError, match="is damaged or is not a HyperSack store"):
        Storage(bad)
    with pytest.raises(StorageError, match="is a directory"):
        Storage(tmp_path)


_SCHEMA_2 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE studies (study_id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE,
    spec TEXT NOT NULL, status TEXT NOT NULL, controller_state TEXT, created_at REAL NOT NULL,
    updated_at REAL NOT NULL, uuid TEXT, lease_owner TEXT, lease_host TEXT, lease_pid INTEGER,
    lease_process_start TEXT, lease_heartbeat REAL);
CREATE TABLE trials (study_id INTEGER NOT NULL, trial_id INTEGER NOT NULL, state TEXT NOT NULL,
    config TEXT NOT NULL, seed INTEGER NOT NULL, attempts INTEGER NOT NULL, retries INTEGER NOT NULL,
    last_step INTEGER, metrics TEXT NOT NULL, value REAL, error TEXT, traceback TEXT,
    checkpoint TEXT, checkpoint_step INTEGER, device TEXT, info TEXT NOT NULL, started_at REAL,
    finished_at REAL, PRIMARY KEY (study_id, trial_id));
CREATE TABLE results (study_id INTEGER NOT NULL, trial_id INTEGER NOT NULL, step INTEGER NOT NULL,
    metrics TEXT NOT NULL, reported_at REAL NOT NULL, PRIMARY KEY (study_id, trial_id, step));
INSERT INTO meta VALUES ('schema_version', '2');
INSERT INTO studies (name, spec, status, created_at, updated_at, uuid)
    VALUES ('old', '{}', 'complete', 1.0, 2.0, 'abc');
INSERT INTO trials VALUES (1, 0, 'complete', '{"x": 1}', 0, 1, 0, 3, '{"v": 1.0}', 1.0, NULL,
    NULL, NULL, NULL, NULL, '{}', 1.0, 2.0);
"""


def test_a_schema_2_store_reads_without_stays_and_gains_them_when_opened_for_writing(tmp_path):
    import sqlite3
    from hypersack.core.stays import Stay, StayOutcome
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(_SCHEMA_2)
    with Storage(path, readonly=True) as s:           # a dashboard on a store not yet migrated
        assert s.load_stays(1) == [] and s.load_samples(1) == []
        assert [(t.value, t.values) for t in s.load_trials(1)] == [(1.0, None)]   # no such column
    with Storage(path) as s:
        study = s.get_study("old")
        assert [t.value for t in s.load_trials(study.study_id)] == [1.0]
        s.save_batch(study.study_id, [record(1, values=[2.0, 3.0])], [])      # the added column
        assert [t.values for t in s.load_trials(study.study_id)] == [None, [2.0, 3.0]]
        stay = Stay(0, 1, "n", "gpu0", 1.0, end=2.0, outcome=StayOutcome.FINISHED)
        s.save_batch(study.study_id, [], [], stays=[stay])
        assert s.load_stays(study.study_id) == [stay]
        version = s._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        assert version == ("5",)


def test_samples_round_trip_and_go_with_their_study(store_path):
    from hypersack.runtime.devices.monitor import Sample
    with Storage(store_path) as s:
        sid = s.create_study("a", {}).study_id
        s.save_samples(sid, [("n", "gpu0", Sample(1.0, 30.0, 2.0, 1)),
                             ("n", "gpu0", Sample(2.0, None, 2.5, 0))])
        assert [(r["t"], r["utilization"]) for r in s.load_samples(sid)] == [(1.0, 30.0), (2.0, None)]
        s.delete_study("a")
        assert s.load_samples(sid) == []


def test_a_resume_closes_the_stays_a_killed_driver_left_open(store_path):
    from hypersack.core.stays import Stay, StayOutcome
    with Storage(store_path) as s:
        study = s.create_study("a", {})
        done = Stay(0, 1, "n", "gpu0", 1.0, end=2.0, outcome=StayOutcome.FINISHED)
        left = Stay(1, 1, "n", "gpu1", 1.0)
        s.save_batch(study.study_id, [record(0), record(1)], [], {"elapsed_s": 1.0}, stays=[done, left])
        written = s.get_study("a").updated_at
        assert s.end_open_stays(study.study_id) == 1
        stays = s.load_stays(study.study_id)
        assert stays[0] == done
        assert stays[1].end == written and stays[1].outcome is StayOutcome.INTERRUPTED
        assert s.end_open_stays(study.study_id) == 0


def test_a_new_store_and_its_wal_files_are_private_whatever_the_umask(tmp_path):
    import os
    import stat
    old = os.umask(0o022)
    try:
        with Storage(tmp_path / "s.db") as s:
            s.create_study("a", {})
            modes = {suffix: stat.S_IMODE(os.stat(f"{s.path}{suffix}").st_mode)
                     for suffix in ("", "-wal", "-shm")}
    finally:
        os.umask(old)
    assert modes == {"": 0o600, "-wal": 0o600, "-shm": 0o600}      # was 0644 each


def test_an_existing_store_keeps_its_permissions(tmp_path):
    import os
    import stat
    path = tmp_path / "s.db"
    Storage(path).close()
    os.chmod(path, 0o640)
    Storage(path).close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640


def test_a_reader_that_cannot_use_the_wal_refuses_rather_than_answer_from_before_it(tmp_path,
                                                                                   monkeypatch):
    """In a folder the reader cannot write (no -shm to create), the read-only fallback
    (``immutable=1``) ignores the WAL: with commits in it, it would answer from before them."""
    import sqlite3

    from hypersack.runtime.storage import sqlite as storage_module
    path = tmp_path / "s.db"
    writer = Storage(path)
    sid = writer.create_study("a", {}).study_id
    writer.connection.execute("PRAGMA wal_autocheckpoint=0")
    writer.save_batch(sid, [record(0)], [(0, 1, {"score": 0.5})])
    connect = sqlite3.connect

    def unwritable_folder(database, *args, **kwargs):       # what SQLite says there
        if "mode=ro" in str(database) and "immutable" not in str(database):
            raise sqlite3.OperationalError("unable to open database file")
        return connect(database, *args, **kwargs)
    monkeypatch.setattr(storage_module.sqlite3, "connect", unwritable_folder)
    try:
        with pytest.raises(StorageError, match="write-ahead log"):
            Storage(path, readonly=True)          # was: a study with no trial (the WAL unread)
    finally:
        monkeypatch.undo()
        writer.close()
    with Storage(path, readonly=True) as reader:  # checkpointed at the close: read as it is
        assert len(reader.load_trials(sid)) == 1
