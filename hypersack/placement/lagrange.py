"""The ``lagrange`` policy: Lagrangian shadow prices, then one greedy pass. ``fill``'s price
start without its search, at a cost that grows about linearly with the jobs: ``auto``'s policy
for calls too large for ``fill``.

1. Data-parallel jobs (``gpus`` > 1) are placed first, worst-fit in WFD's order, and stay.
2. *Units*: the GPUs are pooled by (node, architecture) into groups (``prices`` module doc: the
   pooled LP and its dual). Up to ``MAX_UNITS`` groups, each group is a unit with its node's
   cores; above, the groups are pooled further by *type* (architecture, compute and memory left
   per GPU; by architecture alone if that still gives more than ``MAX_UNITS``), a type holding
   the cores of its nodes shared by GPU count. The single-GPU jobs' demands per unit form jobs x
   units arrays.
3. *Prices* per unit of compute and memory of each unit and per core: ``steps`` steps on every
   k-th job (at most ``sample`` jobs, capacities scaled by the sample's share), from zero prices.
   Per group (few units): subgradient steps of the dual with Polyak's step towards 0.97 of the
   lowest bound seen (or of a fractional-knapsack ceiling when lower), the factor halved after 5
   steps without a lower bound; the prices of the lowest bound are kept. Pooled by type (many
   identical units, where a plain subgradient moves one tied unit at a time): steps on the
   smoothed dual, each job spread over the units by a softmax of its reduced profits (temperature
   ``TAU`` x the mean job compute, "not placed" at 0), each price moved by ``ETA / sqrt(k)`` x
   its resource's overuse; the last prices are kept.
4. *Greedy*: jobs by best reduced profit (``R[p, u] = c_pu (1 - u_c) - u_m m_pu - u_q q_p``),
   highest first (ties: more compute, then the given order); each goes to the unit of the highest
   ``R - TIE x c x (its largest share of the unit's compute, memory or cores)`` (the tie-break:
   the unit it strains least) that has one GPU taking it and the node's cores, there to the first
   such group (node order) and in it the *best-fitting* GPU (least compute left after it; ties
   the lower number). A job whose best reduced profit is not positive is still placed if it fits.
   One greedy for both kinds of unit (``lagrange_kernels.greedy``); a unit whose bounds (the
   most compute and memory left on one of its GPUs, the most cores on one of its nodes; made
   exact after a miss, capacities only shrink within a call) are below the job is passed over
   without looking at its groups.

Kernels (``hypersack.placement.jit``: numba where installed, ``pip install hypersack[fast]``; the same
functions as plain Python otherwise, same answers, slower): the greedy and the smoothed price
steps (``lagrange_kernels``). The subgradient steps are ``prices.descend`` (numpy; shared with
``fill``). The jobs are read once into arrays (``_demand_arrays``): no per-job Python work after.

Per call: O(steps x min(jobs, sample) x units) for the prices, O(jobs x units log units) numpy
work for the greedy's arrays and order, and in the kernel per job O(units) plus O(groups of a
unit x GPUs of a group) for the unit it goes to. Every placed job fits (Eq. 2-4) on what was
left when it was placed. Deterministic.
"""
from __future__ import annotations

from operator import attrgetter
from typing import Any, Hashable, Sequence

import numpy as np

from hypersack.placement.jit import warn_interpreted
from hypersack.placement.cluster import Cluster
from hypersack.placement.live import LiveCluster
from hypersack.placement.load import Load, by_runtime
from hypersack.placement.model import EPS, Job
from hypersack.placement.prices import descend
from hypersack.validation import check_integer

__all__ = ["lagrange", "unit_prices", "STEPS", "SAMPLE"]

