"""The baseline every figure is compared with: one job per GPU (HyperSack Sec. V-A3).

``exclusive`` gives each job in the given order the first idle GPU(s), in node then GPU order,
where it fits alone without oversubscription: compute <= C, memory <= D, and the node's spare
cores. A GPU that already runs a job is not idle. A data-parallel job takes k idle GPUs of one
node when a node has them, else the first k idle GPUs across nodes.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypersack.core.placement.cluster import Cluster
from hypersack.core.placement.model import EPS, Job

__all__ = ["exclusive"]


def _idle_gpus(cluster: Cluster) -> list[tuple[int, Any, Any]]:
    """(node number, node, gpu) of every GPU without a running job, in first-fit order."""
    busy = {dev for run in cluster.running.values() for dev in run.devices}
    return [(n, node, gpu) for n, node in enumerate(cluster.nodes) for gpu in node.gpus
            if (node.id, gpu.id) not in busy]


def exclusive(jobs: Sequence[Job], cluster: Cluster) -> dict:
    """One job per idle GPU, jobs in the given order, each on the first idle GPU(s) it fits
    without oversubscription (compute <= C, memory <= D, cores <= what the node has left)."""
    idle = _idle_gpus(cluster)
    cores = [cluster.free_cpus(node.id) for node in cluster.nodes]
    out: dict = {}
    for job in jobs:
        if not idle:
            break
        if job.gpus == 1:
            chosen = next(([slot] for slot in idle if cores[slot[0]] + EPS >= job.cpus
                           and _fits_alone(job, slot[2])), None)
        else:
            chosen = _exclusive_choice([slot for slot in idle if _fits_alone(job, slot[2])], cores, job)
        if chosen is None:
            continue
        for slot in chosen:
            idle.remove(slot)
            cores[slot[0]] -= job.cpus
        out[job.id] = tuple((node.id, gpu.id) for _, node, gpu in chosen)
    return out


def _fits_alone(job: Job, gpu: Any) -> bool:
    demand = job.demand(gpu.arch)
    return demand.compute <= gpu.compute + EPS and demand.memory_gb <= gpu.memory_gb + EPS


def _exclusive_choice(fitting: list, cores: list[float], job: Job) -> list | None:
    k, q = job.gpus, job.cpus
    by_node: dict[int, list] = {}
    for slot in fitting:
        by_node.setdefault(slot[0], []).append(slot)
    for n, slots in by_node.items():
        if len(slots) >= k and cores[n] + EPS >= k * q:
            return slots[:k]
    left = list(cores)
    chosen = []
    for slot in fitting:
        if left[slot[0]] + EPS >= q:
            chosen.append(slot)
            left[slot[0]] -= q
            if len(chosen) == k:
                return chosen
    return None
