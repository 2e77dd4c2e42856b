"""Greedy placement policies for the GAP (HyperSack Sec. IV-B, Algorithms 1 and 2).

* ``ff``: first-fit: jobs in the given order; each goes to the first GPU (node order, then GPU
  order) where it fits.
* ``ffd``: first-fit decreasing: the same over the jobs sorted by expected runtime, longest first.
* ``wf``: worst-fit: each job goes to the fitting GPU with the most compute left (r x C minus the
  load); ties go to the earlier GPU in node/GPU order.
* ``wfd``: worst-fit decreasing: worst-fit over the jobs sorted by expected runtime, longest first.
* ``exclusive``: the baseline: one job per GPU at most, on GPUs with no running job, jobs in
  the given order; a GPU's oversubscription is ignored (a job needs compute <= C).

"Fits" means Eq. 2-4 hold with the job added: compute <= what is left of r x C, memory <= what is
left of D, and the node's spare cores >= the job's cores. The sort key is ``Job.expected_runtime``
over the cluster's architectures (the longest); the sort is stable, so equal runtimes keep the
given order. A job with ``gpus`` = k needs k distinct GPUs: k GPUs of one node when a node has them
(first such node for first-fit, the one with the most compute left for worst-fit), else the k best
GPUs across nodes. Everything is deterministic: no randomness, ties by node then GPU order.

Speed: worst-fit keeps one max-heap per architecture keyed on compute left; first-fit keeps one
segment tree per architecture over compute left, so a job costs O(log G) in the common case
instead of the paper's O(G). A GPU that can no longer take the smallest job is dropped for good.
"""
from __future__ import annotations

import heapq
from typing import Any, Callable, Sequence

from hypersack.core.placement.cluster import Cluster
from hypersack.core.placement.exclusive import exclusive
from hypersack.core.placement.model import EPS, Job

__all__ = ["first_fit", "first_fit_decreasing", "worst_fit", "worst_fit_decreasing", "exclusive",
           "Assignment"]

Assignment = dict  # job id -> tuple of (node_id, gpu_id)
_NEG_INF = float("-inf")


class _Load:
    """A mutable copy of what is left on each GPU and node, GPUs numbered in first-fit order."""

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
        return (self.free_c[i] + EPS >= c and self.free_m[i] + EPS >= m
                and self.free_q[self.node[i]] + EPS >= q)

    def take(self, i: int, c: float, m: float, q: float) -> None:
        self.free_c[i] -= c
        self.free_m[i] -= m
        self.free_q[self.node[i]] -= q


class _Floor:
    """The smallest demand of any job: a GPU below it on compute, memory or its node's cores can
    take no job any more and is dropped from the indexes."""

    def __init__(self, demands: Sequence[dict[str, tuple[float, float]]], jobs: Sequence[Job]):
        pairs = [pair for d in demands for pair in d.values()]
        self.c = min([c for c, _ in pairs], default=0.0)
        self.m = min([m for _, m in pairs], default=0.0)
        self.q = min([job.cpus for job in jobs], default=0.0)

    def dead(self, load: _Load, i: int) -> bool:
        return (load.free_c[i] + EPS < self.c or load.free_m[i] + EPS < self.m
                or load.free_q[load.node[i]] + EPS < self.q)


def _demands(jobs: Sequence[Job], archs: Sequence[str]) -> list[dict[str, tuple[float, float]]]:
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


def _by_runtime(jobs: Sequence[Job], archs: Sequence[str]) -> list[Job]:
    """Jobs by ``Job.expected_runtime`` over ``archs``, longest first; a stable sort."""
    def key(job: Job) -> float:
        per_arch = job.per_arch
        if not per_arch:
            return job.runtime
        return max([per_arch[a].runtime if a in per_arch else job.runtime for a in archs],
                   default=job.runtime)
    return sorted(jobs, key=key, reverse=True)


# ---- indexes over the GPUs: which fitting GPU comes first / has the most compute left ---------

