"""A study's pack policy, ``PackPlan``: the controller's ``PackPolicy`` for local, Ray and
simulated studies alike. Pure: what it needs of the fusable task comes as data
(``architecture_keys``) and callables (``accepts``: the task's verdict on a config;
``measured``: ``execution: auto``'s measured choice, ``runtime.devices.fusion_probe``), so core
never imports the task, torch or the workloads.

``fuses(config, pack_size)`` is ``runs_fused`` of the study's ``mode``: in ``auto`` a config
fuses when the task accepts it and the measurement (when there is one) says fused;
``key(config)`` is the fusibility key of the architecture keys. Members' memory is not known
to the plan (``member_memory`` / ``device_memory`` None: a pack measures its own cap); the
simulator's policy, which knows its profiles, wraps the plan.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hypersack.core.packs.grouping import fusibility_key
from hypersack.core.packs.seating import EXECUTION_MODES, runs_fused
from hypersack.errors import ConfigError
from hypersack.validation import check_integer

__all__ = ["PackPlan"]


@dataclass
class PackPlan:
    """How a study fuses: ``mode`` (its ``execution``), ``max_members`` (members per pack,
    >= 1), ``architecture_keys`` (config keys that change tensor shapes), ``accepts`` (None:
    every config), ``measured`` (None: no measurement, an accepted config fuses), and the
    study's ``pack`` options ``precision``, ``graphs`` and ``conv`` (sent to every pack it
    starts).
    ``mode_field`` names the mode in errors."""
    mode: str
    max_members: int = 8
    architecture_keys: tuple[str, ...] = ()
    accepts: Callable[[Mapping[str, Any]], bool] | None = None
    measured: Callable[[Mapping[str, Any]], bool] | None = None
    precision: str = "fp32"
    graphs: str = "auto"
    conv: str = "grouped"
    mode_field: str = field(default="execution", repr=False)
    _cache: dict[str, bool] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.mode not in EXECUTION_MODES:
            raise ConfigError(self.mode_field, self.mode,
                              f"must be one of {', '.join(EXECUTION_MODES)}")
        check_integer("pack.max_members", self.max_members, low=1)
        self.architecture_keys = tuple(self.architecture_keys)

    def fuses(self, config: Mapping[str, Any], pack_size: int | None = None) -> bool:
        """Whether a trial with ``config``, in an algorithm pack of ``pack_size`` members (None:
        no algorithm pack), runs in a pack (``runs_fused``; in ``auto``, a config the task
        accepts fuses when ``measured`` says so; ``measured`` is asked first, so a signature
        measured separate never needs the task's verdict, nor the task)."""
        return runs_fused(self.mode, lambda: (
            self.measured is None or self.measured(config)) and self._accepts(config), pack_size)

    def _accepts(self, config: Mapping[str, Any]) -> bool:
        if self.accepts is None:
            return True
        key = json.dumps(config, sort_keys=True, default=repr)
        if key not in self._cache:
            self._cache[key] = bool(self.accepts(config))
        return self._cache[key]

    def key(self, config: Mapping[str, Any]) -> Hashable:
        """The fusibility key: trials fuse only when theirs are equal."""
        return fusibility_key(config, self.architecture_keys)

    def member_memory(self, config: Mapping[str, Any], device: tuple[str, str]) -> float | None:
        """Not known to the plan: a pack measures its own cap (``PackCap``, on CUDA)."""
        return None

    def device_memory(self, device: tuple[str, str]) -> float | None:
        return None
