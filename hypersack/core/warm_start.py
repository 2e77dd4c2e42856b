"""Warm start: configs run first (``Study.enqueue``, YAML ``enqueue``: Optuna's
``enqueue_trial``, Ray Tune's ``points_to_evaluate``).

:class:`Enqueued` wraps any algorithm (composition). Its first new trials take the enqueued
configs, in order: each is still asked of the wrapped algorithm (so it belongs to a bracket and a
rung, and is paused or pruned like any other), whose suggested values are replaced by the
enqueued ones; keys an enqueued config leaves out keep the suggested values (a partial config).
The wrapped algorithm is told through ``Algorithm.pin`` that the trial runs another config, so
model-based samplers learn from what really ran. With ``grid``, an enqueued config takes the
place of a grid point. Pure: no I/O, deterministic given the wrapped algorithm.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from hypersack.core.algorithms.base import Algorithm, Decision, Suggestion
from hypersack.core.objective import Value
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError
from hypersack.validation import check_mapping, check_plain_data

__all__ = ["Enqueued", "check_enqueued", "check_config"]

MAX_ENQUEUED = 100_000


def check_config(field: str, config: Any, space: SearchSpace, *, partial: bool) -> dict[str, Any]:
    """``config`` as a dict when each key is a parameter of ``space`` and each value lies in its
    domain (``partial``: keys may be missing); ConfigError naming ``field.key`` and the value."""
    check_mapping(field, config, what="a mapping of parameter names to values")
    for key, value in config.items():
        if key not in space:
            raise ConfigError(f"{field}.{key}", value,
                              f"is not a parameter of the space ({', '.join(space)})")
        check_plain_data(f"{field}.{key}", value)
        if not space[key].contains(value):
            raise ConfigError(f"{field}.{key}", value, f"is outside {space[key].to_dict()}")
    if not partial:
        for key in space:
            if key not in config:
                raise ConfigError(f"{field}.{key}", None, "is missing")
    return dict(config)


def check_enqueued(configs: Any, space: SearchSpace) -> tuple[dict[str, Any], ...]:
    """The ``enqueue`` list: mappings of (some of) the space's parameters to values inside it."""
    if configs is None:
        return ()
    if not isinstance(configs, (list, tuple)) or len(configs) > MAX_ENQUEUED:
        raise ConfigError("enqueue", configs, f"must be a list of at most {MAX_ENQUEUED} configs")
    return tuple(check_config(f"enqueue[{i}]", c, space, partial=True)
                 for i, c in enumerate(configs))


class Enqueued(Algorithm):
    """``inner`` whose first new trials run ``configs`` (see the module docstring). Every other
    call is forwarded; the state is the inner state and how many configs were handed out."""

    def __init__(self, inner: Algorithm, configs: Sequence[Mapping[str, Any]]):
        super().__init__(inner.space, inner.objective, inner.seed)
        self.inner = inner
        self.configs = [dict(c) for c in configs]
        self.taken = 0

    @property
    def exhausted(self) -> bool:
        return self.taken >= len(self.configs) and self.inner.exhausted

    def suggest(self, trial_id: int) -> Suggestion | None:
        suggestion = self.inner.suggest(trial_id)
        if suggestion is None or suggestion.resume is not None or self.taken >= len(self.configs):
            return suggestion
        config = {**suggestion.config, **self.configs[self.taken]}
        self.taken += 1
        self.inner.pin(trial_id, config)
        return Suggestion(config, {**suggestion.info, "enqueued": True})

    def on_result(self, trial_id: int, step: int, metrics: Mapping[str, float]) -> Decision:
        return self.inner.on_result(trial_id, step, metrics)

    def on_complete(self, trial_id: int, value: Value | None, state: str) -> None:
        self.inner.on_complete(trial_id, value, state)

    def observe(self, trial_id: int, config: Mapping[str, Any], value: Value) -> None:
        self.inner.observe(trial_id, config, value)

    def pin(self, trial_id: int, config: Mapping[str, Any]) -> None:
        self.inner.pin(trial_id, config)

    def resources(self, trial_id: int) -> int:
        return self.inner.resources(trial_id)

    def next_decision_step(self, trial_id: int) -> int:
        return self.inner.next_decision_step(trial_id)

    def trial_info(self, trial_id: int) -> Mapping[str, Any]:
        return self.inner.trial_info(trial_id)

    def promote(self) -> int | None:
        return self.inner.promote()

    def use_background(self, runner: Any, wait_s: float = 0.0) -> None:
        self.inner.use_background(runner, wait_s)

    def progress_note(self) -> str | None:
        return self.inner.progress_note()

    # The state is the inner one with one key more, so a store that keeps an algorithm's state
    # in parts (``state_delta``'s ``"parts"``) keeps the wrapped one's the same way.

    def state_dict(self) -> dict[str, Any]:
        return {**self.inner.state_dict(), _TAKEN: self.taken}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.taken = int(state.get(_TAKEN, 0))
        self.inner.load_state_dict({k: v for k, v in state.items() if k != _TAKEN})

    def state_delta(self) -> dict[str, Any] | None:
        delta = self.inner.state_delta()
        return None if delta is None else {**delta, _TAKEN: self.taken}


_TAKEN = "enqueued_taken"
