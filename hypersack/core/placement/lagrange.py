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
   Few units: each job tries its units in order (Python). Pooled: one numpy pass over every group
   per job; a job above what any group has left (per-architecture maxima, made exact after a
   miss; capacities only shrink within a call) is skipped without it.

Per call: O(steps x min(jobs, sample) x units) numpy work for the prices, O(jobs x units) for
the greedy's arrays, and per job O(units) Python steps (few units) or one O(groups) numpy pass
(pooled), plus O(GPUs of a group) per placed job. Every placed job fits (Eq. 2-4) on what was
left when it was placed. Deterministic.
"""
from __future__ import annotations

from typing import Any, Hashable, Sequence

import numpy as np

from hypersack.core.placement.cluster import Cluster
from hypersack.core.placement.live import LiveCluster
from hypersack.core.placement.load import Load, by_runtime
from hypersack.core.placement.model import EPS, Job
from hypersack.errors import ConfigError

__all__ = ["lagrange", "unit_prices", "STEPS", "SAMPLE"]

STEPS = 120         # price steps
SAMPLE = 512        # jobs the price steps look at (every k-th single-GPU job)
MAX_UNITS = 16      # more groups than this are priced and chosen by type
ETA = 0.2           # smoothed steps (pooled units): the first step's size, per unit of overuse
TAU = 0.2           # smoothed steps: softmax temperature, in mean job compute
TIE = 0.01          # weight of the tie-break between units (``_share``)
TARGET = 0.97       # Polyak's target: this fraction of the lowest bound seen
_STALL = 5
_INF = float("inf")


def _demand_arrays(jobs: Sequence[Job], archs: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per job x architecture: compute and memory per GPU; per job: cores."""
    c = np.empty((len(jobs), len(archs)))
    m = np.empty((len(jobs), len(archs)))
    for p, job in enumerate(jobs):
        per_arch = job.per_arch
        for a, arch in enumerate(archs):
            d = per_arch.get(arch) if per_arch else None
            if d is None:
                c[p, a], m[p, a] = job.compute, job.memory_gb
            else:
                c[p, a], m[p, a] = d.compute, d.memory_gb
    return c, m, np.array([job.cpus for job in jobs], dtype=float)


