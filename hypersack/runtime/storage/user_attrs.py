"""User attributes (Optuna's ``set_user_attr``): JSON values a trainable (``ctx.set_attr``) or
the caller (``Study.set_attr``) attaches to a trial or to the study.

A trial's attributes are written by its worker to ``user_attrs.json`` in the trial's folder
(atomically, the whole mapping each time); the driver copies them into the store's
``user_attrs`` table when the trial ends (:class:`AttrsImporter`, a loop listener), so a trial
that is killed keeps those it set before its last durable end. Study attributes go to the store
at once (trial id -1). Readers: ``load_attrs``; ``trials_dataframe()`` has ``user_attrs_<key>``
columns, the report's trials table shows them.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from hypersack.core.trial import TrialState
from hypersack.errors import ConfigError, StorageError, UnsafePathError
from hypersack.runtime.worker import checkpoints
from hypersack.validation import check_plain_data

__all__ = ["check_attr", "write_trial_attr", "read_trial_attrs", "save_attrs", "load_attrs",
           "AttrsImporter", "STUDY"]

STUDY = -1                          # the trial id of the study's own attributes
FILE = "user_attrs.json"
MAX_ATTR_BYTES = 64 * 1024          # one value's JSON; far above a note, tag or small table
MAX_ATTRS = 256                     # per trial or study
_MAX_FILE_BYTES = MAX_ATTRS * (MAX_ATTR_BYTES + 256)   # the most a worker writes to FILE
_KEY = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_RUNNING = TrialState.RUNNING
_TABLE = """CREATE TABLE IF NOT EXISTS user_attrs (
    study_id INTEGER NOT NULL, trial_id INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (study_id, trial_id, key))"""


def check_attr(key: Any, value: Any) -> str:
    """The JSON text of ``value`` when ``key`` is a name (letters, digits, ``_ . -``, as a
    column suffix) and ``value`` is JSON data of at most MAX_ATTR_BYTES; ConfigError naming
    ``user_attrs.<key>`` otherwise."""
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise ConfigError("user_attrs (a key)", key, "must be 1-128 letters, digits, '_', '.' or '-'")
    field = f"user_attrs.{key}"
    check_plain_data(field, value)
    text = json.dumps(value)
    if len(text) > MAX_ATTR_BYTES:
        raise ConfigError(field, value, f"must be at most {MAX_ATTR_BYTES} bytes as JSON")
    return text


def read_trial_attrs(trial_dir: Path) -> dict[str, Any]:
    """The attributes a trial's worker wrote ({} when none, or the file is unreadable or
    unsafe: a link, a FIFO, another user's file or one too large, see
    ``checkpoints.read_private``)."""
    try:
        data = json.loads(checkpoints.read_private(Path(trial_dir) / FILE, _MAX_FILE_BYTES))
    except (OSError, ValueError, UnsafePathError):
        return {}
    return data if isinstance(data, dict) else {}


def write_trial_attr(trial_dir: Path, key: str, value: Any) -> None:
    """Worker side: set ``key`` in the trial's attribute file (validated; atomic rename)."""
    check_attr(key, value)
    attrs = read_trial_attrs(trial_dir)
    attrs[key] = value
    if len(attrs) > MAX_ATTRS:
        raise ConfigError("user_attrs", key, f"must hold at most {MAX_ATTRS} keys per trial")
    checkpoints.replace_private(Path(trial_dir) / FILE, json.dumps(attrs).encode())


def save_attrs(store: Any, study_id: int, trial_id: int, attrs: Mapping[str, Any]) -> None:
    """Store ``attrs`` of a trial (or STUDY) in one transaction; a key set before is replaced."""
    rows = [(study_id, trial_id, str(k), check_attr(k, v)) for k, v in attrs.items()]
    if not rows:
        return
    with store.transaction("store user attributes"):
        db = store.connection
        db.execute(_TABLE)
        db.executemany("INSERT OR REPLACE INTO user_attrs VALUES (?,?,?,?)", rows)


def load_attrs(store: Any, study_id: int) -> dict[int, dict[str, Any]]:
    """trial id (STUDY for the study) -> its attributes; {} from a store without the table."""
    db = store.connection
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'user_attrs'"
                  ).fetchone() is None:
        return {}
    out: dict[int, dict[str, Any]] = {}
    for trial_id, key, value in db.execute(
            "SELECT trial_id, key, value FROM user_attrs WHERE study_id = ? ORDER BY trial_id, key",
            (study_id,)):
        out.setdefault(trial_id, {})[key] = json.loads(value)
    return out


class AttrsImporter:
    """A loop listener: copies each trial's attribute file into the store once the trial has
    stopped running (ended, paused or waiting), and every trial's at ``close``."""

    def __init__(self, store: Any, study_id: int, trial_dir: Any, attrs_file: Any = None):
        """``trial_dir(trial_id)``: the trial's folder; ``attrs_file(trial_id)``: the path of its
        attribute file as text (default: built from ``trial_dir``; ``Storage.trial_file`` makes
        it without a Path, which costs more than the ``stat`` of it)."""
        self.store, self.study_id, self.trial_dir = store, study_id, trial_dir
        self._file = attrs_file or (lambda trial_id: os.path.join(trial_dir(trial_id), FILE))
        self._seen: dict[int, float] = {}     # trial -> mtime of the file last imported
        self._imported: dict[int, dict[str, Any]] = {}   # trial -> its attributes, last imported
        # trial -> (state, attempts) when its file was last looked at by ``listen``: a trial's
        # file changes only while it runs, so it is looked at once per stop (one ``stat``)
        self._looked: dict[int, tuple[str, int]] = {}

    def of(self, trial_id: int) -> dict[str, Any]:
        """The attributes trial ``trial_id`` set, as last imported (empty before)."""
        return dict(self._imported.get(trial_id, {}))

    def listen(self, events: Sequence[Any], trials: Mapping[int, Any]) -> None:
        named: set[Any] = {getattr(event, "trial_id", None) for event in events}
        for trial_id in named:
            record = trials.get(trial_id)
            if record is None or record.state is _RUNNING:
                continue
            stop = (record.state.value, record.attempts)
            if self._looked.get(trial_id) != stop:
                self._looked[trial_id] = stop
                self._import(trial_id)

    def close(self, trials: Mapping[int, Any], quiet: bool = False) -> None:
        """Import every launched trial's file (but one looked at since it last stopped);
        ``quiet``: a store fault is dropped."""
        try:
            for trial_id, record in trials.items():
                if record.attempts and self._looked.get(trial_id) != (record.state.value,
                                                                      record.attempts):
                    self._import(trial_id)
        except StorageError:
            if not quiet:
                raise

    def _import(self, trial_id: int) -> None:
        try:
            mtime = os.lstat(self._file(trial_id)).st_mtime
        except OSError:
            return
        if self._seen.get(trial_id) == mtime:
            return
        self._seen[trial_id] = mtime
        attrs = read_trial_attrs(self.trial_dir(trial_id))
        self._imported[trial_id] = dict(attrs)
        try:
            save_attrs(self.store, self.study_id, trial_id, attrs)
        except ConfigError:
            pass                       # a hand-edited file: the worker wrote only valid values
