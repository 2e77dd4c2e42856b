"""Exact results under faults: a second driver is refused, double Ctrl-C exits 130, a full disk
stops the study with what is stored kept, and random kills of drivers and workers leave every
step stored exactly once with the values of an uninterrupted run."""
from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hypersack.core.controller import Budget, Controller
from hypersack.core.objective import Objective
from hypersack.core.algorithms import make_algorithm
from hypersack.core.space import SearchSpace
from hypersack.core.trial import (FailureCause, Launch, ResultReported, Stop, TrialFailed,
                                  TrialStarted)
from hypersack.errors import StorageFullError
from hypersack.runtime.loop.run import run_loop
from hypersack.runtime.storage.sqlite import Storage

from controller_helpers import on_slots

ROOT = Path(__file__).resolve().parents[2]

STUDY = """
name: {name}
trainable: synthetic_chain
objective: {{metric: loss, mode: min}}
space:
  lr: {{type: float, low: 0.05, high: 1.0}}
  steps: {steps}
  sleep_s: {sleep}
budget: {{trials: {trials}}}
executor: {{workers: 2}}
"""


def _write(tmp_path: Path, name="s", steps=8, sleep=0.2, trials=4) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(STUDY.format(name=name, steps=steps, sleep=sleep, trials=trials))
    return path


def _hs(tmp_path: Path, env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hypersack", *args, "--progress", "none"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _wait_for_results(db: Path, at_least: int, timeout: float = 120.0) -> None:
    import sqlite3
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            con = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
            n = con.execute("SELECT COUNT(*) FROM results").fetchone()[0]
            con.close()
            if n >= at_least:
                return
        except sqlite3.Error:
            pass
        time.sleep(0.05)
    raise AssertionError(f"fewer than {at_least} results after {timeout} s")


def _refused_in_process(tmp_path: Path, capsys, *args: str) -> str:
    """``hypersack ARGS`` through the console entry point in this process (the lease check comes
    before any worker starts: no process start needed); asserts exit code 2, returns stderr."""
    import os
    from hypersack._entry import main
    here = os.getcwd()
    os.chdir(tmp_path)                         # the CLI's default store: ./hypersack.db
    try:
        capsys.readouterr()
        code = main([*args, "--progress", "none"])
    finally:
        os.chdir(here)
    err = capsys.readouterr().err
    assert code == 2, err
    return err


@pytest.mark.slow
def test_a_second_driver_is_refused_then_double_ctrl_c_exits_130_and_resume_is_exact(
        tmp_path, subprocess_env, capsys):
    first = _hs(tmp_path, subprocess_env, "run", str(_write(tmp_path, steps=24, sleep=0.25,
                                                            trials=2)))
    _wait_for_results(tmp_path / "hypersack.db", 2)
    for args in (["resume", "s"], ["run", "s.yaml", "--resume"], ["run", "s.yaml", "--replace"]):
        err = _refused_in_process(tmp_path, capsys, *args)
        assert first.poll() is None, "the first driver ended early: the study is too short here"
        assert "being run by another driver" in err, err
    first.send_signal(signal.SIGINT)
    time.sleep(0.05)
    first.send_signal(signal.SIGINT)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 130 and "hypersack resume s" in err and "Traceback" not in err
    again = _hs(tmp_path, subprocess_env, "resume", "s")
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    _assert_exact(tmp_path / "hypersack.db")


def _assert_exact(db: Path) -> None:
    import json
    import sqlite3
    from hypersack.workloads.chain import chain_values
    con = sqlite3.connect(db)
    trials = con.execute("SELECT trial_id, state, config, seed FROM trials").fetchall()
    assert trials
    for trial_id, state, config, seed in trials:
        assert state == "complete"
        rows = con.execute("SELECT step, metrics FROM results WHERE trial_id = ? ORDER BY step",
                           (trial_id,)).fetchall()
        expected = chain_values(json.loads(config), seed)
        assert [s for s, _ in rows] == list(range(1, len(expected) + 1))
        assert [json.loads(m) for _, m in rows] == expected
    con.close()


@pytest.mark.slow
def test_random_driver_and_worker_kills_leave_exact_results(tmp_path):
    spec = importlib.util.spec_from_file_location("fault_injection", ROOT / "benchmarks" / "driver" / "fault_injection.py")
    faults = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = faults           # dataclasses look their module up while defined
    spec.loader.exec_module(faults)
    # Seed 2: one SIGINT of the driver (graceful stop, then resume) and a worker kill; the
    # double Ctrl-C is the test above, SIGKILLs of the driver are the pipelined tests below.
    outcome = faults.run_faults(driver_kills=1, worker_kills=1, seed=2, trials=4, steps=8,
                                sleep_s=0.05, folder=tmp_path)
    assert outcome.exact, outcome
    assert outcome.steps_lost == 0 and outcome.wrong_values == 0 and outcome.orphans == 0
    assert sum(outcome.driver_kills.values()) == 1 and outcome.worker_kills == 1
    assert not outcome.problems, outcome.problems


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["power", "process"])
def test_driver_kills_lose_no_acknowledged_step_in_either_durability_with_pipelined_reports(
        tmp_path, durability):
    spec = importlib.util.spec_from_file_location("fault_injection", ROOT / "benchmarks" / "driver" / "fault_injection.py")
    faults = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = faults
    spec.loader.exec_module(faults)
    # Seed 7: a worker kill, then a SIGKILL of the driver while reports are in flight.
    outcome = faults.run_faults(driver_kills=1, worker_kills=1, seed=7, trials=2, steps=9,
                                sleep_s=0.05, folder=tmp_path, durability=durability,
                                pipelined=True)
    assert outcome.exact, outcome
    assert outcome.steps_lost == 0 and outcome.steps_duplicated == 0 and outcome.wrong_values == 0
    assert sum(outcome.driver_kills.values()) == 1 and not outcome.problems, outcome.problems
    import sqlite3
    con = sqlite3.connect(tmp_path / "hypersack.db")
    (spec_text,) = con.execute("SELECT spec FROM studies LIMIT 1").fetchone()
    con.close()
    assert f'"durability": "{durability}"' in spec_text