def unit_prices(c: np.ndarray, m: np.ndarray, q: np.ndarray, fit: np.ndarray, cap_c: np.ndarray,
                cap_m: np.ndarray, cap_q: np.ndarray, node: np.ndarray, steps: int,
                sample: int, smooth: bool = False) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """Step 3 of the module doc on jobs x units demands ``c``, ``m`` (cores ``q`` per job),
    ``fit`` (False: no GPU of the unit takes the job), unit capacities ``cap_c``, ``cap_m``,
    capacities ``cap_q`` of the core holders and each unit's holder ``node``; ``smooth``: the
    smoothed steps. Returns (the lowest dual bound seen on the sample, scaled back to all jobs;
    prices per unit of compute and of memory per unit; per core per holder). The bound is an
    upper bound on the placed compute when every job is sampled and each unit is a group."""
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
    pc, pm, pq = zero
    best_l, best = _INF, (pc, pm, pq)
    ceiling = _knapsack_ceiling(cs, ms, qs, fs, kc, km, kq)
    node_c = np.bincount(node, weights=kc, minlength=n_count)
    idx = np.arange(len(cs))
    # Ties (identical groups, and every group at zero prices) split the jobs evenly, not all on
    # the first group: the subgradient then moves every group's price at once.
    spread = ((idx[:, None] * 7919 + np.arange(g_count)[None, :] * 104729) % 1009) * (1e-7 / 1009)
    base = np.where(fs, cs + spread, -np.inf)
    factor, stall = 2.0, 0
    tau = max(TAU * float(np.where(fs, cs, 0.0).max(axis=1).mean()), 1e-6)
    soft = best
    for k_step in range(steps):
        r = base - sc * pc - sm * pm - sq * pq[node]
        top = r.argmax(axis=1)
        gain = r[idx, top]
        taken = gain > 0
        bound = float(pc.sum() + pm.sum() + pq.sum() + gain[taken].sum())
        if bound < best_l - EPS:
            best_l, best, stall = bound, (pc, pm, pq), 0
        else:
            stall += 1
            if stall >= _STALL:
                factor, stall = factor / 2, 0
        if smooth:
            z = r / tau
            zmax = np.maximum(z.max(axis=1), 0.0)
            e = np.exp(z - zmax[:, None])
            w = e / (e.sum(axis=1) + np.exp(-zmax))[:, None]
            g_c = 1 - (w * sc).sum(axis=0)
            g_m = 1 - (w * sm).sum(axis=0)
            g_q = 1 - np.bincount(node, weights=(w * sq).sum(axis=0), minlength=n_count)
            eta = ETA / np.sqrt(1.0 + k_step)
            pc, pm, pq = (np.maximum(0.0, pc - eta * kc * g_c), np.maximum(0.0, pm - eta * kc * g_m),
                          np.maximum(0.0, pq - eta * node_c * g_q))
            soft = (pc, pm, pq)
            continue
        at = top[taken]
        g_c = 1 - np.bincount(at, weights=sc[taken, at], minlength=g_count)
        g_m = 1 - np.bincount(at, weights=sm[taken, at], minlength=g_count)
        g_q = 1 - np.bincount(node[at], weights=sq[taken, at], minlength=n_count)
        for g, p in ((g_c, pc), (g_m, pm), (g_q, pq)):
            g[(p <= 0) & (g > 0)] = 0.0                 # a free, slack resource stays free
        norm = float((g_c ** 2).sum() + (g_m ** 2).sum() + (g_q ** 2).sum())
        if norm < 1e-12:
            break
        step = factor * (bound - TARGET * min(best_l, ceiling)) / norm
        pc, pm, pq = (np.maximum(0.0, pc - step * g_c), np.maximum(0.0, pm - step * g_m),
                      np.maximum(0.0, pq - step * g_q))
    pc, pm, pq = soft if smooth else best

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


class _Pools:
    """The GPUs of a Load pooled by (node, architecture): ``gpus`` per group, ``arch`` (position
    in ``archs``) and ``node`` per group, capacities left per group and per node, the most compute
    and memory left on one GPU of each group."""

    def __init__(self, load: Load, archs: Sequence[str]):
        members: dict[tuple[int, str], list[int]] = {}
        for i, arch in enumerate(load.arch):
            members.setdefault((load.node[i], arch), []).append(i)
        self.gpus = list(members.values())
        arch_at = {a: k for k, a in enumerate(archs)}
        self.arch = np.array([arch_at[a] for _, a in members], dtype=int)
        self.node = np.array([n for n, _ in members], dtype=int)
        free_c = np.maximum(np.array(load.free_c, dtype=float), 0.0)
        free_m = np.maximum(np.array(load.free_m, dtype=float), 0.0)
        self.cap_c = np.array([free_c[g].sum() for g in self.gpus])
        self.cap_m = np.array([free_m[g].sum() for g in self.gpus])
        self.cap_q = np.maximum(np.array(load.free_q, dtype=float), 0.0)
        self.top_c = np.array([free_c[g].max() for g in self.gpus])
        self.top_m = np.array([free_m[g].max() for g in self.gpus])


