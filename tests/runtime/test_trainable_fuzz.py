"""Fuzz: trainables that report anything, raise anything, exit, die, start processes and
signal themselves never crash or wedge the driver, never leave a study running, and never leak
a process."""
from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import pytest

import hypersack
from hypersack.runtime.storage import queries
from hypersack.runtime.storage.sqlite import Storage

pytestmark = pytest.mark.slow

STUDIES = 2
TRIALS = 105          # per study: 210 trials in all


def _pgid(pid: int) -> int | None:
    """The process group of a live (not zombie) process, else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if stat[0] in ("Z", "X") else int(stat[2])


def _in_groups(groups: set[int]) -> list[int]:
    """Live processes in any of ``groups``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _pgid(int(entry)) in groups:
            found.append(int(entry))
    return found


def _leaked(pids: set[int], groups: set[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        left = sorted({p for p in pids if _pgid(p) is not None} | set(_in_groups(groups)))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


@pytest.mark.parametrize("seed", range(STUDIES))
def test_fuzzed_trainables_never_crash_wedge_or_leak(tmp_path, seed):
    record = tmp_path / "pids"
    record.touch()
    study = hypersack.Study(
        name=f"fuzz{seed}", space={"case": {"type": "int", "low": 0, "high": 10**9},
                                   "record": str(record)},
        objective=("score", "max"), n_trials=TRIALS, storage=tmp_path / "s.db", workers=4,
        max_retries=0, seed=seed, trial_timeout_s=60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # failed trials are the point here
        run = study.run("fuzz_trainables:fuzzed", progress=False)
    assert run.status == "complete"
    with Storage(tmp_path / "s.db", readonly=True) as store:
        status = queries.status(store, study.name)
        assert status["status"] == store.get_study(study.name).status == "complete"
        assert [s["status"] for s in store.list_studies()] == ["complete"]
    states = {t["state"] for t in status["trials"]}
    assert status["total"] == TRIALS and states <= {"complete", "failed"}
    assert status["complete"] > 0 and status["failed"] > 0
    for t in status["trials"]:
        if t["state"] == "failed":
            assert t["error"]
    # Every worker leads its process group: nothing may be left in any of them, nor any
    # process a trainable started, nor a child of this test process (the driver).
    pids = {int(line) for line in record.read_text().split()}
    assert _leaked(pids, groups=pids) == []
    assert _worker_children(os.getpid()) == []


def _worker_children(pid: int) -> list[int]:
    """Live worker processes that are children of ``pid`` (other tests' children, a Ray
    cluster's say, are not this test's business)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == pid and stat[0] not in ("Z", "X") and b"worker_entry" in command:
            found.append(int(entry))
    return found
