"""A study's stored state tells the truth: running only while a live driver runs it; a command
that is refused, or stopped before its loop began, leaves the stored study as it was."""
from __future__ import annotations

import socket
import subprocess

import pytest

import hypersack
from hypersack import study as study_module
from hypersack.errors import ClusterError, StorageError, StudyBusyError
from hypersack.runtime.storage import queries
from hypersack.runtime.executors.local import LocalExecutor
from hypersack.runtime.storage.sqlite import Storage


def _study(store_path, n_trials=2):
    return hypersack.Study(name="s", space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
                           objective=("score", "max"), n_trials=n_trials, storage=store_path,
                           workers=1)


def _reaped_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _cli(capsys, store_path, *args: str) -> str:
    from hypersack._entry import main
    capsys.readouterr()
    assert main([*args, "--storage", str(store_path)]) == 0
    return capsys.readouterr().out


def test_a_study_whose_driver_died_shows_as_interrupted_with_how_to_resume(store_path, capsys):
    with Storage(store_path) as store:
        row = store.create_study("s", {"objective": {"metric": "score", "mode": "max"}})
        store.connection.execute(
            "UPDATE studies SET lease_owner = 'gone', lease_host = ?, lease_pid = ?, "
            "lease_heartbeat = 0 WHERE study_id = ?", (socket.gethostname(), _reaped_pid(),
                                                       row.study_id))
        store.connection.commit()
    with Storage(store_path, readonly=True) as store:
        assert store.get_study("s").status == "running"              # as stored
        assert queries.status(store, "s")["status"] == "interrupted"  # as it stands
        assert [s["status"] for s in store.list_studies()] == ["interrupted"]
        from hypersack.report.data import from_storage
        assert from_storage(store, "s").status == "interrupted"       # the HTML report too
    hint = f"interrupted (resume with: hypersack resume s --storage {store_path})"
    shown = _cli(capsys, store_path, "status", "s").splitlines()
    assert shown[0].startswith("s (interrupted): 0 trials") and shown[1] == hint
    listed = _cli(capsys, store_path, "list").splitlines()
    assert listed[1].split()[:2] == ["s", "interrupted"] and listed[2] == f"s: {hint}"


def test_a_study_its_live_driver_runs_shows_as_running(store_path):
    with Storage(store_path) as driver:
        row = driver.create_study("s", {"objective": {"metric": "score", "mode": "max"}})
        driver.acquire_lease(row)
        with Storage(store_path, readonly=True) as reader:
            assert queries.status(reader, "s")["status"] == "running"
        driver.release_lease(row.study_id)
        assert driver.list_studies()[0]["status"] == "interrupted"   # released while running


def test_a_resume_stopped_before_its_loop_or_refused_leaves_the_study_as_it_was(
        store_path, monkeypatch):
    study = _study(store_path)
    assert study.run("trainables:quick", progress=False).status == "complete"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt        # Ctrl-C in resume's first half second
    monkeypatch.setattr(study_module, "prepare_machine", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _study(store_path, n_trials=5).resume("trainables:quick", progress=False)
    with Storage(store_path) as store:
        assert store.get_study("s").status == "complete"
        assert store.get_study("s").spec["budget"]["trials"] == 2      # not the refused 5
        row = store.get_study("s")
        store.acquire_lease(row)                     # a live driver holds it now
        with pytest.raises(StudyBusyError):
            _study(store_path).resume("trainables:quick", progress=False)
        assert store.get_study("s").status == "complete"
        store.release_lease(row.study_id)


def test_replace_keeps_the_old_study_until_the_new_ones_executor_has_started(
        store_path, monkeypatch):
    study = _study(store_path)
    study.run("trainables:quick", progress=False)
    with Storage(store_path, readonly=True) as store:
        old = store.get_study("s")
        folder = store.study_dir(old)
    assert folder.is_dir()

    def no_cluster(self):
        raise ClusterError("Ray could not connect to 'ray://nowhere:10001'")
    with monkeypatch.context() as patch:
        patch.setattr(LocalExecutor, "start", no_cluster)
        with pytest.raises(ClusterError):
            _study(store_path, n_trials=1).run("trainables:quick", if_exists="replace",
                                               progress=False)
    with Storage(store_path, readonly=True) as store:
        kept = store.get_study("s")
        assert (kept.uuid, kept.status) == (old.uuid, "complete")
        assert queries.status(store, "s")["complete"] == 2
        assert [s["name"] for s in store.list_studies()] == ["s"]
    assert folder.is_dir()
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]    # the new one's is gone

    _study(store_path, n_trials=1).run("trainables:quick", if_exists="replace", progress=False)
    with Storage(store_path, readonly=True) as store:
        new = store.get_study("s")
        assert new.uuid != old.uuid and queries.status(store, "s")["total"] == 1
        assert [s["name"] for s in store.list_studies()] == ["s"]
    assert not folder.exists()


def test_an_empty_store_file_says_so(tmp_path):
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(StorageError, match=r"'.*empty.db' is an empty file \(0 bytes\)"):
        Storage(empty, readonly=True)
