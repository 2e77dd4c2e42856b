"""``fill``'s inner work as kernels over numpy arrays (compiled by numba where it is installed,
``hypersack.placement.jit``; the same source runs as plain Python otherwise, with the same answers).

Arrays (every kernel reads them; ``fill.py`` builds them once per call):

* jobs (single-GPU only, in WFD's order: position ``p``): ``jc[p, a]``/``jm[p, a]`` compute and
  memory on architecture ``a``, ``jq[p]`` cores;
* GPUs (first-fit order: number ``i``): ``garch[i]`` architecture, ``gnode[i]`` node;
  ``fc[i]``/``fm[i]`` compute and memory left, ``fq[n]`` cores left on node ``n``;
* an answer: ``where[p]`` = the GPU of job ``p``, -1 when unplaced.

A job fits GPU ``i`` when ``fc[i] + EPS >= c``, ``fm[i] + EPS >= m`` and ``fq[gnode[i]] + EPS
>= q`` (``Load.fits``'s comparisons: HyperSack Eq. 2-4); every kernel that places a job checks
exactly that on what is left, so every answer keeps Eq. 1-4. The search state is ``where``, the
loads, the *pools* (per architecture, the unplaced jobs by (compute there, position) ascending:
held as every job in that order, made once per call, the members being the jobs with ``where``
< 0, so a move writes ``where`` and nothing shifts) and per GPU its jobs by (compute, position)
ascending: ``improve._Search``'s lists as arrays.

Kernels: ``wf_greedy`` (worst-fit, ``LiveCluster``'s ``wf`` for single-GPU jobs), ``retake``
(loads of an answer, taken in a given order), ``search`` (``improve``'s add/swap passes: with
the same start, the same moves as ``wfd-ls``), ``polish`` (search, refill and evict moves while
they gain), ``fill_search`` (every start, polishing, the kicks: ``_kicks_on``, each undone from a
journal of the two GPUs it touched when it loses). Sums are explicit loops (numpy's
pairwise ``sum`` and numba's would differ in the last bit), no ``exp``/``log``: the compiled form
and ``.py_func`` give identical answers (tested).
"""
from __future__ import annotations

import numpy as np

from hypersack.placement.jit import inline_kernel, kernel
from hypersack.placement.lp_kernels import lp_prices

#: The first 16 hex digits of lp_kernels.py's sha256. numba caches this module's compiled code
#: with lp_kernels' kernels inside it and invalidates that cache only when the text of this file
#: changes: this line changes with lp_kernels (a test checks that it is current).
LP_KERNELS_SHA = "cdb7c522167c7936"

EPS = 1e-9
SCAN = 16          # add/swap: candidates looked at below the best compute (improve._SCAN)
REFILL_SCAN = 24   # refill: unplaced candidates looked at per freed GPU
EVICT_IN = 8       # evict: unplaced candidates (largest first) tried per GPU
EVICT_OUT = 8      # evict: the smallest jobs of the GPU among which 2-3 are taken out
KINDS = 8          # _kinds: the distinct demands compared per job
BUCKET = 32        # _order_by: the most jobs a bucket sorts by insertion (more: by radix)
STALL = 5          # price steps without a lower bound before the step factor is halved
SMALLEST = 2.0 ** -6
_SIGN = ~0x7FFFFFFFFFFFFFFF  # the int64 sign bit (_order_by)
PATIENCE_PER_GPU = 3  # the kicks' patience is at least this many kicks per GPU
_MOD = 2147483647  # the kicks' generator: MINSTD (x * 48271 mod 2^31 - 1), exact in int64


# ---- sorted rows: pools and per-GPU job lists -----------------------------------------------------

@inline_kernel
def _position(rows, n, row, p, jc, col):        # pragma: no cover - compiled (tested via py_func)
    """Where job ``p`` stands (or would stand) in ``rows[row, :n]``, kept by (jc[., col], job)."""
    c = jc[p, col]
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) >> 1
        x = rows[row, mid]
        cx = jc[x, col]
        if cx < c or (cx == c and x < p):
            lo = mid + 1
        else:
            hi = mid
    return lo


@inline_kernel
def _insert(rows, count, row, p, jc, col):
    """Insert job ``p`` into ``rows[row, :count[row]]``, kept by (jc[., col], job)."""
    n = count[row]
    lo = _position(rows, n, row, p, jc, col)
    k = n
    while k > lo:
        rows[row, k] = rows[row, k - 1]
        k -= 1
    rows[row, lo] = p
    count[row] = n + 1


@inline_kernel
def _remove(rows, count, row, p, jc, col):
    """Remove job ``p`` from ``rows[row, :count[row]]`` (it is there)."""
    n = count[row]
    lo = _position(rows, n, row, p, jc, col)
    for k in range(lo, n - 1):
        rows[row, k] = rows[row, k + 1]
    count[row] = n - 1


@inline_kernel
def _upto(pool, a, x, jc):
    """How many of all jobs ``pool[a]`` (every job by (jc[., a], job)) have ``jc[., a] <= x``."""
    lo, hi = 0, pool.shape[1]
    while lo < hi:
        mid = (lo + hi) >> 1
        if jc[pool[a, mid], a] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@inline_kernel
def _below(pool, a, k, where):
    """The last index ``<= k`` of ``pool[a]`` holding an unplaced job (the pool's members), -1 if none."""
    while k >= 0 and where[pool[a, k]] >= 0:
        k -= 1
    return k


# ---- greedy starts and loads -----------------------------------------------------------------------

@kernel
def wf_greedy(order, jc, jm, jq, garch, gnode, fc, fm, fq):
    """Worst-fit: each job of ``order`` to the fitting GPU with the most compute left (ties: the
    lower number), taking its demand from ``fc``/``fm``/``fq`` (changed). ``where`` per job."""
    where = np.full(jc.shape[0], -1, dtype=np.int64)
    for t in range(order.shape[0]):
        p = order[t]
        best = -1
        for i in range(garch.shape[0]):
            a = garch[i]
            if fc[i] + EPS >= jc[p, a] and fm[i] + EPS >= jm[p, a] and fq[gnode[i]] + EPS >= jq[p]:
                if best < 0 or fc[i] > fc[best]:
                    best = i
        if best >= 0:
            a = garch[best]
            fc[best] -= jc[p, a]
            fm[best] -= jm[p, a]
            fq[gnode[best]] -= jq[p]
            where[p] = best
    return where


@kernel
def retake(where, order, jc, jm, jq, garch, gnode, base_c, base_m, base_q):
    """The loads left after taking the placed jobs of ``where`` on ``base_*``, in ``order``
    (the sums' order matters in the last bit: ``wfd-ls`` takes its start in the jobs' given order)."""
    fc, fm, fq = base_c.copy(), base_m.copy(), base_q.copy()
    for t in range(order.shape[0]):
        p = order[t]
        i = where[p]
        if i >= 0:
            a = garch[i]
            fc[i] -= jc[p, a]
            fm[i] -= jm[p, a]
            fq[gnode[i]] -= jq[p]
    return fc, fm, fq


