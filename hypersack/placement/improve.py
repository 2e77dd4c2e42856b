"""Local search on top of a greedy placement: trade jobs to raise occupancy (Eq. 5).

``improve`` takes any feasible assignment and repeatedly, GPU by GPU, applies the best move:

* add: the unplaced single-GPU job with the most compute that fits the GPU's room;
* swap: take a placed single-GPU job ``p`` off the GPU and put the unplaced job ``u`` with the
  most compute in ``(c_p, c_p + room]`` there, when ``u`` also fits the memory and cores left.

Every move raises the placed compute by at least ``min_gain``, so it ends; Eq. 1-4 hold after
every move. Data-parallel jobs stay where they are. Candidates come from one sorted list per architecture,
so a move costs O(log jobs). The policy ``wfd-ls`` is ``wfd`` then ``improve``: it keeps WFD's
balance and mostly its long-jobs-first order, but a swapped-out job waits for a later decision.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Mapping, Sequence
from typing import Any, Hashable

from hypersack.placement.check import check_placement
from hypersack.placement.cluster import Cluster, as_devices
from hypersack.placement.model import EPS, Job
from hypersack.placement.live import LiveCluster
from hypersack.placement.load import Load, by_runtime, demands
from hypersack.validation import check_integer, check_number

__all__ = ["improve", "worst_fit_decreasing_local_search"]

_SCAN = 16       # candidates looked at below the best compute before giving up on a move
_INF = float("inf")
#: Smallest compute gain (percent of one GPU) worth a move: below it a swap only churns jobs for
#: less than profiling noise, and the search would spend most of its time on full GPUs.
MIN_GAIN = 0.25


class _Given:
    """A feasible assignment as the search reads it: the load with it taken, the jobs (in the
    order given: ties between equal candidates go to the earlier job), their demands, and
    ``placed``: job position -> GPU numbers. ``numbers``: the assignment gives GPU numbers
    (``Load.keys`` positions, as ``LiveCluster.assign_checked(numbers=True)``), not devices."""

    def __init__(self, jobs: Sequence[Job], cluster: Cluster, assignment: Mapping[Hashable, Any],
                 numbers: bool = False):
        self.jobs, self.load = list(jobs), Load(cluster)
        self.demands = demands(self.jobs, list(self.load.by_arch))
        position = {key: i for i, key in enumerate(self.load.keys)}
        index = {job.id: p for p, job in enumerate(self.jobs)}
        self.placed: dict[int, tuple[int, ...]] = {}
        load, cpus = self.load, [job.cpus for job in self.jobs]
        for jid, devices in assignment.items():
            p = index[jid]
            gpus = self.placed[p] = (tuple(devices) if numbers
                                     else tuple(position[dev] for dev in as_devices(devices)))
            demand = self.demands[p]
            for i in gpus:
                c, m = demand[load.arch[i]]
                load.take(i, c, m, cpus[p])


class _Search:
    def __init__(self, state: Any, min_gain: float):
        self.min_gain = max(min_gain, 2 * EPS)
        self.jobs, self.load, self.demands = state.jobs, state.load, state.demands
        self.where: dict[int, int | None] = {}          # single-GPU job -> GPU number (None: unplaced)
        self.on_gpu: list[list[tuple[float, int]]] = [[] for _ in self.load.keys]   # sorted (c, p)
        self.fixed: dict[int, tuple[int, ...]] = {}
        for p, gpus in state.placed.items():
            if len(gpus) == 1:
                self.where[p] = gpus[0]
                self.on_gpu[gpus[0]].append((self.demands[p][self.load.arch[gpus[0]]][0], p))
            else:
                self.fixed[p] = gpus
        for placed in self.on_gpu:
            placed.sort()
        self.pool = {arch: sorted((self.demands[p][arch][0], p) for p, job in enumerate(self.jobs)
                                  if job.gpus == 1 and p not in self.where) for arch in self.load.by_arch}

    def _unpool(self, u: int) -> None:
        for arch, pool in self.pool.items():
            del pool[bisect_left(pool, (self.demands[u][arch][0], u))]

    def _best_move(self, i: int) -> tuple[float, int | None, int] | None:
        """The move on GPU ``i`` that raises its compute the most: (gain, job out or None, job in)."""
        load, demands, jobs = self.load, self.demands, self.jobs
        arch = load.arch[i]
        pool = self.pool[arch]
        if not pool:
            return None
        room_c, room_m, room_q = load.free_c[i], load.free_m[i], load.free_q[load.node[i]]
        if room_c < self.min_gain:
            return None
        top = pool[-1][0]
        best, best_gain = None, self.min_gain - EPS
        for c_p, p in ((0.0, None), *self.on_gpu[i]):     # by c_p ascending: best bound first
            if top - c_p <= best_gain:
                break                          # nothing unplaced is big enough to gain more
            m_p, q_p = (demands[p][arch][1], jobs[p].cpus) if p is not None else (0.0, 0.0)
            k = bisect_right(pool, (c_p + room_c + EPS, _INF)) - 1
            for k in range(k, max(-1, k - _SCAN), -1):
                c_u, u = pool[k]
                if c_u - c_p <= best_gain:
                    break
                if demands[u][arch][1] <= m_p + room_m + EPS and jobs[u].cpus <= q_p + room_q + EPS:
                    best, best_gain = (c_u - c_p, p, u), c_u - c_p
                    break
            if best_gain >= room_c - EPS:
                break                          # the GPU is full: no move can do better
        return best

    def _apply(self, i: int, out: int | None, u: int) -> None:
        load, arch = self.load, self.load.arch[i]
        if out is not None:
            load.take(i, *(-v for v in self.demands[out][arch]), -self.jobs[out].cpus)
            self.on_gpu[i].remove((self.demands[out][arch][0], out))
            self.where[out] = None
            for a, pool in self.pool.items():
                insort(pool, (self.demands[out][a][0], out))
        self._unpool(u)
        load.take(i, *self.demands[u][arch], self.jobs[u].cpus)
        insort(self.on_gpu[i], (self.demands[u][arch][0], u))
        self.where[u] = i

    def run(self, rounds: int) -> dict[Hashable, tuple]:
        for _ in range(rounds):
            moved = False
            for i in range(len(self.load.keys)):
                while (move := self._best_move(i)) is not None:
                    self._apply(i, move[1], move[2])
                    moved = True
            if not moved:
                break
        keys, jobs = self.load.keys, self.jobs
        gpus = {**self.fixed, **{p: (i,) for p, i in self.where.items() if i is not None}}
        return {jobs[p].id: tuple(keys[i] for i in gpus[p]) for p in sorted(gpus)}


def _check_options(rounds: Any, min_gain: Any) -> float:
    check_integer("placement.rounds", rounds, low=0)
    return check_number("placement.min_gain", min_gain, low=0.0)


def improve(jobs: Sequence[Job], cluster: Cluster, assignment: Mapping[Hashable, Any],
            rounds: int = 2, min_gain: float = MIN_GAIN) -> dict[Hashable, tuple]:
    """A feasible assignment with placed compute >= ``assignment``'s, after at most ``rounds``
    passes over the GPUs in first-fit order, each move gaining at least ``min_gain`` compute
    (percent of one GPU). ``assignment`` is checked first (PlacementError when it breaks Eq. 1-4).
    Deterministic."""
    min_gain = _check_options(rounds, min_gain)
    check_placement(jobs, cluster, assignment)
    return _Search(_Given(jobs, cluster, assignment), min_gain).run(rounds)


def worst_fit_decreasing_local_search(jobs: Sequence[Job], cluster: Cluster, rounds: int = 1,
                                      min_gain: float = MIN_GAIN) -> dict[Hashable, tuple]:
    """The ``wfd-ls`` policy: worst-fit decreasing, then ``improve`` from where it stopped
    (options ``rounds`` and ``min_gain`` as for ``improve``)."""
    min_gain = _check_options(rounds, min_gain)
    start = LiveCluster(cluster).assign_checked(list(jobs), "wfd", {}, keep=False, numbers=True)
    ordered = by_runtime(jobs, cluster.architectures)         # WFD's order: its tie-breaks
    return _Search(_Given(ordered, cluster, start, numbers=True), min_gain).run(rounds)
