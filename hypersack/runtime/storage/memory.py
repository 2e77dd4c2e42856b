"""An in-memory study store for simulations: what ``run_loop`` writes, kept in dicts.

It implements the ``Store`` protocol the loop writes to (``save_batch``, ``load_stays``,
``set_status``, ``heartbeat``, ``transaction``: a block that keeps its writes only when it ends
without error), checked by ``tests/contracts/test_store_contract.py``. Where it differs from a
resumable store: it holds one study, a state function is kept uncalled (``load_state`` calls
it), and a result's metrics are kept as handed over (not copied, nothing converted). A simulation of
10,000 trials writes hundreds of thousands of results; SQLite with a durable commit per batch
would cost more than the simulation itself, and nothing here needs to survive the process.
``results`` keeps every reported result only when ``keep_results`` is set (the loop hands the
metrics dicts over; they are not copied).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from hypersack.core.algorithms.base import StateParts
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
        self.controller_state: dict[str, Any] | Callable[[], dict[str, Any]] | None = None
        self.state_parts: dict[str, Any] = {}     # an algorithm state kept in parts, by key
        self.stays: dict[tuple[int, int, str, str], Stay] = {}
        self._depth = 0
        self._undo: _Undo | None = None

    def transaction(self) -> "MemoryStore":
        """A group of writes kept together (``with store.transaction():``): an exception inside
        the outermost block undoes every write made in it (trials, results, state, stays,
        status). Cheap: it keeps only what the block overwrites."""
        return self

    def __enter__(self) -> "MemoryStore":
        if self._depth == 0:
            self._undo = _Undo(self.result_count, len(self.results), self.controller_state,
                               dict(self.status))
        self._depth += 1
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._depth -= 1
        if self._depth == 0:
            undo, self._undo = self._undo, None
            if exc_type is not None and undo is not None:
                undo.roll_back(self)

    def save_batch(self, study_id: int, trials: Iterable[TrialRecord],
                   results: Iterable[tuple[int, int, dict[str, Any]]],
                   controller_state: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
                   *, stays: Iterable[Stay] = ()) -> None:
        """Keep a snapshot of each changed trial (the controller mutates its records later,
        their ``info`` in place). The controller state is kept as given: a function that makes
        it is not called (a simulation is never resumed, and building the state every turn is
        the costliest part); a dict is copied, its algorithm's ``StateParts`` kept by key."""
        self.batches += 1
        undo = self._undo
        for record in trials:
            if undo is not None and record.trial_id not in undo.trials:
                undo.trials[record.trial_id] = self.trials.get(record.trial_id)
            snapshot = object.__new__(TrialRecord)     # dataclasses.replace(record), cheaper
            snapshot.__dict__.update(record.__dict__)
            snapshot.info = dict(record.info)
            if record.values is not None:
                snapshot.values = list(record.values)
            self.trials[record.trial_id] = snapshot
        results = list(results)
        self.result_count += len(results)
        if self.keep_results:
            self.results.extend(results)
        if controller_state is not None:
            self._keep_state(controller_state)
        for stay in stays:              # frozen: kept as given
            if undo is not None and stay.key not in undo.stays:
                undo.stays[stay.key] = self.stays.get(stay.key)
            self.stays[stay.key] = stay

    def _keep_state(self, state: dict[str, Any] | Callable[[], dict[str, Any]]) -> None:
        if callable(state):
            self.controller_state = state
            return
        if self._undo is not None and self._undo.parts is None:
            self._undo.parts = dict(self.state_parts)
        algorithm = state.get("algorithm")
        parts = algorithm.get("parts") if isinstance(algorithm, dict) else None
        if not isinstance(algorithm, dict) or not isinstance(parts, StateParts):
            self.state_parts.clear()
            self.controller_state = copy.deepcopy(state)
            return
        for key, value in parts.items():
            if value is None:
                self.state_parts.pop(key, None)
            else:
                self.state_parts[key] = copy.deepcopy(value)
        self.controller_state = copy.deepcopy({**state, "algorithm": {**algorithm, "parts": {}}})

    def load_state(self) -> dict[str, Any] | None:
        """The controller state last saved, with every stored part under the algorithm's
        ``"parts"``; a state function is called now."""
        state = self.controller_state
        if callable(state):
            return state()
        state = copy.deepcopy(state)
        if state is not None and self.state_parts:
            algorithm = state.get("algorithm")
            if isinstance(algorithm, dict):
                algorithm["parts"] = copy.deepcopy(self.state_parts)
        return state

    def load_stays(self, study_id: int) -> list[Stay]:
        """Every stay, by trial, attempt and rank (the one study this store holds)."""
        return sorted(self.stays.values(), key=lambda s: (s.trial_id, s.attempt, s.rank))

    def set_status(self, study_id: int, status: str) -> None:
        self.status[study_id] = status

    def heartbeat(self, study_id: int) -> None:
        """A simulation has no other driver to keep out."""


@dataclass
class _Undo:
    """What an open transaction overwrote: enough to put it back."""
    result_count: int
    kept_results: int
    controller_state: Any
    status: dict[int, str]
    trials: dict[int, TrialRecord | None] = field(default_factory=dict)
    stays: dict[tuple[int, int, str, str], Stay | None] = field(default_factory=dict)
    parts: dict[str, Any] | None = None      # all of them, once the block saved a state

    def roll_back(self, store: MemoryStore) -> None:
        for trial_id, snapshot in self.trials.items():
            if snapshot is None:
                store.trials.pop(trial_id, None)
            else:
                store.trials[trial_id] = snapshot
        for key, stay in self.stays.items():
            if stay is None:
                store.stays.pop(key, None)
            else:
                store.stays[key] = stay
        if self.parts is not None:
            store.state_parts = self.parts
        store.result_count, store.controller_state = self.result_count, self.controller_state
        store.status = self.status
        del store.results[self.kept_results:]
