"""The study store's SQLite schema and the migration of older stores.

Contract: ``migrate(db)`` brings the file behind ``db`` (a writable connection, outside any
transaction: its ``executescript`` commits an open one) to schema ``SCHEMA_VERSION``: it creates every missing table
(``CREATE TABLE IF NOT EXISTS``, so a store of schema 1-3 gets the tables added since, and reads
as having none of their rows before), adds the ``studies`` columns a schema-1 store lacks
(``_MIGRATIONS``) and the ``trials`` columns a schema-1..4 store lacks (``_TRIAL_MIGRATIONS``:
NULL in older rows, which were single-objective), gives every study without one a uuid, and records the version in ``meta``. It
never drops or rewrites stored rows, and running it again changes nothing. Readers (read-only
connections) never migrate: they find the tables an older store lacks missing, and say so.

Layout: ``stays`` and ``state_parts`` are ``WITHOUT ROWID`` tables where this code creates them
(a new store, or an older one gaining them): their rows are small and keyed, and a rowid table
with a composite key writes each new row twice (the table and its key's index), a page of each
in every commit's WAL. A table an older store already has keeps its layout (nothing is rebuilt):
both answer every statement here alike. ``trials`` and ``results`` stay rowid tables (a trial's
row can be kilobytes, which a rowid table keeps in its page up to ~4 KiB, a ``WITHOUT ROWID``
one only up to ~1 KiB; ``results`` are read in the order they were stored, by rowid).
"""
from __future__ import annotations

import sqlite3
import uuid

SCHEMA_VERSION = 5      # 3: stays and utilisation samples; 4: state_parts (tables added to older stores);
                        # 5: trials.objective_values (multi-objective studies)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS studies (
    study_id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    controller_state TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    uuid TEXT,
    lease_owner TEXT,
    lease_host TEXT,
    lease_pid INTEGER,
    lease_process_start TEXT,
    lease_heartbeat REAL
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
    objective_values TEXT,
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
CREATE TABLE IF NOT EXISTS stays (
    study_id INTEGER NOT NULL,
    trial_id INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    node TEXT NOT NULL,
    gpu TEXT NOT NULL,
    rank INTEGER NOT NULL,
    share REAL NOT NULL,
    pack TEXT,
    start REAL NOT NULL,
    end REAL,
    outcome TEXT,
    PRIMARY KEY (study_id, trial_id, attempt, node, gpu)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS state_parts (
    study_id INTEGER NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (study_id, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS samples (
    study_id INTEGER NOT NULL,
    node TEXT NOT NULL,
    gpu TEXT NOT NULL,
    t REAL NOT NULL,
    utilization REAL,
    memory_gb REAL NOT NULL,
    processes INTEGER NOT NULL,
    PRIMARY KEY (study_id, node, gpu, t)
);
"""

_MIGRATIONS = ("uuid TEXT", "lease_owner TEXT", "lease_host TEXT", "lease_pid INTEGER",
               "lease_process_start TEXT", "lease_heartbeat REAL")
_TRIAL_MIGRATIONS = ("objective_values TEXT",)      # schema 5


def migrate(db: sqlite3.Connection) -> None:
    """Create the missing tables and columns of schema ``SCHEMA_VERSION`` (see the module)."""
    db.executescript(_SCHEMA)
    columns = {r[1] for r in db.execute("PRAGMA table_info(studies)")}
    for column in _MIGRATIONS:          # stores written by schema 1
        if column.split()[0] not in columns:
            db.execute(f"ALTER TABLE studies ADD COLUMN {column}")
    trial_columns = {r[1] for r in db.execute("PRAGMA table_info(trials)")}
    for column in _TRIAL_MIGRATIONS:    # stores written by schema 1-4
        if column.split()[0] not in trial_columns:
            db.execute(f"ALTER TABLE trials ADD COLUMN {column}")
    for (study_id,) in db.execute("SELECT study_id FROM studies WHERE uuid IS NULL").fetchall():
        db.execute("UPDATE studies SET uuid = ? WHERE study_id = ?", (uuid.uuid4().hex, study_id))
    db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
               (str(SCHEMA_VERSION),))
