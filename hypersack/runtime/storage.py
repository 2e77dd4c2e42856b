"""Embedded SQLite study store (WAL, synchronous=FULL): studies, trials, every reported result.

One file holds many studies. The driver is the only writer; ``save_batch`` writes one batch of
changes in one transaction, and returns only once it is durable on disk, so a result that was
acknowledged to a worker survives a kill -9 or a power loss. Readers (``hypersack status``) can
read while a study runs.
"""
from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from hypersack.core.trial import TrialRecord, TrialState
from hypersack.errors import StorageError, StudyNotFoundError

__all__ = ["Storage", "StudyRow", "DEFAULT_STORAGE"]

DEFAULT_STORAGE = "hypersack.db"
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS studies (
    study_id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    controller_state TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS trials (
    study_id INTEGER NOT NULL REFERENCES studies(study_id) ON DELETE CASCADE,
    trial_id INTEGER NOT NULL,
    state TEXT NOT NULL,
    config TEXT NOT NULL,
    seed INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    retries INTEGER NOT NULL,
    last_step INTEGER,
    metrics TEXT NOT NULL,
    value REAL,
    error TEXT,
    traceback TEXT,
    checkpoint TEXT,
    checkpoint_step INTEGER,
    device TEXT,
    info TEXT NOT NULL,
    started_at REAL,
    finished_at REAL,
    PRIMARY KEY (study_id, trial_id)
);
CREATE TABLE IF NOT EXISTS results (
    study_id INTEGER NOT NULL,
    trial_id INTEGER NOT NULL,
    step INTEGER NOT NULL,
    metrics TEXT NOT NULL,
    reported_at REAL NOT NULL,
    PRIMARY KEY (study_id, trial_id, step)
);
"""

_TRIAL_COLUMNS = ("trial_id", "state", "config", "seed", "attempts", "retries", "last_step",
                  "metrics", "value", "error", "traceback", "checkpoint", "checkpoint_step",
                  "device", "info", "started_at", "finished_at")


@dataclass(frozen=True)
class StudyRow:
    study_id: int
    name: str
    spec: dict[str, Any]
    status: str            # running | complete | interrupted
    controller_state: dict[str, Any] | None
    created_at: float
    updated_at: float


class Storage:
    """A study store in one SQLite file. Not thread-safe: use it from one thread."""

    def __init__(self, path: str | Path = DEFAULT_STORAGE):
        self.path = Path(path)
        if self.path.is_dir():
            raise StorageError(f"The storage path {str(self.path)!r} is a directory, not a database file")
        try:
            self._db = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(_SCHEMA)
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                             (str(SCHEMA_VERSION),))
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"Cannot open the study store {str(self.path)!r}: {exc}") from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Storage":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def artifacts_root(self) -> Path:
        """Folder for trial logs and checkpoints: ``hypersack-runs/`` beside the database file."""
        return self.path.resolve().parent / "hypersack-runs"

    def trial_dir(self, study: str, trial_id: int) -> Path:
        return self.artifacts_root / study / f"trial-{trial_id:05d}"

    # ---- studies ---------------------------------------------------------------------------

    def create_study(self, name: str, spec: dict[str, Any]) -> StudyRow:
        now = time.time()
        try:
            self._db.execute(
                "INSERT INTO studies (name, spec, status, created_at, updated_at) VALUES (?,?,?,?,?)",
                (name, json.dumps(spec), "running", now, now))
        except sqlite3.IntegrityError:
            raise StorageError(
                f"A study named {name!r} already exists in {self.path}: resume it with "
                f"'hypersack resume {name}', or pick another name") from None
        return self.get_study(name)

    def get_study(self, name: str) -> StudyRow:
        row = self._db.execute(
            "SELECT study_id, name, spec, status, controller_state, created_at, updated_at "
            "FROM studies WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise StudyNotFoundError(name, str(self.path))
        return StudyRow(row[0], row[1], json.loads(row[2]), row[3],
                        json.loads(row[4]) if row[4] else None, row[5], row[6])

    def has_study(self, name: str) -> bool:
        return self._db.execute("SELECT 1 FROM studies WHERE name = ?", (name,)).fetchone() is not None

    def list_studies(self) -> list[dict[str, Any]]:
        """Every study with its status and trial counts by state."""
        rows = self._db.execute("SELECT study_id, name, status, created_at FROM studies ORDER BY study_id")
        out = []
        for study_id, name, status, created in rows.fetchall():
            out.append({"name": name, "status": status, "created_at": created,
                        "counts": self.counts(study_id)})
        return out

    def counts(self, study_id: int) -> dict[str, int]:
        counts = {s.value: 0 for s in TrialState}
        for state, n in self._db.execute(
                "SELECT state, COUNT(*) FROM trials WHERE study_id = ? GROUP BY state", (study_id,)):
            counts[state] = n
        return counts

    def update_spec(self, study_id: int, spec: dict[str, Any]) -> None:
        self._db.execute("UPDATE studies SET spec = ?, updated_at = ? WHERE study_id = ?",
                         (json.dumps(spec), time.time(), study_id))

    def set_status(self, study_id: int, status: str) -> None:
        self._db.execute("UPDATE studies SET status = ?, updated_at = ? WHERE study_id = ?",
                         (status, time.time(), study_id))

    def delete_study(self, name: str) -> None:
        study = self.get_study(name)
        with self._transaction():
            self._db.execute("DELETE FROM results WHERE study_id = ?", (study.study_id,))
            self._db.execute("DELETE FROM trials WHERE study_id = ?", (study.study_id,))
            self._db.execute("DELETE FROM studies WHERE study_id = ?", (study.study_id,))

    # ---- the journal -----------------------------------------------------------------------

    def save_batch(self, study_id: int, trials: Iterable[TrialRecord],
                   results: Iterable[tuple[int, int, dict[str, Any]]],
                   controller_state: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
                   ) -> None:
        """Write changed trials, new results ``(trial_id, step, metrics)`` and the controller
        state (or a function that makes it) in one durable transaction."""
        if callable(controller_state):
            controller_state = controller_state()
        now = time.time()
        with self._transaction():
            self._db.executemany(
                f"INSERT OR REPLACE INTO trials (study_id, {', '.join(_TRIAL_COLUMNS)}) "
                f"VALUES ({', '.join('?' * (len(_TRIAL_COLUMNS) + 1))})",
                [(study_id, *_trial_row(t)) for t in trials])
            self._db.executemany(
                "INSERT OR REPLACE INTO results VALUES (?,?,?,?,?)",
                [(study_id, tid, step, json.dumps(m), now) for tid, step, m in results])
            if controller_state is not None:
                self._db.execute(
                    "UPDATE studies SET controller_state = ?, updated_at = ? WHERE study_id = ?",
                    (json.dumps(controller_state), now, study_id))

    def _transaction(self):
        db = self._db

        class _Tx:
            def __enter__(self):
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self, exc_type, exc, tb):
                db.execute("COMMIT" if exc_type is None else "ROLLBACK")
                return False
        return _Tx()

    def load_trials(self, study_id: int) -> list[TrialRecord]:
        rows = self._db.execute(
            f"SELECT {', '.join(_TRIAL_COLUMNS)} FROM trials WHERE study_id = ? ORDER BY trial_id",
            (study_id,)).fetchall()
        return [_trial_from_row(r) for r in rows]

    def load_results(self, study_id: int, trial_id: int | None = None) -> list[dict[str, Any]]:
        """Results as ``{"trial_id", "step", **metrics}`` ordered by trial then step."""
        query = "SELECT trial_id, step, metrics FROM results WHERE study_id = ?"
        args: tuple = (study_id,)
        if trial_id is not None:
            query += " AND trial_id = ?"
            args += (trial_id,)
        rows = self._db.execute(query + " ORDER BY trial_id, step", args).fetchall()
        return [{"trial_id": t, "step": s, **json.loads(m)} for t, s, m in rows]


def _trial_row(t: TrialRecord) -> tuple:
    return (t.trial_id, t.state.value, json.dumps(t.config), t.seed, t.attempts, t.retries,
            t.last_step, json.dumps(t.metrics), t.value, t.error, t.traceback, t.checkpoint,
            t.checkpoint_step, t.device, json.dumps(_info_with_resources(t)), t.started_at,
            t.finished_at)


def _info_with_resources(t: TrialRecord) -> dict[str, Any]:
    """The trial's info, plus its device count when it grew (kept for resume)."""
    return t.info if t.resources == 1 else {**t.info, _RESOURCES_KEY: t.resources}


_RESOURCES_KEY = "_resources"


def _trial_from_row(r: tuple) -> TrialRecord:
    d = dict(zip(_TRIAL_COLUMNS, r))
    info = json.loads(d["info"])
    resources = int(info.pop(_RESOURCES_KEY, 1))
    return TrialRecord(resources=resources,
        trial_id=d["trial_id"], config=json.loads(d["config"]), seed=d["seed"],
        state=TrialState(d["state"]), attempts=d["attempts"], retries=d["retries"],
        last_step=d["last_step"], metrics=json.loads(d["metrics"]), value=d["value"],
        error=d["error"], traceback=d["traceback"], checkpoint=d["checkpoint"],
        checkpoint_step=d["checkpoint_step"], device=d["device"], info=info,
        started_at=d["started_at"], finished_at=d["finished_at"])
