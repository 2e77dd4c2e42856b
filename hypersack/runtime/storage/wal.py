"""The background WAL checkpointer of a writing store.

Contract: inside ``Storage.background_wal_checkpoints()`` (the ``WalCheckpoints`` mixin) no commit
of the store's connection copies the WAL into the database file (SQLite's auto-checkpoint is
off); a daemon thread with its own connection (``_WalCheckpointer``) runs PASSIVE checkpoints,
started after a commit once the WAL holds ``CHECKPOINT_PAGES`` frames (read from the ``-shm``
file through SQLite's own descriptor by ``_WalFrames``: nothing here opens or closes a file of
the database while it is connected), at most once per ``CHECKPOINT_EVERY_S``; while one runs that must copy
the whole WAL, the writer's next transaction waits for it (``wait_idle``). Durability is never
changed by it: a commit is durable when it returns, whoever copies it later, and a checkpoint's
errors are ignored (the WAL keeps everything). On leaving the block the thread is stopped and the
auto-checkpoint (``AUTOCHECKPOINT_PAGES``) is back. The mixin needs ``path``, ``readonly``,
``durability``, ``_db`` and ``_checkpointer`` from the store.
"""
from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from hypersack.core.spec import DURABILITY

AUTOCHECKPOINT_PAGES = 1000   # SQLite's default: a commit that grows the WAL past this copies it
CHECKPOINT_PAGES = AUTOCHECKPOINT_PAGES  # a background checkpoint starts once the WAL holds this many
CHECKPOINT_EVERY_S = 0.25     # ... at most once per this many seconds (a reader in another
                              # process can keep the WAL from restarting, so it stays that full)
PROCESS_HOLD_PAGES = 8 * CHECKPOINT_PAGES  # with ``process``, commits wait for a checkpoint only
                              # once the WAL holds this many frames (see _WalCheckpointer)


class WalCheckpoints:
    """The background checkpoints of ``Storage`` (see the module)."""

    path: Path
    readonly: bool
    durability: str
    _db: sqlite3.Connection
    _checkpointer: _WalCheckpointer | None

    @contextlib.contextmanager
    def background_wal_checkpoints(self) -> Any:
        """While inside, no commit of this connection copies the WAL into the database file
        (SQLite's auto-checkpoint, which stalls the commit that crosses
        ``AUTOCHECKPOINT_PAGES``, 10-40 ms with its fsyncs): a thread with its own connection
        does it (a PASSIVE checkpoint, started by the commit that finds ``CHECKPOINT_PAGES`` in
        the WAL, as SQLite's own trigger),
        beside the loop instead of in front of an ack; the next transaction waits until it is
        done, so that it copies the whole WAL and the WAL restarts from its beginning (see
        ``_WalCheckpointer``). Durability is unchanged: a commit is
        durable when it returns (the WAL; fsynced with ``power``), whoever copies it later, and a
        crash during a checkpoint loses nothing. Afterwards the auto-checkpoint is back."""
        if self.readonly or self._checkpointer is not None:
            yield
            return
        self._db.execute("PRAGMA wal_autocheckpoint=0")
        self._checkpointer = _WalCheckpointer(
            self.path, DURABILITY[self.durability], frames=_WalFrames.find(self.path),
            hold_above=CHECKPOINT_PAGES if self.durability == "power" else PROCESS_HOLD_PAGES)
        try:
            yield
        finally:
            if self._checkpointer is not None:
                self._checkpointer.stop()
                self._checkpointer = None
            with contextlib.suppress(sqlite3.Error):
                self._db.execute(f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT_PAGES}")

    @property
    def wal_checkpoint_count(self) -> int:
        """Checkpoints the background thread made (0 outside ``background_wal_checkpoints``)."""
        return self._checkpointer.done if self._checkpointer is not None else 0


