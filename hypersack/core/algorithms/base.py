"""The interface every search algorithm implements, and the registry algorithms enter by name
(``catalog.make_algorithm`` builds them).

Contract:
- ``suggest(trial_id)`` returns a Suggestion for the new trial ``trial_id``, or None when it has
  nothing to propose right now. ``exhausted`` is True once it will never propose again.
- A Suggestion with ``resume`` set asks the study to resume that PAUSED trial (from its checkpoint,
  never from scratch) instead of creating a new one; ``config`` is then ignored and ``trial_id`` is
  not used up.
- ``on_result(trial_id, step, metrics)`` is called for every reported result, in arrival order,
  and returns a Decision for that trial:
  CONTINUE: go on. STOP: end it early (PRUNED). PAUSE: it stops at this step and its checkpoint is
  kept; state PAUSED until a later ``suggest`` resumes it (or the study ends: it then ends PRUNED).
  GROW: it stops at this step and relaunches from its checkpoint with ``resources(trial_id)``
  devices (data-parallel); it waits PENDING until that many are free.
- ``promote()`` names a PAUSED trial to resume now, or None; the study asks it before ``suggest``.
- ``resources(trial_id)`` is the number of devices the trial's next launch needs (default 1).
- ``next_decision_step(trial_id)``: the first step at which a report of the trial may get a
  decision other than CONTINUE (its next decision point), from the algorithm's state now;
  reports at lower steps surely CONTINUE, so the study may let the trial go on before they are
  stored (pipelining). Default 0: every step is a decision point (always safe).
- ``on_complete(trial_id, value, state)`` is called once per trial when it ends; ``value`` is the
  objective value (None for a failed trial); in a multi-objective study (``objective.is_multi``)
  the tuple of every objective's value. An algorithm that ranks trials by one metric
  (``ranks_by_one_metric``: the multi-fidelity ones) refuses a multi-objective study
  (``refuse_several_objectives``) unless built with ``rank_by`` (``catalog``), which hands it
  that one objective.
- ``state_dict()`` is JSON-serialisable; ``load_state_dict(sd)`` on a freshly built algorithm of
  the same arguments continues exactly where the saved one stood (used by resume).
- ``state_dict()`` may return a ``StateSnapshot``: the same object for as long as the state is
  unchanged, never changed once returned (a store then encodes it once, not with every commit).
- ``state_delta()`` (optional; default None: ``state_dict()`` is stored whole with every commit):
  for a state that grows with the trials, what to store with this commit: the small rest of the
  state with ``"parts"``, a ``StateParts`` of the keyed parts changed since the previous call
  (after ``load_state_dict``: every part). A store keeps parts by key and hands the rest back with
  every stored part under ``"parts"`` (a plain dict); ``load_state_dict`` of that must continue
  exactly as from ``state_dict()``. Each call hands its changes over: call it once per commit.
- ``pin(trial_id, config)``: the study runs the trial just suggested with ``config`` instead
  (an enqueued config, ``core.warm_start``); a model-based algorithm learns from that config.
  ``observe(trial_id, config, value)``: a finished trial this algorithm never suggested, with
  its final objective value (``Study.add_trial``, ``Study.tell``). Defaults: nothing to learn.
- ``use_background(runner)``: the study offers a runner (``runner.submit(fn)`` returns a
  ``concurrent.futures.Future``) for slow, deterministic work such as model fits; an algorithm
  may then return None from ``suggest`` while another of its trials runs ("ask again").
"""
from __future__ import annotations

import enum
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from hypersack.core.objective import Objective, Value
from hypersack.errors import ConfigError
from hypersack.core.space import SearchSpace

__all__ = ["Algorithm", "Decision", "NO_DECISION", "Suggestion", "StateParts", "StateSnapshot",
           "register_algorithm",
           "refuse_several_objectives",
           "algorithm_spec", "registered", "is_optuna_sampler"]


#: ``next_decision_step`` of a trial no report can stop any more (past its last milestone).
NO_DECISION = 2**62


class Decision(enum.Enum):
    """What an algorithm decides for a trial after a result (``Algorithm.on_result``): go on,
    pause it at its checkpoint (it may be promoted later), stop it (pruned), or grow it onto
    more devices (RASDA)."""

    CONTINUE = "continue"
    PAUSE = "pause"
    STOP = "stop"
    GROW = "grow"


@dataclass(frozen=True)
class Suggestion:
    """A new trial an algorithm proposes (``Algorithm.suggest``): its ``config``, annotations
    stored with it (``info``), or the promotion of a paused trial (``resume``: its id)."""

    config: dict[str, Any] = field(default_factory=dict)
    # Free-form annotations an algorithm wants stored with the trial (bracket, rung...).
    info: dict[str, Any] = field(default_factory=dict)
    # Resume this PAUSED trial instead of creating a new one (promotion).
    resume: int | None = None


