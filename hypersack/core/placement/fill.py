"""The ``fill`` policy: the packer for tight instances (several resources binding at once).

Starts, each a feasible placement, then the best few improved by local search; the start that
ends with the most placed compute (Eq. 5) wins (ties: the earlier start):

1. *price starts* (``prices``): the Lagrangian shadow prices of compute and memory per (node,
   architecture) group and of cores per node, the best seen after a quarter, half and all of
   ``steps`` subgradient steps (repeats dropped); for each, single-GPU jobs placed by reduced
   profit or by regret, each on its best group that fits, on the group's first fitting GPU or
   its most balanced one (up to 3 x 2 x 2 = 12 starts). Data-parallel jobs (``gpus`` > 1) are
   placed first, worst-fit in WFD's order, and stay where they are;
2. worst-fit with jobs by *pressure-weighted density* (``density_order``);
3. worst-fit in WFD's order (expected runtime, longest first), always improved: ``fill`` is never
   worse than ``wfd-ls`` with the same ``rounds``. When it places every job it is the answer.

The ``polish`` best starts by their greedy value, and start 3, are improved by ``improve``'s
add/swap search, by *refill* moves (one placed job out, several unplaced in: where memory or cores
bind) and by *evict* moves (two or three placed jobs out, one larger unplaced job in: where the
compute of a GPU is left in fragments), repeated while a pass gains; every move gains at least
``min_gain`` and keeps Eq. 1-4. Once the best answer is at least ``enough`` x the dual bound L
(the compute of the data-parallel jobs plus L of the price starts: an upper bound on any answer
that keeps them where they are), the remaining starts are not improved: none could gain more than
the 1 - ``enough`` left. Deterministic.
"""
from __future__ import annotations

from bisect import bisect_right, insort
from itertools import combinations
from typing import Any, Callable, Hashable, Sequence

from hypersack.core.placement.check import placed_compute
from hypersack.core.placement.cluster import Cluster
from hypersack.core.placement.improve import MIN_GAIN, _check_options, _Given, _Search
from hypersack.core.placement.live import LiveCluster
from hypersack.core.placement.load import by_runtime
from hypersack.core.placement.model import EPS, Job, check_number
from hypersack.core.placement.prices import ORDERS, WITHIN, Groups, ids, price_greedy, prices, reduced_profits
from hypersack.errors import ConfigError

__all__ = ["fill", "density_order"]

_SCAN = 24          # refill: unplaced candidates looked at per freed GPU
_EVICT_IN = 8       # evict: unplaced candidates (largest first) tried per GPU
_EVICT_OUT = 8      # evict: the smallest placed jobs of the GPU among which 2-3 are taken out
_INF = float("inf")
STEPS = 120         # subgradient steps of the price starts
POLISH = 4          # greedy starts improved, besides WFD's
#: Stop improving starts once the best answer is this fraction of the dual bound L: L bounds
#: the optimum, so the answer is then proven within 1% of it.
ENOUGH = 0.99


def density_order(jobs: Sequence[Job], cluster: Cluster) -> list[Job]:
    """Jobs by pressure-weighted density, highest first (ties: more compute, then given order):
    compute over ``P_c c / c_bar + P_q q / q_bar + P_m m / m_bar``, ``P_r`` resource r's pressure
    (what the jobs ask of it over what the cluster has left), ``r_bar`` what an average GPU has left
    of it (cores: the cluster's cores left over its GPUs)."""
    gpus = [(node, gpu) for node, gpu in cluster.gpus()]
    if not gpus or not jobs:
        return list(jobs)
    cap_c = sum(max(0.0, cluster.free(n.id, g.id)[0]) for n, g in gpus)
    cap_m = sum(max(0.0, cluster.free(n.id, g.id)[1]) for n, g in gpus)
    cap_q = sum(max(0.0, cluster.free_cpus(n.id)) for n in cluster.nodes)
    want_c = sum(job.compute * job.gpus for job in jobs)
    want_m = sum(job.memory_gb * job.gpus for job in jobs)
    want_q = sum(job.cpus * job.gpus for job in jobs)
    count = len(gpus)
    weights = []
    for want, cap in ((want_c, cap_c), (want_q, cap_q), (want_m, cap_m)):
        weights.append(0.0 if cap <= EPS else (want / cap) / (cap / count))
    w_c, w_q, w_m = weights

    def key(job: Job) -> tuple[float, float]:
        cost = w_c * job.compute + w_q * job.cpus + w_m * job.memory_gb
        return (-(job.compute / cost) if cost > EPS else -_INF, -job.compute)
    return sorted(jobs, key=key)


class _FillSearch(_Search):
    """``improve``'s search with the evict moves' cache: GPU -> (its smallest jobs, their subsets)."""

    def __init__(self, state: Any, min_gain: float):
        super().__init__(state, min_gain)
        self.subsets: dict[int, tuple[tuple, list]] = {}


