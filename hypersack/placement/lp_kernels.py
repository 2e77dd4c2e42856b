"""The exact bound of ``fill``'s relaxation: its linear program, by the primal simplex method with
generalized upper bounds (Dantzig and Van Slyke, 1967), warm-started at a feasible answer.

The LP, on ``fill_kernels._columns``' arrays (per group ``g`` and job ``p``: compute ``ct``, -inf
where no GPU of the group takes the job, and demands over the group's or node's capacity
``tc``/``tm``/``tq``)::

    max  sum_{g, p} ct[g, p] x[g, p]
    s.t. sum_p tc[g, p] x[g, p] <= 1  and  sum_p tm[g, p] x[g, p] <= 1          (each group g)
         sum_{g of node n} sum_p tq[g, p] x[g, p] <= 1                         (each node n)
         sum_g x[g, p] <= 1                                (each job p: its upper-bound row)
         x >= 0, x[g, p] = 0 where ct[g, p] = -inf

Its optimum bounds the compute of any placement (a placement is an integer point of it), and
equals the lowest Lagrangian bound L(prices) of ``fill_kernels.prices`` (LP duality), which the
subgradient steps only approach. The m = 2 G + N coupling rows are few, the jobs many: the basis
keeps one *key* variable per job (a placement of it, or its slack) and m others (the working
basis, a dense m x m matrix rebuilt and factored at each pivot: exact enough, and cheap while m is
small). The prices returned are the duals of the last basis; the caller bounds with L at them
clipped to >= 0, which is a valid bound whether or not the simplex reached the optimum (weak
duality): a pivot cap or a numerical failure can only make the bound looser, never wrong.

numba caches ``fill_kernels``' compiled code with these kernels inside it and invalidates that
cache only when the text of ``fill_kernels.py`` changes: that file holds this one's hash
(``LP_KERNELS_SHA``, checked by a test), so a change here changes it too.
"""
from __future__ import annotations

import numpy as np

from hypersack.placement.jit import inline_kernel, kernel

ENTER = 1e-7      # the least reduced cost (compute) at which a variable enters the basis
PIVOT = 1e-9      # the least pivot element taken in the ratio test
SINGULAR = 1e-13  # a working basis pivot below this: the factorization is abandoned


@inline_kernel
def _add(w, k, g, p, sign, tc, tm, tq, g_node, n_groups):  # pragma: no cover - compiled (tested via py_func)
    """Column ``k`` of ``w`` += ``sign`` x job ``p``'s column on group ``g`` (rows: compute of
    g, memory of g, cores of g's node)."""
    w[g, k] += sign * tc[g, p]
    w[n_groups + g, k] += sign * tm[g, p]
    w[2 * n_groups + g_node[g], k] += sign * tq[g, p]


@inline_kernel
def _use(rows, g, p, sign, tc, tm, tq, g_node, n_groups):  # pragma: no cover - compiled (tested via py_func)
    """``rows`` += ``sign`` x job ``p``'s demands on group ``g``'s rows."""
    rows[g] += sign * tc[g, p]
    rows[n_groups + g] += sign * tm[g, p]
    rows[2 * n_groups + g_node[g]] += sign * tq[g, p]


@kernel
def _factor(w, perm):
    """``w`` (square) replaced by its LU factors with partial pivoting (``perm``: row order);
    False when a pivot is below ``SINGULAR`` (the factors are then unusable)."""
    m = w.shape[0]
    for k in range(m):
        perm[k] = k
    for k in range(m):
        best, r = abs(w[k, k]), k
        for i in range(k + 1, m):
            if abs(w[i, k]) > best:
                best, r = abs(w[i, k]), i
        if best < SINGULAR:
            return False
        if r != k:
            for j in range(m):
                w[k, j], w[r, j] = w[r, j], w[k, j]
            perm[k], perm[r] = perm[r], perm[k]
        inverse = 1.0 / w[k, k]
        for i in range(k + 1, m):
            f = w[i, k] * inverse
            w[i, k] = f
            if f != 0.0:
                for j in range(k + 1, m):
                    w[i, j] -= f * w[k, j]
    return True


@kernel
def _solve(lu, perm, b, out):
    """``out`` = x with W x = b, W = P^T L U as ``_factor`` left it."""
    m = lu.shape[0]
    for i in range(m):
        s = b[perm[i]]
        for j in range(i):
            s -= lu[i, j] * out[j]
        out[i] = s
    for i in range(m - 1, -1, -1):
        s = out[i]
        for j in range(i + 1, m):
            s -= lu[i, j] * out[j]
        out[i] = s / lu[i, i]