class _WalCheckpointer:
    """A thread copying the WAL into the database file on its own connection (a PASSIVE
    checkpoint), started by the commit after which the WAL holds ``CHECKPOINT_PAGES`` frames
    (SQLite's auto-checkpoint trigger; where ``frames`` cannot tell, by any commit), at most
    once per ``CHECKPOINT_EVERY_S``. When the WAL holds ``hold_above`` frames or more, the
    writer's next transaction waits until that checkpoint is done (``wait_idle``): no frame is
    appended while it runs, so it copies the whole WAL and the writer's next transaction
    restarts the WAL from its start (with commits landing during every checkpoint, the WAL was
    never fully copied and grew without end: 13 MB after a 200-trial study, appended to by
    every commit). With ``power`` every checkpoint is held so (``hold_above`` =
    ``CHECKPOINT_PAGES``: the fsync of each commit costs more while the WAL file grows); with
    ``process`` (no fsync per commit) commits go on beside most checkpoints and wait only once
    the WAL reaches ``PROCESS_HOLD_PAGES`` (a wait costs the checkpoint's fsync of the database
    file, which shows in the ack p99). A checkpoint runs while the loop sends its acks and
    gathers the next events, not inside a commit. Its errors are ignored: the writer's own
    connection checkpoints when it closes, and the WAL keeps everything meanwhile."""

    def __init__(self, path: Path, synchronous: str, clock: Callable[[], float] = time.monotonic,
                 frames: "_WalFrames | None" = None, hold_above: int = CHECKPOINT_PAGES):
        self.done = 0
        self._path, self._synchronous, self._clock = path, synchronous, clock
        self._frames = frames
        self._hold_above = hold_above
        self._hold = False                # the next transaction waits for the running one
        self._last = -math.inf            # when the last checkpoint was started
        self._commits = 0                 # pokes so far (one per commit)
        self._read: tuple[int, int] | None = None   # (commits, frames) at the last read
        self._rate = 0.0                  # the most frames per commit seen between two reads
        self._skip = 0                    # commits whose poke reads no frames
        self._wake = threading.Event()
        self._idle = threading.Event()    # set while no checkpoint is running
        self._idle.set()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hypersack-wal-checkpoints",
                                        daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """After a commit: start a checkpoint if one is due and none is running. The WAL's
        frames are not read after every commit, only where the WAL may have reached
        ``CHECKPOINT_PAGES`` (``_skips``)."""
        self._commits += 1
        if self._skip > 0:
            self._skip -= 1
            return
        if not self._idle.is_set() or self._clock() - self._last < CHECKPOINT_EVERY_S:
            return
        frames = self._frames() if self._frames is not None else None
        if frames is not None and frames < CHECKPOINT_PAGES:
            self._skip = self._skips(frames)
            return
        if not self._thread.is_alive():
            return
        self._last = self._clock()
        self._read = None                 # the WAL may restart: the next growth is measured anew
        self._hold = frames is None or frames >= self._hold_above
        self._idle.clear()
        self._wake.set()

    def _skips(self, frames: int) -> int:
        """After a read of ``frames`` (below ``CHECKPOINT_PAGES``): how many of the next commits
        skip the read, half of those that the fastest growth seen between two reads (frames per
        commit) would take to fill the WAL to ``CHECKPOINT_PAGES``; none before a growth is
        seen. So the reads thin out far from the mark and the checkpoint starts at most one
        commit's frames past it (at that pace; a heuristic, as the frame count is)."""
        read, self._read = self._read, (self._commits, frames)
        if read is not None and frames >= read[1] and self._commits > read[0]:
            self._rate = max(self._rate, (frames - read[1]) / (self._commits - read[0]))
        if self._rate <= 0:
            return 0
        return int((CHECKPOINT_PAGES - frames) / (2 * self._rate))

    def wait_idle(self) -> None:
        """Before a write transaction: wait until a running checkpoint that holds the writer
        is done."""
        if self._hold:
            self._idle.wait()
            self._hold = False

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        self._thread.join()
        self._idle.set()
        if self._frames is not None:
            self._frames.close()

    def _run(self) -> None:
        try:
            db = sqlite3.connect(str(self._path), timeout=30, isolation_level=None)
        except sqlite3.Error:
            self._idle.set()
            return
        try:
            db.execute(f"PRAGMA synchronous={self._synchronous}")
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping.is_set():
                    return
                try:
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                        self.done += 1
                finally:
                    self._idle.set()
        finally:
            self._idle.set()
            db.close()


class _WalFrames:
    """How many frames the WAL holds now: ``mxFrame`` of the wal-index header, 4 bytes at
    offset 16 of the ``-shm`` file in native byte order (https://www.sqlite.org/walformat.html),
    read without a lock: a heuristic for when to checkpoint, never for what is durable. None
    when it cannot be read.

    It reads through SQLite's own descriptor of the ``-shm`` file (``find``), and never opens
    or closes one itself: on POSIX, closing ANY descriptor of a file drops every fcntl lock the
    process holds on it, SQLite's included (https://www.sqlite.org/howtocorrupt.html, 2.2), and
    without its lock on ``-shm`` the next connection of another process (``hypersack status``,
    the dashboard) takes itself for the first one, truncates ``-shm`` and rebuilds it under
    this process's mapping: the driver died of SIGBUS (issue 37). The descriptor is SQLite's:
    it is valid while a connection of this process to the database is open (SQLite keeps one
    per file and process), so ``find`` is called with the store's connection open and the
    reads stop before it closes (``_WalCheckpointer.stop``); ``close`` only forgets it.
    (Python's ``mmap`` would duplicate and later close it: not used.)"""

    def __init__(self, fd: int):
        self._fd: int | None = fd

    @classmethod
    def find(cls, db_path: Path) -> "_WalFrames | None":
        """The reader of SQLite's open ``-shm`` descriptor of ``db_path`` in this process (a
        connection must have read the database in WAL mode), or None where there is none (no
        WAL, an exclusive-mode connection's wal-index in memory) or descriptors cannot be
        listed."""
        try:
            shm = os.stat(f"{db_path}-shm")
            names = os.listdir("/dev/fd")        # this process's descriptors (Linux, macOS)
        except OSError:
            return None
        for name in names:
            try:
                st = os.fstat(int(name))         # fstat of a number: nothing is opened
            except (OSError, ValueError):
                continue
            if (st.st_dev, st.st_ino) == (shm.st_dev, shm.st_ino):
                return cls(int(name))
        return None

    def __call__(self) -> int | None:
        if self._fd is None:
            return None
        try:
            header = os.pread(self._fd, 4, 16)
        except OSError:
            return None
        return int.from_bytes(header, sys.byteorder) if len(header) == 4 else None

    def close(self) -> None:
        """Stop reading; the descriptor is SQLite's, never closed here."""
        self._fd = None