def _passes(search: Any, rounds: int, best: Callable[[Any, int], Any],
            apply: Callable[[Any, int, Any], None]) -> bool:
    """Up to ``rounds`` passes over every GPU in first-fit order, applying ``best(search, i)``'s
    move on GPU ``i`` while it finds one; stops after a pass that moved nothing. Whether any moved."""
    any_moved = False
    for _ in range(rounds):
        moved = False
        for i in range(len(search.load.keys)):
            while (move := best(search, i)) is not None:
                apply(search, i, move)
                moved = any_moved = True
        if not moved:
            break
    return any_moved


def _refill(search: _Search, rounds: int) -> bool:
    """Refill moves on every GPU, up to ``rounds`` passes; whether any moved."""
    return _passes(search, rounds, _best_refill, _apply_refill)


def _apply_refill(search: _Search, i: int, move: tuple[int, list[int]]) -> None:
    out, picked = move
    search._apply(i, out, picked[0])
    for u in picked[1:]:
        search._apply(i, None, u)


def _best_refill(search: _Search, i: int) -> tuple[int, list[int]] | None:
    """Take one placed job ``p`` off GPU ``i`` and fill the room with unplaced jobs, largest
    compute first among the ``_SCAN`` largest that are not too big; the first p that gains."""
    load, demands, jobs = search.load, search.demands, search.jobs
    arch, n = load.arch[i], load.node[i]
    pool = search.pool[arch]
    if not pool:
        return None
    for c_p, p in search.on_gpu[i]:
        m_p, q_p = demands[p][arch][1], jobs[p].cpus
        room_c, room_m, room_q = load.free_c[i] + c_p, load.free_m[i] + m_p, load.free_q[n] + q_p
        k = bisect_right(pool, (room_c + EPS, _INF)) - 1
        picked, gain = [], 0.0
        for k in range(k, max(-1, k - _SCAN), -1):
            c_u, u = pool[k]
            m_u, q_u = demands[u][arch][1], jobs[u].cpus
            if c_u <= room_c + EPS and m_u <= room_m + EPS and q_u <= room_q + EPS:
                picked.append(u)
                room_c, room_m, room_q = room_c - c_u, room_m - m_u, room_q - q_u
                gain += c_u
        if picked and gain - c_p >= search.min_gain:
            return p, picked
    return None


def _evict(search: _FillSearch, rounds: int) -> bool:
    """Evict moves on every GPU, up to ``rounds`` passes; whether any moved."""
    return _passes(search, rounds, _best_evict, _apply_evict)


def _apply_evict(search: _FillSearch, i: int, move: tuple[list[int], int]) -> None:
    outs, u = move
    for p in outs[1:]:
        _unplace(search, i, p)
    search._apply(i, outs[0], u)


def _best_evict(search: _FillSearch, i: int) -> tuple[list[int], int] | None:
    """Two or three of the ``_EVICT_OUT`` smallest jobs on GPU ``i`` out, one unplaced job that
    did not fit in (among the ``_EVICT_IN`` largest that could fit then): the largest gain."""
    load, demands, jobs = search.load, search.demands, search.jobs
    arch, n = load.arch[i], load.node[i]
    pool, placed = search.pool[arch], search.on_gpu[i][:_EVICT_OUT]
    if not pool or len(placed) < 2:
        return None
    room_c, room_m, room_q = load.free_c[i], load.free_m[i], load.free_q[n]
    k = bisect_right(pool, (room_c + sum(c for c, _ in placed) + EPS, _INF)) - 1
    key = tuple(placed)
    cached = search.subsets.get(i)
    if cached is not None and cached[0] == key:
        subsets = cached[1]
    else:
        subsets = _subsets(search, arch, placed)
        search.subsets[i] = (key, subsets)
    sums = [s[0] for s in subsets]
    best, best_gain = None, search.min_gain - EPS
    for k in range(k, max(-1, k - _EVICT_IN), -1):
        c_u, u = pool[k]
        if c_u <= best_gain:
            break
        need_c, need_m, need_q = c_u - room_c, demands[u][arch][1] - room_m, jobs[u].cpus - room_q
        if need_c <= EPS and need_m <= EPS and need_q <= EPS:
            continue                                  # an add: improve's move
        for s in range(bisect_right(sums, need_c - EPS), len(sums)):
            gone, m_out, q_out, members = subsets[s]
            if c_u - gone <= best_gain:
                break
            if m_out + EPS >= need_m and q_out + EPS >= need_q:
                best, best_gain = ([placed[t][1] for t in members], u), c_u - gone
                break
    return best


def _subsets(search: _Search, arch: str, placed: list) -> list[tuple[float, float, float, tuple[int, ...]]]:
    """(compute, memory, cores, members) of every 2 and 3 of ``placed``, by compute ascending."""
    c = [v for v, _ in placed]
    m = [search.demands[p][arch][1] for _, p in placed]
    q = [search.jobs[p].cpus for _, p in placed]
    out: list[tuple[float, float, float, tuple[int, ...]]] = [
        (c[a] + c[b], m[a] + m[b], q[a] + q[b], (a, b)) for a, b in combinations(range(len(placed)), 2)]
    out += [(c[a] + c[b] + c[d], m[a] + m[b] + m[d], q[a] + q[b] + q[d], (a, b, d))
            for a, b, d in combinations(range(len(placed)), 3)]
    out.sort(key=lambda s: s[0])
    return out


