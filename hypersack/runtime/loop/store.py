"""The store interface the study loop writes to (SQLite ``runtime.storage.sqlite``; ``runtime.storage.memory`` in memory)."""
from __future__ import annotations

from typing import Any, Callable, ContextManager, Iterable, Protocol, runtime_checkable

from hypersack.core.stays import Stay
from hypersack.core.trial import TrialRecord

__all__ = ["BackgroundWalCheckpoints", "LAUNCH_FIELDS", "Store", "StudyRef"]

#: The ``TrialRecord`` fields of a running launch (its devices, a stop asked and not yet
#: honoured): ``Controller.restore`` resets them, so a store need not keep them.
LAUNCH_FIELDS = ("devices", "stop_reason")


class StudyRef(Protocol):
    """What the loop needs of a stored study: its id in the store and its name."""

    @property
    def study_id(self) -> int: ...

    @property
    def name(self) -> str: ...


class Store(Protocol):
    """Where a running study's journal goes. One driver writes a study at a time. Every store
    passes ``tests/contracts/test_store_contract.py``; where stores may differ, it says so here.

    ``save_batch`` is the durability point: changed trials (with the checkpoints named in them),
    the results ``(trial_id, step, metrics)`` accepted with them and the controller state are
    written in one transaction that is durable when the call returns; the loop acknowledges
    results to workers only after it. A store that cannot write raises ``StorageError`` and has
    written nothing of the batch.

    Trials: each record is a snapshot taken by the call (the controller mutates its records
    afterwards, ``info`` in place) that replaces the trial's stored one whole; every field is
    kept but ``LAUNCH_FIELDS``. Results: the loop hands each ``(trial_id, step)`` over once (the
    controller drops a replayed step), and a trial's results are read back in step order. A
    metric value may be any number (NaN and infinities included: the controller fails the trial
    on them after accepting the result) or whatever else a trainable reported: a store that
    serialises keeps a value that is no JSON value as its ``str`` (never raises on it).

    The controller state is a dict or a function that makes it; None keeps the stored one. A
    resumable store calls the function with the batch (SQLite); a store that is never resumed
    may keep it uncalled (memory). A state whose ``["algorithm"]["parts"]`` is a ``StateParts``
    (``Algorithm.state_delta``) carries only the algorithm's parts changed since the previous
    batch: the store keeps parts by key (None removes one) and, when it loads the state, hands
    every stored part back there as a plain dict (``{}`` when none are left; SQLite: the
    ``state_parts`` table). Any other state is the whole state: stored parts are dropped. An
    algorithm state that is a ``StateSnapshot`` (never changed once handed out) may be encoded
    once and its text reused while the store is handed that same object.
    ``stays`` (opened or closed with those trials' changes) are written in the same
    transaction; a stay replaces the stored one with its ``key``.

    ``transaction()`` is the group commit: every write made inside the block (``save_batch``,
    ``set_status`` and ``heartbeat`` calls, and other tables' writes that share the store's
    connection) joins one transaction, durable when the outermost block ends; ``save_batch``
    inside it is durable only then. An exception out of the outermost block writes nothing of
    it. Nested blocks join the outer one (no savepoints): an exception caught inside the outer
    block undoes nothing.

    Optional: ``BackgroundWalCheckpoints``, for a store that can move its housekeeping (SQLite's
    WAL checkpoints) off the commits.
    """

    def transaction(self) -> ContextManager[Any]: ...

    def save_batch(self, study_id: int, trials: Iterable[TrialRecord],
                   results: Iterable[tuple[int, int, dict[str, Any]]],
                   controller_state: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
                   *, stays: Iterable[Stay] = ()) -> None: ...

    def load_stays(self, study_id: int) -> list[Stay]:
        """The study's stays, by trial, attempt and rank."""

    def set_status(self, study_id: int, status: str) -> None:
        """``status``: running | complete | interrupted; the latest one set is the study's."""

    def heartbeat(self, study_id: int) -> None:
        """Renew this driver's hold on the study; without a lease held (or for a store without
        leases) it writes nothing and raises nothing."""


@runtime_checkable
class BackgroundWalCheckpoints(Protocol):
    """A store that can move its housekeeping (SQLite's WAL checkpoints) off the commits: the
    loop holds ``background_wal_checkpoints()`` while it runs (``isinstance(store,
    BackgroundWalCheckpoints)``)."""

    def background_wal_checkpoints(self) -> ContextManager[Any]: ...
