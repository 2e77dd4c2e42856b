"""Fused packs in the simulator: the scenario's fusion plan, its pack policy for the controller,
and the packs running on the simulated devices.

The decisions are core's and the controller's, as in a local study: whether a trial fuses and
its key (``core.packs.PackPlan``, the local study's policy; the simulated task accepts every
config, and ``auto`` decides by ``core.packs.choose_fusion`` from the scenario's speeds), the pack
and seat it takes and a new pack's cap (``core.packs.PackBook``, with a member costing its
profile's ``memory_gb`` of its device's memory: ``SimPackPolicy``); a member's demand on
placement is ``core.packs.member_demand``. The executor only obeys the Launch (``RunningPacks``):
a member joins the running pack its Launch names, or starts it; a pack left without members
ends at the executor's next poll (a launch of the same turn joins it), as the local executor's.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hypersack.core.packs import PackPlan

__all__ = ["SimFusion", "SimPackPolicy", "SimPack", "RunningPacks"]

Key = tuple[str, str]


@dataclass
class SimFusion(PackPlan):
    """A scenario's fusion plan: ``core.packs.PackPlan`` (the local study's policy) with the
    scenario's ``mode`` (its study's ``execution``, default fused), ``max_members`` (its
    ``pack.max_members``) and ``architecture_keys``; the simulated task accepts every config.
    In ``auto``, ``decide`` makes ``measured`` the choice ``core.packs.choose_fusion`` makes
    from the scenario's speeds (``choice``). Errors name ``study.execution``."""
    mode: str = "fused"
    mode_field: str = field(default="study.execution", repr=False)
    choice: Any = field(default=None, repr=False)

    def decide(self, fused_model: Any, trials: int | None, devices: int = 1) -> Any:
        """``execution: auto`` as a local study decides it, from a probe the scenario's speeds
        make: a pack of the planned width (``core.packs.planned_width``) steps ``width /
        speedup(width)`` times a member's step alone (``fused_model``: ``sim.perf.FusedModel``;
        the simulator has no fixed costs, so the steady rates decide). Returns the choice."""
        from hypersack.core.packs import FusionProbe, choose_fusion, planned_width, study_waves
        width = planned_width(self.max_members, trials, devices)
        probe = FusionProbe("simulated", width, 1, fused_model.step_time(1.0, width), 1.0)
        choice = choose_fusion("simulated task", probe, waves=study_waves(trials, width, devices))
        self.choice, fused = choice, choice.fused
        self.measured = lambda config: fused
        return choice


class SimPackPolicy:
    """The controller's ``core.packs.PackPolicy`` of a simulated study: ``fusion``'s answers, a
    member's memory from ``perf``'s profile on its device's architecture, and a device's memory
    from ``gpu_of(device)`` (the simulated GPU, None once it is gone)."""

    def __init__(self, fusion: SimFusion, perf: Any, gpu_of: Callable[[Key], Any]):
        self.fusion, self._perf, self._gpu_of = fusion, perf, gpu_of

    @property
    def max_members(self) -> int:
        return self.fusion.max_members

    def fuses(self, config: Mapping[str, Any], pack_size: int | None = None) -> bool:
        return self.fusion.fuses(config, pack_size)

    def key(self, config: Mapping[str, Any]) -> Hashable:
        return self.fusion.key(config)

    def member_memory(self, config: Mapping[str, Any], device: Key) -> float | None:
        gpu = self._gpu_of(device)
        return None if gpu is None else float(self._perf.profile(config, gpu.arch).memory_gb)

    def device_memory(self, device: Key) -> float | None:
        gpu = self._gpu_of(device)
        return None if gpu is None else float(gpu.memory_gb)


@dataclass(eq=False)
class SimPack:
    """A pack process on one device: its members (trial id -> seat, in join order)."""
    pack_id: int
    device: Key
    members: dict[int, int] = field(default_factory=dict)


class RunningPacks:
    """The running packs of a simulated cluster; ``of[trial_id]`` is a member's pack."""

    def __init__(self, fusion: SimFusion):
        self.fusion = fusion
        self.packs: list[SimPack] = []
        self.of: dict[int, SimPack] = {}
        self.on: dict[Key, list[SimPack]] = {}     # device -> its packs, in start order
        self.started = 0                           # packs started so far
        self.largest = 0                           # most members a pack held at once

    def pack(self, pack_id: int) -> SimPack | None:
        return next((p for p in self.packs if p.pack_id == pack_id), None)

    def join(self, trial_id: int, pack_id: int, seat: int, device: Key) -> SimPack:
        """Seat ``trial_id`` in the running pack ``pack_id``, else in a new pack of that id on
        ``device`` (as its Launch says)."""
        pack = self.pack(pack_id)
        if pack is None:
            self.started += 1
            pack = SimPack(pack_id, device)
            self.packs.append(pack)
            self.on.setdefault(device, []).append(pack)
        pack.members[trial_id] = seat
        self.of[trial_id] = pack
        self.largest = max(self.largest, len(pack.members))
        return pack

    def leave(self, trial_id: int) -> SimPack | None:
        """The member leaves its pack (which stays, maybe empty, until ``end_empty``)."""
        pack = self.of.pop(trial_id, None)
        if pack is not None:
            del pack.members[trial_id]
        return pack

    def end_empty(self) -> list[int]:
        """Packs without members end; returns their ids, in start order."""
        ended = [p.pack_id for p in self.packs if not p.members]
        if ended:
            self.packs = [p for p in self.packs if p.members]
            self.on = {d: kept for d, ps in self.on.items() if (kept := [p for p in ps if p.members])}
        return ended