# ---- the loop, with a fake executor: a full disk ------------------------------------------------

class _OneTrialExecutor:
    """Reports step 1 of trial 0, then step 2 (whose storing fails); records shutdown."""

    def __init__(self):
        self.turn, self.killed, self.acks = 0, None, []
        self.submitted = []

    def start(self):
        pass

    def submit(self, command):
        self.submitted.append(command)

    def poll(self, timeout):
        self.turn += 1
        if self.turn == 1:
            return [TrialStarted(0, "cpu"), ResultReported(0, 1, {"loss": 0.5}, "ck1")]
        return [ResultReported(0, self.turn, {"loss": 0.4}, f"ck{self.turn}")]

    def acknowledge(self, trial_ids, free_below):
        self.acks.append(tuple(trial_ids))

    def shutdown(self, kill=False):
        self.killed = kill


class _FillsUp(Storage):
    def __init__(self, path, ok_batches):
        super().__init__(path)
        self.ok = ok_batches

    def save_batch(self, *args, **kwargs):
        if self.ok <= 0:
            raise StorageFullError("The disk holding the study store 'x' is full (0 bytes free)")
        self.ok -= 1
        super().save_batch(*args, **kwargs)


def test_a_full_disk_stops_the_study_keeps_what_is_stored_and_says_how_to_resume(tmp_path):
    space = SearchSpace({"lr": {"type": "float", "low": 0.1, "high": 1.0}})
    objective = Objective("loss", "min")
    controller = Controller(make_algorithm({"type": "random"}, space, objective, 0),
                                     objective, Budget(trials=1), options=on_slots(1))
    executor = _OneTrialExecutor()
    with _FillsUp(tmp_path / "s.db", ok_batches=2) as store:
        row = store.create_study("s", {})
        store.acquire_lease(row)
        with pytest.raises(StorageFullError, match="hypersack resume s"):
            run_loop(controller, executor, store, row)
        assert executor.killed is True
        stored = store.load_results(row.study_id)
        assert [r["step"] for r in stored] == [1]           # step 2 was never acknowledged
        (trial,) = store.load_trials(row.study_id)
        assert trial.checkpoint == "ck1" and trial.checkpoint_step == 1
        assert store.get_study("s").status == "interrupted"
    assert isinstance(executor.submitted[0], Launch)
    assert executor.acks == [(0,)]        # step 1's report, stored; never step 2's


def test_a_worker_that_hits_a_full_disk_halts_the_study_with_its_trial_kept(tmp_path):
    space = SearchSpace({"lr": {"type": "float", "low": 0.1, "high": 1.0}})
    objective = Objective("loss", "min")
    controller = Controller(make_algorithm({"type": "random"}, space, objective, 0),
                                     objective, Budget(trials=1), options=on_slots(1))

    class Full(_OneTrialExecutor):
        def poll(self, timeout):
            self.turn += 1
            return [TrialStarted(0, "cpu"), TrialFailed(0, "OSError: [Errno 28] No space left",
                                                         cause=FailureCause.DISK_FULL)]

    with Storage(tmp_path / "s.db") as store:
        row = store.create_study("s", {})
        with pytest.raises(StorageFullError, match="disk is full"):
            run_loop(controller, Full(), store, row)
        (trial,) = store.load_trials(row.study_id)
        assert trial.state.value == "pending" and trial.retries == 0
        assert store.get_study("s").status == "interrupted"
    assert not any(isinstance(c, Stop) for c in Full().submitted)
