"""The study specification: what a study.yaml or the Python API declares, validated in one place.

``StudySpec.from_dict`` raises ConfigError naming the dotted field (``executor.workers``) and the
value; ``to_dict`` is the JSON form kept in the study store (resume rebuilds the study from it).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from hypersack.core.controller import Budget
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError

__all__ = ["StudySpec", "ExecutorOptions", "Resources", "PackOptions", "EXECUTION_MODES",
           "check_resumable"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_fields(section: str, given: Mapping[str, Any], allowed: set[str],
                 root: str = "study") -> None:
    """ConfigError unless ``given`` is a mapping whose keys are all in ``allowed``; ``section``
    is its dotted path ("" at the top, which errors call ``root``)."""
    if not isinstance(given, Mapping):
        raise ConfigError(section or root, given, "must be a mapping")
    for key in given:
        if key not in allowed:
            prefix = f"{section}." if section else ""
            raise ConfigError(f"{prefix}{key}", given[key],
                              f"is not a known field (known: {', '.join(sorted(allowed))})")


@dataclass(frozen=True)
class ExecutorOptions:
    """``workers``: parallel trial slots (None: one per GPU, else one per CPU core).
    ``max_retries``: relaunches of a trial whose worker process died.
    ``trial_timeout_s``: a trial running longer is killed and FAILED."""
    workers: int | None = None
    max_retries: int = 2
    trial_timeout_s: float | None = None

    _FIELDS = {"workers", "max_retries", "trial_timeout_s"}

    def __post_init__(self) -> None:
        if self.workers is not None and (isinstance(self.workers, bool) or not isinstance(self.workers, int)
                                         or self.workers < 1):
            raise ConfigError("executor.workers", self.workers, "must be an integer >= 1")
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ConfigError("executor.max_retries", self.max_retries, "must be an integer >= 0")
        t = self.trial_timeout_s
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or t <= 0):
            raise ConfigError("executor.trial_timeout_s", t, "must be a number of seconds > 0")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "ExecutorOptions":
        d = d or {}
        check_fields("executor", d, cls._FIELDS)
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        return {"workers": self.workers, "max_retries": self.max_retries,
                "trial_timeout_s": self.trial_timeout_s}


@dataclass(frozen=True)
class Resources:
    """A trial's demand on each device it uses, when no profile says otherwise: ``compute`` in
    percent of one device (100: all of it), ``memory_gb`` of device memory, ``cpus`` host cores."""
    compute: float = 100.0
    memory_gb: float = 0.0
    cpus: int = 1

    _FIELDS = {"compute", "memory_gb", "cpus"}

    def __post_init__(self) -> None:
        for name, low in (("compute", 0.0), ("memory_gb", 0.0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < low:
                raise ConfigError(f"resources.{name}", v, f"must be a finite number >= {low:g}")
        if self.compute <= 0:
            raise ConfigError("resources.compute", self.compute, "must be > 0 (percent of a device)")
        if isinstance(self.cpus, bool) or not isinstance(self.cpus, int) or self.cpus < 0:
            raise ConfigError("resources.cpus", self.cpus, "must be an integer >= 0")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "Resources":
        d = d or {}
        check_fields("resources", d, cls._FIELDS)
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        return {"compute": self.compute, "memory_gb": self.memory_gb, "cpus": self.cpus}


EXECUTION_MODES = ("separate", "fused", "auto")


@dataclass(frozen=True)
class PackOptions:
    """Fused packs (``execution: fused | auto``): ``max_members`` trials at most in one pack
    (one worker process, one fused model); on CUDA a pack may take fewer, as measured memory
    allows."""
    max_members: int = 8

    _FIELDS = {"max_members"}

    def __post_init__(self) -> None:
        m = self.max_members
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise ConfigError("pack.max_members", m, "must be an integer >= 1")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "PackOptions":
        d = d or {}
        check_fields("pack", d, cls._FIELDS)
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        return {"max_members": self.max_members}


def _check_execution(mode: Any) -> None:
    if mode not in EXECUTION_MODES:
        raise ConfigError("execution", mode, f"must be one of {', '.join(EXECUTION_MODES)}")


def _check_oversubscription(value: Any) -> None:
    if value is None:
        return
    items = value.items() if isinstance(value, Mapping) else [(None, value)]
    for arch, r in items:
        field_name = "oversubscription" if arch is None else f"oversubscription.{arch}"
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r < 1:
            raise ConfigError(field_name, r, "must be a number >= 1 (1: no oversubscription)")


def _check_placement(value: Any) -> None:
    """A policy name, or ``{policy: NAME, OPTION: VALUE}`` (``placement.parse_placement``)."""
    from hypersack.core.placement import parse_placement
    parse_placement(value)


@dataclass(frozen=True)
class StudySpec:
    name: str
    space: SearchSpace
    objective: Objective
    budget: Budget
    trainable: str | None = None          # "module:function" or a built-in name; None: passed in Python
    algorithm: dict[str, Any] = field(default_factory=lambda: {"type": "random"})
    seed: int = 0
    executor: ExecutorOptions = ExecutorOptions()
    max_steps: int | str | None = None    # steps per trial (int) or the config key holding it
    description: str = ""
    placement: Any = "wfd"                # policy name, or {policy: hay, w_frag: .., w_entire: ..}
    # Oversubscription ratio r: one number for every device, or per architecture ({A100: 3}).
    # None: the inventory's defaults (profiled per GPU architecture; 1 for CPU slots).
    oversubscription: float | dict[str, float] | None = None
    resources: Resources = Resources()    # a trial's demand when no profile says otherwise
    # separate: one process per trial; fused: every trial in a pack of its fusable task; auto:
    # the trials the task accepts fuse, the others run separately.
    execution: str = "separate"
    pack: PackOptions = PackOptions()

    _FIELDS = {"name", "space", "objective", "budget", "trainable", "algorithm", "seed", "executor",
               "max_steps", "description", "storage", "placement", "oversubscription", "resources",
               "execution", "pack"}

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ConfigError("name", self.name,
                              "must be 1-128 letters, digits, '_', '.' or '-', starting with a letter or digit")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError("seed", self.seed, "must be an integer >= 0")
        if self.trainable is not None and not isinstance(self.trainable, str):
            raise ConfigError("trainable", self.trainable, "must be 'module:function' or a built-in name")
        ms = self.max_steps
        if ms is not None and not ((isinstance(ms, int) and not isinstance(ms, bool) and ms >= 1)
                                   or (isinstance(ms, str) and ms in self.space)):
            raise ConfigError("max_steps", ms, "must be an integer >= 1 or the name of a space parameter")
        _check_placement(self.placement)
        _check_oversubscription(self.oversubscription)
        _check_execution(self.execution)

    def steps_for(self, config: Mapping[str, Any]) -> int | None:
        """Planned steps of a trial with ``config`` (for progress bars), or None if unknown."""
        if isinstance(self.max_steps, str):
            value = config.get(self.max_steps)
            return int(value) if isinstance(value, (int, float)) else None
        return self.max_steps

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "StudySpec":
        """Validate a study declaration; ``storage`` is accepted and ignored here (the CLI uses it)."""
        check_fields("", d, cls._FIELDS)
        for required in ("name", "space", "objective", "budget"):
            if required not in d:
                raise ConfigError(required, None, "is required")
        budget = d["budget"]
        check_fields("budget", budget, {"trials", "time_s"})
        algorithm = d.get("algorithm", {"type": "random"})
        if isinstance(algorithm, str):
            algorithm = {"type": algorithm}
        if not isinstance(algorithm, Mapping) or "type" not in algorithm:
            raise ConfigError("algorithm", algorithm, "must be a name or a mapping with a 'type'")
        return cls(name=d["name"], space=SearchSpace(d["space"]),
                   objective=Objective.parse(d["objective"]), budget=Budget(**budget),
                   trainable=d.get("trainable"), algorithm=dict(algorithm), seed=d.get("seed", 0),
                   executor=ExecutorOptions.from_dict(d.get("executor")),
                   max_steps=d.get("max_steps"), description=d.get("description", ""),
                   placement=d.get("placement", "wfd"), oversubscription=d.get("oversubscription"),
                   resources=Resources.from_dict(d.get("resources")),
                   execution=d.get("execution", "separate"), pack=PackOptions.from_dict(d.get("pack")))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "trainable": self.trainable, "space": self.space.to_dict(),
                "objective": self.objective.to_dict(),
                "budget": {"trials": self.budget.trials, "time_s": self.budget.time_s},
                "algorithm": dict(self.algorithm), "seed": self.seed,
                "executor": self.executor.to_dict(), "max_steps": self.max_steps,
                "description": self.description, "placement": self.placement,
                "oversubscription": (dict(self.oversubscription) if isinstance(self.oversubscription, Mapping)
                                     else self.oversubscription),
                "resources": self.resources.to_dict(), "execution": self.execution,
                "pack": self.pack.to_dict()}


# Fields a resumed study may change: how much to run and how, not what is searched.
RESUMABLE_CHANGES = frozenset({"budget", "executor", "max_steps", "description", "placement",
                               "oversubscription", "resources", "execution", "pack"})


def check_resumable(stored: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Raise ConfigError when ``new`` changes what the stored study searches (its space,
    objective, algorithm, seed or trainable); budget and executor options may change."""
    for key in sorted(set(stored) | set(new)):
        if key not in RESUMABLE_CHANGES and stored.get(key) != new.get(key):
            raise ConfigError(key, new.get(key),
                              f"differs from the stored study's {stored.get(key)!r}; only "
                              f"{', '.join(sorted(RESUMABLE_CHANGES))} may change on resume "
                              "(replace the study, or give it another name)")
