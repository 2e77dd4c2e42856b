"""What happened on every simulated device: who ran where and when, and how busy it was.

The executor calls :meth:`Timeline.account` before every change on a device, so each device keeps
three exact integrals over time (piecewise-constant between changes):

* allocated compute: ``min(1, sum(c_j) / (r * C))`` (occupancy: assigned over what Eq. 2 allows),
* delivered utilisation: ``min(1, sum(c_j * rate_j) / C)`` (what the trials got, see ``perf``),
* busy: 1 while at least one trial holds the device,

and the seconds it was alive. ``intervals`` lists every (trial, attempt) stay on a device, for the
per-GPU CSV and the Gantt chart.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

__all__ = ["Interval", "Timeline", "write_csv", "write_gantt"]


@dataclass
class Interval:
    trial_id: int
    attempt: int
    node: str
    gpu: str
    start: float
    end: float | None
    compute: float          # c_j: percent of the device asked for
    memory_gb: float
    outcome: str = "running"   # finished | stopped | failed | lost | running


class _DeviceStats:
    __slots__ = ("since", "alive_from", "alive_until", "alloc", "used", "busy",
                 "alloc_now", "used_now", "busy_now")

    def __init__(self, t: float):
        self.since = t
        self.alive_from: float = t
        self.alive_until: float | None = None
        self.alloc = self.used = self.busy = 0.0
        self.alloc_now = self.used_now = self.busy_now = 0.0


class Timeline:
    def __init__(self) -> None:
        self._stats: dict[tuple[str, str], _DeviceStats] = {}
        self.intervals: list[Interval] = []

    def add_device(self, device: tuple[str, str], t: float) -> None:
        self._stats[device] = _DeviceStats(t)

    def remove_device(self, device: tuple[str, str], t: float) -> None:
        self.account(device, t, 0.0, 0.0, 0.0)
        self._stats[device].alive_until = t

    def account(self, device: tuple[str, str], t: float, alloc: float, used: float, busy: float) -> None:
        """Close the integrals up to ``t`` and set the new levels (fractions in [0, 1])."""
        s = self._stats[device]
        dt = t - s.since
        if dt > 0:
            s.alloc += s.alloc_now * dt
            s.used += s.used_now * dt
            s.busy += s.busy_now * dt
        s.since = t
        s.alloc_now, s.used_now, s.busy_now = alloc, used, busy

    def summary(self, end: float) -> dict[str, float]:
        """Means over every device's alive time within [0, end]: occupancy (allocated compute),
        utilisation (delivered), busy fraction; plus device-seconds."""
        alive = alloc = used = busy = 0.0
        for s in self._stats.values():
            stop = end if s.alive_until is None else min(end, s.alive_until)
            span = max(0.0, stop - s.alive_from)
            alive += span
            tail = max(0.0, stop - s.since) if s.alive_until is None else 0.0
            alloc += s.alloc + s.alloc_now * tail
            used += s.used + s.used_now * tail
            busy += s.busy + s.busy_now * tail
        if alive <= 0:
            return {"occupancy": 0.0, "utilization": 0.0, "busy": 0.0, "device_seconds": 0.0}
        return {"occupancy": alloc / alive, "utilization": used / alive, "busy": busy / alive,
                "device_seconds": alive}

    def devices(self) -> list[tuple[str, str]]:
        return list(self._stats)


def write_csv(intervals: Iterable[Interval], path: str | Path) -> None:
    """One row per (trial attempt, device) stay: node, gpu, trial, attempt, start_s, end_s, ..."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["node", "gpu", "trial_id", "attempt", "start_s", "end_s", "compute_pct",
                    "memory_gb", "outcome"])
        for iv in sorted(intervals, key=lambda i: (i.node, i.gpu, i.start, i.trial_id)):
            w.writerow([iv.node, iv.gpu, iv.trial_id, iv.attempt, f"{iv.start:.3f}",
                        "" if iv.end is None else f"{iv.end:.3f}", f"{iv.compute:g}",
                        f"{iv.memory_gb:g}", iv.outcome])


def write_gantt(intervals: list[Interval], path: str | Path, title: str = "") -> bool:
    """A Gantt chart PNG (one row per GPU; stacked bars where trials share it). Returns False,
    writing nothing, when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = sorted({(iv.node, iv.gpu) for iv in intervals})
    index = {dev: i for i, dev in enumerate(rows)}
    fig, ax = plt.subplots(figsize=(12, max(2.5, 0.35 * len(rows) + 1)))
    colours = plt.get_cmap("tab20")
    for dev in rows:
        stays = [iv for iv in intervals if (iv.node, iv.gpu) == dev and iv.end is not None]
        lanes, slots = _assign_lanes(stays)
        height = 0.8 / lanes
        for iv, slot in zip(stays, slots):
            y = index[dev] - 0.4 + slot * height
            ax.broken_barh([(iv.start, _end(iv) - iv.start)], (y, height),
                           facecolors=colours(iv.trial_id % 20), edgecolor="black", linewidth=0.2)
    ax.set_yticks(range(len(rows)), [f"{n}/{g}" for n, g in rows])
    ax.set_xlabel("simulated time (s)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _end(stay: Interval) -> float:
    """The end of a closed stay (a stay still open ends where it starts)."""
    return stay.start if stay.end is None else stay.end


def _assign_lanes(stays: list[Interval]) -> tuple[int, list[int]]:
    """Stack concurrent stays of one device: (number of lanes, each stay's lane)."""
    order = sorted(range(len(stays)), key=lambda i: (stays[i].start, stays[i].trial_id))
    lane_end: list[float] = []
    slots = [0] * len(stays)
    for i in order:
        s = stays[i]
        for lane, end in enumerate(lane_end):
            if end <= s.start:
                lane_end[lane], slots[i] = _end(s), lane
                break
        else:
            lane_end.append(_end(s))
            slots[i] = len(lane_end) - 1
    return max(1, len(lane_end)), slots
