"""Fused packs in the simulator: the study's fusion plan and the packs running on devices.

The decisions are core's, the same as the local executor's (``runtime/executors/packs.py``):
whether a trial fuses (``core.fusing.runs_fused``; the simulated task accepts every config, so
``auto`` fuses every trial), its key (``core.packing.fusibility_key`` of the workload's
``architecture_keys``, with the algorithm's pack group: ``core.routing.group_key``), the pack
it joins (``core.routing.choose_pack``: same device, same key, a free seat), and a new pack's
cap (``core.fusing.pack_cap`` of the device memory free when it starts, a member costing its
profile's ``memory_gb``). A member's demand on placement is ``core.demand.member_demand``.

A pack left without members ends at the executor's next poll (a launch of the same turn joins
it), as the local executor's does.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Mapping

from hypersack.core.fusing import pack_cap, runs_fused
from hypersack.core.packing import fusibility_key
from hypersack.core.routing import PackSeats, choose_pack, group_key
from hypersack.core.spec import EXECUTION_MODES
from hypersack.errors import ConfigError

__all__ = ["SimFusion", "SimPack", "PackBook"]

Key = tuple[str, str]


@dataclass(frozen=True)
class SimFusion:
    """A scenario's fusion plan: ``mode`` (the study's ``execution``), ``max_members`` (its
    ``pack.max_members``), ``architecture_keys`` (config keys that change tensor shapes: only
    trials with equal values fuse)."""
    mode: str = "fused"
    max_members: int = 8
    architecture_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in EXECUTION_MODES:
            raise ConfigError("study.execution", self.mode,
                              f"must be one of {', '.join(EXECUTION_MODES)}")

    def fuses(self, config: Mapping[str, Any], pack_size: int | None = None) -> bool:
        return runs_fused(self.mode, lambda: True, pack_size)

    def key(self, config: Mapping[str, Any], group: Any) -> Hashable:
        return group_key(fusibility_key(config, self.architecture_keys), group)


@dataclass(eq=False)
class SimPack:
    """A pack process on one device: its members (trial ids, in join order) and its cap."""
    pack_id: int
    device: Key
    key: Hashable
    cap: int
    members: list[int] = field(default_factory=list)

    def seats(self) -> PackSeats:
        return PackSeats(self.pack_id, _label(self.device), self.key, len(self.members), self.cap)


class PackBook:
    """The running packs of a simulated cluster; ``of[trial_id]`` is a member's pack."""

    def __init__(self, fusion: SimFusion):
        self.fusion = fusion
        self.packs: list[SimPack] = []
        self.of: dict[int, SimPack] = {}
        self.on: dict[Key, list[SimPack]] = {}     # device -> its packs, in start order
        self.started = 0                           # packs started so far
        self.largest = 0                           # most members a pack held at once

    def devices_with_seats(self, key: Hashable) -> list[Key]:
        """Devices of packs with ``key`` and a seat, in start order (a launch not placed)."""
        return [p.device for p in self.packs if p.key == key and p.seats().has_seat]

    def join(self, trial_id: int, key: Hashable, device: Key, free_gb: float,
             member_gb: float) -> SimPack:
        """Seat ``trial_id`` in the pack ``choose_pack`` names on ``device``, or in a new pack
        there whose cap is ``pack_cap`` of ``free_gb`` (the memory free before this member)."""
        chosen = choose_pack([p.seats() for p in self.on.get(device, ())], key, [_label(device)])
        pack = next((p for p in self.on.get(device, ()) if p.pack_id == chosen), None)
        if pack is None:
            self.started += 1
            per_member = member_gb if member_gb > 0 else None
            cap = pack_cap(self.fusion.max_members, free_gb if per_member else None, per_member)
            pack = SimPack(self.started, device, key, cap)
            self.packs.append(pack)
            self.on.setdefault(device, []).append(pack)
        pack.members.append(trial_id)
        self.of[trial_id] = pack
        self.largest = max(self.largest, len(pack.members))
        return pack

    def leave(self, trial_id: int) -> SimPack | None:
        """The member leaves its pack (which stays, maybe empty, until ``end_empty``)."""
        pack = self.of.pop(trial_id, None)
        if pack is not None:
            pack.members.remove(trial_id)
        return pack

    def end_empty(self) -> None:
        """Packs without members end."""
        if any(not p.members for p in self.packs):
            self.packs = [p for p in self.packs if p.members]
            self.on = {d: kept for d, ps in self.on.items() if (kept := [p for p in ps if p.members])}


def _label(device: Key) -> str:
    return f"{device[0]}/{device[1]}"
