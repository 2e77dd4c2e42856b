"""Embedded SQLite study store (WAL): studies, trials, every reported result, each trial's
stays on devices and the GPUs' utilisation samples (schema 3; an older store gets the new tables
when it is next opened for writing, and reads as having none before).

One file holds many studies. ``save_batch`` writes one batch of changes in one transaction, and
returns only once it is durable, so a result that was acknowledged to a worker survives a kill -9
(and, with ``durability="power"``, a power loss). Readers (``hypersack status``) open the file read-only
(``Storage(path, readonly=True)``) and can read while a study runs; they never create a file.
A new store is created 0600 (its ``-wal`` and ``-shm`` too), as the run folders' files.

Identity: each study has a uuid; its run folder (logs, checkpoints) is
``hypersack-runs/<name>-<uuid12>/`` beside the database, so two stores in one folder, or a study
replaced by another of the same name, never share checkpoint files.

One driver per study: a driver takes the study's lease (``acquire_lease``: driver id, host,
pid, heartbeat) before it runs, renews it with every batch and ``heartbeat``, and gives it back
at the end. A second driver is refused with ``StudyBusyError`` naming the holder; a lease whose
driver died (its pid is gone on this host, or its heartbeat is older than ``LEASE_TTL_S``) is
taken over. A driver whose lease was taken over fails its next write (``LeaseLostError``)
instead of writing beside the new one.

Durability (``Storage(path, durability=...)``, the study's ``durability:``): ``"power"`` (the
default) commits with ``synchronous=FULL``: every commit is fsynced, so what was acknowledged
survives a power loss or an OS crash. ``"process"`` commits with WAL ``synchronous=NORMAL``: the
commit is in the operating system's page cache when ``save_batch`` returns (fsynced at
checkpoints), so it survives any crash of this process (kill -9 included) but not a power loss
or a kernel crash; commits cost no fsync.

Group commit: ``transaction()`` opens one transaction that every write made inside it joins
(``save_batch``, the job history's profiles, other tables written through ``connection``), with
one commit (one fsync) at its end. The study loop holds one per turn: every report that arrived
within the turn's window, the trials' changes, the controller's state and the profiles commit
together, before any of them is acknowledged. ``commits`` counts durable commits (benchmarks).

Faults are errors, not tracebacks: a full disk raises ``StorageFullError`` (with the free
space), a damaged file ``StorageCorruptError`` (naming the file and how to recover it). A study
is resumed or exported only from a file SQLite's quick check finds intact (``verify_integrity``;
``integrity``); ``hypersack check`` runs the full check.

Modules: ``schema`` (tables, ``SCHEMA_VERSION``, ``migrate``), ``lease`` (``StudyLease``: the
driver's lease), ``wal`` (``WalCheckpoints``: the background checkpointer); ``Storage`` here
holds the connection, transactions, ``save_batch`` and the reads, and mixes in the other two.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import sqlite3
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from hypersack.core.algorithms.base import StateParts, StateSnapshot
from hypersack.core.spec import DURABILITY, check_durability
from hypersack.core.stays import Stay, StayOutcome
from hypersack.core.trial import TrialRecord, TrialState
from hypersack.errors import (StorageCorruptError, StorageError, StorageFullError,
                              StudyExistsError, StudyNotFoundError)
# The schema, the lease and the WAL checkpointer live in their own modules; their names stay
# importable from here.
from hypersack.runtime.storage import integrity
from hypersack.runtime.storage.json_text import encoder
from hypersack.runtime.storage.lease import LEASE_TTL_S as LEASE_TTL_S
from hypersack.runtime.storage.lease import StudyLease
from hypersack.runtime.storage.lease import _Holder as _Holder
from hypersack.runtime.storage.lease import _process_start as _process_start
from hypersack.runtime.storage.schema import _MIGRATIONS as _MIGRATIONS
from hypersack.runtime.storage.schema import _SCHEMA as _SCHEMA
from hypersack.runtime.storage.schema import SCHEMA_VERSION as SCHEMA_VERSION
from hypersack.runtime.storage.schema import migrate
from hypersack.runtime.storage.wal import AUTOCHECKPOINT_PAGES as AUTOCHECKPOINT_PAGES
from hypersack.runtime.storage.wal import CHECKPOINT_EVERY_S as CHECKPOINT_EVERY_S
from hypersack.runtime.storage.wal import CHECKPOINT_PAGES as CHECKPOINT_PAGES
from hypersack.runtime.storage.wal import PROCESS_HOLD_PAGES as PROCESS_HOLD_PAGES
from hypersack.runtime.storage.wal import WalCheckpoints
from hypersack.runtime.storage.wal import _WalCheckpointer as _WalCheckpointer
from hypersack.runtime.storage.wal import _WalFrames as _WalFrames

__all__ = ["Storage", "StudyRow", "DEFAULT_STORAGE", "DURABILITY", "LEASE_TTL_S", "check_durability"]

DEFAULT_STORAGE = "hypersack.db"
_TRIAL_FOLDER = "trial-{:05d}"   # a trial's folder in its study's run folder
_PARKED = "\x1freplaced-"    # in the name of a study set aside for its replacement (park_study)
CACHE_KIB = 65536       # the writer's page cache (KiB)
_TRIAL_DIRS = 4096       # trial folders kept by ``Storage.trial_dir``
_INFO_TEXTS = 16384      # trials' info texts kept by ``Storage._info_json``

_TRIAL_COLUMNS = ("trial_id", "state", "config", "seed", "attempts", "retries", "last_step",
                  "metrics", "value", "objective_values", "error", "traceback", "checkpoint",
                  "checkpoint_step",
                  "device", "info", "started_at", "finished_at")

def _upsert(table: str, columns: tuple[str, ...], key: tuple[str, ...]) -> str:
    """An INSERT of ``(study_id, *columns)`` whose row, where one with its ``key`` is stored,
    replaces every other column of that row in place (what ``INSERT OR REPLACE`` stores, but
    without deleting the row and inserting it again at the end of the table with a new rowid:
    one page written instead of two or three, in the WAL and the fsync of every commit)."""
    names = ("study_id", *columns)
    values = f"({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
    if sqlite3.sqlite_version_info < (3, 24, 0):      # no upsert before SQLite 3.24
        return f"INSERT OR REPLACE INTO {table} {values}"
    rest = ", ".join(f"{c} = excluded.{c}" for c in names if c not in key)
    return f"INSERT INTO {table} {values} ON CONFLICT ({', '.join(key)}) DO UPDATE SET {rest}"


# CPython's sqlite3 module (3.11) binds a None that no adapter names only after looking for
# ``PrepareProtocol.__adapt__``, an AttributeError formatted and dropped per value: a trial's row
# holds several NULLs, written at each report. An adapter that hands None back binds the same
# NULL without it: the ``get`` of an empty dict, a C callable (no Python frame per NULL) whose
# answer for any key is None. Process-wide, and the same for every user of sqlite3 (None has no
# ``__conform__``, so nothing else could have adapted it).
_NO_KEYS: dict[None, None] = {}
sqlite3.register_adapter(type(None), _NO_KEYS.get)
_INSERT_TRIAL = _upsert("trials", _TRIAL_COLUMNS, ("study_id", "trial_id"))


@dataclass(frozen=True)
class StudyRow:
    study_id: int
    name: str
    spec: dict[str, Any]
    status: str            # running | complete | interrupted
    controller_state: dict[str, Any] | None
    created_at: float
    updated_at: float
    uuid: str = ""         # the study's identity: keys its run folder


_STAY_COLUMNS = ("trial_id", "attempt", "node", "gpu", "rank", "share", "pack", "start", "end",
                 "outcome")
_INSERT_PART = _upsert("state_parts", ("key", "value"), ("study_id", "key"))
_INSERT_STAY = _upsert("stays", _STAY_COLUMNS, ("study_id", "trial_id", "attempt", "node", "gpu"))
_STUDY_COLUMNS = "study_id, name, spec, status, controller_state, created_at, updated_at, uuid"


class Storage(StudyLease, WalCheckpoints):
    """A study store in one SQLite file. Not thread-safe: use it from one thread.

    ``readonly``: open an existing file for reading only (status, best, export); a missing file
    is a ``StorageError`` and is not created. ``durability``: "power" or "process" (see the
    module docstring; ConfigError otherwise).
    """

    def __init__(self, path: str | Path = DEFAULT_STORAGE, *, readonly: bool = False,
                 durability: str = "power"):
        self.path = Path(path)
        self._artifacts_root: Path | None = None    # resolved once (a launch asks for it)
        self._study_dirs: dict[tuple[str, str], Path] = {}   # (name, uuid) -> study_dir
        self._trial_dirs: dict[tuple[str, str, int], Path] = {}   # (name, uuid, id) -> trial_dir
        self.readonly = readonly
        self.durability = check_durability(durability)
        self.commits = 0                 # durable commits made by this connection
        self._checkpointer: _WalCheckpointer | None = None
        self._depth = 0                  # nesting of transaction()
        self._configs: dict[tuple[int, int], tuple[dict, str]] = {}
        self._metrics: dict[tuple[int, int], tuple[dict, str]] = {}   # see _metrics_json
        self._infos: dict[tuple[int, int], tuple[bytes, str]] = {}    # see _info_json
        self._lease: str | None = None
        self._partless: set[int] = set()  # studies with no state parts stored (this connection)
        self._snapshot: tuple[Any, str] = (None, "")   # the last StateSnapshot written, its text
        if self.path.is_dir():
            raise StorageError(f"The storage path {str(self.path)!r} is a directory, not a database file")
        if readonly and not self.path.exists():
            raise StorageError(f"No study store at {str(self.path)!r} (check the path, or pass "
                               "--storage FILE)")
        folder = self.path.parent
        if not readonly and not folder.is_dir():
            raise StorageError(f"The folder of the storage path {str(self.path)!r} does not "
                               f"exist: {str(folder)!r} (create it, or give another path)")
        if not readonly:
            _create_private(self.path)
        try:
            self._db = _connect(self.path, readonly)
            if not readonly:
                self._prepare()
            else:
                self._db.execute("SELECT 1 FROM studies LIMIT 1").fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc, "open") from None

    def _prepare(self) -> None:
        self._db.execute("PRAGMA journal_mode=WAL")
        self.set_durability(self.durability)
        # The trials and results B-trees of a large study (100,000 trials) stay in memory: with
        # SQLite's default 2 MiB cache every write re-read pages from the OS (cost per report
        # grew with the study). At most this much memory, only as the study grows.
        self._db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        self._db.execute("PRAGMA foreign_keys=ON")
        migrate(self._db)

    def set_durability(self, durability: str) -> None:
        """Change the durability of later commits ("power" or "process")."""
        self.durability = check_durability(durability)
        self._db.execute(f"PRAGMA synchronous={DURABILITY[self.durability]}")

    @property
    def connection(self) -> sqlite3.Connection:
        """The store's connection, for tables of other modules (the job history, ...): their
        writes inside ``transaction()`` commit with it. Use it from the store's thread only."""
        return self._db

    def _error(self, exc: sqlite3.Error, doing: str) -> StorageError:
        """The StorageError that says what ``exc`` means for this file."""
        code = getattr(exc, "sqlite_errorcode", None)
        where = str(self.path)
        if code == sqlite3.SQLITE_FULL or "disk is full" in str(exc):
            free = _free_space(self.path)
            return StorageFullError(f"The disk holding the study store {where!r} is full "
                                    f"({free} free) while trying to {doing}: nothing stored was lost")
        if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) or "malformed" in str(exc) \
                or "not a database" in str(exc):
            return StorageCorruptError(
                f"The study store {where!r} is damaged or is not a HyperSack store ({exc}). "
                + _DAMAGE_HINT.format(where=where))
        if "no such table" in str(exc):
            empty = self.path.exists() and self.path.stat().st_size == 0
            what = ("is an empty file (0 bytes): no study was ever stored in it" if empty
                    else "is not a HyperSack store")
            return StorageError(f"The study store {where!r} {what} ({exc}): cannot {doing} "
                                "(check the path, or pass --storage FILE)")
        if code == sqlite3.SQLITE_READONLY or "readonly" in str(exc):
            return StorageError(f"The study store {where!r} is read-only: cannot {doing}")
        if code == sqlite3.SQLITE_BUSY or "locked" in str(exc):
            return StorageError(f"The study store {where!r} stayed locked by another process "
                                f"for 30 s: cannot {doing}")
        return StorageError(f"The study store {where!r}: cannot {doing} ({exc})")

    def check_integrity(self, full: bool = False) -> list[str]:
        """What SQLite's quick check (``full``: its integrity check, indexes included) finds
        damaged in the file, one line each naming the table; [] when it is intact
        (``integrity.problems``). Reads only."""
        return integrity.problems(self._db, full)

    def verify_integrity(self, doing: str) -> None:
        """The quick check, before a study is resumed or exported (``doing`` says which):
        ``StorageCorruptError`` naming the file and what is damaged, rather than resuming or
        exporting from a damaged file."""
        found = self.check_integrity()
        if found:
            raise _damaged(str(self.path), found, doing)

    def _run(self, doing: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except sqlite3.Error as exc:
            raise self._error(exc, doing) from None

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None
        self._db.close()

    def __enter__(self) -> "Storage":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def artifacts_root(self) -> Path:
        """Folder for trial logs and checkpoints: ``hypersack-runs/`` beside the database file
        (the path is resolved on first use, not at every trial's launch)."""
        if self._artifacts_root is None:
            self._artifacts_root = self.path.resolve().parent / "hypersack-runs"
        return self._artifacts_root

    def study_dir(self, study: StudyRow) -> Path:
        """The study's run folder, keyed by its identity (made once per study: every trial's
        folder is in it)."""
        key = (study.name, study.uuid)
        found = self._study_dirs.get(key)
        if found is None:
            found = self._study_dirs[key] = self.artifacts_root / f"{study.name}-{study.uuid[:12]}"
        return found

    def trial_dir(self, study: StudyRow, trial_id: int) -> Path:
        """The trial's folder in ``study_dir``, made once per trial and kept (the loop asks for
        it at each launch of the trial, and again when it stops: ``AttrsImporter``); the last
        ``_TRIAL_DIRS`` asked are kept."""
        key = (study.name, study.uuid, trial_id)
        found = self._trial_dirs.get(key)
        if found is None:
            if len(self._trial_dirs) >= _TRIAL_DIRS:
                self._trial_dirs.clear()
            found = self._trial_dirs[key] = self.study_dir(study) / _TRIAL_FOLDER.format(trial_id)
        return found

    def trial_file(self, study: StudyRow, trial_id: int, name: str) -> str:
        """``str(trial_dir(study, trial_id) / name)``, without building a Path (the driver
        looks for a file of every trial that stops)."""
        return f"{self.study_dir(study)}{os.sep}{_TRIAL_FOLDER.format(trial_id)}{os.sep}{name}"

    # ---- studies ---------------------------------------------------------------------------

    def create_study(self, name: str, spec: dict[str, Any]) -> StudyRow:
        now = time.time()
        try:
            self._db.execute(
                "INSERT INTO studies (name, spec, status, created_at, updated_at, uuid) "
                "VALUES (?,?,?,?,?,?)", (name, json.dumps(spec), "running", now, now, uuid.uuid4().hex))
        except sqlite3.IntegrityError:
            raise StudyExistsError(name, str(self.path)) from None
        except sqlite3.Error as exc:
            raise self._error(exc, f"create study {name!r}") from None
        return self.get_study(name)

    def get_study(self, name: str) -> StudyRow:
        row = self._run("read the studies", lambda: self._db.execute(
            f"SELECT {_STUDY_COLUMNS} FROM studies WHERE name = ?", (name,)).fetchone())
        if row is None:
            raise StudyNotFoundError(name, str(self.path))
        state = json.loads(row[4]) if row[4] else None
        if state is not None:
            self._add_state_parts(row[0], state)
        return StudyRow(row[0], row[1], json.loads(row[2]), row[3], state, row[5], row[6],
                        row[7] or "")

    def _add_state_parts(self, study_id: int, state: dict[str, Any]) -> None:
        """Put the study's stored algorithm state parts (``_write_state``) back in ``state``
        (``state["algorithm"]["parts"]``, a plain dict), where it has any."""
        algorithm = state.get("algorithm")
        if not isinstance(algorithm, dict):
            return
        try:
            rows = self._db.execute("SELECT key, value FROM state_parts WHERE study_id = ?",
                                    (study_id,)).fetchall()
        except sqlite3.OperationalError:
            return                          # a store from before schema 4, opened read-only
        except sqlite3.Error as exc:
            raise self._error(exc, "read the algorithm's state") from None
        if rows:
            inline = algorithm.get("parts")     # {} where the parts went by key
            algorithm["parts"] = {**(inline if isinstance(inline, dict) else {}),
                                  **{key: json.loads(value) for key, value in rows}}

    def has_study(self, name: str) -> bool:
        return self._run("read the studies", lambda: self._db.execute(
            "SELECT 1 FROM studies WHERE name = ?", (name,)).fetchone()) is not None

    # ---- the driver's lease: acquire_lease, heartbeat, release_lease, shown_status (lease.py) --

    def list_studies(self) -> list[dict[str, Any]]:
        """Every study with its status (``shown_status``) and trial counts by state."""
        rows = self._run("list the studies", lambda: self._db.execute(
            "SELECT study_id, name, status, created_at FROM studies WHERE instr(name, ?) = 0 "
            "ORDER BY study_id", (_PARKED,)).fetchall())
        out = []
        for study_id, name, status, created in rows:
            out.append({"name": name, "status": self.shown_status(study_id, status),
                        "created_at": created, "counts": self.counts(study_id)})
        return out

    def counts(self, study_id: int) -> dict[str, int]:
        counts = {s.value: 0 for s in TrialState}
        rows = self._run("count the trials", lambda: self._db.execute(
            "SELECT state, COUNT(*) FROM trials WHERE study_id = ? GROUP BY state", (study_id,)).fetchall())
        for state, n in rows:
            counts[state] = n
        return counts

    def update_spec(self, study_id: int, spec: dict[str, Any]) -> None:
        self._run("update the study's spec", lambda: self._db.execute(
            "UPDATE studies SET spec = ?, updated_at = ? WHERE study_id = ?",
            (json.dumps(spec), time.time(), study_id)))

    def set_status(self, study_id: int, status: str) -> None:
        self._run(f"mark the study {status}", lambda: self._db.execute(
            "UPDATE studies SET status = ?, updated_at = ? WHERE study_id = ?",
            (status, time.time(), study_id)))

    def delete_study(self, name: str) -> None:
        """Delete the study's rows (not its run folder); refused while a live driver runs it."""
        study = self.get_study(name)

        def delete() -> None:
            with self._transaction():
                self._refuse_if_held(study)
                self._delete_rows(study.study_id)
        self._run(f"delete study {name!r}", delete)

    def _delete_rows(self, study_id: int) -> None:
        for table in ("results", "stays", "samples", "state_parts", "trials", "studies"):
            self._db.execute(f"DELETE FROM {table} WHERE study_id = ?", (study_id,))

    def park_study(self, name: str) -> StudyRow:
        """Move study ``name`` out of the way of a study replacing it (refused while a live
        driver runs it), under a name no user study can have (it holds a control character);
        parked studies are not listed. The replacement then ``delete_study``s the parked row once it has
        started, or ``unpark_study`` puts it back."""
        study = self.get_study(name)
        parked = f"{name}{_PARKED}{study.uuid[:12]}"

        def park() -> None:
            with self._transaction():
                self._refuse_if_held(study)
                self._db.execute("UPDATE studies SET name = ? WHERE study_id = ?",
                                 (parked, study.study_id))
        self._run(f"set study {name!r} aside for its replacement", park)
        return self.get_study(parked)

    def unpark_study(self, parked: StudyRow, name: str) -> None:
        """Give a parked study its name back, deleting the study ``name`` that was to replace
        it (if any: its run never began), in one transaction."""
        def unpark() -> None:
            with self._transaction():
                taken = self._db.execute("SELECT study_id FROM studies WHERE name = ?",
                                         (name,)).fetchone()
                if taken is not None:
                    self._delete_rows(taken[0])
                self._db.execute("UPDATE studies SET name = ? WHERE study_id = ?",
                                 (name, parked.study_id))
        self._run(f"put study {name!r} back", unpark)

    # ---- the journal -----------------------------------------------------------------------

    def save_batch(self, study_id: int, trials: Iterable[TrialRecord],
                   results: Iterable[tuple[int, int, dict[str, Any]]],
                   controller_state: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
                   *, stays: Iterable[Stay] = ()) -> None:
        """Write changed trials, new results ``(trial_id, step, metrics)``, the controller
        state (or a function that makes it) and the trials' opened or closed ``stays`` in one
        durable transaction."""
        if callable(controller_state):
            controller_state = controller_state()
        self._run("store the study's progress",
                  lambda: self._write_batch(study_id, trials, results, controller_state, stays))

    def _write_batch(self, study_id: int, trials: Iterable[TrialRecord],
                     results: Iterable[tuple[int, int, dict[str, Any]]],
                     controller_state: dict[str, Any] | None, stays: Iterable[Stay] = ()) -> None:
        now = time.time()
        with self._transaction():
            if self._lease is not None and controller_state is None:
                self._renew(study_id, now)      # else renewed by the state's own UPDATE
            result_rows, last = [], {}
            for tid, step, m in results:
                text = _metrics_text(m)   # a bad metric (the trial fails on it) as text
                result_rows.append((study_id, tid, step, text, now))
                last[tid] = (step, m, text)
            trial_rows = [(study_id, *_trial_row(t, self._config_json(study_id, t),
                                                 self._metrics_json(study_id, t, last),
                                                 self._info_json(study_id, t)))
                          for t in trials]
            if trial_rows:
                self._db.executemany(_INSERT_TRIAL, trial_rows)
            if result_rows:
                self._db.executemany("INSERT OR REPLACE INTO results VALUES (?,?,?,?,?)", result_rows)
            if controller_state is not None:
                self._write_state(study_id, controller_state, now)
            self._write_stays(study_id, stays)

    def _write_state(self, study_id: int, state: dict[str, Any], now: float) -> None:
        """Inside the batch's transaction: the controller state, with the lease renewed in the
        same UPDATE of the study's row when this driver holds one (LeaseLostError, and the
        batch rolled back, when another driver took it), whose algorithm parts
        (``state["algorithm"]["parts"]``, a ``StateParts`` of those changed since the previous
        batch) go to ``state_parts`` by key (None deletes one) and the rest to the study's row,
        with ``"parts": {}`` where they go; ``get_study`` puts every stored part back. Any other
        state is the whole state: the stored parts go."""
        algorithm = state.get("algorithm")
        parts = algorithm.get("parts") if isinstance(algorithm, dict) else None
        if not isinstance(algorithm, dict) or not isinstance(parts, StateParts):
            if study_id not in self._partless:
                self._db.execute("DELETE FROM state_parts WHERE study_id = ?", (study_id,))
                self._partless.add(study_id)
        else:
            self._partless.discard(study_id)
            state = {**state, "algorithm": {**algorithm, "parts": {}}}
            gone = [(study_id, key) for key, value in parts.items() if value is None]
            if gone:
                self._db.executemany("DELETE FROM state_parts WHERE study_id = ? AND key = ?", gone)
            rows = [(study_id, key, _json(value)) for key, value in parts.items()
                    if value is not None]
            if rows:
                self._db.executemany(_INSERT_PART, rows)
        text = self._state_json(state)
        if self._lease is None:
            self._db.execute(
                "UPDATE studies SET controller_state = ?, updated_at = ? WHERE study_id = ?",
                (text, now, study_id))
            return
        cursor = self._db.execute(
            "UPDATE studies SET controller_state = ?, updated_at = ?, lease_heartbeat = ? "
            "WHERE study_id = ? AND lease_owner = ?",
            (text, now, now, study_id, self._lease))
        if cursor.rowcount != 1:
            raise self._lease_lost()

    def _state_json(self, state: dict[str, Any]) -> str:
        """``json.dumps(state)``, with the text of ``state["algorithm"]`` (its first key) encoded
        once per ``StateSnapshot``: reused while the algorithm hands back the same object."""
        algorithm = state.get("algorithm")
        if type(algorithm) is not StateSnapshot or next(iter(state)) != "algorithm":
            return _json(state)
        held, text = self._snapshot
        if algorithm is not held:
            text = _json(algorithm)
            self._snapshot = (algorithm, text)
        if len(state) == 1:
            return '{"algorithm": ' + text + "}"
        return '{"algorithm": ' + text + ", " + _json(
            {key: value for key, value in state.items() if key != "algorithm"})[1:]

    def _write_stays(self, study_id: int, stays: Iterable[Stay]) -> None:
        """Inside the batch's transaction: each stay replaces the stored one with its key."""
        rows = [(study_id, s.trial_id, s.attempt, s.node, s.gpu, s.rank, s.share,
                 None if s.pack is None else _json(s.pack), s.start, s.end,
                 None if s.outcome is None else s.outcome.value) for s in stays]
        if rows:
            self._db.executemany(_INSERT_STAY, rows)

    def load_stays(self, study_id: int) -> list[Stay]:
        """The study's stays by trial, attempt and rank ([] from a store older than schema 3)."""
        if not self._has_table("stays"):
            return []
        rows = self._run("read the stays", lambda: self._db.execute(
            f"SELECT {', '.join(_STAY_COLUMNS)} FROM stays WHERE study_id = ? "
            "ORDER BY trial_id, attempt, rank", (study_id,)).fetchall())
        return [Stay.from_dict({**dict(zip(_STAY_COLUMNS, r)),
                                "pack": None if r[6] is None else json.loads(r[6])}) for r in rows]

    def end_open_stays(self, study_id: int) -> int:
        """Close the stays a killed driver left open: they end when the study was last written
        (its last batch), as INTERRUPTED. For a resume, before the new driver launches
        anything; returns how many were closed."""
        def close() -> int:
            with self._transaction():
                return self._db.execute(
                    "UPDATE stays SET outcome = ?, end = MAX(start, (SELECT updated_at FROM studies "
                    "WHERE study_id = ?)) WHERE study_id = ? AND end IS NULL",
                    (StayOutcome.INTERRUPTED.value, study_id, study_id)).rowcount
        return self._run("close the stays of the last run", close)

    def save_samples(self, study_id: int, samples: Iterable[tuple[str, str, Any]]) -> None:
        """Store utilisation samples ``(node, gpu, sample)`` (``monitor.Sample``: ``t`` in wall
        seconds) in one transaction; a sample already stored at that time is replaced."""
        rows = [(study_id, node, gpu, s.t, s.utilization, s.memory_used_gb, s.processes)
                for node, gpu, s in samples]
        if not rows:
            return

        def write() -> None:
            with self._transaction():
                self._db.executemany("INSERT OR REPLACE INTO samples VALUES (?,?,?,?,?,?,?)", rows)
        self._run("store the GPU utilisation samples", write)

    def load_samples(self, study_id: int) -> list[dict[str, Any]]:
        """``{"node", "gpu", "t", "utilization", "memory_gb", "processes"}`` by device and time."""
        if not self._has_table("samples"):
            return []
        rows = self._run("read the utilisation samples", lambda: self._db.execute(
            "SELECT node, gpu, t, utilization, memory_gb, processes FROM samples "
            "WHERE study_id = ? ORDER BY node, gpu, t", (study_id,)).fetchall())
        keys = ("node", "gpu", "t", "utilization", "memory_gb", "processes")
        return [dict(zip(keys, r)) for r in rows]

    def load_metric(self, study_id: int, metric: str, since: float | None = None
                    ) -> list[tuple[int, int, float, Any]]:
        """One metric of every result as ``(trial_id, step, reported_at, value)`` by trial then
        step (value None where that result lacks it). SQLite extracts the value, so a report of
        10,000 trials parses no JSON here; Python does where SQLite cannot: a name it cannot
        match (non-ASCII, a quote, a backslash: stored escaped) or a NaN or infinity in any
        result (not JSON to SQLite). ``since``: only results stored after that wall time."""
        where, args = "WHERE study_id = ?", list[Any]([study_id])
        if since is not None:
            where += " AND reported_at > ?"
            args.append(since)
        if metric.isascii() and metric.isprintable() and not {'"', "\\"} & set(metric):
            try:
                return self._db.execute(
                    f"SELECT trial_id, step, reported_at, json_extract(metrics, ?) FROM results "
                    f"{where} ORDER BY trial_id, step", ['$."' + metric + '"', *args]).fetchall()
            except sqlite3.Error as exc:
                if "malformed JSON" not in str(exc):
                    raise self._error(exc, "read the results") from None
        rows = self._run("read the results", lambda: self._db.execute(
            f"SELECT trial_id, step, reported_at, metrics FROM results {where} "
            "ORDER BY trial_id, step", args).fetchall())
        return [(t, s, at, json.loads(m).get(metric)) for t, s, at, m in rows]

    def _has_trial_column(self, name: str) -> bool:
        return any(r[1] == name for r in self._run("read the schema", lambda: self._db.execute(
            "PRAGMA table_info(trials)").fetchall()))

    def _has_table(self, name: str) -> bool:
        return self._run("read the schema", lambda: self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()) is not None

    def transaction(self, doing: str = "store the study's progress") -> "_Transaction":
        """One transaction for every write made inside it (``with store.transaction(): ...``):
        one commit, durable at the end of the outermost block (this store's durability). An
        exception inside rolls everything back; a failed commit raises StorageError (``doing``
        says what was being stored) and leaves nothing of the block written. Nested blocks join
        the outer one."""
        return _Transaction(self, doing)

    def _config_json(self, study_id: int, t: TrialRecord) -> str:
        """``t.config`` as JSON, encoded once per config object (configs are never changed in
        place: a trial's config is its identity)."""
        key = (study_id, t.trial_id)
        hit = self._configs.get(key)
        if hit is None or hit[0] is not t.config:
            hit = self._configs[key] = (t.config, _json(t.config))
        return hit[1]

    def _metrics_json(self, study_id: int, t: TrialRecord,
                      last: dict[int, tuple[int, dict, str]]) -> str:
        """``t.metrics`` as JSON: the text of its result in this batch (``_metrics_json``), or
        the text last written for the same metrics object (a trial's metrics are replaced by a
        new dict at each report, never changed in place: a launch, a start or a finish writes
        the row again with the same object), else encoded."""
        key = (study_id, t.trial_id)
        text = _metrics_json(last, t)
        if text is None:
            hit = self._metrics.get(key)
            if hit is not None and hit[0] is t.metrics:
                return hit[1]
            text = _json(t.metrics)
        self._metrics[key] = (t.metrics, text)
        return text

    def _info_json(self, study_id: int, t: TrialRecord) -> str:
        """The text of the trial's info column (``_info_with_resources``): the text last
        written for it where the info's pickle is the same bytes, else encoded. A trial's info
        is changed in place (a launch, a start), so it is compared by content, not identity;
        equal pickles hold the same types, values, float bits and key order, so they encode to
        the same text, and a pickle is a quarter of the encoding's cost (a float's shortest
        ``repr`` is the dear part: each report wrote the trial's ``began_at`` times again).
        Where the info cannot be pickled it is encoded (and fails as it would)."""
        info = _info_with_resources(t)
        if not info:
            return "{}"
        try:
            probe = pickle.dumps(info, _PICKLE)
        except Exception:
            return _json(info)
        key = (study_id, t.trial_id)
        hit = self._infos.get(key)
        if hit is not None and hit[0] == probe:
            return hit[1]
        text = _json(info)
        if len(self._infos) >= _INFO_TEXTS:
            self._infos.clear()
        self._infos[key] = (probe, text)
        return text

    def _transaction(self) -> "_Transaction":
        return _Transaction(self, "store the study's progress", raw=True)

    def load_trials(self, study_id: int) -> list[TrialRecord]:
        columns = ", ".join(_TRIAL_COLUMNS)
        if self.readonly and not self._has_trial_column("objective_values"):
            columns = columns.replace("objective_values", "NULL")     # a store of schema 1-4
        rows = self._run("read the trials", lambda: self._db.execute(
            f"SELECT {columns} FROM trials WHERE study_id = ? ORDER BY trial_id",
            (study_id,)).fetchall())
        return [_trial_from_row(r) for r in rows]

    def load_results(self, study_id: int, trial_id: int | None = None) -> list[dict[str, Any]]:
        """Results as ``{"trial_id", "step", **metrics}`` ordered by trial then step."""
        query = "SELECT trial_id, step, metrics FROM results WHERE study_id = ?"
        args: tuple = (study_id,)
        if trial_id is not None:
            query += " AND trial_id = ?"
            args += (trial_id,)
        rows = self._run("read the results", lambda: self._db.execute(
            query + " ORDER BY trial_id, step", args).fetchall())
        return [{"trial_id": t, "step": s, **json.loads(m)} for t, s, m in rows]


class _Transaction:
    """See ``Storage.transaction``. ``raw``: sqlite3 errors pass through unmapped (for callers
    that map them with ``Storage._run``)."""

    def __init__(self, store: Storage, doing: str, raw: bool = False):
        self._store, self._doing, self._raw = store, doing, raw

    def __enter__(self) -> "_Transaction":
        store = self._store
        if store._depth == 0:
            if store._checkpointer is not None:
                store._checkpointer.wait_idle()
            try:
                store._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                if self._raw:
                    raise
                raise store._error(exc, self._doing) from None
        store._depth += 1
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        store = self._store
        store._depth -= 1
        if store._depth > 0:
            return
        db = store._db
        if exc_type is not None:
            store._partless.clear()   # a DELETE of parts may be undone
            if db.in_transaction:
                db.execute("ROLLBACK")
            return
        try:
            db.execute("COMMIT")
        except sqlite3.Error as error:
            store._partless.clear()
            if db.in_transaction:     # a failed COMMIT (disk full) leaves it open
                db.execute("ROLLBACK")
            if self._raw:
                raise
            raise store._error(error, self._doing) from None
        store.commits += 1
        if store._checkpointer is not None:
            store._checkpointer.poke()


def _create_private(path: Path) -> None:
    """Create a new store's file empty and 0600 whatever the umask (as the run folders' files),
    before SQLite opens it: SQLite gives the ``-wal`` and ``-shm`` files the database file's
    permissions. An existing file (or link) is left as it is. Closing this descriptor is safe:
    the file is new (``O_EXCL``), so no connection of this process holds a lock on it."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError:
        return                  # it exists, or SQLite says why it cannot be made
    os.close(fd)


def _connect(path: Path, readonly: bool) -> sqlite3.Connection:
    if not readonly:
        return sqlite3.connect(str(path), timeout=30, isolation_level=None)
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        db = sqlite3.connect(uri, uri=True, timeout=30, isolation_level=None)
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return db
    except sqlite3.OperationalError as exc:
        if "unable to open" not in str(exc):
            raise
    # A WAL store in a folder we cannot write (no -shm file to create): read it as it is on
    # disk, unless its WAL holds commits: an immutable connection ignores the WAL, so it would
    # answer from before them (a wrong answer, not an error). No -shm there means no connection
    # is open, so those commits are a closed or killed writer's, waiting for a checkpoint.
    wal = Path(f"{path}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise StorageError(
            f"Cannot read the study store {str(path)!r} read-only: its write-ahead log "
            f"{str(wal)!r} holds commits not yet in the file, and its folder cannot be written "
            "(SQLite needs a -shm file beside it to read them). Open it once where the folder is "
            "writable (its owner running hypersack status copies them in), or copy the store "
            "with its -wal file to a writable folder")
    return sqlite3.connect(uri + "&immutable=1", uri=True, timeout=30, isolation_level=None)


_DAMAGE_HINT = ("See what is damaged with: hypersack check --storage {where}; recover what it "
                "holds with: sqlite3 {where} .recover | sqlite3 recovered.db")


def _damaged(where: str, found: list[str], doing: str) -> StorageCorruptError:
    shown = "; ".join(found[:3]) + (f" (and {len(found) - 3} more)" if len(found) > 3 else "")
    return StorageCorruptError(f"The study store {where!r} is damaged ({shown}): cannot {doing}. "
                               + _DAMAGE_HINT.format(where=where))


def check_file(path: str | Path, full: bool = True) -> list[str]:
    """``Storage.check_integrity`` of the file at ``path`` opened read-only, even one whose
    studies table cannot be read (``Storage`` refuses to open that one); ``StorageError`` when
    there is no such file, ``StorageCorruptError`` when it is not an SQLite database at all."""
    path = Path(path)
    if not path.is_file():
        raise StorageError(f"No study store at {str(path)!r} (check the path, or pass --storage FILE)")
    try:
        db = _connect(path, readonly=True)
    except sqlite3.DatabaseError as exc:
        raise StorageCorruptError(f"The study store {str(path)!r} is not an SQLite database "
                                  f"({exc})") from None
    try:
        return integrity.problems(db, full)
    finally:
        db.close()


def _free_space(path: Path) -> str:
    try:
        free = float(shutil.disk_usage(path.resolve().parent).free)
    except OSError:
        return "unknown space"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if free < 1024 or unit == "TiB":
            return f"{free:.0f} {unit}" if unit == "bytes" else f"{free:.1f} {unit}"
        free /= 1024
    return "unknown space"


#: The text of ``json.dumps(m, default=str)`` for every result's metrics (what cannot be JSON is
#: stored as its text), and of ``json.dumps`` for the rest of a batch, by encoders built once.
_metrics_text = encoder(str)
_json = encoder()


def _metrics_json(last: dict[int, tuple[int, dict, str]], t: TrialRecord) -> str | None:
    """The JSON of ``t.metrics`` when they are those of the trial's result in this batch."""
    hit = last.get(t.trial_id)
    return hit[2] if hit is not None and hit[0] == t.last_step and hit[1] == t.metrics else None


def _trial_row(t: TrialRecord, config_json: str | None = None,
               metrics_json: str | None = None, info_json: str | None = None) -> tuple:
    if info_json is None:
        info = _info_with_resources(t)
        info_json = _json(info) if info else "{}"
    return (t.trial_id, _STATE_TEXT[t.state], config_json or _json(t.config), t.seed, t.attempts,
            t.retries, t.last_step, metrics_json or _json(t.metrics), t.value,
            None if t.values is None else _json(t.values), t.error, t.traceback,
            t.checkpoint, t.checkpoint_step, t.device, info_json, t.started_at, t.finished_at)


_PICKLE = 5      # the protocol of ``_info_json``'s probes (floats as their 8 bytes)
_STATE_TEXT = {state: state.value for state in TrialState}   # (``.value`` is a descriptor call)


def _info_with_resources(t: TrialRecord) -> dict[str, Any]:
    """The trial's info, plus its device count when it grew (kept for resume) and the step of
    its value when that is not what a load assumes (``_default_value_step``: its last step,
    with a value): its objective was missing from later reports, or it is not known. So every
    record loads back as it was saved, and stores written before the key load as before."""
    info = t.info if t.resources == 1 else {**t.info, _RESOURCES_KEY: t.resources}
    if t.value_step != _default_value_step(t.value, t.last_step):
        info = {**info, _VALUE_STEP_KEY: t.value_step}
    return info


def _default_value_step(value: float | None, last_step: int | None) -> int | None:
    return None if value is None else last_step


_RESOURCES_KEY = "_resources"
_VALUE_STEP_KEY = "_value_step"


def _trial_from_row(r: tuple) -> TrialRecord:
    d = dict(zip(_TRIAL_COLUMNS, r))
    info = json.loads(d["info"])
    resources = int(info.pop(_RESOURCES_KEY, 1))
    value_step = info.pop(_VALUE_STEP_KEY, _default_value_step(d["value"], d["last_step"]))
    return TrialRecord(resources=resources,
        trial_id=d["trial_id"], config=json.loads(d["config"]), seed=d["seed"],
        state=TrialState(d["state"]), attempts=d["attempts"], retries=d["retries"],
        last_step=d["last_step"], metrics=json.loads(d["metrics"]), value=d["value"],
        value_step=value_step,
        values=None if d["objective_values"] is None else json.loads(d["objective_values"]),
        error=d["error"], traceback=d["traceback"], checkpoint=d["checkpoint"],
        checkpoint_step=d["checkpoint_step"], device=d["device"], info=info,
        started_at=d["started_at"], finished_at=d["finished_at"])