class _WorstFitIndex:
    """One max-heap per architecture of (-compute left, GPU number). ``pick`` finds the best
    fitting GPU of an architecture and leaves it in the heap; after taking from a GPU, ``put``
    re-keys it (in place when it is still on top; else a new entry, the old one going stale)."""

    def __init__(self, load: _Load, floor: _Floor):
        self.load, self.floor = load, floor
        self.heaps = {arch: [(-load.free_c[i], i) for i in members if not floor.dead(load, i)]
                      for arch, members in load.by_arch.items()}
        for heap in self.heaps.values():
            heapq.heapify(heap)

    def pick(self, arch: str, c: float, m: float, q: float) -> int | None:
        load, heap, floor = self.load, self.heaps[arch], self.floor
        free_c, free_m, free_q, node = load.free_c, load.free_m, load.free_q, load.node
        rejected = []
        found = None
        while heap:
            neg, i = heap[0]
            if -neg != free_c[i]:                 # stale: updated by a multi-GPU placement
                heapq.heappop(heap)
                continue
            if -neg + EPS < c:
                break                             # no GPU of this arch has enough compute left
            if free_m[i] + EPS >= m and free_q[node[i]] + EPS >= q:
                found = i
                break
            heapq.heappop(heap)
            if not floor.dead(load, i):
                rejected.append((neg, i))
        for entry in rejected:
            heapq.heappush(heap, entry)
        return found

    def put(self, i: int, old_free_c: float) -> None:
        """GPU ``i`` had ``old_free_c`` compute left before a job took some."""
        heap, new = self.heaps[self.load.arch[i]], self.load.free_c[i]
        dead = self.floor.dead(self.load, i)
        if heap and heap[0][1] == i and -heap[0][0] == old_free_c:
            if dead:
                heapq.heappop(heap)
            else:
                heapq.heapreplace(heap, (-new, i))
        elif new != old_free_c and not dead:
            heapq.heappush(heap, (-new, i))

    def better(self, i: int, j: int) -> bool:
        fc = self.load.free_c
        return fc[i] > fc[j] or (fc[i] == fc[j] and i < j)

    def gpu_key(self, i: int) -> tuple:
        return (-self.load.free_c[i], i)


class _SegmentTree:
    """Max over positions, with "first position >= start whose value >= x" in O(log n)."""

    def __init__(self, values: Sequence[float]):
        size = 1
        while size < max(1, len(values)):
            size *= 2
        self.size, self.count = size, len(values)
        self.t = [_NEG_INF] * (2 * size)
        self.t[size:size + len(values)] = values
        for k in range(size - 1, 0, -1):
            self.t[k] = max(self.t[2 * k], self.t[2 * k + 1])

    def set(self, pos: int, value: float) -> None:
        t = self.t
        k = pos + self.size
        t[k] = value
        k >>= 1
        while k:
            t[k] = t[2 * k] if t[2 * k] >= t[2 * k + 1] else t[2 * k + 1]
            k >>= 1

    def first_at_least(self, start: int, x: float) -> int | None:
        if start >= self.count:
            return None
        t, size = self.t, self.size
        k = start + size
        while True:
            if t[k] >= x:
                while k < size:
                    k *= 2
                    if t[k] < x:
                        k += 1
                return k - size
            while k & 1:
                k >>= 1
            if k == 0:
                return None
            k += 1


class _FirstFitIndex:
    """One segment tree per architecture over compute left (dropped GPUs hold -inf)."""

    def __init__(self, load: _Load, floor: _Floor):
        self.load, self.floor = load, floor
        self.pos = {}
        self.trees = {}
        for arch, members in load.by_arch.items():
            for p, i in enumerate(members):
                self.pos[i] = p
            self.trees[arch] = _SegmentTree([_NEG_INF if floor.dead(load, i) else load.free_c[i]
                                             for i in members])

    def pick(self, arch: str, c: float, m: float, q: float) -> int | None:
        load, tree, members = self.load, self.trees[arch], self.load.by_arch[arch]
        start = 0
        while True:
            p = tree.first_at_least(start, c - EPS)
            if p is None:
                return None
            i = members[p]
            if load.free_m[i] + EPS >= m and load.free_q[load.node[i]] + EPS >= q:
                return i
            if self.floor.dead(load, i):
                tree.set(p, _NEG_INF)
            start = p + 1

    def put(self, i: int, old_free_c: float) -> None:
        value = _NEG_INF if self.floor.dead(self.load, i) else self.load.free_c[i]
        self.trees[self.load.arch[i]].set(self.pos[i], value)

    def better(self, i: int, j: int) -> bool:
        return i < j

    def gpu_key(self, i: int) -> tuple:
        return (i,)


# ---- the greedy loop ------------------------------------------------------------------------

def _pick_single(index: Any, demand: dict[str, tuple[float, float]], q: float) -> int | None:
    """The best fitting GPU over the job's architectures (pick leaves the others untouched)."""
    best = None
    for arch, (c, m) in demand.items():
        i = index.pick(arch, c, m, q)
        if i is not None and (best is None or index.better(i, best)):
            best = i
    return best


def _node_choice(load: _Load, members: list[int], demand, q: float, k: int, key) -> list[int] | None:
    if not members or load.free_q[load.node[members[0]]] + EPS < k * q:
        return None
    fitting = [i for i in members if load.fits(i, *demand[load.arch[i]], 0.0)]
    return sorted(fitting, key=key)[:k] if len(fitting) >= k else None


