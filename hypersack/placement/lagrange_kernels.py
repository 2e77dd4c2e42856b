"""The ``lagrange`` policy's inner loops as kernels over numpy arrays (``hypersack.placement.jit``:
compiled by numba where it is installed, the same functions as plain Python otherwise, with the
same answers).

Arrays only: float64 demands and capacities, int64 positions, bool masks. A *unit* holds groups
(``unit_ptr``/``unit_groups``: the groups of unit u are ``unit_groups[unit_ptr[u]:unit_ptr[u + 1]]``,
in node order), a *group* holds GPUs (``group_ptr``/``group_gpus`` likewise, in GPU number
order) and belongs to one node (``group_node``). Every capacity comparison is the one of
``hypersack.placement.load`` (``free + EPS >= demand``).
"""
from __future__ import annotations

import math

import numpy as np

from hypersack.placement.jit import kernel

__all__ = ["smooth_prices", "greedy"]

_EPS = 1e-9      # hypersack.placement.model.EPS (a kernel reads no module globals it could not freeze)


@kernel
def smooth_prices(base: np.ndarray, sc: np.ndarray, sm: np.ndarray, sq: np.ndarray, holder: np.ndarray,
                  holders: int, kc: np.ndarray, holder_c: np.ndarray, steps: int, tau: float,
                  eta: float) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """Steps on the smoothed dual (``lagrange`` module doc, step 3, pooled units), from zero
    prices. ``base``: jobs x units compute (-inf where the unit cannot take the job); ``sc``,
    ``sm``, ``sq``: each demand over its unit's (or core holder's) capacity; ``holder`` per unit:
    its core holder; ``kc``: the units' compute capacities, ``holder_c`` the holders'. Per step
    each job is spread over the units by a softmax of its reduced profits at temperature ``tau``
    ("not placed" at 0), and each price moves by ``eta / sqrt(1 + step)`` x its capacity x its
    overuse, floored at 0. Returns (the lowest dual bound seen, the last prices of compute and
    memory per unit and of cores per holder)."""
    jobs, units = base.shape
    pc = np.zeros(units)
    pm = np.zeros(units)
    pq = np.zeros(holders)
    r = np.empty(units)
    e = np.empty(units)
    best_l = math.inf
    for step in range(steps):
        use_c = np.zeros(units)
        use_m = np.zeros(units)
        use_q = np.zeros(holders)
        gains = 0.0
        for p in range(jobs):
            top = -math.inf
            for u in range(units):
                r[u] = base[p, u] - sc[p, u] * pc[u] - sm[p, u] * pm[u] - sq[p, u] * pq[holder[u]]
                if r[u] > top:
                    top = r[u]
            if top > 0:
                gains += top
            shift = max(top / tau, 0.0)
            total = math.exp(-shift)
            for u in range(units):
                e[u] = math.exp(r[u] / tau - shift) if r[u] > -math.inf else 0.0
                total += e[u]
            for u in range(units):
                w = e[u] / total
                use_c[u] += w * sc[p, u]
                use_m[u] += w * sm[p, u]
                use_q[holder[u]] += w * sq[p, u]
        bound = gains
        for u in range(units):
            bound += pc[u] + pm[u]
        for h in range(holders):
            bound += pq[h]
        if bound < best_l - _EPS:
            best_l = bound
        size = eta / math.sqrt(1.0 + step)
        for u in range(units):
            pc[u] = max(0.0, pc[u] - size * kc[u] * (1.0 - use_c[u]))
            pm[u] = max(0.0, pm[u] - size * kc[u] * (1.0 - use_m[u]))
        for h in range(holders):
            pq[h] = max(0.0, pq[h] - size * holder_c[h] * (1.0 - use_q[h]))
    return best_l, pc, pm, pq


