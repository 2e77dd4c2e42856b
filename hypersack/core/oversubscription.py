"""Oversubscription ratios: the paper's table, a fixed number, or learned from measurement.

A device of compute 100% takes jobs whose compute demands (each job's NVML utilisation when it ran
alone, from the profiler) sum to at most ``100 x r`` (the knapsack's Eq. 2); memory and host cores
are the knapsack's other dimensions (Eqs. 3-4), so ``r`` is about compute alone. The study's
``oversubscription`` chooses ``r``:

- ``paper``: the HyperSack paper's best ratios (Figs. 13-14: A100 3, H100 2.5), else 2;
- a number (or ``{arch: number}``): that ratio;
- ``auto`` (the default on GPUs): learned per GPU architecture from co-located trials. Each
  measurement is one trial that ran beside others: the summed demand ``D`` (percent) of the
  trials on its device, and its slowdown ``s`` = time per step shared / time per step alone.
  The device is modelled as processor sharing with capacity ``C``: below ``C`` co-located trials
  do not slow each other, above it each runs ``D / C`` times slower. So a measurement with
  ``s >= SATURATED`` estimates ``C = D / s``; one with less slowdown says only ``C >= D``. The
  ratio is ``C / 100`` with ``C`` the median estimate (never below the largest unsaturated
  demand); with no saturated measurement yet, ``C`` probes ``PROBE`` times beyond the largest
  unsaturated demand (at least the prior); with none at all it is the prior (the paper's ratio).
  Clamped to [1, ``MAX_AUTO_RATIO``].

During a run the inventory keeps the ratio ``r0`` it started with; when ``auto`` learns ``r``
from the run's own measurements, demands placed from then on are scaled by ``r0 / r``
(``scaled_compute``): Eq. 2 with capacity ``r0 x 100`` and demands ``d x r0 / r`` is Eq. 2 with
``r x 100`` and ``d``.

A study's value is parsed once into ``Oversubscription`` (its mode and fixed ratios, one set of
bounds); the paper's table is ``PAPER_RATIOS``, the only one (the inventory reads it).

Pure: measurements come from the job history (``runtime.devices.job_history.ProfileStore``), which records
them as the study runs, per GPU architecture and model signature, so the next study on that
architecture starts from what this one learned.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from hypersack.errors import ConfigError
from hypersack.validation import MAX_OVERSUBSCRIPTION, check_name, check_number, is_finite

__all__ = ["PAPER_RATIOS", "PAPER_FALLBACK", "MODES", "SATURATED", "PROBE", "MAX_AUTO_RATIO",
           "Oversubscription", "Colocation", "RatioChoice", "paper_ratio", "auto_ratio", "colocation",
           "ratio_mode", "fixed_ratio", "scaled_compute", "ONLINE_STEP", "relearned_ratio"]

#: The paper's best ratio per architecture (Sec. V-D); ``PAPER_FALLBACK`` for the others.
PAPER_RATIOS: dict[str, float] = {"A100": 3.0, "A800": 3.0, "H100": 2.5, "H800": 2.5}
PAPER_FALLBACK = 2.0
MODES = ("auto", "paper")
#: Slowdown from which a measurement counts as at capacity (10%: timing noise stays below).
SATURATED = 1.10
#: How far beyond the largest demand that caused no slowdown ``auto`` probes next.
PROBE = 1.25
MAX_AUTO_RATIO = 8.0
#: Relative move of the learned ratio below which a run keeps the ratio it uses (``relearned_ratio``).
ONLINE_STEP = 0.02
CPU_ARCH = "cpu"


@dataclass(frozen=True)
class Colocation:
    """One trial measured beside others: ``demand_percent``, the compute demands (percent) of
    every trial on its device summed; ``slowdown``, its time per step there over alone."""
    demand_percent: float
    slowdown: float

    def to_dict(self) -> dict[str, float]:
        return {"demand_percent": self.demand_percent, "slowdown": self.slowdown}


@dataclass(frozen=True)
class RatioChoice:
    """A device architecture's ratio and why (one line, for logs and the report)."""
    ratio: float
    reason: str


def paper_ratio(arch: str) -> float:
    """The paper's ratio for ``arch`` (1 for CPU slots, whose trials use their threads fully)."""
    if arch == CPU_ARCH:
        return 1.0
    return PAPER_RATIOS.get(arch, PAPER_FALLBACK)