def _pick_multi(load: _Load, demand, q: float, k: int, index: Any, worst: bool) -> list[int] | None:
    """k distinct GPUs for a data-parallel job: one node if possible, else across nodes."""
    chosen = _pick_one_node(load, demand, q, k, index.gpu_key, worst)
    return chosen if chosen is not None else _pick_across_nodes(load, demand, q, k, index.gpu_key)


def _pick_one_node(load: _Load, demand, q: float, k: int, key, worst: bool) -> list[int] | None:
    """k GPUs of one node: the first node that has them (first-fit), or the node whose k best
    GPUs have the most compute left (worst-fit; ties: the earlier node)."""
    best, best_score = None, None
    for members in load.node_gpus:
        chosen = _node_choice(load, members, demand, q, k, key)
        if chosen is None:
            continue
        if not worst:
            return chosen
        score = sum(load.free_c[i] for i in chosen)
        if best_score is None or score > best_score + EPS:
            best, best_score = chosen, score
    return best


def _pick_across_nodes(load: _Load, demand, q: float, k: int, key) -> list[int] | None:
    """The first k GPUs in ``key`` order that fit, each node's cores shared by its chosen GPUs.
    Only GPUs that fit at the start can be chosen (cores only go down), so only they are sorted."""
    cores = list(load.free_q)
    node, arch = load.node, load.arch
    fitting = [i for i in range(len(load.keys))
               if cores[node[i]] + EPS >= q and load.fits(i, *demand[arch[i]], 0.0)]
    if len(fitting) < k:
        return None
    chosen = []
    for i in sorted(fitting, key=key):
        n = node[i]
        if cores[n] + EPS >= q:
            chosen.append(i)
            cores[n] -= q
            if len(chosen) == k:
                return chosen
    return None


class _Greedy:
    """One greedy run: ``jobs`` in the order processed, their ``demands``, the ``load`` left, and
    ``placed``: job position -> GPU numbers. ``improve`` continues from it without rebuilding."""

    def __init__(self, jobs: Sequence[Job], cluster: Cluster, index_type: type, decreasing: bool):
        load = self.load = _Load(cluster)
        archs = list(load.by_arch)
        if decreasing:
            jobs = _by_runtime(jobs, archs)
        self.jobs = jobs
        demands = self.demands = _demands(jobs, archs)
        index = index_type(load, _Floor(demands, jobs))
        worst = index_type is _WorstFitIndex
        placed: dict[int, tuple[int, ...]] = {}
        arch_of = load.arch
        for p, (job, demand) in enumerate(zip(jobs, demands)):
            q = job.cpus
            if job.gpus == 1:
                if len(demand) == 1:                       # one architecture: the hot path
                    for arch, (c, m) in demand.items():
                        i = index.pick(arch, c, m, q)
                else:
                    i = _pick_single(index, demand, q)
                if i is not None:
                    old = load.free_c[i]
                    load.take(i, *demand[arch_of[i]], q)
                    index.put(i, old)
                    placed[p] = (i,)
                continue
            chosen = _pick_multi(load, demand, q, job.gpus, index, worst)
            if chosen is not None:
                for i in chosen:
                    old = load.free_c[i]
                    load.take(i, *demand[arch_of[i]], q)
                    index.put(i, old)
                placed[p] = tuple(chosen)
        self.placed = placed

    def assignment(self) -> Assignment:
        keys, jobs = self.load.keys, self.jobs
        return {jobs[p].id: tuple(keys[i] for i in gpus) for p, gpus in self.placed.items()}


def _greedy(jobs: Sequence[Job], cluster: Cluster, index_type: type, decreasing: bool) -> Assignment:
    return _Greedy(jobs, cluster, index_type, decreasing).assignment()


def first_fit(jobs: Sequence[Job], cluster: Cluster) -> Assignment:
    """HS-FF (Algorithm 1 without sorting)."""
    return _greedy(jobs, cluster, _FirstFitIndex, decreasing=False)


def first_fit_decreasing(jobs: Sequence[Job], cluster: Cluster) -> Assignment:
    """HS-FFD (Algorithm 1, jobs sorted by expected runtime, longest first)."""
    return _greedy(jobs, cluster, _FirstFitIndex, decreasing=True)


def worst_fit(jobs: Sequence[Job], cluster: Cluster) -> Assignment:
    """HS-WF (Algorithm 2 without sorting)."""
    return _greedy(jobs, cluster, _WorstFitIndex, decreasing=False)


def worst_fit_decreasing(jobs: Sequence[Job], cluster: Cluster) -> Assignment:
    """HS-WFD (Algorithm 2, jobs sorted by expected runtime, longest first)."""
    return _greedy(jobs, cluster, _WorstFitIndex, decreasing=True)


BUILTIN: dict[str, Callable[..., Assignment]] = {
    "ff": first_fit, "ffd": first_fit_decreasing, "wf": worst_fit, "wfd": worst_fit_decreasing,
    "exclusive": exclusive,
}
