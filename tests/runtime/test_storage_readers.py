"""A study's driver survives other processes reading its store (issue 37).

The driver died of SIGBUS near the end of a study while another process read the store every few
ms: ``storage/wal.py`` opened the ``-shm`` file itself and closed it when the background
checkpoints ended, and on POSIX that close dropped SQLite's own locks on ``-shm``; the next
reader's connection then took itself for the first, truncated ``-shm`` and rebuilt it under the
driver's mapping. The first test checks the lock itself (from another process; "free" on
7bfe09a), the second runs the store's writer beside a reader in a tight loop (SIGBUS on 7bfe09a
in 4 of 4 tries), the third a whole ASHA study beside a reader of every read path
(tests/store_reader.py; on 7bfe09a it crashes in only some runs, as the crash needs a reader's
connection inside the driver's last writes: it guards the whole road, every result stored
once). Writers run in subprocesses, so that a crash is an exit code here. The long form, 10
studies of 300 trials, is benchmarks/driver/concurrent_reader.py.
"""
from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hypersack.runtime.storage.sqlite import Storage

TESTS = Path(__file__).resolve().parents[1]

# Another process asks for a write lock on the whole -shm file, without waiting: refused while
# any connection of the writer's process holds its lock there (SQLite keeps a shared lock on one
# byte for as long as a connection is open).
_PROBE = textwrap.dedent("""
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print("free")
    except OSError:
        print("held")
    finally:
        os.close(fd)
""")


def _shm_lock(db: Path) -> str:
    out = subprocess.run([sys.executable, "-c", _PROBE, f"{db}-shm"], capture_output=True,
                         text=True, timeout=60, check=True)
    return out.stdout.strip()


def test_the_writer_keeps_sqlites_lock_on_the_wal_index_through_and_after_background_checkpoints(
        tmp_path):
    with Storage(tmp_path / "s.db") as store:
        sid = store.create_study("s", {}).study_id
        assert _shm_lock(store.path) == "held"
        with store.background_wal_checkpoints():
            for i in range(5):
                store.save_batch(sid, [], [(0, i, {"v": i})])
            assert _shm_lock(store.path) == "held"
            frames = store._checkpointer._frames       # found: SQLite's own descriptor
            assert frames is not None and frames() is not None and frames() > 0
        assert _shm_lock(store.path) == "held"        # was "free": the close dropped it
        store.save_batch(sid, [], [(0, 9, {"v": 9})])
        assert _shm_lock(store.path) == "held"


def _start_reader(db: Path, name: str, env: dict, dashboard: bool = False) -> subprocess.Popen:
    reader = subprocess.Popen(
        [sys.executable, str(TESTS / "store_reader.py"), str(db), name,
         *(["--dashboard"] if dashboard else [])],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert reader.stdout is not None and reader.stdout.readline().strip() == "ready"
    return reader


def _stop_reader(reader: subprocess.Popen) -> dict:
    reader.send_signal(signal.SIGTERM)
    out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


_WRITER = textwrap.dedent("""
    import sys
    from hypersack.runtime.storage.sqlite import Storage
    with Storage(sys.argv[1]) as store:
        row = store.create_study("w", {"objective": {"metric": "v", "mode": "min"}})
        store.acquire_lease(row)
        step = 0
        for _ in range(2):                    # the loop's block, then the driver's last writes
            with store.background_wal_checkpoints():
                for _ in range(150):
                    step += 1
                    store.save_batch(row.study_id, [], [(0, step, {"v": step, "pad": "x" * 3000})])
            for _ in range(150):
                step += 1
                store.save_batch(row.study_id, [], [(0, step, {"v": step})])
                store.list_studies()
        store.release_lease(row.study_id)
    print(step)
""")


def test_a_writer_survives_a_reader_opening_the_store_in_a_tight_loop(tmp_path, subprocess_env):
    db = tmp_path / "s.db"
    Storage(db).close()                       # the reader opens a store from its first read
    reader = _start_reader(db, "w", subprocess_env)
    try:
        writer = subprocess.run([sys.executable, "-c", _WRITER, str(db)], env=subprocess_env,
                                capture_output=True, text=True, timeout=300)
    finally:
        read = _stop_reader(reader)
    assert writer.returncode == 0, (writer.returncode, writer.stderr[-2000:])   # was -7 (SIGBUS)
    assert sum(read["reads"].values()) > 0 and read["errors"] == []
    with Storage(db, readonly=True) as store:
        steps = [r["step"] for r in store.load_results(store.get_study("w").study_id)]
    assert steps == list(range(1, int(writer.stdout) + 1))


@pytest.mark.slow
def test_an_asha_study_survives_every_read_path_polled_in_a_tight_loop(tmp_path, subprocess_env):
    from hypersack.workloads.chain import chain_values
    (tmp_path / "s.yaml").write_text(textwrap.dedent("""
        name: r
        trainable: synthetic_chain
        space:
          lr: {type: float, low: 0.05, high: 1.0}
          steps: 9
          sleep_s: 0
          checkpoint_every: 1000
        objective: {metric: loss, mode: min}
        budget: {trials: 60}
        algorithm: {type: asha, min_t: 1, max_t: 9, reduction_factor: 3}
        executor: {workers: 2}
        durability: process
    """))
    db = tmp_path / "hypersack.db"
    reader = _start_reader(db, "r", subprocess_env, dashboard=True)
    try:
        driver = subprocess.run([sys.executable, "-m", "hypersack", "run", "s.yaml", "--progress",
                                 "none"], cwd=tmp_path, env=subprocess_env, capture_output=True,
                                text=True, timeout=600)
    finally:
        read = _stop_reader(reader)
    assert driver.returncode == 0, (driver.returncode, driver.stderr[-2000:])
    assert "Traceback" not in driver.stderr and "Fatal Python error" not in driver.stderr
    # reads of the running study (which path got one first depends on timing), then every
    # path once more on the finished store
    assert read["errors"] == [] and sum(read["reads"].values()) > 0
    assert min(read["final"].values()) == 1, read
    con = sqlite3.connect(db)
    try:
        trials = con.execute("SELECT trial_id, state, config, seed, last_step FROM trials").fetchall()
        assert len(trials) == 60
        for trial_id, state, config, seed, last in trials:
            assert state in ("complete", "pruned")
            rows = con.execute("SELECT step, metrics FROM results WHERE trial_id = ? ORDER BY step",
                               (trial_id,)).fetchall()
            expected = chain_values(json.loads(config), seed)
            assert [s for s, _ in rows] == list(range(1, last + 1))      # each step once
            assert [json.loads(m) for _, m in rows] == expected[:last]
    finally:
        con.close()
