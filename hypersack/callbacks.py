"""Callbacks: user code told about trials as the study runs (Optuna's ``callbacks=[fn]``, Ray
Tune's ``Callback``).

``Study(callbacks=[...])`` or YAML ``callbacks: [module:object]`` takes, in any mix:

- a :class:`Callback` (instance, or a subclass, built with no arguments): its hooks
  ``on_trial_start(study, trial)``, ``on_trial_result(study, trial, result)``,
  ``on_trial_complete(study, trial)`` (COMPLETE or PRUNED), ``on_trial_error(study, trial)``
  (FAILED) and ``on_study_end(study)``;
- a plain function ``fn(study, trial)``: called once when each trial ends (complete, pruned or
  failed), as Optuna calls its callbacks.

Contract: hooks run in the driver, on one background thread, in the order the study stored
what they describe (a result is durable before ``on_trial_result`` sees it); never on the loop's
thread, so a slow callback does not slow the study. ``study`` is the ``hypersack.Study`` (its
readers, e.g. ``best_trial()``, work there); ``trial`` a :class:`FrozenTrial`. A callback that
raises is logged once with its traceback (logger ``hypersack.callbacks``), called again for later
events, and never stops the study. Every hook queued has run when ``Study.run`` returns.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from hypersack.errors import ConfigError
from hypersack.validation import check_references, import_reference

__all__ = ["Callback", "FrozenTrial", "resolve_callbacks", "check_callback_names"]


@dataclass(frozen=True)
class FrozenTrial:
    """What a callback sees of a trial, copied when the event was stored. ``state``: running,
    complete, pruned or failed; ``value``: the objective's last reported value (None before a
    report); ``step``: the last stored step; ``metrics``: that step's metrics; ``values``: in
    a multi-objective study, every objective's value (objective order, as Optuna's), else None;
    ``user_attrs``: what the trial set with ``ctx.set_attr`` (Optuna's ``user_attrs``), as of
    its last stop (whole when it ends; what a running trial set since is read at its stop)."""
    trial_id: int
    config: dict[str, Any]
    state: str
    value: float | None = None
    step: int | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    values: list[float] | None = None
    user_attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def number(self) -> int:
        """Optuna's name for the trial id."""
        return self.trial_id

    @property
    def params(self) -> dict[str, Any]:
        """Optuna's name for the config."""
        return self.config


class Callback:
    """Base class of callbacks: override the hooks you need (each does nothing here)."""

    def on_trial_start(self, study: Any, trial: FrozenTrial) -> None:
        """A trial started for the first time in this run (a paused trial that resumes is not
        started again)."""

    def on_trial_result(self, study: Any, trial: FrozenTrial, result: Mapping[str, Any]) -> None:
        """A result was stored; ``result`` is ``{"step": step, **metrics}``."""

    def on_trial_complete(self, study: Any, trial: FrozenTrial) -> None:
        """A trial ended COMPLETE or PRUNED (stopped early: ``trial.state`` says which)."""

    def on_trial_error(self, study: Any, trial: FrozenTrial) -> None:
        """A trial ended FAILED (``trial.error`` says why)."""

    def on_study_end(self, study: Any) -> None:
        """The run ended (complete or interrupted), after every other hook."""


def check_callback_names(names: Any) -> tuple[str, ...]:
    """The YAML ``callbacks`` list: ``module:object`` strings (ConfigError naming the item)."""
    return check_references("callbacks", names)


def resolve_callbacks(items: Sequence[Any], field_name: str = "callbacks") -> list[Any]:
    """Each item as a callback object: a ``module:object`` string imported, a Callback subclass
    built, a Callback or a function kept. ConfigError naming the item otherwise."""
    if isinstance(items, (str, Callback)) or not isinstance(items, (list, tuple)):
        raise ConfigError(field_name, items, "must be a list of callbacks (objects, functions "
                          "or 'module:object' references)")
    out = []
    for i, item in enumerate(items):
        where = f"{field_name}[{i}]"
        obj = import_reference(where, item) if isinstance(item, str) else item
        if isinstance(obj, type) and issubclass(obj, Callback):
            obj = obj()
        if not isinstance(obj, Callback) and not callable(obj):
            raise ConfigError(where, item, "must be a hypersack.Callback, a function "
                              "fn(study, trial), or 'module:object' naming one")
        out.append(obj)
    return out


def hooks_of(callback: Any) -> dict[str, Callable[..., Any]]:
    """The hooks a callback answers, by event kind (``start``, ``result``, ``complete``,
    ``error``, ``study_end``); a plain function answers the two trial ends."""
    if isinstance(callback, Callback):
        return {"start": callback.on_trial_start, "result": callback.on_trial_result,
                "complete": callback.on_trial_complete, "error": callback.on_trial_error,
                "study_end": callback.on_study_end}
    return {"complete": callback, "error": callback}