@dataclass(frozen=True)
class Oversubscription:
    """A study's ``oversubscription``, parsed once (``parse``): ``mode`` "auto" (None), "paper"
    or "fixed"; a fixed study gives ``single`` (one ratio for every device) or ``per_arch``
    ({architecture: ratio}, the paper's ratio for the others). Every ratio is in [1,
    ``MAX_OVERSUBSCRIPTION``]: 1 is no oversubscription."""
    mode: str = "auto"
    single: float | None = None
    per_arch: Mapping[str, float] | None = None

    @classmethod
    def parse(cls, value: Any, field: str = "oversubscription") -> "Oversubscription":
        """The value object of ``value`` (ConfigError naming ``field`` and the value)."""
        if value is None:
            return cls()
        if isinstance(value, str):
            if value not in MODES:
                raise ConfigError(field, value, "must be 'auto', 'paper', a number >= 1 or "
                                  "{architecture: number}")
            return cls(value)
        if isinstance(value, Mapping):
            ratios = {check_name(f"{field} (an architecture name)", arch):
                      _ratio(f"{field}.{arch}", r) for arch, r in value.items()}
            return cls("fixed", per_arch=ratios)
        return cls("fixed", single=_ratio(field, value))

    def ratio(self, arch: str) -> float:
        """The ratio a device of ``arch`` starts with: the fixed one, else the paper's
        (``paper_ratio``: 1 on CPU slots); ``auto`` then learns from there."""
        if self.single is not None:
            return self.single
        if self.per_arch is not None and arch in self.per_arch:
            return float(self.per_arch[arch])
        return paper_ratio(arch)


def _ratio(field: str, value: Any) -> float:
    return check_number(field, value, low=1.0, high=MAX_OVERSUBSCRIPTION,
                        hint="(1: no oversubscription)")


def ratio_mode(value: Any) -> str:
    """``auto``, ``paper`` or ``fixed`` for a study's ``oversubscription`` (None: ``auto``)."""
    return Oversubscription.parse(value).mode


def fixed_ratio(value: float | Mapping[str, float], arch: str) -> float:
    """The ratio a fixed ``oversubscription`` gives ``arch`` (a mapping without it: the paper's)."""
    return Oversubscription.parse(value).ratio(arch)


def colocation(alone_s: float, shared_s: float, demands: Iterable[float]) -> Colocation | None:
    """The measurement of a trial whose step took ``alone_s`` seconds alone and ``shared_s``
    beside the others, ``demands`` (percent) being every co-located trial's demand, its own
    included; None when a time is not a positive number or no one shared its device."""
    loads = [float(d) for d in demands]
    if len(loads) < 2 or not all(is_finite(t) and t > 0 for t in (alone_s, shared_s)):
        return None
    if not all(is_finite(d) and d > 0 for d in loads):
        return None
    return Colocation(sum(loads), float(shared_s) / float(alone_s))


def auto_ratio(arch: str, measurements: Iterable[Colocation],
               prior: float | None = None) -> RatioChoice:
    """``arch``'s ratio under ``oversubscription: auto`` (the rule in the module docstring);
    ``prior`` defaults to ``paper_ratio(arch)``."""
    if arch == CPU_ARCH:
        return RatioChoice(1.0, "CPU slots: a trial already uses its slot's threads")
    prior = paper_ratio(arch) if prior is None else float(prior)
    valid = [m for m in measurements if is_finite(m.demand_percent) and m.demand_percent > 0
             and is_finite(m.slowdown) and m.slowdown > 0]
    if not valid:
        return RatioChoice(_clamp(prior), f"{arch}: no co-location measured yet, the paper's "
                           f"ratio {prior:g}")
    estimates = [m.demand_percent / m.slowdown for m in valid if m.slowdown >= SATURATED]
    free = max((m.demand_percent for m in valid if m.slowdown < SATURATED), default=0.0)
    if estimates:
        capacity = max(statistics.median(estimates), free)
        reason = (f"{arch}: capacity {capacity:.0f}% from {len(estimates)} saturated of "
                  f"{len(valid)} co-location measurements (demand / slowdown, median)")
    else:
        capacity = max(100.0 * prior, PROBE * free)
        reason = (f"{arch}: {len(valid)} co-location measurements up to {free:.0f}% demand, "
                  f"none slowed by {SATURATED:g}x or more: probing {capacity:.0f}%")
    return RatioChoice(_clamp(capacity / 100.0), reason)


def _clamp(ratio: float) -> float:
    return round(min(MAX_AUTO_RATIO, max(1.0, ratio)), 3)


def scaled_compute(compute: float, start_ratio: float, ratio: float) -> float:
    """A compute demand (percent) for an inventory built at ``start_ratio`` that places as
    ``compute`` would at ``ratio`` (both >= 1; see the module docstring)."""
    check_number("oversubscription (the inventory's ratio)", start_ratio, low=1.0)
    check_number("oversubscription", ratio, low=1.0)
    return float(compute) * float(start_ratio) / float(ratio)


def relearned_ratio(arch: str, measurements: Iterable[Colocation], now: float,
                    step: float = ONLINE_STEP) -> RatioChoice | None:
    """``auto_ratio`` over ``arch``'s measurements during a run whose ratio is ``now``: the
    new choice when it moved by more than ``step`` x ``now``, else None (the run keeps its
    ratio, and its cached demands)."""
    choice = auto_ratio(arch, measurements)
    if abs(choice.ratio - now) <= step * now:
        return None
    return choice