@kernel
def _lists(where, jc, garch, n_arch):
    """The pools and per-GPU job lists of ``where``. ``pool[a]``: every job by (compute on ``a``,
    position) (``_pools``: the same for every answer); the pool of ``a`` is its unplaced jobs
    (``where`` < 0) in that order, so a move changes ``where`` only, ``npool[a]`` their count.
    ``ong[i, :nong[i]]``: GPU ``i``'s jobs by (compute, position) (``_rows``)."""
    pool = _pools(jc, n_arch)
    npool, ong, nong = _rows(where, jc, garch, n_arch)
    return pool, npool, ong, nong


@kernel
def _pools(jc, n_arch):
    """Per architecture ``a``, every job by (``jc[., a]``, position) ascending."""
    n_jobs = jc.shape[0]
    pool = np.empty((n_arch, n_jobs), dtype=np.int64)
    keys = np.empty(n_jobs, dtype=np.float64)
    for a in range(n_arch):
        for p in range(n_jobs):
            keys[p] = jc[p, a]
        pool[a] = np.argsort(keys, kind="mergesort")          # stable: ties by position
    return pool


@kernel
def _rows(where, jc, garch, n_arch):
    """``_lists``'s ``npool``, ``ong``, ``nong`` of ``where``."""
    n_jobs, n_gpus = jc.shape[0], garch.shape[0]
    npool = np.zeros(n_arch, dtype=np.int64)
    ong = np.empty((n_gpus, n_jobs), dtype=np.int64)
    nong = np.zeros(n_gpus, dtype=np.int64)
    free = 0
    for p in range(n_jobs):
        if where[p] < 0:
            free += 1
    for a in range(n_arch):
        npool[a] = free
    for p in range(n_jobs):                                   # positions ascending
        i = where[p]
        if i >= 0:
            _insert(ong, nong, i, p, jc, garch[i])
    return npool, ong, nong


# ---- moves -------------------------------------------------------------------------------------------

@inline_kernel
def _unplace(i, p, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong):
    """Job ``p`` off GPU ``i``, back to the pools."""
    a = garch[i]
    fc[i] -= -jc[p, a]
    fm[i] -= -jm[p, a]
    fq[gnode[i]] -= -jq[p]
    _remove(ong, nong, i, p, jc, a)
    where[p] = -1
    for b in range(npool.shape[0]):
        npool[b] += 1


@inline_kernel
def _apply(i, out, u, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong):
    """Job ``out`` (-1: none) off GPU ``i`` back to the pools, unplaced job ``u`` onto it."""
    a = garch[i]
    n = gnode[i]
    if out >= 0:
        _unplace(i, out, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong)
    for b in range(npool.shape[0]):
        npool[b] -= 1
    fc[i] -= jc[u, a]
    fm[i] -= jm[u, a]
    fq[n] -= jq[u]
    _insert(ong, nong, i, u, jc, a)
    where[u] = i


@kernel
def _best_move(i, min_gain, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong):
    """``improve``'s best add/swap on GPU ``i``: (gain, job out or -1, job in or -1 for none)."""
    a = garch[i]
    count = npool[a]
    if count == 0:
        return 0.0, -1, -1
    room_c, room_m, room_q = fc[i], fm[i], fq[gnode[i]]
    if room_c < min_gain:
        return 0.0, -1, -1
    top = jc[pool[a, _below(pool, a, pool.shape[1] - 1, where)], a]
    best_gain, best_out, best_in = min_gain - EPS, -1, -1
    for t in range(-1, nong[i]):
        if t < 0:
            p, c_p, m_p, q_p = -1, 0.0, 0.0, 0.0
        else:
            p = ong[i, t]
            c_p, m_p, q_p = jc[p, a], jm[p, a], jq[p]
        if top - c_p <= best_gain:
            break                          # nothing unplaced is big enough to gain more
        k = _below(pool, a, _upto(pool, a, c_p + room_c + EPS, jc) - 1, where)
        seen = 0
        while k >= 0 and seen < SCAN:
            u = pool[a, k]
            c_u = jc[u, a]
            if c_u - c_p <= best_gain:
                break
            if jm[u, a] <= m_p + room_m + EPS and jq[u] <= q_p + room_q + EPS:
                best_gain, best_out, best_in = c_u - c_p, p, u
                break
            seen += 1
            k = _below(pool, a, k - 1, where)
        if best_gain >= room_c - EPS:
            break                          # the GPU is full: no move can do better
    return best_gain, best_out, best_in


@kernel
def search(rounds, min_gain, gpus, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong):
    """``improve``'s passes: up to ``rounds`` passes over ``gpus`` (all, in first-fit order, for
    ``improve``), applying each GPU's best add/swap while it finds one. Whether its last pass
    moved (False: it stopped on a pass without a move, so another pass would move nothing)."""
    moved = False
    for _ in range(rounds):
        moved = False
        for i in gpus:
            while True:
                gain, out, u = _best_move(i, min_gain, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool,
                                          ong, nong)
                if u < 0:
                    break
                _apply(i, out, u, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong)
                moved = True
        if not moved:
            break
    return moved


@kernel
def _best_refill(i, min_gain, picked, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong):
    """One placed job ``p`` of GPU ``i`` out, the room filled with unplaced jobs (largest compute
    first among the ``REFILL_SCAN`` largest not too big): the first ``p`` that gains. Returns
    (p or -1, how many of ``picked`` go in). The jobs in take at most the room plus ``EPS``, so
    a refill gains at most the compute left plus ``EPS``: none where that is below ``min_gain``."""
    a = garch[i]
    n = gnode[i]
    if npool[a] == 0 or fc[i] + 2 * EPS < min_gain:
        return -1, 0
    for t in range(nong[i]):
        p = ong[i, t]
        c_p = jc[p, a]
        room_c, room_m, room_q = fc[i] + c_p, fm[i] + jm[p, a], fq[n] + jq[p]
        k = _below(pool, a, _upto(pool, a, room_c + EPS, jc) - 1, where)
        seen, count, gain = 0, 0, 0.0
        while k >= 0 and seen < REFILL_SCAN:
            u = pool[a, k]
            c_u, m_u, q_u = jc[u, a], jm[u, a], jq[u]
            if c_u <= room_c + EPS and m_u <= room_m + EPS and q_u <= room_q + EPS:
                picked[count] = u
                count += 1
                room_c, room_m, room_q = room_c - c_u, room_m - m_u, room_q - q_u
                gain += c_u
            seen += 1
            k = _below(pool, a, k - 1, where)
        if count > 0 and gain - c_p >= min_gain:
            return p, count
    return -1, 0


