"""``execution: auto``, fused or separate, from a measurement of the device at hand.

Before a model signature is committed to packs, the runtime times a short probe on the device
(``runtime.devices.fusion_probe``): ``steps`` fused steps of a pack of the planned ``width``
(members whose configs are drawn from the study's space, so they split into optimizer stacks
and pad to the largest batch as a real pack does), and steps of those members alone as
``separate`` would run them. ``FusionProbe`` holds the figures; ``choose_fusion`` turns them
into the choice:

- fused member-steps per second = ``width / fused_step_s`` (one fused step trains every member
  one mini-batch);
- separate member-steps per second = ``1 / alone_step_s`` (``alone_step_s``: the mean time of
  one member's step alone; one trial per device, as ``separate`` places them on CPU slots);
- fused only when its rate is at least ``margin`` (``FUSED_MARGIN``, 1.1) times the separate
  rate: timing noise and what the probe does not see (members leaving a pack, its start-up)
  then fall on the side of the mode that needs no pack process. No valid probe: separate.

Pure: the figures come in as data; the choice comes with its one-line reason for the progress
view, ``hypersack status`` and the report.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from hypersack.validation import check_integer, check_number, is_finite

__all__ = ["FUSED_MARGIN", "FusionProbe", "FusionChoice", "choose_fusion", "planned_width"]

#: How much faster (member-steps per second) fused must measure than separate to be chosen.
FUSED_MARGIN = 1.1


@dataclass(frozen=True)
class FusionProbe:
    """One probe on one device: ``device`` (its kind: "cpu", "A100"...), ``width`` (members
    in the fused pack, >= 1), ``steps`` (measured steps per side, warm-up excluded),
    ``fused_step_s`` (seconds of one fused step), ``alone_step_s`` (mean over the members
    probed of the seconds of one step alone); how a side's steps make its figure is the
    probe's (``runtime.devices.fusion_probe``)."""
    device: str
    width: int
    steps: int
    fused_step_s: float
    alone_step_s: float

    @property
    def valid(self) -> bool:
        """Both times positive and finite, a width of at least 1."""
        return (self.width >= 1 and all(is_finite(t) and t > 0
                                        for t in (self.fused_step_s, self.alone_step_s)))

    @property
    def fused_rate(self) -> float:
        """Member-steps per second in a fused pack of ``width``."""
        return self.width / self.fused_step_s

    @property
    def separate_rate(self) -> float:
        """Member-steps per second of one trial alone on the device."""
        return 1.0 / self.alone_step_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FusionProbe":
        return cls(str(data["device"]), int(data["width"]), int(data["steps"]),
                   float(data["fused_step_s"]), float(data["alone_step_s"]))


@dataclass(frozen=True)
class FusionChoice:
    """Whether trials of ``subject`` (a model signature's label) fuse, why (one line), and the
    probe it was decided from (None: no valid probe)."""
    subject: str
    fused: bool
    reason: str
    probe: FusionProbe | None = None
    margin: float = FUSED_MARGIN

    @property
    def mode(self) -> str:
        return "fused" if self.fused else "separate"

    def to_dict(self) -> dict[str, Any]:
        """The choice and its figures as JSON-ready data (``hypersack status --json``)."""
        out: dict[str, Any] = {"subject": self.subject, "mode": self.mode,
                               "reason": self.reason, "margin": self.margin}
        if self.probe is not None and self.probe.valid:
            out.update(self.probe.to_dict(), fused_rate=round(self.probe.fused_rate, 3),
                       separate_rate=round(self.probe.separate_rate, 3))
        return out


def choose_fusion(subject: str, probe: FusionProbe | None,
                  margin: float = FUSED_MARGIN) -> FusionChoice:
    """Fused when ``probe.fused_rate >= margin * probe.separate_rate``, else separate (also
    without a valid probe); ``margin`` >= 1 (ConfigError otherwise). The reason reads
    ``<subject> fused x16: 812 member-steps/s vs separate 540/s -> fused (needs >= 1.1x)``."""
    check_number("execution.margin", margin, low=1.0)
    if probe is None or not probe.valid:
        return FusionChoice(subject, False, f"{subject}: no valid fusion probe on this device "
                            "-> separate", probe, margin)
    fused = probe.fused_rate >= margin * probe.separate_rate
    reason = (f"{subject} fused x{probe.width}: {probe.fused_rate:.0f} member-steps/s vs "
              f"separate {probe.separate_rate:.0f}/s on {probe.device} -> "
              f"{'fused' if fused else 'separate'} (fused needs >= {margin:g}x)")
    return FusionChoice(subject, fused, reason, probe, margin)


def planned_width(max_members: int, trials: int | None, devices: int) -> int:
    """The pack width a probe measures: ``max_members``, but no more than a device's share of
    the study's ``trials`` (None: no trial budget), the trials spread over ``devices``; >= 1."""
    check_integer("pack.max_members", max_members, low=1)
    width = int(max_members)
    if trials is not None:
        width = min(width, -(-int(trials) // max(1, int(devices))))
    return max(1, width)
