"""Where a launch goes inside a node: which pack a fusing trial joins, how many warm workers a
device keeps, which device takes a trial that was not placed. Pure: plain values in and out,
used alike by the local executor and the simulator.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Iterable, Sequence

__all__ = ["PackSeats", "choose_pack", "group_key", "warm_workers", "first_free_device"]


@dataclass(frozen=True)
class PackSeats:
    """A running pack as routing sees it: its id, device, fusibility key, members and cap."""
    pack_id: int
    device: str
    key: Hashable
    members: int
    cap: int
    failed: bool = False

    @property
    def has_seat(self) -> bool:
        return not self.failed and self.members < self.cap


def group_key(fusibility: Hashable, group: Hashable | None) -> Hashable:
    """The key packs are matched on: the task's fusibility key, and the algorithm's pack group
    when it names one (trials of an algorithm's pack fuse only with each other)."""
    return fusibility if group is None else (fusibility, ("group", group))


def choose_pack(packs: Sequence[PackSeats], key: Hashable, devices: Iterable[str]) -> int | None:
    """The pack a fusing trial joins: the first (in start order) on one of ``devices`` with the
    same key and a free seat; None when a new pack must start."""
    allowed = set(devices)
    for pack in packs:
        if pack.key == key and pack.device in allowed and pack.has_seat:
            return pack.pack_id
    return None


def warm_workers(oversubscription: float) -> int:
    """Worker processes a device keeps warm: one per trial it may hold at once (ceil of its
    oversubscription ratio), at least one."""
    return max(1, math.ceil(oversubscription))


def first_free_device(devices: Sequence[str], busy: Iterable[str]) -> str | None:
    """A device for a Launch that names none (the controller always names them; executors
    driven directly, as in their tests, may not): the first one, in the inventory's order,
    that runs nothing."""
    taken = set(busy)
    return next((d for d in devices if d not in taken), None)