@kernel
def _unit_bounds(u: int, unit_ptr: np.ndarray, unit_groups: np.ndarray, group_node: np.ndarray,
                 top_c: np.ndarray, top_m: np.ndarray, free_q: np.ndarray) -> tuple[float, float, float]:
    """The most compute and memory left on one GPU of unit ``u`` and the most cores left on one of
    its nodes, each + EPS."""
    b_c = b_m = b_q = -math.inf
    for t in range(unit_ptr[u], unit_ptr[u + 1]):
        g = unit_groups[t]
        b_c = max(b_c, top_c[g])
        b_m = max(b_m, top_m[g])
        b_q = max(b_q, free_q[group_node[g]])
    return b_c + _EPS, b_m + _EPS, b_q + _EPS


@kernel
def greedy(order: np.ndarray, prefs: np.ndarray, fit: np.ndarray, cu: np.ndarray, mu: np.ndarray,
           q: np.ndarray, unit_ptr: np.ndarray, unit_groups: np.ndarray, group_ptr: np.ndarray,
           group_gpus: np.ndarray, group_node: np.ndarray, free_c: np.ndarray, free_m: np.ndarray,
           free_q: np.ndarray, top_c: np.ndarray, top_m: np.ndarray) -> np.ndarray:
    """Step 4 of the ``lagrange`` module doc: the GPU number each job goes to (-1: none), jobs in
    ``order``; ``free_c``, ``free_m`` (per GPU), ``free_q`` (per node) and ``top_c``, ``top_m``
    (per group: the most left on one of its GPUs) are updated.

    A job tries its units in ``prefs`` order (jobs x units, best first) until one does not
    ``fit`` (the rest do not either); a unit whose bounds (``_unit_bounds``: upper bounds, as
    capacities only shrink) are below the job is passed over; in a unit, its groups in node order
    whose GPUs could take the job and whose node has the cores; in the first such group with a
    GPU that takes the job (compute and memory on the same GPU), the best-fitting one (least
    compute left after it; ties: the lower number). A unit where the job found no group gets its
    bounds made exact again. ``cu``/``mu``: jobs x units demands, ``q``: cores per job."""
    units = len(unit_ptr) - 1
    b_c = np.empty(units)
    b_m = np.empty(units)
    b_q = np.empty(units)
    for u in range(units):
        b_c[u], b_m[u], b_q[u] = _unit_bounds(u, unit_ptr, unit_groups, group_node, top_c, top_m, free_q)
    chosen = np.full(len(q), -1, dtype=np.int64)
    for k in range(len(order)):
        p = order[k]
        qp = q[p]
        for j in range(prefs.shape[1]):
            u = prefs[p, j]
            if not fit[p, u]:
                break                                   # no later unit fits either
            cj = cu[p, u]
            mj = mu[p, u]
            if cj > b_c[u] or mj > b_m[u] or qp > b_q[u]:
                continue
            pick = -1
            at = -1
            for t in range(unit_ptr[u], unit_ptr[u + 1]):
                g = unit_groups[t]
                if top_c[g] + _EPS < cj or top_m[g] + _EPS < mj or free_q[group_node[g]] + _EPS < qp:
                    continue
                slack = math.inf
                for s in range(group_ptr[g], group_ptr[g + 1]):
                    i = group_gpus[s]
                    if free_c[i] + _EPS >= cj and free_m[i] + _EPS >= mj and free_c[i] - cj < slack - _EPS:
                        pick = i
                        slack = free_c[i] - cj
                if pick >= 0:
                    at = g
                    break
            if pick < 0:
                b_c[u], b_m[u], b_q[u] = _unit_bounds(u, unit_ptr, unit_groups, group_node, top_c, top_m, free_q)
                continue
            free_c[pick] -= cj
            free_m[pick] -= mj
            free_q[group_node[at]] -= qp
            most_c = most_m = -math.inf
            for s in range(group_ptr[at], group_ptr[at + 1]):
                most_c = max(most_c, free_c[group_gpus[s]])
                most_m = max(most_m, free_m[group_gpus[s]])
            top_c[at] = most_c
            top_m[at] = most_m
            chosen[p] = pick
            break
    return chosen
