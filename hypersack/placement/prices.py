"""Shadow prices of the scarce resources and the greedy they steer (the ``fill`` policy's starts).

The placement problem (HyperSack Eq. 1-5) is a multiple knapsack: per GPU compute (r x C) and
memory, per node CPU cores, objective the placed compute. Its LP relaxation, with the GPUs of one
node and architecture pooled into a *group* (identical GPUs make the pooled LP equal to the
per-GPU one), has a Lagrangian dual with three prices per group: compute ``pc`` and memory
``pm`` of the group, cores ``pq`` of its node, each in compute units for the whole capacity.
A job's *reduced profit* on group g is

    R[p, g] = c_pg - pc_g c_pg / C_g - pm_g m_pg / M_g - pq_n q_p / Q_n

(-inf where no single GPU of the group could take it). ``prices`` minimises the dual
``L = sum(prices) + sum_p max(0, max_g R[p, g])`` (an upper bound on the placed compute) by
subgradient steps with Polyak's step size towards a feasible value ``target``, the step factor
halved after 5 steps without a lower ``L`` (and the search stopped once it is below 1/64); it
returns the best prices seen and that ``L``. The steps are ``descend``, which the ``lagrange``
policy's per-group prices use too (one implementation).

``price_greedy`` places single-GPU jobs in one of two orders: ``reduced`` (the largest best
reduced profit first) or ``regret`` (the largest gap between the best group and the runner-up
first), each on its groups by reduced profit, best first, on the first GPU of the group that fits
(``first``) or on the one whose compute and memory left stay closest in proportion
(``balanced``). Pure numpy and Python; deterministic.
"""
from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np

from hypersack.placement.load import Demand, Load
from hypersack.placement.model import EPS, Job

__all__ = ["Groups", "prices", "descend", "reduced_profits", "price_greedy", "ORDERS", "WITHIN"]

ORDERS = ("reduced", "regret")
WITHIN = ("first", "balanced")
_STALL = 5
_SMALLEST = 2.0 ** -6    # a step factor this small no longer moves the prices much: stop
_INF = float("inf")