STEPS = 120         # price steps
SAMPLE = 512        # jobs the price steps look at (every k-th single-GPU job)
INTERPRETED_WARN_PAIRS = 1_000_000   # jobs x GPUs from which uncompiled kernels warn (core.jit)
MAX_UNITS = 16      # more groups than this are priced and chosen by type
ETA = 0.2           # smoothed steps (pooled units): the first step's size, per unit of overuse
TAU = 0.2           # smoothed steps: softmax temperature, in mean job compute
TIE = 0.01          # weight of the tie-break between units (``_share``)
TARGET = 0.97       # Polyak's target: this fraction of the lowest bound seen


def _kernels() -> Any:
    """``lagrange_kernels``, imported on first use: importing it imports numba (about 0.3 s of
    CPU), which a process that never runs ``lagrange`` should not pay."""
    from hypersack.placement import lagrange_kernels
    return lagrange_kernels


def _demand_arrays(jobs: Sequence[Job], archs: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per job x architecture: compute and memory per GPU; per job: cores. One pass reads the
    jobs' own values, one per architecture its per-architecture demands."""
    count = len(jobs)
    own_c, own_m, cores = (np.fromiter(map(attrgetter(name), jobs), dtype=float, count=count)
                           for name in ("compute", "memory_gb", "cpus"))
    c = np.repeat(own_c[:, None], len(archs), axis=1)
    m = np.repeat(own_m[:, None], len(archs), axis=1)
    per_arch = list(map(attrgetter("per_arch"), jobs))
    for a, arch in enumerate(archs):
        found = [d.get(arch) for d in per_arch]
        missing = found.count(None)
        if missing == count:
            continue
        if missing:
            rows = np.fromiter([p for p, d in enumerate(found) if d is not None], dtype=np.int64,
                               count=count - missing)
            found = [found[p] for p in rows.tolist()]
        else:
            rows = np.arange(count)
        c[rows, a] = np.fromiter(map(attrgetter("compute"), found), dtype=float, count=len(found))
        m[rows, a] = np.fromiter(map(attrgetter("memory_gb"), found), dtype=float, count=len(found))
    return c, m, cores


def unit_prices(c: np.ndarray, m: np.ndarray, q: np.ndarray, fit: np.ndarray, cap_c: np.ndarray,
                cap_m: np.ndarray, cap_q: np.ndarray, node: np.ndarray, steps: int,
                sample: int, smooth: bool = False) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """Step 3 of the module doc on jobs x units demands ``c``, ``m`` (cores ``q`` per job),
    ``fit`` (False: no GPU of the unit takes the job), unit capacities ``cap_c``, ``cap_m``,
    capacities ``cap_q`` of the core holders and each unit's holder ``node``; ``smooth``: the
    smoothed steps (``lagrange_kernels.smooth_prices``), else the subgradient steps of
    ``prices.descend``. Returns (the lowest dual bound seen on the sample, scaled back to all
    jobs; prices per unit of compute and of memory per unit; per core per holder). The bound is
    an upper bound on the placed compute when every job is sampled and each unit is a group."""
    jobs, g_count = c.shape
    n_count = len(cap_q)
    zero = (np.zeros(g_count), np.zeros(g_count), np.zeros(n_count))
    if jobs == 0 or g_count == 0 or steps == 0:
        return float(np.inf), *zero
    stride = max(1, -(-jobs // max(1, sample)))
    rows = slice(None, None, stride)
    share = len(range(0, jobs, stride)) / jobs
    cs, ms, qs, fs = c[rows], m[rows], q[rows], fit[rows]
    kc, km, kq = cap_c * share, cap_m * share, cap_q * share
    sc = np.divide(cs, kc, out=np.zeros(cs.shape), where=(kc > EPS)[None, :])
    sm = np.divide(ms, km, out=np.zeros(ms.shape), where=(km > EPS)[None, :])
    kqg = kq[node]
    sq = np.divide(np.broadcast_to(qs[:, None], cs.shape), kqg, out=np.zeros(cs.shape),
                   where=(kqg > EPS)[None, :])
    node = np.ascontiguousarray(node, dtype=np.int64)
    if smooth:
        kernels = _kernels()
        tau = max(TAU * float(np.where(fs, cs, 0.0).max(axis=1).mean()), 1e-6)
        base = np.where(fs, cs, -np.inf)
        node_c = np.bincount(node, weights=kc, minlength=n_count)
        best_l, pc, pm, pq = kernels.smooth_prices(base, sc, sm, sq, node, n_count, kc, node_c, steps, tau, ETA)
    else:
        # Ties (identical groups, and every group at zero prices) split the jobs evenly, not all
        # on the first group: the subgradient then moves every group's price at once.
        idx = np.arange(len(cs))
        spread = ((idx[:, None] * 7919 + np.arange(g_count)[None, :] * 104729) % 1009) * (1e-7 / 1009)
        base = np.where(fs, cs + spread, -np.inf)
        ceiling = _knapsack_ceiling(cs, ms, qs, fs, kc, km, kq)
        best_l, kept = descend(base, sc, sm, sq, node, n_count, steps, ceiling, fraction=TARGET, smallest=0.0)
        pc, pm, pq = kept[-1]

    def per_unit(p: np.ndarray, cap: np.ndarray) -> np.ndarray:
        return np.divide(p, cap, out=np.zeros(p.shape), where=cap > EPS)
    return best_l / share, per_unit(pc, kc), per_unit(pm, km), per_unit(pq, kq)


def _knapsack_ceiling(c: np.ndarray, m: np.ndarray, q: np.ndarray, fit: np.ndarray, cap_c: np.ndarray,
                      cap_m: np.ndarray, cap_q: np.ndarray) -> float:
    """The lowest of three fractional-knapsack bounds on the placed compute, each with one
    resource alone (all compute, all memory, all cores of the cluster), every job at its most
    compute and least demand of that resource over the groups that fit it."""
    ok = fit.any(axis=1)
    value = np.where(fit, c, 0.0).max(axis=1)[ok]
    out = float(value.sum())
    for use, cap in ((np.where(fit, c, np.inf).min(axis=1)[ok], cap_c.sum()),
                     (np.where(fit, m, np.inf).min(axis=1)[ok], cap_m.sum()),
                     (np.broadcast_to(q[:, None], c.shape)[ok, 0], cap_q.sum())):
        order = np.argsort(-value / np.maximum(use, EPS), kind="stable")
        spent = np.cumsum(use[order])
        k = int(np.searchsorted(spent, cap, side="right"))
        got = float(value[order[:k]].sum())
        if k < len(order):
            before = float(spent[k - 1]) if k else 0.0
            got += float(value[order[k]]) * (cap - before) / max(float(use[order[k]]), EPS)
        out = min(out, got)
    return out


def _csr(owner: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(ptr, members): the positions with ``owner`` k are ``members[ptr[k]:ptr[k + 1]]``, ascending."""
    members = np.argsort(owner, kind="stable").astype(np.int64)
    ptr = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=count), out=ptr[1:])
    return ptr, members


class _Pools:
    """The GPUs of a Load pooled by (node, architecture): ``gpus`` per group (lists of GPU
    numbers; as arrays ``ptr``/``members``, see ``_csr``), ``arch`` (position in ``archs``) and
    ``node`` per group, capacities left per group and per node, the most compute and memory left
    on one GPU of each group; ``free_c``/``free_m`` per GPU (floored at 0: ``cap_*``, ``top_*``)."""

    def __init__(self, load: Load, archs: Sequence[str]):
        groups: dict[tuple[int, str], int] = {}
        group_of = np.fromiter([groups.setdefault(key, len(groups)) for key in zip(load.node, load.arch)],
                               dtype=np.int64, count=len(load.arch))
        self.ptr, self.members = _csr(group_of, len(groups))
        self.gpus = [self.members[self.ptr[g]:self.ptr[g + 1]].tolist() for g in range(len(groups))]
        arch_at = {a: k for k, a in enumerate(archs)}
        self.arch = np.array([arch_at[a] for _, a in groups], dtype=np.int64)
        self.node = np.array([n for n, _ in groups], dtype=np.int64)
        free_c = np.maximum(np.array(load.free_c, dtype=float), 0.0)
        free_m = np.maximum(np.array(load.free_m, dtype=float), 0.0)
        self.cap_c = np.bincount(group_of, weights=free_c, minlength=len(groups))
        self.cap_m = np.bincount(group_of, weights=free_m, minlength=len(groups))
        self.cap_q = np.maximum(np.array(load.free_q, dtype=float), 0.0)
        self.top_c = np.full(len(groups), -np.inf)
        self.top_m = np.full(len(groups), -np.inf)
        np.maximum.at(self.top_c, group_of, free_c)
        np.maximum.at(self.top_m, group_of, free_m)


class _Units:
    """What the prices and the greedy work on: each group alone when there are at most
    ``MAX_UNITS`` groups, else the groups pooled by type (architecture, compute and memory left on
    their GPUs; by architecture alone if that still makes more than ``MAX_UNITS``), each type with
    the cores of its nodes shared by GPU count. ``groups`` per unit (numpy, node order; as one
    array ``ptr``/``members``, see ``_csr``), ``arch``
    per unit; ``cap_c``/``cap_m`` per unit, ``cap_q`` per core holder and ``holder`` per unit
    (the node for single groups, the unit itself for types)."""

    def __init__(self, pools: _Pools):
        g_count = len(pools.gpus)
        if g_count <= MAX_UNITS:
            keys: list[Any] = list(range(g_count))
        else:
            keys = [(int(a), round(float(c), 1), round(float(m), 1))
                    for a, c, m in zip(pools.arch, pools.top_c, pools.top_m)]
            if len(set(keys)) > MAX_UNITS:
                keys = [int(a) for a in pools.arch]
        members: dict[Any, list[int]] = {}
        for g, key in enumerate(keys):
            members.setdefault(key, []).append(g)
        self.groups = [np.array(gs, dtype=np.int64) for gs in members.values()]
        self.ptr = np.zeros(len(self.groups) + 1, dtype=np.int64)
        np.cumsum([len(gs) for gs in self.groups], out=self.ptr[1:])
        self.members = np.concatenate(self.groups)
        self.single = g_count <= MAX_UNITS
        self.arch = np.array([pools.arch[gs[0]] for gs in self.groups], dtype=int)
        self.cap_c = np.array([pools.cap_c[gs].sum() for gs in self.groups])
        self.cap_m = np.array([pools.cap_m[gs].sum() for gs in self.groups])
        self.top_c = np.array([pools.top_c[gs].max() for gs in self.groups])
        self.top_m = np.array([pools.top_m[gs].max() for gs in self.groups])
        if self.single:
            self.holder, self.cap_q = pools.node.copy(), pools.cap_q
        else:
            size = np.array([len(g) for g in pools.gpus], dtype=float)
            node_gpus = np.bincount(pools.node, weights=size, minlength=len(pools.cap_q))
            share = pools.cap_q[pools.node] * size / np.maximum(node_gpus[pools.node], 1.0)
            self.holder = np.arange(len(self.groups))
            self.cap_q = np.array([share[gs].sum() for gs in self.groups])


def _share(c: np.ndarray, m: np.ndarray, q: np.ndarray, cap_c: np.ndarray, cap_m: np.ndarray,
           cap_q: np.ndarray) -> np.ndarray:
    """Per job x unit: the job's compute times its largest share of the unit's compute, memory
    or cores (the greedy's tie-break: among units of (nearly) equal reduced profit, the one the
    job strains least; 0 where a capacity is 0, which the fit mask rules out anyway)."""
    def over(a: np.ndarray, cap: np.ndarray) -> np.ndarray:
        return np.divide(a, cap[None, :], out=np.zeros(a.shape), where=(cap > EPS)[None, :])
    return c * np.maximum(np.maximum(over(c, cap_c), over(m, cap_m)),
                          over(np.broadcast_to(q[:, None], c.shape), cap_q))


def _greedy(load: Load, pools: _Pools, units: _Units, c: np.ndarray, m: np.ndarray,
            q: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Step 4 of the module doc (``lagrange_kernels.greedy``): the GPU number of each single-GPU
    job (-1: not placed); ``load``'s free lists are updated."""
    cu, mu = c[:, units.arch], m[:, units.arch]
    cap_q = units.cap_q[units.holder]
    ranked = r - TIE * _share(cu, mu, q, units.cap_c, units.cap_m, cap_q)
    best = r.max(axis=1)
    order = np.lexsort((-cu.max(axis=1), -best))                 # stable: ties keep the order
    order = order[best[order] > -np.inf].astype(np.int64)       # the others fit no unit
    prefs = np.argsort(-ranked, axis=1, kind="stable").astype(np.int64)
    free_c = np.array(load.free_c, dtype=float)
    free_m = np.array(load.free_m, dtype=float)
    free_q = np.array(load.free_q, dtype=float)
    cu, mu = np.ascontiguousarray(cu), np.ascontiguousarray(mu)     # one compiled form
    kernels = _kernels()
    chosen = kernels.greedy(order, prefs, np.isfinite(r), cu, mu, q, units.ptr, units.members, pools.ptr,
                            pools.members, pools.node, free_c, free_m, free_q, pools.top_c.copy(),
                            pools.top_m.copy())
    load.free_c[:], load.free_m[:], load.free_q[:] = free_c.tolist(), free_m.tolist(), free_q.tolist()
    return chosen


def _check(name: str, value: Any, least: int) -> int:
    return check_integer(f"placement.{name}", value, low=least)


def lagrange(jobs: Sequence[Job], cluster: Cluster, steps: int = STEPS,
             sample: int = SAMPLE) -> dict[Hashable, tuple]:
    """The ``lagrange`` policy (module doc): ``steps`` price steps (0: zero prices, i.e. jobs by
    compute, each where it strains a unit least), on at most ``sample`` jobs."""
    _check("steps", steps, 0)
    _check("sample", sample, 1)
    jobs = list(jobs)
    load = Load(cluster)
    archs = list(load.by_arch)
    multi = [job for job in jobs if job.gpus > 1] if jobs and max(map(attrgetter("gpus"), jobs)) > 1 else []
    answer: dict[Hashable, tuple] = {}
    if multi:
        fixed = LiveCluster(cluster).assign_checked(by_runtime(multi, archs), "wf", {}, keep=False, numbers=True)
        for job in multi:
            for i in fixed.get(job.id, ()):
                d = job.demand(load.arch[i])
                load.take(i, d.compute, d.memory_gb, job.cpus)
        answer.update((jid, tuple(load.keys[i] for i in gpus)) for jid, gpus in fixed.items())
    singles = [job for job in jobs if job.gpus == 1] if multi else jobs
    if not singles or not load.keys:
        return answer
    warn_interpreted("placement lagrange", len(singles) * len(load.keys), INTERPRETED_WARN_PAIRS)
    pools = _Pools(load, archs)
    units = _Units(pools)
    c, m, q = _demand_arrays(singles, archs)
    cu, mu = c[:, units.arch], m[:, units.arch]
    fit = ((cu <= units.top_c[None, :] + EPS) & (mu <= units.top_m[None, :] + EPS)
           & (q[:, None] <= units.cap_q[units.holder][None, :] + EPS))
    _, uc, um, uq = unit_prices(cu, mu, q, fit, units.cap_c, units.cap_m, units.cap_q, units.holder,
                                steps, sample, smooth=not units.single)
    r = np.where(fit, cu * (1 - uc) - mu * um - q[:, None] * uq[units.holder], -np.inf)
    chosen = _greedy(load, pools, units, c, m, q, r)
    placed = np.flatnonzero(chosen >= 0)
    ids = list(map(attrgetter("id"), singles))
    where = [(key,) for key in load.keys]
    answer.update(zip([ids[p] for p in placed.tolist()], [where[i] for i in chosen[placed].tolist()]))
    return answer
