"""The store under faults and contention: identity, one driver per study, full disks, damaged
files, read-only readers."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from hypersack.core.trial import TrialRecord, TrialState
from hypersack.errors import (LeaseLostError, StorageCorruptError, StorageError, StorageFullError,
                              StudyBusyError)
from hypersack.runtime.storage import lease as lease_mod
from hypersack.runtime.storage import sqlite as storage_mod
from hypersack.runtime.storage.sqlite import Storage


def record(trial_id: int, state=TrialState.RUNNING, **kw) -> TrialRecord:
    return TrialRecord(trial_id, {"x": trial_id / 10}, seed=trial_id, state=state, **kw)


def test_each_study_has_its_own_run_folder_even_with_the_same_name(tmp_path):
    with Storage(tmp_path / "a.db") as a, Storage(tmp_path / "b.db") as b:
        ra, rb = a.create_study("s", {}), b.create_study("s", {})
        assert ra.uuid and rb.uuid and ra.uuid != rb.uuid
        assert a.trial_dir(ra, 1) != b.trial_dir(rb, 1)
        assert a.study_dir(ra).parent == b.study_dir(rb).parent == tmp_path / "hypersack-runs"
        a.delete_study("s")
        again = a.create_study("s", {})                 # --replace makes a new identity
        assert a.study_dir(again) != a.study_dir(ra)


def test_a_trials_folder_is_made_once_and_kept_per_study_identity(tmp_path, monkeypatch):
    with Storage(tmp_path / "a.db") as a:
        first = a.create_study("s", {})
        kept = a.trial_dir(first, 7)
        assert kept == a.study_dir(first) / "trial-00007" and a.trial_dir(first, 7) is kept
        assert a.trial_dir(first, 8) == a.study_dir(first) / "trial-00008"
        a.delete_study("s")
        again = a.create_study("s", {})                 # the same name, a new identity
        assert a.trial_dir(again, 7) == a.study_dir(again) / "trial-00007" != kept
        monkeypatch.setattr(storage_mod, "_TRIAL_DIRS", 2)
        a.trial_dir(again, 9)                           # past the limit: the kept ones go
        assert a.trial_dir(first, 7) == kept and a.trial_dir(first, 7) is not kept


def test_a_second_driver_is_refused_and_a_dead_ones_lease_is_taken_over(tmp_path):
    path = tmp_path / "s.db"
    with Storage(path) as first, Storage(path) as second:
        row = first.create_study("s", {})
        first.acquire_lease(row)
        with pytest.raises(StudyBusyError, match=f"pid {os.getpid()}"):
            second.acquire_lease(row)
        with pytest.raises(StudyBusyError):
            second.delete_study("s")                       # --replace against a live driver
        first.release_lease(row.study_id)
        second.acquire_lease(row)
        # The first driver writes on after losing its lease: refused, nothing written.
        first._lease = "stale-owner"
        with pytest.raises(LeaseLostError):
            first.save_batch(row.study_id, [record(0)], [(0, 1, {"v": 1.0})])
        assert second.load_trials(row.study_id) == []


def test_a_turn_with_controller_state_renews_the_lease_in_the_same_write(tmp_path):
    """The state's UPDATE of the study row is the lease renewal: it moves the heartbeat, and a
    driver that lost the lease is refused with nothing of the turn written."""
    path = tmp_path / "s.db"
    with Storage(path) as first, Storage(path) as second:
        row = first.create_study("s", {})
        first.acquire_lease(row)
        beat = "SELECT lease_heartbeat, controller_state FROM studies WHERE study_id = ?"
        first._db.execute("UPDATE studies SET lease_heartbeat = 1.0 WHERE study_id = ?",
                          (row.study_id,))
        first.save_batch(row.study_id, [record(0)], [(0, 1, {"v": 1.0})], {"turn": 1})
        heartbeat, state = first._db.execute(beat, (row.study_id,)).fetchone()
        assert heartbeat > 1.0 and '"turn": 1' in state
        first.release_lease(row.study_id)
        second.acquire_lease(row)
        first._lease = "stale-owner"
        with pytest.raises(LeaseLostError):
            first.save_batch(row.study_id, [record(1)], [(1, 1, {"v": 2.0})], {"turn": 2})
        assert [t.trial_id for t in second.load_trials(row.study_id)] == [0]
        assert '"turn": 1' in second._db.execute(beat, (row.study_id,)).fetchone()[1]


def test_the_lease_of_a_killed_driver_is_taken_over_at_once(tmp_path):
    path = tmp_path / "s.db"
    code = ("import sys, os; from hypersack.runtime.storage.sqlite import Storage\n"
            "s = Storage(sys.argv[1]); row = s.create_study('s', {}); s.acquire_lease(row)\n"
            "os._exit(0)")                                     # dies holding the lease
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    with Storage(path) as s:
        row = s.get_study("s")
        s.acquire_lease(row)                                  # the pid is gone: stale
        s.heartbeat(row.study_id)


def test_a_lease_from_another_host_expires_after_its_ttl(tmp_path, monkeypatch):
    path = tmp_path / "s.db"
    with Storage(path) as s:
        row = s.create_study("s", {})
        s._db.execute("UPDATE studies SET lease_owner='x', lease_host='elsewhere', lease_pid=1, "
                      "lease_heartbeat=? WHERE study_id=?",
                      (__import__("time").time(), row.study_id))
        with pytest.raises(StudyBusyError, match="elsewhere"):
            s.acquire_lease(row)
        monkeypatch.setattr(lease_mod, "LEASE_TTL_S", 0.0)     # where the lease reads it
        s.acquire_lease(row)


class _FullDisk:
    """A connection whose writes fail as SQLite does on a full disk, after ``ok`` statements."""

    def __init__(self, db, ok: int):
        self._db, self._ok = db, ok

    def _write(self, sql: str) -> None:
        if sql.startswith(("INSERT", "UPDATE", "COMMIT")):
            if self._ok <= 0:
                raise sqlite3.OperationalError("database or disk is full")
            self._ok -= 1

    def execute(self, sql, *args):
        self._write(sql)
        return self._db.execute(sql, *args)

    def executemany(self, sql, rows):
        self._write(sql)
        return self._db.executemany(sql, rows)

    def __getattr__(self, name):
        return getattr(self._db, name)


def test_a_full_disk_is_an_error_that_loses_nothing_stored(tmp_path):
    path = tmp_path / "s.db"
    with Storage(path) as s:
        row = s.create_study("s", {})
        s.save_batch(row.study_id, [record(0)], [(0, 1, {"v": 1.0})])
        s._db = _FullDisk(s._db, ok=0)
        with pytest.raises(StorageFullError, match="is full .* free") as info:
            s.save_batch(row.study_id, [record(0, TrialState.COMPLETE)], [(0, 2, {"v": 2.0})])
        assert "nothing stored was lost" in str(info.value)
    with Storage(path, readonly=True) as s:
        sid = s.get_study("s").study_id
        assert [r["step"] for r in s.load_results(sid)] == [1]
        assert s.load_trials(sid)[0].state is TrialState.RUNNING


def test_a_real_full_disk_on_a_small_tmpfs(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root, or no mount permission); the fake "
                    "full disk above covers the same path")
    try:
        with Storage(mount / "s.db") as s:
            row = s.create_study("s", {})
            big = {"blob": "x" * 20_000}
            with pytest.raises(StorageFullError):
                for step in range(1, 1000):
                    s.save_batch(row.study_id, [record(0)], [(0, step, big)])
            stored = len(s.load_results(row.study_id))
            assert stored > 0
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_damaged_file_names_the_file_and_the_recovery(tmp_path):
    path = tmp_path / "s.db"
    with Storage(path) as s:
        row = s.create_study("s", {})
        s.save_batch(row.study_id, [record(i) for i in range(200)], [])
    size = path.stat().st_size
    with open(path, "r+b") as f:           # every page after the schema page is garbage
        f.seek(4096)
        f.write(b"\xff" * (size - 4096))
    with pytest.raises(StorageCorruptError, match=r"s\.db.*\.recover"):
        with Storage(path, readonly=True) as s:
            s.load_trials(s.get_study("s").study_id)


def test_readers_open_read_only_and_never_create_a_file(tmp_path):
    missing = tmp_path / "typo.db"
    with pytest.raises(StorageError, match="No study store at"):
        Storage(missing, readonly=True)
    assert not missing.exists()
    path = tmp_path / "s.db"
    with Storage(path) as s:
        s.create_study("s", {})
    os.chmod(path, 0o444)
    try:
        with Storage(path, readonly=True) as s:
            assert s.get_study("s").name == "s"
            with pytest.raises(StorageError):
                s.create_study("t", {})
    finally:
        os.chmod(path, 0o644)


def test_a_schema_1_store_is_migrated_with_identities(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(storage_mod._SCHEMA.split("CREATE TABLE IF NOT EXISTS trials")[0].replace(
        "    uuid TEXT,\n    lease_owner TEXT,\n    lease_host TEXT,\n    lease_pid INTEGER,\n"
        "    lease_process_start TEXT,\n    lease_heartbeat REAL\n", "").replace(
        "updated_at REAL NOT NULL,\n", "updated_at REAL NOT NULL\n"))
    db.execute("INSERT INTO studies (name, spec, status, created_at, updated_at) "
               "VALUES ('old', '{}', 'complete', 0, 0)")
    db.commit()
    db.close()
    with Storage(path) as s:
        row = s.get_study("old")
        assert len(row.uuid) == 32
        s.acquire_lease(row)


def test_a_bad_study_or_a_mistyped_store_makes_no_file(tmp_path):
    import hypersack
    from hypersack.errors import ConfigError
    path = tmp_path / "s.db"
    with pytest.raises(ConfigError):        # refused when the study is made (issue 27)
        hypersack.Study(space={"x": {"type": "float", "low": 0, "high": 1}},
                        objective=("score", "max"), name="s", n_trials=1, storage=path,
                        algorithm={"type": "grid", "points_per_axis": 0})
    good = hypersack.Study(space={"x": {"type": "float", "low": 0, "high": 1}},
                           objective=("score", "max"), name="s", n_trials=1, storage=path)
    with pytest.raises(StorageError, match="No study store"):
        good.resume("trainables:quick")
    assert not path.exists()