@kernel
def _best_evict(i, min_gain, outs, scratch, who, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong):
    """Two or three of the ``EVICT_OUT`` smallest jobs of GPU ``i`` out, one unplaced job that did
    not fit in (among the ``EVICT_IN`` largest that could fit then): the largest gain (ties: the
    larger job in, then the first set out in enumeration order). ``scratch``/``who``: room for
    the sets out. Returns (how many of ``outs`` go out, 0 for no move; the job in). The job in
    needs at most the room plus the jobs out plus ``EPS``, so an evict gains at most the compute
    left plus ``EPS``: none where that is below ``min_gain`` - ``EPS``."""
    a = garch[i]
    count = npool[a]
    placed = min(nong[i], EVICT_OUT)
    if count == 0 or placed < 2 or fc[i] + 3 * EPS < min_gain:
        return 0, -1
    room_c, room_m, room_q = fc[i], fm[i], fq[gnode[i]]
    total = 0.0
    for t in range(placed):
        total += jc[ong[i, t], a]
    k = _below(pool, a, _upto(pool, a, room_c + total + EPS, jc) - 1, where)
    seen = 0
    best_gain, best_in, best_set = min_gain - EPS, -1, -1
    size = -1
    while k >= 0 and seen < EVICT_IN:
        u = pool[a, k]
        c_u = jc[u, a]
        seen += 1
        k = _below(pool, a, k - 1, where)
        if c_u <= best_gain:
            break
        need_c, need_m, need_q = c_u - room_c, jm[u, a] - room_m, jq[u] - room_q
        if need_c <= EPS and need_m <= EPS and need_q <= EPS:
            continue                                    # an add: search's move
        if size < 0:                                    # the sets out, built once per call
            size = 0
            for x in range(placed):
                for y in range(x + 1, placed):
                    for z in range(y, placed):
                        px, py = ong[i, x], ong[i, y]
                        scratch[size, 0] = jc[px, a] + jc[py, a]
                        scratch[size, 1] = jm[px, a] + jm[py, a]
                        scratch[size, 2] = jq[px] + jq[py]
                        who[size, 0], who[size, 1], who[size, 2] = px, py, -1
                        if z > y:
                            pz = ong[i, z]
                            scratch[size, 0] += jc[pz, a]
                            scratch[size, 1] += jm[pz, a]
                            scratch[size, 2] += jq[pz]
                            who[size, 2] = pz
                        size += 1
        for s in range(size):
            gone = scratch[s, 0]
            if gone < need_c - EPS or c_u - gone <= best_gain:
                continue
            if scratch[s, 1] + EPS >= need_m and scratch[s, 2] + EPS >= need_q:
                best_gain, best_in, best_set = c_u - gone, u, s
    if best_in < 0:
        return 0, -1
    for t in range(3):
        outs[t] = who[best_set, t]
    return (2 if outs[2] < 0 else 3), best_in


@kernel
def _refills(rounds, min_gain, gpus, picked, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong,
             nong):
    """Refill moves on ``gpus``, up to ``rounds`` passes; whether any moved."""
    any_moved = False
    for _ in range(rounds):
        moved = False
        for i in gpus:
            while True:
                p, count = _best_refill(i, min_gain, picked, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool,
                                        npool, ong, nong)
                if p < 0:
                    break
                _apply(i, p, picked[0], jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong)
                for t in range(1, count):
                    _apply(i, -1, picked[t], jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong,
                           nong)
                moved = any_moved = True
        if not moved:
            break
    return any_moved


@kernel
def _evicts(rounds, min_gain, gpus, outs, scratch, who, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool,
            ong, nong):
    """Evict moves on ``gpus``, up to ``rounds`` passes (``scratch``/``who``: ``_best_evict``'s
    room); whether any moved."""
    any_moved = False
    for _ in range(rounds):
        moved = False
        for i in gpus:
            while True:
                count, u = _best_evict(i, min_gain, outs, scratch, who, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool,
                                       npool, ong, nong)
                if count == 0:
                    break
                for t in range(1, count):
                    _unplace(i, outs[t], jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong)
                _apply(i, outs[0], u, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong)
                moved = any_moved = True
        if not moved:
            break
    return any_moved


@kernel
def polish(rounds, min_gain, gpus, evict, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong):
    """Add/swap passes over ``gpus``, then refill and evict passes, repeated while the latter
    move (at most ``2 rounds`` times), and a last add/swap pass unless the state is one where
    a pass moves nothing (``evict`` False: no evict moves). ``where`` and the loads change."""
    picked, outs, scratch, who = _room()
    _polish(rounds, min_gain, gpus, evict, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong,
            picked, outs, scratch, who)


@kernel
def _room():
    """The moves' scratch arrays: refill's picks, evict's jobs out, evict's sets and their jobs."""
    size = EVICT_OUT * EVICT_OUT * EVICT_OUT
    return (np.empty(REFILL_SCAN, dtype=np.int64), np.empty(3, dtype=np.int64), np.empty((size, 3)),
            np.empty((size, 3), dtype=np.int64))


@kernel
def _polish(rounds, min_gain, gpus, evict, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong,
            picked, outs, scratch, who):
    """``polish`` with its scratch arrays given (``_room``)."""
    unsettled = refilled = evicted = False
    for _ in range(max(1, 2 * rounds)):
        unsettled = search(rounds, min_gain, gpus, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong,
                           nong)
        refilled = _refills(rounds, min_gain, gpus, picked, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool,
                            npool, ong, nong)
        evicted = evict and _evicts(rounds, min_gain, gpus, outs, scratch, who, jc, jm, jq, garch, gnode, where,
                                    fc, fm, fq, pool, npool, ong, nong)
        if not (refilled or evicted):
            break
    if unsettled or refilled or evicted:         # else the last search pass moved nothing, and nothing since
        search(rounds, min_gain, gpus, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong)


@kernel
def value_of(where, jc, garch):
    """Placed compute of ``where`` (each job on its GPU's architecture), summed by position."""
    total = 0.0
    for p in range(where.shape[0]):
        if where[p] >= 0:
            total += jc[p, garch[where[p]]]
    return total


# ---- prices ------------------------------------------------------------------------------------------
#
# The price loops read the (job, group) arrays of ``_scaled`` as columns of (group, job) arrays
# (``_columns``: compute with -inf where no GPU of the group takes the job, so that its reduced
# profit is -inf too): per group one pass over the jobs, which the compiler vectorizes. Every
# reduced profit is the same expression, evaluated in the same order, as in ``_reduced``, and
# every sum runs over the jobs in position order: the answers are those of the row-wise loops
# (the tests keep that form as a reference).

@kernel
def groups_of(garch, gnode):
    """GPUs pooled by (node, architecture), groups numbered by their first GPU: group per GPU,
    node and architecture per group."""
    n_gpus = garch.shape[0]
    group = np.empty(n_gpus, dtype=np.int64)
    g_node = np.empty(n_gpus, dtype=np.int64)
    g_arch = np.empty(n_gpus, dtype=np.int64)
    count = 0
    for i in range(n_gpus):
        found = -1
        for g in range(count):
            if g_node[g] == gnode[i] and g_arch[g] == garch[i]:
                found = g
                break
        if found < 0:
            found = count
            g_node[count], g_arch[count] = gnode[i], garch[i]
            count += 1
        group[i] = found
    return group, g_node[:count].copy(), g_arch[:count].copy()


@kernel
def _members(group, n_groups):
    """Per group its GPUs by number ascending: ``members[g, :count[g]]``."""
    members = np.empty((n_groups, group.shape[0]), dtype=np.int64)
    count = np.zeros(n_groups, dtype=np.int64)
    for i in range(group.shape[0]):
        g = group[i]
        members[g, count[g]] = i
        count[g] += 1
    return members, count