def _unplace(search: _Search, i: int, p: int) -> None:
    """Take job ``p`` off GPU ``i``: back to the unplaced pools."""
    load, arch = search.load, search.load.arch[i]
    load.take(i, *(-v for v in search.demands[p][arch]), -search.jobs[p].cpus)
    search.on_gpu[i].remove((search.demands[p][arch][0], p))
    search.where[p] = None
    for a, pool in search.pool.items():
        insort(pool, (search.demands[p][a][0], p))


def _polish(jobs: Sequence[Job], cluster: Cluster, start: Any, rounds: int, min_gain: float) -> dict:
    """``start`` improved by add/swap, refill and evict moves while a pass of them gains."""
    search = _FillSearch(_Given(jobs, cluster, start), min_gain)
    for _ in range(max(1, 2 * rounds)):
        search.run(rounds)
        refilled = _refill(search, rounds)
        evicted = _evict(search, rounds)
        if not (refilled or evicted):
            break
    return search.run(rounds)


def _price_starts(jobs: list[Job], cluster: Cluster, fixed: dict, target: float,
                  steps: int) -> tuple[float, list[dict]]:
    """The price starts (module doc) on top of the data-parallel jobs' places ``fixed``, and the
    dual bound L on the compute the single-GPU jobs can add to ``fixed``."""
    state = _Given(jobs, cluster, fixed)
    singles = [p for p, job in enumerate(jobs) if job.gpus == 1]
    if not singles or not state.load.keys:
        return _INF, []
    groups = Groups(state.load, [jobs[p] for p in singles], [state.demands[p] for p in singles])
    out = []
    bound, snapshots = prices(groups, target, steps, [steps * k // 4 for k in (1, 2)])
    for pc, pm, pq in snapshots:
        r = reduced_profits(groups, pc, pm, pq)
        for order in ORDERS:
            for within in WITHIN:
                load = _copy(state.load)
                placed = price_greedy(load, groups, singles, state.demands, jobs, r, order, within)
                out.append({**fixed, **ids(jobs, load.keys, placed)})
    return bound, out


def _copy(load: Any) -> Any:
    out = object.__new__(type(load))
    out.__dict__.update(load.__dict__)
    out.free_c, out.free_m, out.free_q = list(load.free_c), list(load.free_m), list(load.free_q)
    return out


def fill(jobs: Sequence[Job], cluster: Cluster, rounds: int = 2, min_gain: float = MIN_GAIN,
         steps: int = STEPS, polish: int = POLISH, enough: float = ENOUGH) -> dict[Hashable, tuple]:
    """The ``fill`` policy (module doc); ``rounds`` and ``min_gain`` as for ``improve``;
    ``steps``: subgradient steps of the price starts (0: no price starts); ``polish``: greedy
    starts improved besides WFD's; ``enough``: stop improving starts once the best answer is at
    least this fraction of the dual bound (> 1: never stop early)."""
    min_gain = _check_options(rounds, min_gain)
    enough = check_number("placement.enough", enough)
    for name, given in (("steps", steps), ("polish", polish)):
        if isinstance(given, bool) or not isinstance(given, int) or given < 0:
            raise ConfigError(f"placement.{name}", given, "must be an integer >= 0")
    jobs = list(jobs)
    live = LiveCluster(cluster)
    wfd_order = by_runtime(jobs, cluster.architectures)
    wfd_start = live.assign_checked(wfd_order, "wf", {})
    if len(wfd_start) == len(jobs):
        return wfd_start                      # every job placed: no move of the search applies
    dense_order = density_order(jobs, cluster)
    starts = [(dense_order, live.assign_checked(dense_order, "wf", {}))]
    value = {id(a): placed_compute(jobs, cluster, a) for _, a in starts}
    value[id(wfd_start)] = placed_compute(jobs, cluster, wfd_start)
    ceiling = _INF
    if steps:
        fixed = {jid: devs for jid, devs in wfd_start.items() if len(devs) > 1}
        target = max(value.values())
        bound, price_starts = _price_starts(jobs, cluster, fixed, target, steps)
        ceiling = placed_compute(jobs, cluster, fixed) + bound
        for start in price_starts:
            value[id(start)] = placed_compute(jobs, cluster, start)
            starts.append((jobs, start))
    ranked = sorted(starts, key=lambda s: -value[id(s[1])])[:polish]      # stable: ties keep order
    best: Any = None
    best_value = -_INF
    for order, start in [(wfd_order, wfd_start), *ranked]:
        answer = _polish(order, cluster, start, rounds, min_gain)
        got = placed_compute(jobs, cluster, answer)
        if got > best_value + EPS:
            best, best_value = answer, got
        if best_value >= enough * ceiling - EPS:
            break                       # within ``enough`` of the bound: no start can gain more
    return best