class _Units:
    """What the prices and the greedy work on: each group alone when there are at most
    ``MAX_UNITS`` groups, else the groups pooled by type (architecture, compute and memory left on
    their GPUs; by architecture alone if that still makes more than ``MAX_UNITS``), each type with
    the cores of its nodes shared by GPU count. ``groups`` per unit (numpy, node order), ``arch``
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
        self.groups = [np.array(gs, dtype=int) for gs in members.values()]
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


def _greedy(load: Load, pools: _Pools, r: np.ndarray, c: np.ndarray, m: np.ndarray,
            q: np.ndarray) -> dict[int, int]:
    """Step 4 with one unit per group: {single-GPU job position: GPU number}; ``load`` is
    updated. Each job tries its groups by reduced profit, best first (Python: few groups)."""
    best = r.max(axis=1)
    cg, mg = c[:, pools.arch], m[:, pools.arch]
    order = np.lexsort((-cg.max(axis=1), -best))                 # stable: ties keep the order
    prefs = np.argsort(-(r - TIE * _share(cg, mg, q, pools.cap_c, pools.cap_m, pools.cap_q[pools.node])),
                       axis=1, kind="stable").tolist()
    rows_c, rows_m, rows_q, rows_f = cg.tolist(), mg.tolist(), q.tolist(), np.isfinite(r).tolist()
    free_c, free_m, free_q = load.free_c, load.free_m, load.free_q
    node_of, members = pools.node.tolist(), pools.gpus
    top_c, top_m = pools.top_c.tolist(), pools.top_m.tolist()
    out: dict[int, int] = {}
    for p in order.tolist():
        if best[p] == -_INF:
            break                                   # the rest fit no group either
        chosen = _first_group(prefs[p], rows_f[p], rows_c[p], rows_m[p], rows_q[p], node_of, free_q,
                              top_c, top_m, members, free_c, free_m)
        if chosen is None:
            continue
        g, i = chosen
        load.take(i, rows_c[p][g], rows_m[p][g], rows_q[p])
        top_c[g] = max(free_c[j] for j in members[g])
        top_m[g] = max(free_m[j] for j in members[g])
        out[p] = i
    return out


def _first_group(groups: list[int], fit: list[bool], cp: list[float], mp: list[float], qp: float,
                 node_of: list[int], free_q: list[float], top_c: list[float], top_m: list[float],
                 members: list[list[int]], free_c: list[float], free_m: list[float]) -> tuple[int, int] | None:
    """The first of ``groups`` with a GPU that takes the job (and its node the cores), and that
    group's best-fitting GPU (least compute left after it; ties: the lower number)."""
    for g in groups:
        if not fit[g]:
            return None                             # -inf: no later group fits either
        c, m = cp[g], mp[g]
        if free_q[node_of[g]] + EPS < qp or top_c[g] + EPS < c or top_m[g] + EPS < m:
            continue
        chosen, left = None, _INF
        for i in members[g]:
            if free_c[i] + EPS >= c and free_m[i] + EPS >= m and free_c[i] - c < left - EPS:
                chosen, left = i, free_c[i] - c
        if chosen is not None:
            return g, chosen
    return None