class StateParts(dict[str, Any]):
    """The keyed parts of an algorithm's state changed since its previous ``state_delta`` (key
    -> JSON value; None: the part is gone): a store writes these by key instead of the whole
    state (see the module contract and ``Store``)."""


class StateSnapshot(dict[str, Any]):
    """A ``state_dict()`` that its algorithm never changes once handed out, and hands out again
    (the very object) for as long as its state is unchanged: a store may keep the JSON text of
    the one it last wrote and reuse it while it is handed the same object (see ``Store``)."""


class Algorithm:
    """Base class; subclasses override what they need. Defaults: never stop a trial early."""

    #: Ranks trials by one metric to stop, pause or promote them (see the module contract).
    ranks_by_one_metric = False

    def __init__(self, space: SearchSpace, objective: Objective, seed: int = 0):
        self.space = space
        self.objective = objective
        self.seed = seed

    @property
    def exhausted(self) -> bool:
        return False

    def suggest(self, trial_id: int) -> Suggestion | None:
        raise NotImplementedError

    def on_result(self, trial_id: int, step: int, metrics: Mapping[str, float]) -> Decision:
        return Decision.CONTINUE

    def on_complete(self, trial_id: int, value: Value | None, state: str) -> None:
        return None

    def resources(self, trial_id: int) -> int:
        return 1

    def pin(self, trial_id: int, config: Mapping[str, Any]) -> None:
        """Trial ``trial_id`` runs ``config``, not the config suggested (see the contract)."""
        return None

    def observe(self, trial_id: int, config: Mapping[str, Any], value: Value) -> None:
        """A finished trial run elsewhere with ``config`` reached ``value`` (see the contract)."""
        return None

    def next_decision_step(self, trial_id: int) -> int:
        """The trial's next decision point (see the module contract); 0: every step is one."""
        return 0

    def trial_info(self, trial_id: int) -> Mapping[str, Any]:
        """Annotations for the trial's next launch (its rung, bracket, pack...), merged into its
        record's ``info``; ``info["pack"]`` asks the controller to fuse only trials of one pack (``core.packs``)."""
        return {}

    def promote(self) -> int | None:
        """A PAUSED trial to resume now (a promotion), or None. Asked before ``suggest`` and also
        once no new trial may be created (trial budget spent), so promotions are never starved."""
        return None

    def use_background(self, runner: Any, wait_s: float = 0.0) -> None:
        """Offered by the study; the default ignores it (everything runs inline)."""
        return None

    def progress_note(self) -> str | None:
        """Where the search stands, for the progress view (Hyperband: "iteration 3, bracket 2
        of 5"), or None: nothing to say."""
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None

    def state_delta(self) -> dict[str, Any] | None:
        """What to store with this commit when the state is kept in parts (see the module
        contract); None: ``state_dict()`` is stored whole."""
        return None


def refuse_several_objectives(objective: Objective, algorithm: str) -> None:
    """ConfigError when ``objective`` has several parts: ``algorithm`` ranks trials by one metric."""
    if objective.is_multi:
        metrics = ", ".join(objective.metrics)
        raise ConfigError("algorithm", algorithm, (
            f"ranks trials by one metric to stop them early, and the study has several "
            f"objectives ({metrics}): set algorithm.rank_by to the one it ranks by "
            f"(e.g. rank_by: {objective.metrics[0]}), or use a sampler that handles several "
            "(random, grid, {type: optuna, sampler: nsga2 | nsga3 | tpe | gp})"))


AlgorithmFactory = Callable[..., Algorithm]
_REGISTRY: dict[str, AlgorithmFactory] = {}


def register_algorithm(name: str, factory: AlgorithmFactory | None = None
                       ) -> AlgorithmFactory | Callable[[AlgorithmFactory], AlgorithmFactory]:
    """Register ``factory(space, objective, seed=..., **options)`` under ``name``; usable as a decorator."""
    def _add(f: AlgorithmFactory) -> AlgorithmFactory:
        _REGISTRY[name] = f
        return f
    return _add(factory) if factory is not None else _add


def registered() -> Mapping[str, AlgorithmFactory]:
    """The factories registered so far, by name (the built-in ones once ``catalog`` is imported)."""
    return _REGISTRY


def is_optuna_sampler(obj: Any) -> bool:
    # Without importing optuna: an object of one of its samplers has it imported already.
    optuna = sys.modules.get("optuna")
    return optuna is not None and isinstance(obj, optuna.samplers.BaseSampler)


def algorithm_spec(algorithm: Any) -> dict[str, Any]:
    """The JSON spec stored for ``algorithm`` (a name, a mapping, an Algorithm or an Optuna
    sampler object; objects are stored by class name, for the record)."""
    if isinstance(algorithm, str):
        return {"type": algorithm}
    if isinstance(algorithm, Mapping):
        return dict(algorithm)
    if is_optuna_sampler(algorithm):
        return {"type": "optuna", "sampler": type(algorithm).__name__}
    return {"type": type(algorithm).__name__}
