"""Time-sharing in real studies (worker processes on CPU slots): preempted trials resume from
their checkpoints without gaps or replays, every step is stored once, Hermes brings the fast
converging trials (submitted last) to their target before FIFO, and a preempted trial's results
are exactly those of an uninterrupted run (its noise generator resumes from the checkpoint).

That a torch trainable resumes exactly from its checkpoint (model, optimizer, data order) is
tests/workloads/test_digits.py::test_resume_matches_uninterrupted_run, in process: a digits study
under Hermes here cost ~20 s of CPU for the same two facts together."""
from __future__ import annotations

import math
import sqlite3

import pytest

import hypersack

pytestmark = pytest.mark.slow

STEPS = 30
TAUS = [80, 70, 60, 50, 3, 2]          # grid order = submission order: the fast ones come last


def _study(store_path, name, policy, **options):
    space = {"tau": {"type": "categorical", "choices": TAUS}, "steps": STEPS, "sleep": 0.02}
    return hypersack.Study(space, ("loss", "min"), name=name, algorithm="grid", n_trials=len(TAUS),
                           storage=store_path, workers=2,
                           time_sharing={"policy": policy, "quantum_s": 0.15, **options})


def _results_in_order(store_path, name):
    """(trial_id, step, metrics) in the order the driver stored them."""
    import json
    with sqlite3.connect(store_path) as db:
        (study_id,) = db.execute("SELECT study_id FROM studies WHERE name = ?", (name,)).fetchone()
        rows = db.execute("SELECT trial_id, step, metrics FROM results WHERE study_id = ? "
                          "ORDER BY rowid", (study_id,)).fetchall()
    return [(t, s, json.loads(m)) for t, s, m in rows]


def _target_step(tau: float) -> int:
    """First step where the noise-free curve made 90% of its reduction over STEPS steps."""
    goal = 1 - 0.9 * (1 - math.exp(-STEPS / tau))
    return next(s for s in range(1, STEPS + 1) if math.exp(-s / tau) <= goal)


def _check_no_gaps(rows, trial_ids):
    for trial_id in trial_ids:
        mine = [(s, m) for t, s, m in rows if t == trial_id]
        assert [s for s, _ in mine] == list(range(1, STEPS + 1))   # every step, once, in order
        for (_, before), (step, now) in zip(mine, mine[1:]):
            if now["start"] != before["start"]:
                assert now["start"] == step - 1      # resumed from the last stored step


def test_hermes_preempts_resumes_without_gaps_and_reaches_targets_before_fifo(store_path):
    positions, losses = {}, {}
    for policy in ("fifo", "hermes"):
        study = _study(store_path, policy, policy)
        assert study.run("trainables:decaying", progress=False).status == "complete"
        status = study.status()
        assert status["complete"] == len(TAUS)
        rows = _results_in_order(store_path, policy)
        _check_no_gaps(rows, range(len(TAUS)))
        losses[policy] = {(t, s): m["loss"] for t, s, m in rows}
        resumes = {t["trial_id"]: t["resumes"] for t in status["trials"]}
        assert all(t["retries"] == 0 and t["attempts"] == 1 for t in status["trials"])
        if policy == "fifo":
            assert set(resumes.values()) == {0}
        else:
            assert sum(resumes.values()) > 0          # some trials were preempted, then resumed
        tau_of = {t["trial_id"]: t["config"]["tau"] for t in status["trials"]}
        reached = {}
        for index, (t, s, _) in enumerate(rows):
            if tau_of[t] < 10 and t not in reached and s >= _target_step(tau_of[t]):
                reached[t] = index
        positions[policy] = sum(reached.values()) / len(reached)
    assert positions["hermes"] < positions["fifo"]
    assert losses["hermes"] == losses["fifo"]       # the noise generator resumed exactly
