"""What every policy reads: a mutable table of what is left on each GPU and node, and the jobs'
per-architecture demands (HyperSack Sec. III-B).

GPUs are numbered in first-fit order (node order, then GPU order within the node); ``keys[i]`` is
GPU ``i``'s ``(node_id, gpu_id)``. ``free_c``/``free_m`` are compute (percent, of r x C) and
memory (GB) left per GPU, ``free_q`` the cores left per node. A job "fits" GPU ``i`` when
``free_c[i] + EPS >= c``, ``free_m[i] + EPS >= m`` and ``free_q[node[i]] + EPS >= q``: the one
comparison every policy uses (``hypersack.placement.check`` is the one place Eq. 1-4 are
*verified*, with the same arithmetic).
"""
from __future__ import annotations

from itertools import chain, repeat
from operator import attrgetter, itemgetter, methodcaller
from typing import Any, Callable, Sequence

import numpy as np

from hypersack.placement.cluster import Cluster
from hypersack.placement.model import EPS, Job

__all__ = ["Load", "Demand", "InJobOrder", "demands", "demand_table", "by_runtime", "pick_one_node", "pick_k_in_order"]

Demand = dict[str, tuple[float, float]]  # architecture -> (compute, memory_gb) per GPU


class InJobOrder(dict):
    """A policy's answer whose keys are in the order of the jobs the policy was given: a
    built-in policy that builds its answer so returns it as this type, and ``assign`` then
    need not re-order it (``assign`` returns a plain dict)."""


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


_TOP = attrgetter("compute", "memory_gb", "runtime", "cpus", "gpus")
_PER_ARCH = attrgetter("per_arch")
_ITEMS = methodcaller("items")
_ARCH_DEMAND = attrgetter("compute", "memory_gb", "runtime")
_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_ROW_NAMES: dict[tuple[str, ...], tuple[str, Any]] = {}


def _row_name(archs: tuple[str, ...]) -> tuple[str, Any]:
    """The attribute a Job's cached row for ``archs`` is stored under (the same in every
    process: the architecture names, hex-encoded), and its getter."""
    found = _ROW_NAMES.get(archs)
    if found is None:
        name = "_demand_row_" + "_".join(a.encode().hex() for a in archs)
        found = (name, attrgetter(name))
        if len(_ROW_NAMES) < 256:
            _ROW_NAMES[archs] = found
    return found


def demand_table(jobs: Sequence[Job], archs: tuple[str, ...]) -> np.ndarray:
    """The jobs' numbers as a float64 array, one row per job (in order), ``k`` = max(1,
    len(archs)) columns each of compute and memory_gb, one per architecture of ``archs`` (with
    no architecture: the top-level values), then ``expected_runtime(archs)``, cpus and gpus:
    shape (len(jobs), 2k + 3), read-only (copy what you change).

    The rows are read from the per-job cache when every job has one for ``archs`` (one
    attribute read per job); else they are computed for all jobs at once and, when every job is
    exactly a ``Job``, cached on them. The cache cannot go stale: a Job is frozen (its fields and
    its ``per_arch``, a read-only mapping of frozen ``ArchDemand``, never change after
    construction), the row depends only on those fields and ``archs`` (it is stored under a name
    made of ``archs``), and ``Job.renamed``, which copies the cache, changes only the id, which
    the row does not hold. Subclasses of Job are never cached (they could read differently)."""
    jobs = jobs if isinstance(jobs, list) else list(jobs)
    n = len(jobs)
    width = 2 * max(1, len(archs)) + 3
    name, getter = _row_name(archs)
    try:
        rows = list(map(getter, jobs))
    except AttributeError:
        table = _compute_table(jobs, archs, width)
        if n and set(map(type, jobs)) == {Job}:
            _store_rows(jobs, name, table)
        table.flags.writeable = False
        return table
    return np.frombuffer(b"".join(rows), dtype=np.float64).reshape(n, width)


def _store_rows(jobs: list[Job], name: str, table: np.ndarray) -> None:
    """Cache row p of ``table`` (its bytes) on ``jobs[p]`` under ``name`` (``demand_table``), and
    on its origin when it is a renamed copy (``Job``)."""
    data = table.tobytes()
    size = table.shape[1] * table.itemsize
    ends = range(size, len(data) + size, size)
    rows = map(data.__getitem__, map(slice, range(0, len(data), size), ends))
    for job, row in zip(jobs, rows):
        found = job.__dict__
        found[name] = row
        origin = found.get("_origin")
        if origin is not None:
            origin.__dict__[name] = row          # renamed copies made from now on start with it


def _compute_table(jobs: list[Job], archs: tuple[str, ...], width: int) -> np.ndarray:
    """``demand_table`` computed from the jobs' fields, all jobs at once."""
    n, k = len(jobs), max(1, len(archs))
    top = np.fromiter(chain.from_iterable(map(_TOP, jobs)), dtype=np.float64, count=5 * n).reshape(n, 5)
    table = np.empty((n, width))
    table[:, :k] = top[:, 0:1]
    table[:, k:2 * k] = top[:, 1:2]
    table[:, 2 * k:] = top[:, 2:]
    per_arch = list(map(_PER_ARCH, jobs))
    sizes = np.fromiter(map(len, per_arch), dtype=np.int64, count=n)
    if not archs or not sizes.any():
        return table
    items = list(chain.from_iterable(map(_ITEMS, per_arch)))
    arch_no = {a: i for i, a in enumerate(archs)}
    code = np.fromiter(map(arch_no.get, map(_FIRST, items), repeat(-1)), dtype=np.int64, count=len(items))
    values = np.fromiter(chain.from_iterable(map(_ARCH_DEMAND, map(_SECOND, items))), dtype=np.float64,
                         count=3 * len(items)).reshape(-1, 3)
    owner = np.repeat(np.arange(n), sizes)
    known = code >= 0
    owner, code, values = owner[known], code[known], values[known]
    table[owner, code] = values[:, 0]
    table[owner, k + code] = values[:, 1]
    # expected_runtime: the longest over archs; the top-level runtime counts where an arch of
    # ``archs`` is not in the job's per_arch (per_arch's keys are distinct)
    named = np.bincount(owner, minlength=n)
    longest = np.where(named < len(archs), top[:, 2], -np.inf)
    np.maximum.at(longest, owner, values[:, 2])
    table[:, 2 * k] = longest
    return table


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