@kernel
def _scaled(jc, jm, jq, group, g_node, g_arch, fc, fm, fq):
    """Per (job, group): demands over the group's capacity (0 where it has none) and whether
    one GPU of the group takes the job on what is left (``prices.Groups``)."""
    n_jobs, n_groups = jc.shape[0], g_node.shape[0]
    cap_c, cap_m = np.zeros(n_groups), np.zeros(n_groups)
    top_c, top_m = np.full(n_groups, -np.inf), np.full(n_groups, -np.inf)
    for i in range(group.shape[0]):
        g = group[i]
        c, m = max(fc[i], 0.0), max(fm[i], 0.0)
        cap_c[g] += c
        cap_m[g] += m
        top_c[g] = max(top_c[g], c)
        top_m[g] = max(top_m[g], m)
    cap_q = np.maximum(fq, 0.0)
    sc, sm, sq = np.zeros((n_jobs, n_groups)), np.zeros((n_jobs, n_groups)), np.zeros((n_jobs, n_groups))
    cg = np.zeros((n_jobs, n_groups))
    fit = np.zeros((n_jobs, n_groups), dtype=np.bool_)
    for p in range(n_jobs):
        for g in range(n_groups):
            a, n = g_arch[g], g_node[g]
            c, m, q = jc[p, a], jm[p, a], jq[p]
            cg[p, g] = c
            if cap_c[g] > EPS:
                sc[p, g] = c / cap_c[g]
            if cap_m[g] > EPS:
                sm[p, g] = m / cap_m[g]
            if cap_q[n] > EPS:
                sq[p, g] = q / cap_q[n]
            fit[p, g] = c <= top_c[g] + EPS and m <= top_m[g] + EPS and q <= cap_q[n] + EPS
    return cg, sc, sm, sq, fit