@kernel
def _solve_transposed(lu, perm, b, scratch, out):
    """``out`` = y with W^T y = b (U^T L^T P y = b)."""
    m = lu.shape[0]
    for i in range(m):
        s = b[i]
        for j in range(i):
            s -= lu[j, i] * scratch[j]
        scratch[i] = s / lu[i, i]
    for i in range(m - 1, -1, -1):
        s = scratch[i]
        for j in range(i + 1, m):
            s -= lu[j, i] * scratch[j]
        scratch[i] = s
    for i in range(m):
        out[perm[i]] = scratch[i]


@kernel
def _entering(ct, tc, tm, tq, g_node, key, pi, sigma, slack_basic, nk_job, nk_var, gain, top):
    """The nonbasic variable of the largest reduced cost above ``ENTER`` at the prices ``pi`` (a
    job's placements: its best group's, ties to the lower group): (job or -1, group or -1 for
    the job's slack, or the row of a coupling slack when the job is -1); (-2, -2) when none
    (the basis is optimal). ``sigma`` (per job: its key's reduced profit, 0 for its slack),
    ``gain`` and ``top`` are written (room, per job)."""
    n_groups, n_jobs = ct.shape
    m = pi.shape[0]
    for p in range(n_jobs):
        gain[p] = -np.inf
        top[p] = -1
        sigma[p] = 0.0
    for g in range(n_groups):                    # one pass per group over the jobs (vectorized)
        price_c, price_m, price_q = pi[g], pi[n_groups + g], pi[2 * n_groups + g_node[g]]
        for p in range(n_jobs):
            r = ct[g, p] - tc[g, p] * price_c - tm[g, p] * price_m - tq[g, p] * price_q
            higher = r > gain[p]
            gain[p] = r if higher else gain[p]
            top[p] = g if higher else top[p]
            sigma[p] = r if key[p] == g else sigma[p]
    best, e_job, e_var = ENTER, -2, -2
    for i in range(m):
        if not slack_basic[i] and -pi[i] > best:
            best, e_job, e_var = -pi[i], -1, i
    for p in range(n_jobs):
        if key[p] >= 0 and -sigma[p] > best:
            basic = False
            for k in range(m):
                if nk_job[k] == p and nk_var[k] == -1:
                    basic = True
            if not basic:
                best, e_job, e_var = -sigma[p], p, -1
    for p in range(n_jobs):
        r = gain[p] - sigma[p]
        if r > best:
            best, e_job, e_var = r, p, top[p]
    return e_job, e_var


@kernel
def lp_prices(ct, tc, tm, tq, g_node, n_nodes, start, max_pivots):
    """The LP's duals (module doc): (compute prices per group, memory prices per group, core
    prices per node, pivots made, whether the last basis is optimal). ``start[p]``: job p's group
    in a feasible answer (-1: unplaced), the first basis. At most ``max_pivots`` pivots."""
    n_groups, n_jobs = ct.shape
    m = 2 * n_groups + n_nodes
    key = start.copy()
    nk_job = np.full(m, -1, dtype=np.int64)      # the working basis: a job's variable, or
    nk_var = np.arange(m)                         # (job -1) the slack of row nk_var
    slack_basic = np.ones(m, dtype=np.bool_)
    w, perm = np.empty((m, m)), np.empty(m, dtype=np.int64)
    rhs, cost, x, pi, alpha, scratch = np.empty(m), np.empty(m), np.empty(m), np.empty(m), np.empty(m), np.empty(m)
    sigma, gain, top = np.empty(n_jobs), np.empty(n_jobs), np.empty(n_jobs, dtype=np.int64)
    found = np.zeros(m)
    left = np.ones(m)                             # 1 - what the keys use of each row
    for p in range(n_jobs):
        if key[p] >= 0:
            _use(left, key[p], p, -1.0, tc, tm, tq, g_node, n_groups)
    pivots, optimal = 0, False
    while True:
        w[:, :] = 0.0
        rhs[:] = left
        for k in range(m):
            p, v = nk_job[k], nk_var[k]
            if p < 0:
                w[v, k] = 1.0
                cost[k] = 0.0
                continue
            cost[k] = 0.0
            if v >= 0:
                _add(w, k, v, p, 1.0, tc, tm, tq, g_node, n_groups)
                cost[k] += ct[v, p]
            if key[p] >= 0:
                _add(w, k, key[p], p, -1.0, tc, tm, tq, g_node, n_groups)
                cost[k] -= ct[key[p], p]
        if not _factor(w, perm):
            break
        _solve(w, perm, rhs, x)
        _solve_transposed(w, perm, cost, scratch, pi)
        found[:] = pi
        e_job, e_var = _entering(ct, tc, tm, tq, g_node, key, pi, sigma, slack_basic, nk_job, nk_var, gain, top)
        if e_job == -2:
            optimal = True
            break
        if pivots >= max_pivots:
            break
        # the entering column, its job's key taken off (the job's row stays at its sum)
        rhs[:] = 0.0                                  # rhs is rebuilt next pass: room for it
        if e_job < 0:
            rhs[e_var] = 1.0
        else:
            if e_var >= 0:
                _use(rhs, e_var, e_job, 1.0, tc, tm, tq, g_node, n_groups)
            if key[e_job] >= 0:
                _use(rhs, key[e_job], e_job, -1.0, tc, tm, tq, g_node, n_groups)
        _solve(w, perm, rhs, alpha)
        leave_k, leave_job, theta, size = _ratio(x, alpha, nk_job, e_job)
        if leave_k == -2:
            break                                     # unbounded: not for this LP (numerics)
        pivots += 1
        before = key[leave_job] if leave_k < 0 else -1
        _pivot(leave_k, leave_job, e_job, e_var, key, nk_job, nk_var, slack_basic)
        if leave_k < 0 and key[leave_job] != before:  # a job's key changed: what keys use too
            if before >= 0:
                _use(left, before, leave_job, 1.0, tc, tm, tq, g_node, n_groups)
            if key[leave_job] >= 0:
                _use(left, key[leave_job], leave_job, -1.0, tc, tm, tq, g_node, n_groups)
    return found[:n_groups].copy(), found[n_groups:2 * n_groups].copy(), found[2 * n_groups:].copy(), pivots, optimal


