"""``execution: auto``, fused or separate, from a measurement of the device at hand.

Before a model signature is committed to packs, the runtime times a short probe on the device
(``runtime.devices.fusion_probe``): a pack of ``width`` members (configs drawn from the study's
space, so they split into optimizer stacks and pad to the largest batch as a real pack does),
its fixed costs and its steady steps, and members alone as ``separate`` runs them, one whole
trial each. ``FusionProbe`` holds the figures; ``choose_fusion`` turns them into the choice by
the member-steps per second each mode makes over a *trial of the study* (``study_rates``), not
over steady steps alone:

- a trial alone trains ``S`` steps (``trial_steps``: the mean of the probed members' trials,
  epochs x steps per epoch) and pays its fixed costs (``alone_fixed_s``: its start, its
  evaluations and checkpoints): ``S / (alone_fixed_s + S * alone_step_s)`` member-steps per
  second of a device;
- a pack of ``w`` members pays its fixed costs once (``fused_fixed_s``: members built, its
  first step's extra, its members' epoch ends) and steps until its longest member is done
  (``pack_steps``), members that finished early leaving their seats empty unless queued
  trials refill them (``expected_occupancy``):
  ``w * S / (fused_fixed_s + S / occupancy * fused_step_s)``;
- without trial lengths (``trial_steps`` 0: an older probe), the steady rates
  ``width / fused_step_s`` and ``1 / alone_step_s``.

Fused only when its rate is at least ``margin`` (``FUSED_MARGIN``, 1.1) times the separate
rate: timing noise and what the probe does not see then fall on the side of the mode that
needs no pack process. No valid probe: separate.

Pure: the figures come in as data; the choice comes with its one-line reason for the progress
view, ``hypersack status`` and the report.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from hypersack.core.packs.slots import compacted_capacity
from hypersack.validation import check_integer, check_number, is_finite

__all__ = ["FUSED_MARGIN", "FusionProbe", "FusionChoice", "choose_fusion", "expected_occupancy",
           "planned_width", "study_rates", "study_waves", "wave_occupancy"]

#: How much faster (member-steps per second) fused must measure than separate to be chosen.
FUSED_MARGIN = 1.1


@dataclass(frozen=True)
class FusionProbe:
    """One probe on one device: ``device`` (its kind: "cpu", "A100"...), ``width`` (members
    in the probed pack, >= 1), ``steps`` (measured steady steps per side), ``fused_step_s``
    (seconds of one steady step of the pack), ``alone_step_s`` (mean over the members probed
    of the seconds of one steady step alone), ``fused_fixed_s`` (the pack's seconds beyond its
    steady steps: its start, every member built, its members' epoch ends), ``alone_fixed_s``
    (a whole trial alone's seconds beyond its steady steps, mean over the members probed),
    ``trial_steps`` (mean training steps of one probed member's whole trial; 0:
    unknown), ``pack_steps`` (the longest of them) and ``member_steps`` (each probed
    member's, when known: how the pack empties and compacts). Times in seconds, >= 0."""
    device: str
    width: int
    steps: int
    fused_step_s: float
    alone_step_s: float
    fused_fixed_s: float = 0.0
    alone_fixed_s: float = 0.0
    trial_steps: float = 0.0
    pack_steps: float = 0.0
    member_steps: tuple[float, ...] = ()

    @property
    def valid(self) -> bool:
        """Both step times positive and finite, fixed times finite and >= 0, a width of at
        least 1, trial lengths finite and >= 0."""
        return (self.width >= 1
                and all(is_finite(t) and t > 0 for t in (self.fused_step_s, self.alone_step_s))
                and all(is_finite(t) and t >= 0 for t in (self.fused_fixed_s, self.alone_fixed_s,
                                                          self.trial_steps, self.pack_steps,
                                                          *self.member_steps)))

    @property
    def fused_rate(self) -> float:
        """Steady member-steps per second in a fused pack of ``width``."""
        return self.width / self.fused_step_s

    @property
    def separate_rate(self) -> float:
        """Steady member-steps per second of one trial alone on the device."""
        return 1.0 / self.alone_step_s

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["member_steps"] = list(self.member_steps)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FusionProbe":
        """The probe of ``to_dict`` (a probe kept before fixed times and trial lengths were
        measured reads them as 0: steady rates)."""
        extra = {k: float(data.get(k, 0.0)) for k in ("fused_fixed_s", "alone_fixed_s",
                                                       "trial_steps", "pack_steps")}
        return cls(str(data["device"]), int(data["width"]), int(data["steps"]),
                   float(data["fused_step_s"]), float(data["alone_step_s"]), **extra,
                   member_steps=tuple(float(x) for x in data.get("member_steps", ())))


def expected_occupancy(trial_steps: float, pack_steps: float, waves: float) -> float:
    """The share of a pack's seat-steps that train a member, in (0, 1]: a pack steps until its
    longest member (``pack_steps``) is done while a member trains ``trial_steps``; with
    ``waves`` (>= 1: the trials a seat takes over the study, ``inf``: no end in sight) a freed
    seat takes a queued trial, so only the last wave leaves seats empty:
    ``waves * S / ((waves - 1) * S + max(S, pack_steps))``."""
    s = float(trial_steps)
    if s <= 0:
        return 1.0
    longest = max(s, float(pack_steps))
    w = max(1.0, float(waves))
    if math.isinf(w):
        return 1.0
    return w * s / ((w - 1.0) * s + longest)


def wave_occupancy(member_steps: Sequence[float], slots: int) -> float:
    """Member-steps trained over slot-steps computed, in (0, 1], by a pack of ``slots`` slots
    (at least one per member) whose members train ``member_steps`` steps each and leave, none
    joining: it computes every slot at every step and is compacted to its live members when
    they fill half its slots or fewer (``compacted_capacity``, before a step, as the fused
    runner does). 1.0 without members."""
    lengths = sorted(math.ceil(x) for x in member_steps if x > 0)
    if not lengths:
        return 1.0
    capacity, live, done, computed = max(int(slots), len(lengths)), len(lengths), 0, 0
    for end in sorted(set(lengths)):
        computed += (end - done) * capacity
        done, live = end, live - lengths.count(end)
        if live:
            capacity = compacted_capacity(capacity, live) or capacity
    return sum(lengths) / computed


def _occupancy(probe: FusionProbe, waves: float) -> float:
    """The probe's pack occupancy over ``waves``: its members' own lengths with compaction
    when known (a seat refilled in every wave but the last), else ``expected_occupancy``."""
    if not probe.member_steps:
        return expected_occupancy(probe.trial_steps, probe.pack_steps, waves)
    first = wave_occupancy(probe.member_steps, probe.width)
    w = max(1.0, float(waves))
    return 1.0 if math.isinf(w) else w / ((w - 1.0) + 1.0 / first)


def study_rates(probe: FusionProbe, waves: float = 1.0) -> tuple[float, float]:
    """(fused, separate) member-steps per second over the study's trials (module docstring);
    the steady rates when the probe has no trial length. ``probe`` must be ``valid``. A pack
    step's time is taken as proportional to the slots it computes."""
    s = probe.trial_steps
    if s <= 0:
        return probe.fused_rate, probe.separate_rate
    occupancy = _occupancy(probe, waves)
    fused = probe.width * s / (probe.fused_fixed_s + s / occupancy * probe.fused_step_s)
    separate = s / (probe.alone_fixed_s + s * probe.alone_step_s)
    return fused, separate


@dataclass(frozen=True)
class FusionChoice:
    """Whether trials of ``subject`` (a model signature's label) fuse, why (one line), the
    probe it was decided from (None: no valid probe), ``margin`` and the study's ``waves``
    (trials per seat) it was decided for."""
    subject: str
    fused: bool
    reason: str
    probe: FusionProbe | None = None
    margin: float = FUSED_MARGIN
    waves: float = 1.0

    @property
    def mode(self) -> str:
        return "fused" if self.fused else "separate"

    def to_dict(self) -> dict[str, Any]:
        """The choice and its figures as JSON-ready data (``hypersack status --json``):
        ``fused_rate`` / ``separate_rate`` are the study rates the choice compared."""
        out: dict[str, Any] = {"subject": self.subject, "mode": self.mode,
                               "reason": self.reason, "margin": self.margin}
        if self.probe is not None and self.probe.valid:
            fused, separate = study_rates(self.probe, self.waves)
            out.update(self.probe.to_dict(), fused_rate=round(fused, 3),
                       separate_rate=round(separate, 3),
                       steady_fused_rate=round(self.probe.fused_rate, 3),
                       steady_separate_rate=round(self.probe.separate_rate, 3))
        return out


def choose_fusion(subject: str, probe: FusionProbe | None, margin: float = FUSED_MARGIN,
                  waves: float = 1.0) -> FusionChoice:
    """Fused when the fused study rate is at least ``margin`` times the separate one
    (``study_rates(probe, waves)``), else separate (also without a valid probe); ``margin``
    >= 1 and ``waves`` >= 1 (ConfigError otherwise). The reason reads ``<subject> fused x16:
    812 member-steps/s vs separate 540/s over trials of 24 steps (fixed 1.20 s / 0.05 s,
    occupancy 80%) on cpu -> fused (fused needs >= 1.1x)``."""
    check_number("execution.margin", margin, low=1.0)
    check_number("execution.waves", waves, low=1.0)
    if probe is None or not probe.valid:
        return FusionChoice(subject, False, f"{subject}: no valid fusion probe on this device "
                            "-> separate", probe, margin, waves)
    fused_rate, separate_rate = study_rates(probe, waves)
    fused = fused_rate >= margin * separate_rate
    over = "" if probe.trial_steps <= 0 else (
        f" over trials of {probe.trial_steps:.0f} steps (fixed {probe.fused_fixed_s:.2f} s / "
        f"{probe.alone_fixed_s:.2f} s, occupancy "
        f"{_occupancy(probe, waves):.0%})")
    reason = (f"{subject} fused x{probe.width}: {fused_rate:.0f} member-steps/s vs "
              f"separate {separate_rate:.0f}/s{over} on {probe.device} -> "
              f"{'fused' if fused else 'separate'} (fused needs >= {margin:g}x)")
    return FusionChoice(subject, fused, reason, probe, margin, waves)


def study_waves(trials: int | None, width: int, devices: int) -> float:
    """Trials per pack seat over the study: ``trials / (width * devices)``, at least 1;
    ``inf`` without a trial budget (None)."""
    if trials is None:
        return math.inf
    return max(1.0, int(trials) / (max(1, int(width)) * max(1, int(devices))))


def planned_width(max_members: int, trials: int | None, devices: int) -> int:
    """The pack width a probe measures: ``max_members``, but no more than a device's share of
    the study's ``trials`` (None: no trial budget), the trials spread over ``devices``; >= 1."""
    check_integer("pack.max_members", max_members, low=1)
    width = int(max_members)
    if trials is not None:
        width = min(width, -(-int(trials) // max(1, int(devices))))
    return max(1, width)
