"""The store interface the study loop writes to (SQLite ``runtime.storage``; ``sim.store`` in memory)."""
from __future__ import annotations

from typing import Any, Callable, ContextManager, Iterable, Protocol, runtime_checkable

from hypersack.core.stays import Stay
from hypersack.core.trial import TrialRecord

__all__ = ["BackgroundCheckpoints", "LAUNCH_FIELDS", "Store", "StudyRef"]

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
    """Where a running study's journal goes. One driver writes a study at a time.

    ``save_batch`` is the durability point: changed trials (with the checkpoints named in them),
    the results ``(trial_id, step, metrics)`` accepted with them and the controller state are
    written in one transaction that is durable when the call returns; the loop acknowledges
    results to workers only after it. A store that cannot write raises ``StorageError`` and has
    written nothing of the batch. ``stays`` (opened or closed with those trials' changes) are
    written in the same transaction; a stay replaces the stored one with its ``key``. A controller
    state whose ``["algorithm"]["parts"]`` is a ``StateParts`` (``Algorithm.state_delta``) carries
    only the algorithm's parts changed since the previous batch: a store that can be resumed keeps
    parts by key (None removes one) and hands every stored part back there when it loads the
    state (SQLite: the ``state_parts`` table).

    ``transaction()`` is the group commit: every write made inside the block (``save_batch``
    calls, and other tables' writes that share the store's connection) joins one transaction,
    durable when the outermost block ends; ``save_batch`` inside it is durable only then. An
    exception inside the block writes nothing of it.

    Optional: ``background_checkpoints()``, a context manager the loop holds while it runs, for a
    store that can move its housekeeping (SQLite's WAL checkpoints) off the commits.
    """

    def transaction(self) -> ContextManager[Any]: ...

    def save_batch(self, study_id: int, trials: Iterable[TrialRecord],
                   results: Iterable[tuple[int, int, dict[str, Any]]],
                   controller_state: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
                   *, stays: Iterable[Stay] = ()) -> None: ...

    def load_stays(self, study_id: int) -> list[Stay]:
        """The study's stays, by trial, attempt and rank."""

    def set_status(self, study_id: int, status: str) -> None:
        """``status``: running | complete | interrupted."""

    def heartbeat(self, study_id: int) -> None:
        """Renew this driver's hold on the study (no-op for a store without leases)."""


@runtime_checkable
class BackgroundCheckpoints(Protocol):
    """A store that can move its housekeeping (SQLite's WAL checkpoints) off the commits: the
    loop holds ``background_checkpoints()`` while it runs (``isinstance(store,
    BackgroundCheckpoints)``)."""

    def background_checkpoints(self) -> ContextManager[Any]: ...
