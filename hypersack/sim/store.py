"""An in-memory study store for simulations: what ``run_loop`` writes, kept in dicts.

It implements the ``Store`` protocol the loop writes to (``save_batch``, ``load_stays``,
``set_status``, ``heartbeat``, ``transaction``: a block that keeps its batches only when it ends
without error). A simulation of
10,000 trials writes hundreds of thousands of results; SQLite with a durable commit per batch
would cost more than the simulation itself, and nothing here needs to survive the process.
``results`` keeps every reported result only when ``keep_results`` is set (the loop hands the
metrics dicts over; they are not copied).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from hypersack.core.stays import Stay
from hypersack.core.trial import TrialRecord

__all__ = ["MemoryStore", "SimStudyRow"]


@dataclass(frozen=True)
class SimStudyRow:
    """The study row the loop needs: ``study_id`` and ``name``."""
    study_id: int
    name: str


class MemoryStore:
    def __init__(self, keep_results: bool = False):
        self.keep_results = keep_results
        self.trials: dict[int, TrialRecord] = {}
        self.results: list[tuple[int, int, dict[str, Any]]] = []
        self.result_count = 0
        self.batches = 0
        self.status: dict[int, str] = {}
        self.controller_state: dict[str, Any] | None = None
        self.stays: dict[tuple[int, int, str, str], Stay] = {}
        self._depth = 0
        self._undo: list[tuple[dict[int, TrialRecord | None], int, int, Any]] = []

    def transaction(self) -> "MemoryStore":
        """A group of batches kept together (``with store.transaction():``): an exception inside
        the outermost block undoes every batch saved in it. Cheap: a simulation turn raises
        nothing."""
        return self

    def __enter__(self) -> "MemoryStore":
        if self._depth == 0:
            self._undo = [({}, self.result_count, len(self.results), self.controller_state)]
        self._depth += 1
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._depth -= 1
        if self._depth == 0 and exc_type is not None:
            self._roll_back()

    def _roll_back(self) -> None:
        before, count, kept, state = self._undo[0]
        for trial_id, snapshot in before.items():
            if snapshot is None:
                self.trials.pop(trial_id, None)
            else:
                self.trials[trial_id] = snapshot
        self.result_count, self.controller_state = count, state
        del self.results[kept:]

    def save_batch(self, study_id: int, trials: Iterable[TrialRecord],
                   results: Iterable[tuple[int, int, dict[str, Any]]],
                   controller_state: Any = None, *, stays: Iterable[Stay] = ()) -> None:
        """Keep a snapshot of each changed trial (the controller mutates its records later).
        The controller state is kept as given: a function that makes it is not called (a
        simulation is never resumed, and building the state every turn is the costliest part)."""
        self.batches += 1
        undo = self._undo[0][0] if self._depth else None
        for record in trials:
            if undo is not None and record.trial_id not in undo:
                undo[record.trial_id] = self.trials.get(record.trial_id)
            snapshot = object.__new__(TrialRecord)     # dataclasses.replace(record), cheaper
            snapshot.__dict__.update(record.__dict__)
            self.trials[record.trial_id] = snapshot
        results = list(results)
        self.result_count += len(results)
        if self.keep_results:
            self.results.extend(results)
        if controller_state is not None:
            self.controller_state = controller_state
        for stay in stays:              # frozen: kept as given
            self.stays[stay.key] = stay

    def load_stays(self, study_id: int) -> list[Stay]:
        """Every stay, by trial, attempt and rank (the one study this store holds)."""
        return sorted(self.stays.values(), key=lambda s: (s.trial_id, s.attempt, s.rank))

    def set_status(self, study_id: int, status: str) -> None:
        self.status[study_id] = status

    def heartbeat(self, study_id: int) -> None:
        """A simulation has no other driver to keep out."""
