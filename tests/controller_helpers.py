"""A controller's inventory for tests: ``n`` devices of one trial each (CPU slots, as a CPU-only
machine gets), so that "n free slots" of a test is "n idle devices" of the placement path."""
from __future__ import annotations

import dataclasses

from hypersack.core.controller import ControllerOptions
from hypersack.core.trial import Launch
from hypersack.placement import GPU, Cluster, Node

NODE = "n0"


def slot(i: int) -> tuple[str, str]:
    """The ``(node, device)`` of device ``i``."""
    return NODE, f"cpu{i}"


def slot_gpu(i: int) -> GPU:
    """Device ``i`` (for a DeviceAdded event)."""
    return GPU(slot(i)[1], "cpu", 1.0)


def slots(n: int) -> Cluster:
    """One node with ``n`` devices, each taking one trial of the default demand (100% compute)."""
    return Cluster([Node(NODE, 64, tuple(slot_gpu(i) for i in range(n)))])


def on_slots(n: int, policy: str = "wfd", **options) -> ControllerOptions:
    """A controller's options placing trials on ``slots(n)`` with ``policy`` (and ``options``:
    packs, time-sharing, demand)."""
    return ControllerOptions(inventory=slots(n), placement=policy, **options)


def unplaced(launch: Launch) -> Launch:
    """``launch`` without its devices (to compare the rest)."""
    return dataclasses.replace(launch, devices=())


def count_placement_runs(alloc) -> list[int]:
    """The number of jobs of each placement run ``alloc`` (an ``Allocator``) makes from here on."""
    runs: list[int] = []
    real = alloc._assign

    def counting(jobs):
        runs.append(len(jobs))
        return real(jobs)
    alloc._assign = counting
    return runs
