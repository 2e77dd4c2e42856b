"""A trial's attempts count only failures (the first launch and each retry); resumes (promotion,
preemption, resume after Ctrl-C) are counted apart, in status --json, the export, the DataFrame
and the trial table (issue 39)."""
from __future__ import annotations

import csv
import io
import json

import hypersack
from hypersack.cli import main
from hypersack.core.trial import TrialRecord, TrialState
from hypersack.runtime.storage import queries
from hypersack.runtime.storage.sqlite import Storage

# trial id -> (launches, retries): promoted twice; retried once then resumed; never launched
TRIALS = {0: (3, 0), 1: (3, 1), 2: (0, 0)}


def _store(path):
    spec = hypersack.Study(name="c", space={"x": hypersack.Float(0, 1)}, objective=("y", "max"),
                           n_trials=3, storage=path).spec.to_dict()
    with Storage(path) as store:
        row = store.create_study("c", spec)
        records = [TrialRecord(i, {"x": 0.1}, seed=i, attempts=launches, retries=retries,
                               state=TrialState.COMPLETE if launches else TrialState.PENDING,
                               started_at=1e9 if launches else None,
                               finished_at=1e9 + 5 if launches else None)
                   for i, (launches, retries) in TRIALS.items()]
        store.save_batch(row.study_id, records, [])
        store.set_status(row.study_id, "complete")
    return path


def test_attempts_count_the_first_launch_and_retries_and_resumes_are_apart(tmp_path, capsys):
    db = _store(tmp_path / "s.db")
    want = {0: (1, 2), 1: (2, 1), 2: (0, 0)}          # (attempts, resumes)
    with Storage(db, readonly=True) as store:
        info = queries.status(store, "c")
        rows = list(csv.DictReader(io.StringIO(queries.export(store, "c", "csv"))))
        exported = json.loads(queries.export(store, "c", "json"))["trials"]
    assert {t["trial_id"]: (t["attempts"], t["resumes"]) for t in info["trials"]} == want
    assert {int(r["trial_id"]): (int(r["attempts"]), int(r["resumes"])) for r in rows} == want
    assert {t["trial_id"]: (t["attempts"], t["resumes"]) for t in exported} == want
    frame = hypersack.Study.load("c", db).trials_dataframe()
    assert dict(zip(frame["number"], zip(frame["attempts"], frame["resumes"]))) == want
    assert main(["status", "c", "--storage", str(db)]) == 0
    table = capsys.readouterr().out
    head = next(line for line in table.splitlines() if "tries" in line)
    assert head.split()[:6] == ["trial", "state", "value", "step", "tries", "resumes"]
    row0 = next(line.split() for line in table.splitlines() if line.split()[:1] == ["0"])
    assert row0[4:6] == ["1", "2"]
