"""What every policy reads: a mutable table of what is left on each GPU and node, and the jobs'
per-architecture demands (HyperSack Sec. III-B).

GPUs are numbered in first-fit order (node order, then GPU order within the node); ``keys[i]`` is
GPU ``i``'s ``(node_id, gpu_id)``. ``free_c``/``free_m`` are compute (percent, of r x C) and
memory (GB) left per GPU, ``free_q`` the cores left per node. A job "fits" GPU ``i`` when
``free_c[i] + EPS >= c``, ``free_m[i] + EPS >= m`` and ``free_q[node[i]] + EPS >= q``: the one
comparison every policy uses (``hypersack.core.placement.check`` is the one place Eq. 1-4 are
*verified*, with the same arithmetic).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from hypersack.core.placement.cluster import Cluster
from hypersack.core.placement.model import EPS, Job

__all__ = ["Load", "Demand", "demands", "by_runtime", "pick_one_node", "pick_k_in_order"]

Demand = dict[str, tuple[float, float]]  # architecture -> (compute, memory_gb) per GPU


class Load:
    """What is left on each GPU and node of ``cluster`` (see the module doc)."""

    def __init__(self, cluster: Cluster):
        self.keys: list[tuple] = []
        self.arch: list[str] = []
        self.node: list[int] = []
        self.free_c: list[float] = []
        self.free_m: list[float] = []
        self.free_q: list[float] = []
        self.node_gpus: list[list[int]] = []
        self.by_arch: dict[str, list[int]] = {}
        for n, node in enumerate(cluster.nodes):
            self.free_q.append(cluster.free_cpus(node.id))
            members = []
            for gpu in node.gpus:
                i = len(self.keys)
                free_c, free_m = cluster.free(node.id, gpu.id)
                self.keys.append((node.id, gpu.id))
                self.arch.append(gpu.arch)
                self.node.append(n)
                self.free_c.append(free_c)
                self.free_m.append(free_m)
                self.by_arch.setdefault(gpu.arch, []).append(i)
                members.append(i)
            self.node_gpus.append(members)

    def fits(self, i: int, c: float, m: float, q: float) -> bool:
        """Whether (c, m) fits GPU ``i`` and ``q`` cores its node."""
        return (self.free_c[i] + EPS >= c and self.free_m[i] + EPS >= m
                and self.free_q[self.node[i]] + EPS >= q)

    def take(self, i: int, c: float, m: float, q: float) -> None:
        """Count (c, m) more on GPU ``i`` and ``q`` more cores on its node (negative: give back)."""
        self.free_c[i] -= c
        self.free_m[i] -= m
        self.free_q[self.node[i]] -= q


def demands(jobs: Sequence[Job], archs: Sequence[str]) -> list[Demand]:
    """Per job: architecture -> (compute, memory_gb) per GPU, for the cluster's architectures."""
    out = []
    for job in jobs:
        per_arch = job.per_arch
        if not per_arch:
            out.append(dict.fromkeys(archs, (job.compute, job.memory_gb)))
        else:
            own = (job.compute, job.memory_gb)
            out.append({a: (per_arch[a].compute, per_arch[a].memory_gb) if a in per_arch else own
                        for a in archs})
    return out


def by_runtime(jobs: Sequence[Job], archs: Sequence[str]) -> list[Job]:
    """Jobs by ``Job.expected_runtime`` over ``archs``, longest first; a stable sort."""
    def key(job: Job) -> float:
        per_arch = job.per_arch
        if not per_arch:
            return job.runtime
        return max([per_arch[a].runtime if a in per_arch else job.runtime for a in archs],
                   default=job.runtime)
    return sorted(jobs, key=key, reverse=True)


def pick_one_node(load: Load, demand: Demand, q: float, k: int, key: Callable[[int], Any],
                  worst: bool) -> list[int] | None:
    """k GPUs of one node for a data-parallel job: the first node that has them (first-fit), or
    the node whose k best GPUs (by ``key``) have the most compute left (worst-fit; ties: the
    earlier node). Within a node the k first GPUs in ``key`` order that fit are taken."""
    best, best_score = None, None
    for members in load.node_gpus:
        if not members or load.free_q[load.node[members[0]]] + EPS < k * q:
            continue
        fitting = [i for i in members if load.fits(i, *demand[load.arch[i]], 0.0)]
        if len(fitting) < k:
            continue
        chosen = sorted(fitting, key=key)[:k]
        if not worst:
            return chosen
        score = sum(load.free_c[i] for i in chosen)
        if best_score is None or score > best_score + EPS:
            best, best_score = chosen, score
    return best


def pick_k_in_order(candidates: Any, node: Sequence[int], free_q: Sequence[float], q: float,
                    k: int) -> list[int] | None:
    """The first k of ``candidates`` (GPU numbers that fit, best first) whose nodes still have
    ``q`` cores each once the earlier chosen GPUs of the node took theirs; None if fewer."""
    cores: dict[int, float] = {}
    chosen = []
    for i in candidates:
        left = cores.get(node[i], free_q[node[i]])
        if left + EPS >= q:
            chosen.append(i)
            cores[node[i]] = left - q
            if len(chosen) == k:
                return chosen
    return None