@kernel
def _ratio(x, alpha, nk_job, e_job):
    """The ratio test: the basic variable that reaches 0 first as the entering one grows (rate
    ``alpha`` of the working basis' values ``x``; a job's key falls by what its other variables
    and, for ``e_job``, the entering one gain). Returns (working position or -1 for a key, the
    key's job, the step, the pivot size); (-2, ...) when nothing blocks."""
    m = x.shape[0]
    theta, size, leave_k, leave_job = np.inf, 0.0, -2, -1
    for k in range(m):
        a = alpha[k]
        if a > PIVOT:
            r = max(x[k], 0.0) / a
            if r < theta - 1e-12 or (r <= theta + 1e-12 and a > size):
                theta, size, leave_k, leave_job = r, a, k, -1
    entering_seen = False
    for k in range(m):
        q = nk_job[k]
        if q < 0:
            continue
        first = True
        for j in range(k):
            if nk_job[j] == q:
                first = False
        if not first:
            continue
        rate, value = 0.0, 1.0
        for j in range(k, m):
            if nk_job[j] == q:
                rate += alpha[j]
                value -= x[j]
        if q == e_job:
            rate -= 1.0
            entering_seen = True
        if -rate > PIVOT:
            r = max(value, 0.0) / -rate
            if r < theta - 1e-12 or (r <= theta + 1e-12 and -rate > size):
                theta, size, leave_k, leave_job = r, -rate, -1, q
    if e_job >= 0 and not entering_seen:         # its key alone: falls at rate 1 from 1
        if 1.0 < theta - 1e-12 or (1.0 <= theta + 1e-12 and 1.0 > size):
            theta, size, leave_k, leave_job = 1.0, 1.0, -1, e_job
    return leave_k, leave_job, theta, size


@kernel
def _pivot(leave_k, leave_job, e_job, e_var, key, nk_job, nk_var, slack_basic):
    """The basis after the pivot: the entering variable in, the leaving one out. When a job's
    key leaves, the entering variable becomes the new key if it is the job's, else one of the
    job's working variables does and the entering one takes its place there."""
    m = nk_job.shape[0]
    if e_job < 0:
        slack_basic[e_var] = True
    if leave_k >= 0:                                  # a working variable leaves
        if nk_job[leave_k] < 0:
            slack_basic[nk_var[leave_k]] = False
        nk_job[leave_k], nk_var[leave_k] = e_job, e_var
        return
    q = leave_job                                     # job q's key leaves
    if e_job == q:
        key[q] = e_var
        return
    for k in range(m):
        if nk_job[k] == q:
            key[q] = nk_var[k]
            nk_job[k], nk_var[k] = e_job, e_var
            return
    key[q] = e_var                                    # (not reached: q is e_job or has one)
