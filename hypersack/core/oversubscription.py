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

Pure: measurements come from the job history (``runtime.devices.job_history.ProfileStore``), which records
them as the study runs, per GPU architecture and model signature, so the next study on that
architecture starts from what this one learned.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from hypersack.errors import ConfigError
from hypersack.validation import check_number, is_finite

__all__ = ["PAPER_RATIOS", "PAPER_FALLBACK", "MODES", "SATURATED", "PROBE", "MAX_AUTO_RATIO",
           "Colocation", "RatioChoice", "paper_ratio", "auto_ratio", "colocation",
           "ratio_mode", "fixed_ratio", "scaled_compute"]

#: The paper's best ratio per architecture (Sec. V-D); ``PAPER_FALLBACK`` for the others.
PAPER_RATIOS: dict[str, float] = {"A100": 3.0, "A800": 3.0, "H100": 2.5, "H800": 2.5}
PAPER_FALLBACK = 2.0
MODES = ("auto", "paper")
#: Slowdown from which a measurement counts as at capacity (10%: timing noise stays below).
SATURATED = 1.10
#: How far beyond the largest demand that caused no slowdown ``auto`` probes next.
PROBE = 1.25
MAX_AUTO_RATIO = 8.0
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


def ratio_mode(value: Any) -> str:
    """``auto``, ``paper`` or ``fixed`` for a study's ``oversubscription`` (None: ``auto``)."""
    if value is None:
        return "auto"
    if isinstance(value, str):
        if value not in MODES:
            raise ConfigError("oversubscription", value,
                              "must be 'auto', 'paper', a number >= 1 or {architecture: number}")
        return value
    return "fixed"


def fixed_ratio(value: float | Mapping[str, float], arch: str) -> float:
    """The ratio a fixed ``oversubscription`` gives ``arch`` (a mapping without it: the paper's)."""
    if isinstance(value, Mapping):
        return float(value[arch]) if arch in value else paper_ratio(arch)
    return float(value)


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
