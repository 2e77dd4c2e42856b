"""The driver dies (SIGKILL) or is interrupted (SIGINT) mid-study; resume completes it, losing nothing."""
from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow      # real drivers and workers (still in `make test`)

STUDY = """
name: r
trainable: trainables:gated
objective: {metric: score, mode: max}
space:
  x: {type: float, low: 0.0, high: 1.0}
  steps: 6
  free: 3
  hold: 2
  gate: GATE
budget: {trials: 8}
max_steps: steps
executor: {workers: 2}
"""
# Trials 0-2 run through; later ones hold after step 2 until the gate file exists (or they are
# asked to stop): the signal lands with 3 trials complete and held ones running, at any load.
FREE = 3


def _write_study(tmp_path: Path) -> Path:
    (tmp_path / "study.yaml").write_text(STUDY.replace("GATE", str(tmp_path / "gate")))
    return tmp_path / "gate"


def _held(db: Path) -> int:
    """Running trials held at the gate, their step-2 checkpoint durable."""
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT COUNT(*) FROM trials WHERE state = 'running' "
                           "AND checkpoint IS NOT NULL AND last_step = 2").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


def _start(tmp_path: Path, env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hypersack", *args, "--storage",
                             str(tmp_path / "s.db"), "--progress", "lines"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _complete_trials(db: Path) -> dict[int, list]:
    """Complete trials and their stored results, read straight from SQLite."""
    if not db.exists():
        return {}
    con = sqlite3.connect(db)
    try:
        done = [r[0] for r in con.execute("SELECT trial_id FROM trials WHERE state = 'complete'")]
        return {t: con.execute("SELECT step, metrics FROM results WHERE trial_id = ? ORDER BY step",
                               (t,)).fetchall() for t in done}
    except sqlite3.OperationalError:
        return {}
    finally:
        con.close()


def _wait_for(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def _status(tmp_path: Path, capsys) -> dict:
    """``hypersack status r --json`` through the console entry point, in this process (a read
    command: the CLI's own process is tests/test_cli.py's)."""
    from hypersack._entry import main
    capsys.readouterr()
    code = main(["status", "r", "--json", "--storage", str(tmp_path / "s.db")])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_sigkill_driver_then_resume_keeps_every_completed_trial(tmp_path, subprocess_env, capsys):
    gate = _write_study(tmp_path)
    db = tmp_path / "s.db"
    driver = _start(tmp_path, subprocess_env, "run", str(tmp_path / "study.yaml"))
    _wait_for(lambda: len(_complete_trials(db)) >= FREE and _held(db), timeout=120)
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=10)
    before = _complete_trials(db)
    assert len(before) == FREE
    gate.touch()

    resumed = _start(tmp_path, subprocess_env, "resume", "r")
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err

    after = _complete_trials(db)
    assert len(after) == 8
    for trial_id, results in before.items():     # nothing completed before the kill was lost or redone
        assert after[trial_id] == results
    status = _status(tmp_path, capsys)
    assert status["complete"] == 8 and status["running"] == 0 and status["status"] == "complete"
    restarted = [t for t in status["trials"] if t["metrics"]["starts"] > 1]
    assert restarted
    for t in restarted:   # a trial cut by the kill went on from its checkpoint, not from step 0
        assert t["last_step"] == 6


def test_sigint_stops_at_next_report_and_resume_finishes(tmp_path, subprocess_env, capsys):
    gate = _write_study(tmp_path)
    db = tmp_path / "s.db"
    driver = _start(tmp_path, subprocess_env, "run", str(tmp_path / "study.yaml"))
    _wait_for(lambda: len(_complete_trials(db)) >= FREE and _held(db), timeout=120)
    driver.send_signal(signal.SIGINT)
    out, err = driver.communicate(timeout=60)
    assert driver.returncode == 130
    assert "hypersack resume r" in err
    status = _status(tmp_path, capsys)
    assert status["status"] == "interrupted" and status["running"] == 0
    assert status["complete"] == FREE
    gate.touch()

    resumed = _start(tmp_path, subprocess_env, "resume", "r")
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    status = _status(tmp_path, capsys)
    assert status["complete"] == 8
    # Interrupted trials resumed from their checkpoint: more than one start, and all six steps.
    assert any(t["metrics"]["starts"] > 1 for t in status["trials"])
    assert all(t["last_step"] == 6 for t in status["trials"])
