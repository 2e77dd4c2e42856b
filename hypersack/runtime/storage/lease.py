"""The driver's lease on a study: one driver writes a study at a time.

Contract: ``StudyLease`` is the part of ``Storage`` that holds a study for one driver, in the
``lease_*`` columns of its ``studies`` row. ``acquire_lease`` takes it (driver id, host, pid,
the process's start time, heartbeat) in one transaction, refused with ``StudyBusyError`` naming
the holder while a live driver holds it; ``heartbeat`` (and every ``save_batch``) renews it and
raises ``LeaseLostError`` once another driver took it over; ``release_lease`` gives it back and
never raises. A holder is live while its process runs (same host: the pid exists and started
when the lease says, which sees through pid reuse) or, on another host, while its heartbeat is
younger than ``LEASE_TTL_S``; a dead holder's lease is taken over at once. ``shown_status``
shows a study stored as running that no live driver holds as interrupted. The mixin needs
``path``, ``_db``, ``_lease``, ``_run`` and ``_transaction`` from the store.
"""
from __future__ import annotations

import os
import socket
import sqlite3
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from hypersack.errors import LeaseLostError, StudyBusyError, StudyNotFoundError

if TYPE_CHECKING:
    from hypersack.runtime.storage.sqlite import StudyRow, _Transaction

LEASE_TTL_S = 60.0      # a lease not renewed this long (seconds) belongs to a dead driver


class StudyLease:
    """The lease methods of ``Storage`` (see the module)."""

    path: Path
    _db: sqlite3.Connection
    _lease: str | None

    if TYPE_CHECKING:
        def _run(self, doing: str, fn: Callable[[], Any]) -> Any: ...

        def _transaction(self) -> _Transaction: ...

    def acquire_lease(self, study: StudyRow) -> None:
        """Hold ``study`` for this driver; ``StudyBusyError`` if a live driver holds it."""
        me = _Holder.current()
        owner = uuid.uuid4().hex

        def take() -> None:
            with self._transaction():
                self._refuse_if_held(study)
                self._db.execute(
                    "UPDATE studies SET lease_owner = ?, lease_host = ?, lease_pid = ?, "
                    "lease_process_start = ?, lease_heartbeat = ? WHERE study_id = ?",
                    (owner, me.host, me.pid, me.process_start, time.time(), study.study_id))
        self._run(f"take the lease of study {study.name!r}", take)
        self._lease = owner

    def shown_status(self, study_id: int, status: str) -> str:
        """``status`` as it stands: a study stored as running that no live driver holds (its
        driver was killed, or stopped before its loop began) is interrupted."""
        if status != "running":
            return status
        held = self._run("read the study's lease", lambda: self._live_lease(study_id))
        return "running" if held is not None and held[0] else "interrupted"

    def _live_lease(self, study_id: int) -> tuple[bool, tuple] | None:
        """(whether a live driver holds the lease, the lease's columns); None: no such study."""
        row = self._db.execute(
            "SELECT lease_owner, lease_host, lease_pid, lease_process_start, lease_heartbeat "
            "FROM studies WHERE study_id = ?", (study_id,)).fetchone()
        if row is None:
            return None
        owner, host, pid, start, beat = row
        if owner is None:
            return False, row
        if owner == self._lease:
            return True, row
        return _Holder(host or "", int(pid or 0), start).alive(time.time() - float(beat or 0.0)), row

    def _refuse_if_held(self, study: StudyRow) -> None:
        held = self._live_lease(study.study_id)
        if held is None:
            raise StudyNotFoundError(study.name, str(self.path))
        alive, (owner, host, pid, _, beat) = held
        age = time.time() - float(beat or 0.0)
        if alive and owner != self._lease:
            raise StudyBusyError(
                f"Study {study.name!r} in {self.path} is being run by another driver (pid {pid} on "
                f"{host}, last heartbeat {age:.0f} s ago). Stop that driver first (Ctrl-C); a driver "
                f"that died is taken over at once on this host, or after {LEASE_TTL_S:.0f} s "
                "from another")

    def heartbeat(self, study_id: int) -> None:
        """Renew this driver's lease; ``LeaseLostError`` if another driver took it over."""
        if self._lease is None:
            return
        self._run("renew the study's lease", lambda: self._renew(study_id, time.time()))

    def _renew(self, study_id: int, now: float) -> None:
        cursor = self._db.execute(
            "UPDATE studies SET lease_heartbeat = ? WHERE study_id = ? AND lease_owner = ?",
            (now, study_id, self._lease))
        if cursor.rowcount != 1:
            raise self._lease_lost()

    def _lease_lost(self) -> LeaseLostError:
        """The error of a write that found the lease held by another driver (or no study)."""
        return LeaseLostError(
            f"This driver lost its hold on the study in {self.path}: another driver took it "
            "over (or the study was deleted); stopping without writing")

    def release_lease(self, study_id: int) -> None:
        """Give the lease back (at the end of a run); never raises for a lost lease."""
        if self._lease is None:
            return
        owner, self._lease = self._lease, None
        try:
            self._db.execute("UPDATE studies SET lease_owner = NULL, lease_heartbeat = NULL "
                             "WHERE study_id = ? AND lease_owner = ?", (study_id, owner))
        except sqlite3.Error:
            pass


@dataclass(frozen=True)
class _Holder:
    """A driver process: host, pid and the process's start time (to see through pid reuse)."""
    host: str
    pid: int
    process_start: str | None

    @classmethod
    def current(cls) -> "_Holder":
        return cls(socket.gethostname(), os.getpid(), _process_start(os.getpid()))

    def alive(self, heartbeat_age_s: float) -> bool:
        """On this host: the process still runs. Elsewhere: its heartbeat is recent."""
        if self.host != socket.gethostname():
            return heartbeat_age_s < LEASE_TTL_S
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        start = _process_start(self.pid)
        return self.process_start is None or start is None or start == self.process_start


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), or None where unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None
