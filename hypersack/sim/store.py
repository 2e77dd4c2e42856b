"""An in-memory study store for simulations: what ``run_loop`` writes, kept in dicts.

It implements the ``Store`` protocol the loop writes to (``save_batch``, ``load_stays``,
``set_status``, ``heartbeat``). A simulation of
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

    def save_batch(self, study_id: int, trials: Iterable[TrialRecord],
                   results: Iterable[tuple[int, int, dict[str, Any]]],
                   controller_state: Any = None, *, stays: Iterable[Stay] = ()) -> None:
        """Keep a snapshot of each changed trial (the controller mutates its records later).
        The controller state is kept as given: a function that makes it is not called (a
        simulation is never resumed, and building the state every turn is the costliest part)."""
        self.batches += 1
        for record in trials:
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