def _greedy_wide(load: Load, pools: _Pools, units: _Units, c: np.ndarray, m: np.ndarray,
                 q: np.ndarray, r: np.ndarray) -> dict[int, int]:
    """Step 4 for pooled units: each job tries its units in order, in a unit its groups in node
    order; a unit whose bounds (the most compute and memory left on one of its GPUs, the most
    cores left on one of its nodes: upper bounds, as capacities only shrink within a call) are
    below the job is skipped without looking at its groups, and its bounds are made exact again
    when a job within them found no group there."""
    cap_q = np.array([units.cap_q[units.holder[u]] for u in range(len(units.groups))])
    cu, mu = c[:, units.arch], m[:, units.arch]
    ranked = r - TIE * _share(cu, mu, q, units.cap_c, units.cap_m, cap_q)
    best = r.max(axis=1)
    order = np.lexsort((-cu.max(axis=1), -best))                 # stable: ties keep the order
    prefs = np.argsort(-ranked, axis=1, kind="stable").tolist()
    rows_c, rows_m, rows_q, rows_f = cu.tolist(), mu.tolist(), q.tolist(), np.isfinite(r).tolist()
    free_c, free_m, free_q = load.free_c, load.free_m, load.free_q
    members, node_of = pools.gpus, pools.node.tolist()
    top_c, top_m = pools.top_c.tolist(), pools.top_m.tolist()
    unit_groups = [gs.tolist() for gs in units.groups]

    def bounds(u: int) -> tuple[float, float, float]:
        gs = unit_groups[u]
        return (max(top_c[g] for g in gs) + EPS, max(top_m[g] for g in gs) + EPS,
                max(free_q[node_of[g]] for g in gs) + EPS)
    bound = [bounds(u) for u in range(len(unit_groups))]
    out: dict[int, int] = {}
    for p in order.tolist():
        if best[p] == -_INF:
            break                                   # the rest fit no unit either
        qp, cp, mp, fit = rows_q[p], rows_c[p], rows_m[p], rows_f[p]
        for u in prefs[p]:
            if not fit[u]:
                break                               # -inf: no later unit fits either
            cj, mj = cp[u], mp[u]
            b_c, b_m, b_q = bound[u]
            if cj > b_c or mj > b_m or qp > b_q:
                continue
            chosen, g = -1, -1
            for g in unit_groups[u]:
                if top_c[g] + EPS < cj or top_m[g] + EPS < mj or free_q[node_of[g]] + EPS < qp:
                    continue
                slack = _INF
                for i in members[g]:
                    if free_c[i] + EPS >= cj and free_m[i] + EPS >= mj and free_c[i] - cj < slack - EPS:
                        chosen, slack = i, free_c[i] - cj
                if chosen >= 0:
                    break
            if chosen < 0:
                bound[u] = bounds(u)
                continue
            load.take(chosen, cj, mj, qp)
            top_c[g] = max(free_c[i] for i in members[g])
            top_m[g] = max(free_m[i] for i in members[g])
            out[p] = chosen
            break
    return out


def _check(name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"placement.{name}", value, f"must be an integer >= {least}")
    return value


def lagrange(jobs: Sequence[Job], cluster: Cluster, steps: int = STEPS,
             sample: int = SAMPLE) -> dict[Hashable, tuple]:
    """The ``lagrange`` policy (module doc): ``steps`` price steps (0: zero prices, i.e. jobs by
    compute, each where it strains a unit least), on at most ``sample`` jobs."""
    _check("steps", steps, 0)
    _check("sample", sample, 1)
    jobs = list(jobs)
    load = Load(cluster)
    archs = list(load.by_arch)
    multi = [job for job in jobs if job.gpus > 1]
    answer: dict[Hashable, tuple] = {}
    if multi:
        fixed = LiveCluster(cluster).assign_checked(by_runtime(multi, archs), "wf", {}, keep=False, numbers=True)
        for job in multi:
            for i in fixed.get(job.id, ()):
                d = job.demand(load.arch[i])
                load.take(i, d.compute, d.memory_gb, job.cpus)
        answer.update((jid, tuple(load.keys[i] for i in gpus)) for jid, gpus in fixed.items())
    singles = [job for job in jobs if job.gpus == 1]
    if not singles or not load.keys:
        return answer
    pools = _Pools(load, archs)
    units = _Units(pools)
    c, m, q = _demand_arrays(singles, archs)
    cu, mu = c[:, units.arch], m[:, units.arch]
    fit = ((cu <= units.top_c[None, :] + EPS) & (mu <= units.top_m[None, :] + EPS)
           & (q[:, None] <= units.cap_q[units.holder][None, :] + EPS))
    _, uc, um, uq = unit_prices(cu, mu, q, fit, units.cap_c, units.cap_m, units.cap_q, units.holder,
                                steps, sample, smooth=not units.single)
    r = np.where(fit, cu * (1 - uc) - mu * um - q[:, None] * uq[units.holder], -np.inf)
    if units.single:
        placed = _greedy(load, pools, r, c, m, q)
    else:
        placed = _greedy_wide(load, pools, units, c, m, q, r)
    keys = load.keys
    answer.update((singles[p].id, (keys[i],)) for p, i in placed.items())
    return answer
