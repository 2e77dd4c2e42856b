"""The ``fill`` policy: the packer for tight instances (several resources binding at once).

Two starts, each worst-fit through the one greedy implementation (``LiveCluster``), each then
improved by ``improve``'s add/swap search and by *refill* moves, and the start that places the
most compute (Eq. 5) wins (ties: the first):

1. jobs by *pressure-weighted density*: compute over the share of the scarce resources the job
   takes, ``c / (P_c c / c_bar + P_q q / q_bar + P_m m / m_bar)``, where ``P_r`` is resource r's
   pressure (what the jobs ask of it over what the cluster has left) and ``r_bar`` what an
   average GPU has left of it (cores: the cluster's cores left over its GPUs). A resource nobody
   lacks weighs little; when cores bind, jobs with much compute per core come first;
2. WFD's order (expected runtime, longest first): ``fill`` is never worse than ``wfd-ls`` with the
   same ``rounds``.

Refill move: take one placed single-GPU job off a GPU and fill the room it leaves (with what the
GPU and its node had left) greedily with unplaced jobs, largest compute first, among the
``_SCAN`` largest that are not too big; kept when it gains at least ``min_gain``. It trades one
large job for several small ones where memory or cores bind (the 1-for-1 swap of ``improve``
cannot). Deterministic; Eq. 1-4 hold after every move. Cost: two greedy runs plus the searches,
O(P log P + G x jobs per GPU x _SCAN) per round.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Any, Hashable, Sequence

from hypersack.core.placement.check import placed_compute
from hypersack.core.placement.cluster import Cluster
from hypersack.core.placement.improve import MIN_GAIN, _check_options, _Given, _Search
from hypersack.core.placement.live import LiveCluster
from hypersack.core.placement.load import by_runtime
from hypersack.core.placement.model import EPS, Job

__all__ = ["fill", "density_order"]

_SCAN = 24
_INF = float("inf")


def density_order(jobs: Sequence[Job], cluster: Cluster) -> list[Job]:
    """Jobs by pressure-weighted density, highest first (ties: more compute, then given order)."""
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


def _refill(search: _Search, rounds: int) -> None:
    """Refill moves (see the module doc) on every GPU, in first-fit order, ``rounds`` passes."""
    for _ in range(rounds):
        moved = False
        for i in range(len(search.load.keys)):
            while (move := _best_refill(search, i)) is not None:
                out, picked = move
                search._apply(i, out, picked[0])
                for u in picked[1:]:
                    search._apply(i, None, u)
                moved = True
        if not moved:
            return


def _best_refill(search: _Search, i: int) -> tuple[int, list[int]] | None:
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


def fill(jobs: Sequence[Job], cluster: Cluster, rounds: int = 2,
         min_gain: float = MIN_GAIN) -> dict[Hashable, tuple]:
    """The ``fill`` policy (module doc); ``rounds`` and ``min_gain`` as for ``improve``."""
    min_gain = _check_options(rounds, min_gain)
    live = LiveCluster(cluster)
    best: Any = None
    best_value = -_INF
    for order in (density_order(jobs, cluster), by_runtime(jobs, cluster.architectures)):
        start = live.assign_checked(order, "wf", {})
        search = _Search(_Given(order, cluster, start), min_gain)
        search.run(rounds)
        _refill(search, rounds)
        answer = search.run(rounds)
        value = placed_compute(jobs, cluster, answer)
        if value > best_value + EPS:
            best, best_value = answer, value
    return best