@kernel
def _columns(cg, sc, sm, sq, fit, stride, share):
    """Every ``stride``-th job (0, stride, ...) of the (job, group) arrays as a column of
    (group, job) arrays: compute (-inf where ``fit`` is false) and the scaled demands divided by
    ``share`` (the sampled jobs' share of all: the capacities scaled by it)."""
    n_jobs, n_groups = cg.shape
    n = -(-n_jobs // stride)
    ct, tc, tm, tq = np.empty((n_groups, n)), np.empty((n_groups, n)), np.empty((n_groups, n)), np.empty((n_groups, n))
    for k in range(n):
        p = k * stride
        for g in range(n_groups):
            ct[g, k] = cg[p, g] if fit[p, g] else -np.inf
            tc[g, k] = sc[p, g] / share
            tm[g, k] = sm[p, g] / share
            tq[g, k] = sq[p, g] / share
    return ct, tc, tm, tq


@kernel
def _profits(ct, tc, tm, tq, g_node, pc, pm, pq, best, top):
    """Per job (column of ``_columns``' arrays) its best reduced profit at prices (pc, pm, pq)
    into ``best`` and its group into ``top`` (ties: the lower group; -inf and -1 where no GPU
    of any group takes the job)."""
    n_groups, n_jobs = ct.shape
    for p in range(n_jobs):
        best[p] = -np.inf
        top[p] = -1
    for g in range(n_groups):
        price_c, price_m, price_q = pc[g], pm[g], pq[g_node[g]]
        for p in range(n_jobs):
            r = ct[g, p] - tc[g, p] * price_c - tm[g, p] * price_m - tq[g, p] * price_q
            higher = r > best[p]
            best[p] = r if higher else best[p]
            top[p] = g if higher else top[p]


@kernel
def _reduced(cg, sc, sm, sq, fit, g_node, pc, pm, pq):
    """R[p, g] = c - pc_g c/C_g - pm_g m/M_g - pq_n q/Q_n (-inf where no GPU of g takes p)."""
    n_jobs, n_groups = cg.shape
    r = np.empty((n_jobs, n_groups))
    for p in range(n_jobs):
        for g in range(n_groups):
            if fit[p, g]:
                r[p, g] = cg[p, g] - sc[p, g] * pc[g] - sm[p, g] * pm[g] - sq[p, g] * pq[g_node[g]]
            else:
                r[p, g] = -np.inf
    return r


@kernel
def _price_steps(ct, tc, tm, tq, g_node, n_nodes, target, steps):
    """``prices`` on ``_columns``' arrays."""
    n_groups, n_jobs = ct.shape
    pc, pm, pq = np.zeros(n_groups), np.zeros(n_groups), np.zeros(n_nodes)
    best_c, best_m, best_q = pc.copy(), pm.copy(), pq.copy()
    kept_c, kept_m, kept_q = np.zeros((3, n_groups)), np.zeros((3, n_groups)), np.zeros((3, n_nodes))
    kept_version = np.full(3, -1, dtype=np.int64)
    count, version = 0, 0
    best_l = np.inf
    if n_jobs == 0 or n_groups == 0:
        kept_version[0] = 0
        return 0.0, kept_c, kept_m, kept_q, 1
    first, second = steps // 4, steps * 2 // 4
    factor, stall = 2.0, 0
    g_c, g_m, g_q = np.empty(n_groups), np.empty(n_groups), np.empty(n_nodes)
    gain, top = np.empty(n_jobs), np.empty(n_jobs, dtype=np.int64)
    for step_no in range(steps):
        if (step_no == first or step_no == second) and (count == 0 or kept_version[count - 1] != version):
            kept_c[count], kept_m[count], kept_q[count] = best_c, best_m, best_q
            kept_version[count] = version
            count += 1
        bound = 0.0
        for g in range(n_groups):
            bound += pc[g]
        for g in range(n_groups):
            bound += pm[g]
        for n in range(n_nodes):
            bound += pq[n]
        for g in range(n_groups):
            g_c[g] = 1.0
            g_m[g] = 1.0
        for n in range(n_nodes):
            g_q[n] = 1.0
        _profits(ct, tc, tm, tq, g_node, pc, pm, pq, gain, top)
        for p in range(n_jobs):
            g = top[p]
            if g >= 0 and gain[p] > 0:
                bound += gain[p]
                g_c[g] -= tc[g, p]
                g_m[g] -= tm[g, p]
                g_q[g_node[g]] -= tq[g, p]
        if bound < best_l - EPS:
            best_l = bound
            best_c[:] = pc
            best_m[:] = pm
            best_q[:] = pq
            version += 1
            stall = 0
        else:
            stall += 1
            if stall >= STALL:
                factor, stall = factor / 2, 0
        norm = 0.0
        for g in range(n_groups):
            if pc[g] <= 0 and g_c[g] > 0:
                g_c[g] = 0.0                  # a free, slack resource stays free
            if pm[g] <= 0 and g_m[g] > 0:
                g_m[g] = 0.0
            norm += g_c[g] * g_c[g] + g_m[g] * g_m[g]
        for n in range(n_nodes):
            if pq[n] <= 0 and g_q[n] > 0:
                g_q[n] = 0.0
            norm += g_q[n] * g_q[n]
        if norm < 1e-12 or bound - target <= EPS or factor < SMALLEST:
            break
        step = factor * (bound - target) / norm
        for g in range(n_groups):
            pc[g] = max(0.0, pc[g] - step * g_c[g])
            pm[g] = max(0.0, pm[g] - step * g_m[g])
        for n in range(n_nodes):
            pq[n] = max(0.0, pq[n] - step * g_q[n])
    if count == 0 or kept_version[count - 1] != version:
        kept_c[count], kept_m[count], kept_q[count] = best_c, best_m, best_q
        count += 1
    return best_l, kept_c, kept_m, kept_q, count


@kernel
def prices(cg, sc, sm, sq, fit, g_node, n_nodes, target, steps):
    """``prices.prices`` over these arrays: the dual bound L (the lowest seen in ``steps``
    subgradient steps from zero prices, Polyak's step towards ``target``) and the prices of the
    lowest L seen after a quarter, half and all of the steps, without repeats (``kept_*[:count]``)."""
    ct, tc, tm, tq = _columns(cg, sc, sm, sq, fit, 1, 1.0)
    return _price_steps(ct, tc, tm, tq, g_node, n_nodes, target, steps)


@kernel
def _dual(ct, tc, tm, tq, g_node, pc, pm, pq, gain, top):
    """``dual_bound`` on ``_columns``' arrays (``gain``/``top``: room for ``_profits``)."""
    bound = 0.0
    for g in range(pc.shape[0]):
        bound += pc[g]
    for g in range(pm.shape[0]):
        bound += pm[g]
    for n in range(pq.shape[0]):
        bound += pq[n]
    _profits(ct, tc, tm, tq, g_node, pc, pm, pq, gain, top)
    for p in range(gain.shape[0]):
        bound += max(0.0, gain[p])
    return bound


@kernel
def dual_bound(cg, sc, sm, sq, fit, g_node, pc, pm, pq):
    """L at prices (pc, pm, pq) >= 0: their sum plus every job's best positive reduced profit; an
    upper bound on the compute any placement adds (weak duality, ``prices`` module doc)."""
    ct, tc, tm, tq = _columns(cg, sc, sm, sq, fit, 1, 1.0)
    n_jobs = cg.shape[0]
    return _dual(ct, tc, tm, tq, g_node, pc, pm, pq, np.empty(n_jobs), np.empty(n_jobs, dtype=np.int64))


@kernel
def _radix_order(ranked, key):
    """``_order_by`` by a stable radix sort on the keys' bits, byte by byte from the lowest."""
    n = ranked.shape[0]
    jobs = ranked.copy()
    if n < 2:
        return jobs
    values = np.empty(n)
    for t in range(n):
        values[t] = key[ranked[t]] + 0.0                 # -0.0 as 0.0: equal keys, equal bits
    bits = values.view(np.int64)
    for t in range(n):
        b = bits[t]
        if b < 0:
            b ^= 0x7FFFFFFFFFFFFFFF                      # now ascending as the floats
        bits[t] = ~b ^ _SIGN                             # descending, as unsigned integers
    counts = np.zeros((8, 256), dtype=np.int64)
    for t in range(n):
        b = bits[t]
        for d in range(8):
            counts[d, (b >> (8 * d)) & 255] += 1
    other_bits, other_jobs = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    for d in range(8):
        shift = 8 * d
        if counts[d, (bits[0] >> shift) & 255] == n:
            continue                                     # one value of this byte: nothing moves
        total = 0
        for v in range(256):
            here = counts[d, v]
            counts[d, v] = total
            total += here
        for t in range(n):
            b = bits[t]
            v = (b >> shift) & 255
            k = counts[d, v]
            counts[d, v] = k + 1
            other_bits[k] = b
            other_jobs[k] = jobs[t]
        bits, other_bits = other_bits, bits
        jobs, other_jobs = other_jobs, jobs
    return jobs


@kernel
def _order_by(ranked, key):
    """The jobs of ``ranked`` by ``key`` descending, ties in ``ranked``'s order (``ranked[np.argsort(
    -key[ranked], kind="mergesort")]``; no NaN in ``key``; +inf: by ``_radix_order``): a bucket sort, one bucket per job over
    the finite keys' range (the bucket is a monotone function of the key: IEEE rounding is) and
    one for -inf, each sorted by insertion, or by ``_radix_order`` where it holds more than
    ``BUCKET`` jobs (keys far from evenly spread)."""
    n = ranked.shape[0]
    lo, hi = np.inf, -np.inf
    for t in range(n):
        x = key[ranked[t]]
        if x > -np.inf:
            lo, hi = min(lo, x), max(hi, x)
    if hi > 1e300 or lo < -1e300 or (hi > lo and hi - lo < 1e-300):
        return _radix_order(ranked, key)                 # +inf, or the span or its scale would overflow
    scale = 0.0
    if hi > lo:
        scale = (n - 1) / (hi - lo)
    count = np.zeros(n + 2, dtype=np.int64)
    slot = np.empty(n, dtype=np.int64)
    for t in range(n):
        x = key[ranked[t]]
        b = int((hi - x) * scale) if x > -np.inf else n
        slot[t] = b
        count[b + 1] += 1
    for b in range(n + 1):
        count[b + 1] += count[b]
    out = np.empty(n, dtype=np.int64)
    for t in range(n):                                   # stable: ties keep ranked's order
        b = slot[t]
        out[count[b]] = ranked[t]
        count[b] += 1
    start = 0
    for b in range(n):                                   # count[b]: the end of bucket b now
        end = count[b]
        if end - start > BUCKET:                         # keys far from evenly spread
            out[start:end] = _radix_order(out[start:end], key)
            start = end
            continue
        for t in range(start + 1, end):
            p = out[t]
            x = key[p]
            u = t
            while u > start and key[out[u - 1]] < x:
                out[u] = out[u - 1]
                u -= 1
            out[u] = p
        start = end
    return out


@kernel
def _by_size(cg):
    """Jobs by their largest compute over the groups, descending (ties: by position): the
    greedy orders' tie-break."""
    n_jobs, n_groups = cg.shape
    c_max = np.empty(n_jobs)
    for p in range(n_jobs):
        c_max[p] = 0.0
        for g in range(n_groups):
            c_max[p] = max(c_max[p], cg[p, g])
    return _order_by(np.arange(n_jobs), c_max)


@kernel
def _reduced_columns(ct, tc, tm, tq, g_node, pc, pm, pq, rt):
    """``_reduced`` on ``_columns``' arrays into ``rt[g, p]`` (transposed)."""
    n_groups, n_jobs = ct.shape
    for g in range(n_groups):
        price_c, price_m, price_q = pc[g], pm[g], pq[g_node[g]]
        for p in range(n_jobs):
            rt[g, p] = ct[g, p] - tc[g, p] * price_c - tm[g, p] * price_m - tq[g, p] * price_q


@kernel
def _keys(rt, keys):
    """The greedy orders' keys from the reduced profits ``rt[g, p]``: ``keys[0, p]`` the best,
    ``keys[1, p]`` its gap over the runner-up's (or over 0 when that is lower); -inf where no
    group takes the job."""
    n_groups, n_jobs = rt.shape
    first, second = keys[0], keys[1]
    for p in range(n_jobs):
        first[p] = -np.inf
        second[p] = -np.inf
    for g in range(n_groups):                            # the two highest, ties counted twice
        for p in range(n_jobs):
            v = rt[g, p]
            up = v > first[p]
            second[p] = first[p] if up else max(second[p], v)
            first[p] = v if up else first[p]
    for p in range(n_jobs):
        best = first[p]
        gap = best - max(second[p], 0.0) if n_groups > 1 else best
        first[p] = best if np.isfinite(best) else -np.inf
        second[p] = gap if np.isfinite(gap) else -np.inf


@kernel
def _kinds(jc, jm, jq):
    """Per job the first job by position with the same demands on every architecture (among
    those with its compute on architecture 0, up to ``KINDS`` kinds looked at; else itself):
    jobs of one kind fit the same GPUs and have the same reduced profits."""
    n, n_arch = jc.shape
    kind = np.arange(n)
    if n_arch == 0:
        return kind
    order = _order_by(np.arange(n), jc[:, 0])
    start = 0
    while start < n:
        end = start + 1
        while end < n and jc[order[end], 0] == jc[order[start], 0]:
            end += 1
        for t in range(start + 1, end):                 # a run: positions ascending
            p = order[t]
            seen = 0
            for u in range(start, t):
                o = order[u]
                if kind[o] != o:
                    continue
                same = jq[o] == jq[p]
                for a in range(n_arch):
                    same = same and jc[o, a] == jc[p, a] and jm[o, a] == jm[p, a]
                if same:
                    kind[p] = o
                    break
                seen += 1
                if seen >= KINDS:
                    break
        start = end
    return kind


@kernel
def _preferences(rt, prefs, rank):
    """Per job its groups by reduced profit ``rt[g, p]`` descending, ties: the lower group, into
    ``prefs[:, p]`` (each group's rank counted over the jobs, without branches; ``rank``: room)."""
    n_groups, n_jobs = rt.shape
    for g in range(n_groups):
        for p in range(n_jobs):
            rank[p] = 0
        for h in range(g):
            for p in range(n_jobs):
                rank[p] += rt[h, p] >= rt[g, p]
        for h in range(g + 1, n_groups):
            for p in range(n_jobs):
                rank[p] += rt[h, p] > rt[g, p]
        for p in range(n_jobs):
            prefs[rank[p], p] = g


@kernel
def _sizes(fc, fm):
    """The balanced choice's scales: compute and memory left per GPU (at least EPS)."""
    size_c, size_m = np.empty(fc.shape[0]), np.empty(fc.shape[0])
    for i in range(fc.shape[0]):
        size_c[i], size_m[i] = max(fc[i], EPS), max(fm[i], EPS)
    return size_c, size_m


@kernel
def _place(order, prefs, fit, balanced, members, n_members, g_node, g_arch, jc, jm, jq, gnode, size_c, size_m,
           kind, fc, fm, fq, top_c, top_m, dead, where):
    """``price_greedy``'s placement: the jobs in ``order``, each on its groups by reduced profit
    descending (``prefs[:, p]``, ``_preferences``; up to the first that takes no job), on the
    group's first GPU that takes it or (``balanced``) the one whose compute and memory left, over
    ``size_c``/``size_m``, stay closest; ``fc``/``fm``/``fq`` and ``where`` (-1 where unplaced)
    are changed (``where`` all -1 on entry). A job not placed is skipped with its ``kind``
    (``_kinds``): the same demands find no room later either. ``top_c``/``top_m`` (per group)
    and ``dead`` (per job) are room."""
    n_groups = prefs.shape[0]
    dead[:] = False
    for g in range(n_groups):
        top_c[g], top_m[g] = -np.inf, -np.inf
        for k in range(n_members[g]):
            top_c[g] = max(top_c[g], fc[members[g, k]])
            top_m[g] = max(top_m[g], fm[members[g, k]])
    for t in range(order.shape[0]):
        p = order[t]
        q = jq[p]
        if dead[kind[p]]:
            continue                         # a job with p's demands found no room: nor will p
        for s in range(n_groups):
            g = prefs[s, p]
            if not fit[p, g]:
                break                                 # -inf: no later group fits either
            a = g_arch[g]
            c, m = jc[p, a], jm[p, a]
            if fq[g_node[g]] + EPS < q or top_c[g] + EPS < c or top_m[g] + EPS < m:
                continue
            chosen, score = -1, np.inf
            for k in range(n_members[g]):
                i = members[g, k]
                if not (fc[i] + EPS >= c and fm[i] + EPS >= m):
                    continue
                if not balanced:
                    chosen = i
                    break
                gap = abs((fc[i] - c) / size_c[i] - (fm[i] - m) / size_m[i])
                if gap < score - EPS:
                    chosen, score = i, gap
            if chosen >= 0:
                fc[chosen] -= c
                fm[chosen] -= m
                fq[gnode[chosen]] -= q
                top_c[g], top_m[g] = -np.inf, -np.inf
                for k in range(n_members[g]):
                    top_c[g] = max(top_c[g], fc[members[g, k]])
                    top_m[g] = max(top_m[g], fm[members[g, k]])
                where[p] = chosen
                break
        dead[kind[p]] = where[p] < 0                     # the loads only go down from here


@kernel
def price_greedy(r, cg, fit, regret, balanced, group, g_node, g_arch, jc, jm, jq, garch, gnode,
                 fc, fm, fq):
    """``prices.price_greedy``: jobs by best reduced profit (``regret``: by its gap over the
    runner-up group), each on its groups by reduced profit, on the group's first GPU that takes
    it or (``balanced``) the one whose compute and memory left stay closest in proportion;
    ``fc``/``fm``/``fq`` are changed. ``where`` per job. (``_starts`` shares the parts that do
    not depend on ``regret``/``balanced`` between the four.)"""
    n_jobs, n_groups = r.shape
    rt = np.empty((n_groups, n_jobs))
    for p in range(n_jobs):
        for g in range(n_groups):
            rt[g, p] = r[p, g]
    keys = np.empty((2, n_jobs))
    _keys(rt, keys)
    order = _order_by(_by_size(cg), keys[1] if regret else keys[0])
    members, n_members = _members(group, n_groups)
    size_c, size_m = _sizes(fc, fm)
    prefs = np.empty((n_groups, n_jobs), dtype=np.int64)
    _preferences(rt, prefs, np.empty(n_jobs, dtype=np.int64))
    where = np.full(n_jobs, -1, dtype=np.int64)
    _place(order, prefs, fit, balanced, members, n_members, g_node, g_arch, jc, jm, jq, gnode, size_c, size_m,
           _kinds(jc, jm, jq), fc, fm, fq, np.empty(n_groups), np.empty(n_groups), np.empty(n_jobs, dtype=np.bool_),
           where)
    return where


@kernel
def _starts(jc, jm, jq, garch, gnode, n_nodes, base_c, base_m, base_q, wfd_where, dense_order, steps, sample,
            targets, pivots):
    """``fill_search``'s greedy starts: worst-fit in ``dense_order``, then per run of ``targets``
    the price starts of its kept prices (regret or not, balanced or not). Returns (the starts,
    their values, -inf for none, and the lowest dual bound L: inf without price runs; with
    ``pivots`` > 0 also L at the LP's duals, ``lp_kernels``, from the best start: then L is the
    LP's optimum unless the simplex needs more pivots)."""
    n_jobs = jc.shape[0]
    n_starts = 1 + 12 * targets.shape[0]
    starts = np.full((n_starts, n_jobs), -1, dtype=np.int64)
    values = np.full(n_starts, -np.inf)
    fc, fm, fq = base_c.copy(), base_m.copy(), base_q.copy()
    starts[0] = wf_greedy(dense_order, jc, jm, jq, garch, gnode, fc, fm, fq)
    values[0] = value_of(starts[0], jc, garch)
    low = np.inf
    if steps <= 0 or n_jobs == 0 or garch.shape[0] == 0:
        return starts, values, low
    group, g_node, g_arch = groups_of(garch, gnode)
    n_groups = g_node.shape[0]
    cg, sc, sm, sq, fit = _scaled(jc, jm, jq, group, g_node, g_arch, base_c, base_m, base_q)
    floor = max(values[0], value_of(wfd_where, jc, garch))
    stride = max(1, -(-n_jobs // sample))
    share = (-(-n_jobs // stride)) / n_jobs
    ct, tc, tm, tq = _columns(cg, sc, sm, sq, fit, 1, 1.0)
    ct_s, tc_s, tm_s, tq_s = ct, tc, tm, tq
    if stride > 1:                 # every stride-th job, each capacity scaled by their share
        ct_s, tc_s, tm_s, tq_s = _columns(cg, sc, sm, sq, fit, stride, share)
    gain, top = np.empty(n_jobs), np.empty(n_jobs, dtype=np.int64)
    members, n_members = _members(group, n_groups)
    size_c, size_m = _sizes(base_c, base_m)
    by_size = _by_size(cg)
    rt, keys = np.empty((n_groups, n_jobs)), np.empty((2, n_jobs))
    prefs = np.empty((n_groups, n_jobs), dtype=np.int64)
    top_c, top_m = np.empty(n_groups), np.empty(n_groups)
    kind, dead = _kinds(jc, jm, jq), np.empty(n_jobs, dtype=np.bool_)
    s = 1
    for f in range(targets.shape[0]):
        target = floor if f == 0 else floor + targets[f] * (low - floor)
        if stride == 1:
            bound, kept_c, kept_m, kept_q, count = _price_steps(ct, tc, tm, tq, g_node, n_nodes, target, steps)
        else:
            _, kept_c, kept_m, kept_q, count = _price_steps(ct_s, tc_s, tm_s, tq_s, g_node, n_nodes,
                                                            target * share, steps)
            bound = np.inf
            for k in range(count):
                kept_c[k] /= share
                kept_m[k] /= share
                kept_q[k] /= share
                bound = min(bound, _dual(ct, tc, tm, tq, g_node, kept_c[k], kept_m[k], kept_q[k], gain, top))
        low = min(low, bound)
        for k in range(count):
            _reduced_columns(ct, tc, tm, tq, g_node, kept_c[k], kept_m[k], kept_q[k], rt)
            _keys(rt, keys)
            _preferences(rt, prefs, top)
            for regret in range(2):
                order = _order_by(by_size, keys[regret])
                for balanced in (False, True):
                    fc[:] = base_c
                    fm[:] = base_m
                    fq[:] = base_q
                    _place(order, prefs, fit, balanced, members, n_members, g_node, g_arch, jc, jm, jq, gnode,
                           size_c, size_m, kind, fc, fm, fq, top_c, top_m, dead, starts[s])
                    values[s] = value_of(starts[s], jc, garch)
                    s += 1
    if pivots > 0:
        low = min(low, _lp_bound(starts[np.argmax(values)], group, ct, tc, tm, tq, g_node, n_nodes, pivots, gain, top))
    return starts, values, low


@kernel
def _lp_bound(where, group, ct, tc, tm, tq, g_node, n_nodes, pivots, gain, top):
    """L at the duals ``lp_kernels.lp_prices`` finds from the answer ``where`` in at most
    ``pivots`` pivots, clipped to >= 0 (a valid bound whether or not they are optimal); inf
    where it is not finite."""
    key = np.empty(where.shape[0], dtype=np.int64)
    for p in range(where.shape[0]):
        key[p] = group[where[p]] if where[p] >= 0 else -1
    pc, pm, pq, _, _ = lp_prices(ct, tc, tm, tq, g_node, n_nodes, key, pivots)
    bound = _dual(ct, tc, tm, tq, g_node, np.maximum(pc, 0.0), np.maximum(pm, 0.0), np.maximum(pq, 0.0), gain, top)
    return bound if np.isfinite(bound) else np.inf


@kernel
def _weight(want, cap, count):
    """``fill.density_order``'s pressure weight of a resource: (want / cap) / (cap / count)."""
    return 0.0 if cap <= EPS else (want / cap) / (cap / count)


@kernel
def density_order(jc, jm, jq, base_c, base_m, base_q):
    """``fill.density_order``'s order of the jobs (positions) on the loads ``base_*``: by density
    ``c / (w_c c + w_q q + w_m m)`` (c, m on the first architecture) descending (a cost <= EPS:
    first), ties by compute descending, then by position (two stable ``_order_by`` passes); the
    weights as ``density_order``'s (what the jobs ask of a resource over what is left, over what
    an average GPU has left)."""
    n, count = jq.shape[0], base_c.shape[0]
    order = np.arange(n)
    if count == 0:
        return order
    cap_c, cap_m, cap_q, want_c, want_m, want_q = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    for i in range(count):
        cap_c += max(base_c[i], 0.0)
        cap_m += max(base_m[i], 0.0)
    for k in range(base_q.shape[0]):
        cap_q += max(base_q[k], 0.0)
    for p in range(n):
        want_c += jc[p, 0]
        want_m += jm[p, 0]
        want_q += jq[p]
    w_c, w_q, w_m = _weight(want_c, cap_c, count), _weight(want_q, cap_q, count), _weight(want_m, cap_m, count)
    key = np.empty(n)                                        # density: c / cost, highest first
    for p in range(n):
        c = jc[p, 0]
        cost = c * w_c + jq[p] * w_q + jm[p, 0] * w_m
        key[p] = c / cost if cost > EPS else np.inf
    return _order_by(_order_by(order, jc[:, 0].copy()), key)    # ties: by compute, then position


# ---- the whole search ----------------------------------------------------------------------------

@kernel
def _kick(state, i, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong):
    """Take each job of GPU ``i`` off with probability 1/2 (at least one); the generator's state."""
    removed = 0
    t = 0
    while t < nong[i]:
        state = (state * 48271) % _MOD
        if state % 2 == 0:
            _unplace(i, ong[i, t], jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong)
            removed += 1
        else:
            t += 1
    if removed == 0 and nong[i] > 0:
        state = (state * 48271) % _MOD
        _unplace(i, ong[i, state % nong[i]], jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool,
                 ong, nong)
    return state


@kernel
def fill_search(jc, jm, jq, garch, gnode, n_nodes, n_arch, base_c, base_m, base_q, wfd_where,
                dense_order, rounds, min_gain, steps, sample, targets, polish_count, enough, kicks, patience, seed, fixed_value,
                kick_rounds, kick_evict, apart, pivots):
    """``fill``'s search (``fill`` module doc) on the single-GPU jobs, on top of ``base_*`` (the
    loads with the data-parallel jobs, ``fixed_value`` their compute): the WFD start
    ``wfd_where`` and the greedy starts, the best ``polish_count`` of the latter by their value,
    each polished; then ``kicks`` perturbations of the best. Returns (where, its value, the dual
    bound L + ``fixed_value``, the number of polished starts)."""
    n_jobs = jc.shape[0]
    min_gain = max(min_gain, 2 * EPS)
    # the greedy starts: density order, then the price starts
    starts, values, low = _starts(jc, jm, jq, garch, gnode, n_nodes, base_c, base_m, base_q, wfd_where, dense_order,
                                  steps, sample, targets, pivots)
    n_starts = values.shape[0]
    ceiling = fixed_value + low
    ranked = np.argsort(-values, kind="mergesort")            # stable: ties keep the start order
    identity = np.arange(n_jobs)
    every = np.arange(garch.shape[0])
    pool = _pools(jc, n_arch)
    best = wfd_where.copy()
    best_value = -np.inf
    tried = 0
    for t in range(-1, min(polish_count, n_starts)):
        if t >= 0 and not np.isfinite(values[ranked[t]]):
            break
        where = wfd_where.copy() if t < 0 else starts[ranked[t]].copy()
        fc, fm, fq = retake(where, identity, jc, jm, jq, garch, gnode, base_c, base_m, base_q)
        npool, ong, nong = _rows(where, jc, garch, n_arch)
        polish(rounds, min_gain, every, True, jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong)
        tried += 1
        got = value_of(where, jc, garch)
        if got > best_value + EPS:
            best, best_value = where, got
        if fixed_value + best_value >= enough * ceiling - EPS:
            return best, best_value, ceiling, tried     # within ``enough`` of the bound
    if kicks > 0 and garch.shape[0] > 0:
        best_value = _kicks_on(kicks, patience, seed, kick_rounds, kick_evict, apart, min_gain,
                               enough * ceiling - fixed_value, best, best_value, jc, jm, jq, garch, gnode, pool, n_arch,
                               base_c, base_m, base_q)
    return best, best_value, ceiling, tried


@kernel
def _on(gpus, jc, garch, ong, nong):
    """The compute placed on ``gpus`` (distinct)."""
    total = 0.0
    for t in range(gpus.shape[0]):
        i = gpus[t]
        if t > 0 and i == gpus[0]:
            continue
        for k in range(nong[i]):
            total += jc[ong[i, k], garch[i]]
    return total


@kernel
def _save(local, ong, nong, fc, fm, fq, gnode, s_ong, s_nong, s_c, s_m, s_q):
    """The undo journal of a kick on GPUs ``local``: their job lists, loads and nodes' cores."""
    for t in range(2):
        i = local[t]
        s_nong[t] = nong[i]
        for k in range(nong[i]):
            s_ong[t, k] = ong[i, k]
        s_c[t], s_m[t], s_q[t] = fc[i], fm[i], fq[gnode[i]]


@kernel
def _undo(local, where, ong, nong, fc, fm, fq, gnode, s_ong, s_nong, s_c, s_m, s_q):
    """Restore the state ``_save`` journaled (a kick moves jobs on and off ``local`` only): the
    jobs now on them back to unplaced, then the saved lists, their jobs' ``where`` and the loads
    (the saved values themselves: exact)."""
    for t in range(2):
        i = local[t]
        for k in range(nong[i]):
            where[ong[i, k]] = -1
    for t in range(2):
        i = local[t]
        nong[i] = s_nong[t]
        for k in range(s_nong[t]):
            ong[i, k] = s_ong[t, k]
            where[s_ong[t, k]] = i
        fc[i], fm[i], fq[gnode[i]] = s_c[t], s_m[t], s_q[t]


@kernel
def _kicks_on(kicks, patience, seed, kick_rounds, kick_evict, apart, min_gain, stop, where, value, jc, jm, jq, garch,
              gnode, pool, n_arch, base_c, base_m, base_q):
    """Up to ``kicks`` times: about half the jobs of two GPUs (drawn by MINSTD from ``seed``) off,
    the moves on those two GPUs, the result kept when it places no less (else undone from a
    journal). Stops early once the value reaches ``stop`` or, ``patience`` > 0, after max(
    ``patience``, ``PATIENCE_PER_GPU`` x the GPUs) kicks in a row without a gain (a kick tries
    two GPUs: on a large cluster more kicks pass before each GPU has been tried). ``where`` is
    changed (``pool``: ``_pools``); returns its value."""
    n_gpus = garch.shape[0]
    wait = max(patience, PATIENCE_PER_GPU * n_gpus)
    fc, fm, fq = retake(where, np.arange(jc.shape[0]), jc, jm, jq, garch, gnode, base_c, base_m, base_q)
    npool, ong, nong = _rows(where, jc, garch, n_arch)
    s_ong = np.empty((2, jc.shape[0]), dtype=np.int64)     # the undo journal: the two GPUs' lists,
    s_nong = np.empty(2, dtype=np.int64)                       # loads and nodes' cores before a kick
    s_c, s_m, s_q = np.empty(2), np.empty(2), np.empty(2)
    s_npool = npool.copy()
    picked, outs, scratch, who = _room()
    local = np.empty(2, dtype=np.int64)
    state = seed % (_MOD - 1) + 1
    since = 0
    for _ in range(kicks):
        if patience > 0 and since >= wait:
            break                                    # ``wait`` kicks in a row gained nothing
        if value >= stop - EPS:
            break                                    # within ``enough`` of the bound: fill_search
        state = (state * 48271) % _MOD
        local[0] = state % n_gpus
        state = (state * 48271) % _MOD
        local[1] = state % n_gpus
        if apart:                                    # the second GPU on another node if any
            for t in range(n_gpus):
                if gnode[local[1]] != gnode[local[0]]:
                    break
                local[1] = (local[1] + 1) % n_gpus
        if local[1] == local[0]:
            local[1] = (local[0] + 1) % n_gpus
        _save(local, ong, nong, fc, fm, fq, gnode, s_ong, s_nong, s_c, s_m, s_q)
        s_npool[:] = npool
        before = _on(local, jc, garch, ong, nong)
        for t in range(2):
            state = _kick(state, local[t], jc, jm, jq, garch, gnode, where, fc, fm, fq, pool, npool, ong, nong)
        _polish(kick_rounds, min_gain, local[:1] if n_gpus == 1 else local, kick_evict, jc, jm, jq, garch, gnode,
                where, fc, fm, fq, pool, npool, ong, nong, picked, outs, scratch, who)
        got = value - before + _on(local, jc, garch, ong, nong)
        since = 0 if got > value + EPS else since + 1
        if got >= value - EPS:                       # kept
            value = max(got, value)
        else:                                        # undone from the journal
            _undo(local, where, ong, nong, fc, fm, fq, gnode, s_ong, s_nong, s_c, s_m, s_q)
            npool[:] = s_npool
    return value
