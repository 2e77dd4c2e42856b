"""Where a trial runs among the study's running packs: whether it fuses, the pack and seat it
takes, a new pack's cap, and a member's demand on placement. Pure: the controller asks these
(``PackBook``) and names the outcome in its ``Launch`` (``pack``, ``seat``); executors obey.

- ``runs_fused(mode, accepts, pack_size)``: the study's ``execution`` mode decides; in ``auto``
  the fusable task's verdict on the config (``accepts()``, asked only then) does. A trial whose
  algorithm pack holds only itself (``pack_size`` 1, e.g. a late rung of pack-aware Hyperband)
  runs alone as a plain trial in every mode.
- ``group_key(fusibility, group)``: the key packs are matched on.
- ``choose_pack(packs, key, devices)``: the first running pack (in start order) on one of
  ``devices`` with the same key and a free seat, else None (a new pack starts).
- ``pack_cap(max_members, free, per_member, base)``: members a new pack takes, from the memory
  free on its device when it starts (``None``: not measured): ``max_members``, lowered to the
  members that fit ``PACK_HEADROOM`` of the free memory, at least 1.
- ``member_demand(resources, max_members)``: a member's share of its device for placement;
  ``member_job``: that share as the member's placement Job (local machine and simulator).
- ``PackBook``: the running packs as the controller knows them (members, seats, caps); a pack
  left without members still takes launches of the same turn and is dropped by ``end_turn``,
  as executors end it at their next poll.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from hypersack.core.allocator import Demand
from hypersack.core.packs.grouping import member_cap
from hypersack.errors import ConfigError
from hypersack.validation import check_integer

__all__ = ["EXECUTION_MODES", "runs_fused", "pack_cap", "PACK_HEADROOM", "member_demand",
           "member_job", "group_key", "PackSeats",
           "choose_pack", "PackPolicy", "Seat", "PackBook"]

#: A study's ``execution``: a process per trial, every trial in a pack, or packs for the
#: configs the fusable task accepts.
EXECUTION_MODES = ("separate", "fused", "auto")
#: A pack's training precision: fp32 is the exact mode (a member equals its training alone);
#: bf16 and fp16 run under autocast over fp32 master weights (``hypersack.fusion.precision``).
PRECISIONS = ("fp32", "bf16", "fp16")
#: Whether a pack's whole step is one CUDA graph: "auto" (on CUDA), "on" (CUDA only), "off".
GRAPH_MODES = ("auto", "on", "off")
#: How a fused pack runs dense convolutions (``pack.conv``; ``fusion.fused_ops.fused_conv``).
CONV_FORMS = ("grouped", "bmm")

#: Share of a device's free memory a new pack may fill: the rest is kept for fragmentation and
#: the evaluation pass.
PACK_HEADROOM = 0.9

Device = tuple[str, str]


def runs_fused(mode: str, accepts: Callable[[], bool], pack_size: int | None = None) -> bool:
    """Whether a trial runs in a pack: never in ``separate``, always in ``fused`` (a config the
    task refuses then fails in its pack), in ``auto`` when ``accepts()`` (the task takes the
    config: optimizer, schedule, batch size...). Never when its algorithm pack has one member
    (``pack_size`` 1; None: the algorithm forms no packs): a pack of one trains as the plain
    trial does (the isolation guarantee) but pays the fused runner's cost (0.35x the plain speed
    on the measured CPU table) and a pack process."""
    if mode == "separate" or pack_size == 1:
        return False
    if mode == "fused":
        return True
    if mode == "auto":
        return bool(accepts())
    raise ConfigError("execution", mode, f"must be one of {', '.join(EXECUTION_MODES)}")


def _check_max_members(max_members: Any) -> int:
    return check_integer("pack.max_members", max_members, low=1)


def pack_cap(max_members: int, free: float | None, per_member: float | None,
             base: float = 0.0) -> int:
    """Members a new pack may hold (see the module docstring): ``min(max_members,
    member_cap(PACK_HEADROOM * free, per_member, base))``; ``max_members`` when ``free`` or
    ``per_member`` is None (nothing measured). Units: any, shared by the three figures."""
    _check_max_members(max_members)
    if free is None or per_member is None:
        return max_members
    return min(max_members, member_cap(PACK_HEADROOM * max(0.0, free), per_member, base))


def member_demand(resources: Demand, max_members: int) -> Demand:
    """A fused pack member's demand on its device: ``compute`` = 100 / ``max_members`` (or the
    study's own ``resources.compute`` when it sets one below 100), ``memory_gb`` = the trial's,
    ``cpus`` = ``resources.cpus / max_members``: placement then puts up to ``max_members``
    members on one device, and oversubscription still applies across packs."""
    _check_max_members(max_members)
    r = resources
    compute = r.compute if r.compute != 100.0 else 100.0 / max_members
    return Demand(compute, r.memory_gb, r.cpus / max_members)


def member_job(record: Any, resources: Demand, max_members: int,
               per_arch: Mapping[str, Mapping[str, float]] | None = None,
               runtime: float | None = None) -> Any:
    """A pack member's placement Job, for the local machine and the simulator alike:
    ``member_demand(resources, max_members)`` as ``record``'s Job; with ``per_arch``
    (``{arch: {"memory_gb", "runtime"}}``, what a simulator's profiles say) each architecture
    gets the member's compute with its own memory and runtime, and the Job ``runtime``."""
    import dataclasses
    member = member_demand(resources, max_members)
    job = member.job(record)
    if per_arch is None:
        return job
    return dataclasses.replace(job, runtime=runtime, per_arch={
        arch: {"compute": member.compute, "memory_gb": d["memory_gb"], "runtime": d["runtime"]}
        for arch, d in per_arch.items()})


def group_key(fusibility: Hashable, group: Hashable | None) -> Hashable:
    """The key packs are matched on: the task's fusibility key, and the algorithm's pack group
    when it names one (trials of an algorithm's pack fuse only with each other)."""
    return fusibility if group is None else (fusibility, ("group", group))


@dataclass(frozen=True)
class PackSeats:
    """A running pack as ``choose_pack`` sees it: its id, device, key, members and cap."""
    pack_id: int
    device: Hashable
    key: Hashable
    members: int
    cap: int
    failed: bool = False

    @property
    def has_seat(self) -> bool:
        return not self.failed and self.members < self.cap


def choose_pack(packs: Sequence[PackSeats], key: Hashable, devices: Iterable[Hashable]) -> int | None:
    """The pack a fusing trial joins: the first (in start order) on one of ``devices`` with the
    same key and a free seat; None when a new pack must start."""
    allowed = set(devices)
    for pack in packs:
        if pack.key == key and pack.device in allowed and pack.has_seat:
            return pack.pack_id
    return None


class PackPolicy(Protocol):
    """What the controller needs to know of a study's fusion: ``max_members`` (>= 1),
    ``fuses(config, pack_size)`` (``runs_fused`` of the study's mode), ``key(config)`` (the
    fusibility key), and ``member_memory(config, device)`` / ``device_memory(device)`` (any one
    unit; None: not known here, the pack measures its own cap and reports it)."""

    @property
    def max_members(self) -> int: ...

    def fuses(self, config: Mapping[str, Any], pack_size: int | None = None) -> bool: ...

    def key(self, config: Mapping[str, Any]) -> Hashable: ...

    def member_memory(self, config: Mapping[str, Any], device: Device) -> float | None: ...

    def device_memory(self, device: Device) -> float | None: ...


@dataclass(frozen=True)
class Seat:
    """Where a member runs: pack ``pack`` (ids unique over a controller's life), seat ``seat``
    (0-based, the lowest free one), ``new``: the launch starts the pack."""
    pack: int
    seat: int
    new: bool


@dataclass(eq=False)
class _Pack:
    pack_id: int
    device: Device
    key: Hashable
    cap: int
    seats: dict[int, int] = field(default_factory=dict)     # trial id -> seat

    def view(self) -> PackSeats:
        return PackSeats(self.pack_id, self.device, self.key, len(self.seats), self.cap,
                         self.cap < 1)

    def free_seat(self) -> int:
        taken = set(self.seats.values())
        return next(s for s in range(len(taken) + 1) if s not in taken)


class PackBook:
    """The running packs of a study, as the controller decides them (see the module doc)."""

    def __init__(self, policy: PackPolicy):
        self.policy = policy
        self.packs: list[_Pack] = []
        self.of: dict[int, _Pack] = {}       # member trial id -> its pack
        self.started = 0                     # packs started so far (the last id)

    def fuses(self, config: Mapping[str, Any], pack_size: int | None) -> bool:
        return self.policy.fuses(config, pack_size)

    def join(self, trial_id: int, config: Mapping[str, Any], group: Hashable | None,
             device: Device, neighbours: Iterable[Mapping[str, Any]]) -> Seat:
        """Seat ``trial_id`` on ``device``: in the pack ``choose_pack`` names, else in a new pack
        whose cap is ``pack_cap`` of the device memory left by ``neighbours`` (the configs of
        the other trials running on it)."""
        key = group_key(self.policy.key(config), group)
        chosen = choose_pack([p.view() for p in self.packs], key, [device])
        pack = next((p for p in self.packs if p.pack_id == chosen), None)
        new = pack is None
        if pack is None:
            self.started += 1
            pack = _Pack(self.started, device, key, self._cap(config, device, neighbours))
            self.packs.append(pack)
        seat = pack.free_seat()
        pack.seats[trial_id] = seat
        self.of[trial_id] = pack
        return Seat(pack.pack_id, seat, new)

    def _cap(self, config: Mapping[str, Any], device: Device,
             neighbours: Iterable[Mapping[str, Any]]) -> int:
        total = self.policy.device_memory(device)
        member = self.policy.member_memory(config, device)
        if total is None or member is None or member <= 0:
            return pack_cap(self.policy.max_members, None, None)
        used = 0.0
        for other in neighbours:
            used += self.policy.member_memory(other, device) or 0.0
        return pack_cap(self.policy.max_members, total - used, member)

    def leave(self, trial_id: int) -> None:
        """The member ended: its seat is free (its pack stays until ``end_turn``)."""
        pack = self.of.pop(trial_id, None)
        if pack is not None:
            pack.seats.pop(trial_id, None)

    def capped(self, pack_id: int, cap: int) -> None:
        """The pack measured its cap (``PackCapped``): it takes at most ``cap`` members from
        now on; 0: it failed and takes none."""
        for pack in self.packs:
            if pack.pack_id == pack_id:
                pack.cap = max(0, int(cap))

    def end_turn(self) -> None:
        """Packs without members end (executors end them at their next poll)."""
        self.packs = [p for p in self.packs if p.seats]