class Groups:
    """The GPUs of ``load`` pooled by (node, architecture), and the single-GPU jobs' demands on
    each group as arrays: ``c``/``m`` (jobs x groups), ``q`` (jobs), capacities ``cap_c``/``cap_m``
    per group and ``cap_q`` per node (what is left now), ``fit`` whether some GPU of the group
    could take the job on an empty node (compute, memory and the node's cores)."""

    def __init__(self, load: Load, jobs: Sequence[Job], demands: Sequence[Demand]):
        members: dict[tuple[int, str], list[int]] = {}
        for i, arch in enumerate(load.arch):
            members.setdefault((load.node[i], arch), []).append(i)
        self.keys = list(members)
        self.gpus = list(members.values())
        self.node = np.array([n for n, _ in self.keys], dtype=int)
        archs = [a for _, a in self.keys]
        free_c = np.maximum(np.array(load.free_c, dtype=float), 0.0)
        free_m = np.maximum(np.array(load.free_m, dtype=float), 0.0)
        self.cap_c = np.array([free_c[g].sum() for g in self.gpus])
        self.cap_m = np.array([free_m[g].sum() for g in self.gpus])
        self.cap_q = np.maximum(np.array(load.free_q, dtype=float), 0.0)
        self.c = np.array([[d[a][0] for a in archs] for d in demands], dtype=float).reshape(len(demands), len(archs))
        self.m = np.array([[d[a][1] for a in archs] for d in demands], dtype=float).reshape(len(demands), len(archs))
        self.q = np.array([job.cpus for job in jobs], dtype=float)
        max_c = np.array([free_c[g].max() for g in self.gpus]).reshape(1, -1)
        max_m = np.array([free_m[g].max() for g in self.gpus]).reshape(1, -1)
        self.fit = ((self.c <= max_c + EPS) & (self.m <= max_m + EPS)
                    & (self.q[:, None] <= self.cap_q[self.node][None, :] + EPS))

    def scaled(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each demand over its capacity (0 where the capacity is 0: the ``fit`` mask rules those out)."""
        def over(a: np.ndarray, cap: np.ndarray) -> np.ndarray:
            a = np.broadcast_to(a, (len(self.q), len(self.keys)))
            return np.divide(a, cap, out=np.zeros(a.shape), where=(cap > EPS)[None, :])
        return over(self.c, self.cap_c), over(self.m, self.cap_m), over(self.q[:, None], self.cap_q[self.node])


def reduced_profits(groups: Groups, pc: np.ndarray, pm: np.ndarray, pq: np.ndarray) -> np.ndarray:
    """R[p, g] of the module doc (-inf where the job fits no GPU of the group)."""
    sc, sm, sq = groups.scaled()
    r = groups.c - sc * pc - sm * pm - sq * pq[groups.node]
    return np.where(groups.fit, r, -np.inf)


def prices(groups: Groups, target: float, steps: int,
           checkpoints: Sequence[int] = ()) -> tuple[float, list[tuple[np.ndarray, ...]]]:
    """The dual bound L (the lowest seen in ``steps`` subgradient steps from zero prices, module
    doc) and the prices (pc, pm, pq) of the lowest L seen by each of ``checkpoints`` (steps) and
    by the last step, without repeats; ``target``: a placed compute known to be feasible."""
    p_count, g_count = groups.c.shape
    if p_count == 0 or g_count == 0:
        return 0.0, [(np.zeros(g_count), np.zeros(g_count), np.zeros(len(groups.cap_q)))]
    sc, sm, sq = groups.scaled()
    base = np.where(groups.fit, groups.c, -np.inf)
    return descend(base, sc, sm, sq, groups.node, len(groups.cap_q), steps, target,
                   smallest=_SMALLEST, checkpoints=checkpoints)


def descend(base: np.ndarray, sc: np.ndarray, sm: np.ndarray, sq: np.ndarray, node: np.ndarray,
            n_count: int, steps: int, target: float, *, fraction: float | None = None,
            smallest: float = _SMALLEST,
            checkpoints: Sequence[int] = ()) -> tuple[float, list[tuple[np.ndarray, ...]]]:
    """The subgradient steps of the module doc, shared by ``prices`` and the ``lagrange`` policy,
    on jobs x groups ``base`` (compute; -inf where the group cannot take the job), demands over
    capacities ``sc``, ``sm``, ``sq`` and each group's core holder ``node`` (of ``n_count``).
    Polyak's step goes towards ``target``, or with ``fraction`` towards ``fraction`` x the lower
    of ``target`` and the lowest bound seen; the step factor (from 2) is halved after 5 steps
    without a lower bound, and the steps stop once it is below ``smallest``, when the bound is
    within EPS of the aim, or when the subgradient vanishes. Returns (the lowest bound seen,
    the prices (pc, pm, pq) of the lowest bound seen by each of ``checkpoints`` and by the last
    step, without repeats)."""
    g_count = base.shape[1]
    pc, pm, pq = np.zeros(g_count), np.zeros(g_count), np.zeros(n_count)
    best_l, best = np.inf, (pc, pm, pq)
    kept: list[tuple[np.ndarray, ...]] = []
    rows = np.arange(base.shape[0])
    factor, stall = 2.0, 0
    for step_no in range(steps):
        if step_no in checkpoints and (not kept or kept[-1] is not best):
            kept.append(best)
        r = base - sc * pc - sm * pm - sq * pq[node]
        top = r.argmax(axis=1)
        gain = r[rows, top]
        taken = gain > 0
        bound = pc.sum() + pm.sum() + pq.sum() + gain[taken].sum()
        if bound < best_l - EPS:
            best_l, best, stall = bound, (pc, pm, pq), 0
        else:
            stall += 1
            if stall >= _STALL:
                factor, stall = factor / 2, 0
        at = top[taken]
        g_c = 1 - np.bincount(at, weights=sc[taken, at], minlength=g_count)
        g_m = 1 - np.bincount(at, weights=sm[taken, at], minlength=g_count)
        g_q = 1 - np.bincount(node[at], weights=sq[taken, at], minlength=n_count)
        for g, p in ((g_c, pc), (g_m, pm), (g_q, pq)):
            g[(p <= 0) & (g > 0)] = 0.0                 # a free, slack resource stays free
        norm = float((g_c ** 2).sum() + (g_m ** 2).sum() + (g_q ** 2).sum())
        aim = target if fraction is None else fraction * min(best_l, target)
        if norm < 1e-12 or bound - aim <= EPS or factor < smallest:
            break
        step = factor * (bound - aim) / norm
        pc, pm, pq = (np.maximum(0.0, pc - step * g_c), np.maximum(0.0, pm - step * g_m),
                      np.maximum(0.0, pq - step * g_q))
    if not kept or kept[-1] is not best:
        kept.append(best)
    return float(best_l), kept


def _order(r: np.ndarray, c_max: np.ndarray, order: str) -> np.ndarray:
    ranked = -np.sort(-r, axis=1)
    first = ranked[:, 0]
    if order == "regret" and r.shape[1] > 1:
        key = first - np.maximum(ranked[:, 1], 0.0)
    else:
        key = first
    key = np.where(np.isfinite(key), key, -np.inf)
    return np.lexsort((-c_max, -key))        # stable: equal keys keep the given job order


def price_greedy(load: Load, groups: Groups, singles: Sequence[int], demands: Sequence[Demand],
                 jobs: Sequence[Job], r: np.ndarray, order: str, within: str) -> dict[int, int]:
    """Place the single-GPU jobs ``singles`` (positions in ``jobs``; row k of ``r`` and of
    ``groups`` is ``singles[k]``) on ``load``, which is updated: {job position: GPU number}.
    Every job placed fits (Eq. 2-4) on what ``load`` had left when it was placed."""
    if r.size == 0:
        return {}
    free_c, free_m, free_q, arch_of = load.free_c, load.free_m, load.free_q, load.arch
    size_c = [max(c, EPS) for c in load.free_c]
    size_m = [max(m, EPS) for m in load.free_m]
    prefs = np.argsort(-r, axis=1, kind="stable").tolist()
    fits = groups.fit.tolist()
    node_of, members = groups.node.tolist(), groups.gpus
    group_arch = [arch_of[g[0]] for g in members]
    top_c = [max(free_c[i] for i in g) for g in members]       # per group: the most left on a GPU
    top_m = [max(free_m[i] for i in g) for g in members]
    out: dict[int, int] = {}
    for k in _order(r, groups.c.max(axis=1, initial=0.0), order).tolist():
        p, fit = singles[k], fits[k]
        q, demand = jobs[p].cpus, demands[p]
        for g in prefs[k]:
            if not fit[g]:
                break                                 # -inf: no later group fits either
            c, m = demand[group_arch[g]]
            if free_q[node_of[g]] + EPS < q or top_c[g] + EPS < c or top_m[g] + EPS < m:
                continue
            chosen, score = None, _INF
            for i in members[g]:
                if free_c[i] + EPS >= c and free_m[i] + EPS >= m:
                    if within == "first":
                        chosen = i
                        break
                    gap = abs((free_c[i] - c) / size_c[i] - (free_m[i] - m) / size_m[i])
                    if gap < score - EPS:
                        chosen, score = i, gap
            if chosen is not None:
                load.take(chosen, c, m, q)
                top_c[g] = max(free_c[i] for i in members[g])
                top_m[g] = max(free_m[i] for i in members[g])
                out[p] = chosen
                break
    return out


def ids(jobs: Sequence[Job], keys: Sequence[tuple], placed: dict[int, int]) -> dict[Hashable, tuple]:
    """{job id: ((node_id, gpu_id),)} for ``placed`` (job position -> GPU number)."""
    return {jobs[p].id: (keys[i],) for p, i in placed.items()}
