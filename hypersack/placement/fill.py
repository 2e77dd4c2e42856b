"""The ``fill`` policy: the one for tight instances (several resources binding at once).

Starts, each a feasible placement, then the best few improved by local search, then *kicks*
on the best; the answer with the most placed compute (Eq. 5) wins (ties: the earlier one):

1. worst-fit in WFD's order (expected runtime, longest first), always improved: ``fill`` is never
   worse than ``wfd-ls`` with the same ``rounds`` (its first moves are ``wfd-ls``'s, tested).
   When it places every job it is the answer;
2. worst-fit with jobs by *pressure-weighted density* (``density_order``);
3. *price starts*: the Lagrangian shadow prices of compute and memory per (node, architecture)
   group and of cores per node (``prices`` module doc), from two runs of ``steps`` subgradient
   steps (Polyak's target: the best greedy value V of starts 1-2, then V + (L - V) / 2, L the
   first run's bound), on every k-th job when there are more than ``SAMPLE`` (capacities scaled
   by their share; L is then recomputed on all jobs); of each run the best prices seen after a
   quarter, half and all of the steps (repeats dropped); for each, single-GPU jobs placed by
   reduced profit or by regret, each on its best group that fits, on the group's first fitting
   GPU or its most balanced one (up to 2 x 3 x 2 x 2 = 24 starts).

Data-parallel jobs (``gpus`` > 1) are placed by the WFD start and stay where they are. The
``polish`` best starts of 2-3 by their greedy value, and start 1, are improved by ``improve``'s
add/swap search, by *refill* moves (one placed job out, several unplaced in: where memory or cores
bind) and by *evict* moves (two or three placed jobs out, one larger unplaced job in: where the
compute of a GPU is left in fragments), repeated while a pass gains; every move gains at least
``min_gain`` and keeps Eq. 1-4. Then up to ``kicks`` times: the best answer with about half the
jobs of two GPUs (drawn by a generator seeded with ``seed``) taken off, those two GPUs polished
again without evict moves, kept when it places no less (else undone from a journal of the two
GPUs); the kicks stop after max(``patience``, 3 per GPU) kicks in a row without a gain
(``patience`` 0: never). The kicks carry the worst cases: on the 170 stored tight instances the
worst ratio to CP-SAT is 0.977-0.986 without them and 0.992 with them (benchmarks/RESULTS.md).
Once the best answer is at least ``enough`` x the dual bound L (the compute of the data-parallel
jobs plus the lower of the price runs' L and, up to ``LP_PAIRS`` single-GPU jobs x GPUs, the
relaxation's LP optimum, ``lp_kernels``, found in at most ``pivots`` simplex pivots from the best
greedy start: an upper bound on any answer that keeps them where they are), the remaining
starts and kicks are skipped: none could gain more than the 1 - ``enough`` left, and the answer
is proven within 1 - ``enough`` of the optimum. The LP bound is what makes that stop fire: after
2 x 60 steps the subgradient's L is still 1.5% above the LP's on the tight instances on average,
up to 8.8% (4.1% at 384 x 16, where the LP takes 16 pivots and the kicks are then skipped).
Deterministic.

The work runs in ``fill_kernels`` (compiled by numba where installed: ``pip install
hypersack[fast]``; the same answers, slower, without it); this module converts the jobs and the
cluster to arrays once and builds the answer.
"""
from __future__ import annotations

from typing import Any, Hashable, NamedTuple, Sequence

from operator import attrgetter

import numpy as np

from hypersack.placement.jit import warn_interpreted
from hypersack.placement.cluster import Cluster
from hypersack.placement.improve import MIN_GAIN, _check_options, _Given
from hypersack.placement.live import LiveCluster
from hypersack.placement.load import InJobOrder, Load, demand_table
from hypersack.placement.model import EPS, Job
from hypersack.validation import check_integer, check_number

__all__ = ["fill", "density_order"]


def _kernels() -> Any:
    """``fill_kernels``, imported on first use (importing it imports numba: ``core.jit``)."""
    from hypersack.placement import fill_kernels
    return fill_kernels


_INF = float("inf")
_ID = attrgetter("id")
_SUM, _MIN = np.add.reduce, np.minimum.reduce    # ndarray.sum/min without their Python wrappers
STEPS = 60          # subgradient steps of each price run
INTERPRETED_WARN_PAIRS = 2_000   # jobs x GPUs from which an uncompiled search warns (core.jit)
SAMPLE = 256        # jobs the price steps look at (every k-th; capacities scaled by their share)
POLISH = 2          # greedy starts improved, besides WFD's
KICKS = 300         # perturbations of the best answer, each polished
PATIENCE = 80       # stop the kicks after this many in a row without a gain (0: never; at least 3 per GPU)
PIVOTS = 200        # simplex pivots of the LP bound (lp_kernels; 0: the price runs' bound only)
#: The LP bound is sought only up to this many single-GPU jobs x GPUs: beyond, its pivots grow with
#: the jobs (347 at 800 x 32, 2,197 at 1,560 x 64) and cost more than the kicks they can save.
LP_PAIRS = 10_000
#: Stop improving starts once the best answer is this fraction of the dual bound L: L bounds
#: the optimum, so the answer is then proven within 1% of it.
ENOUGH = 0.99
#: The price starts' runs: Polyak's target of the first is the best greedy start's value V; of
#: run k > 0, V + TARGETS[k] x (L - V), L the lowest dual bound of the runs before.
_TARGETS = np.array([0.0, 0.5])
_KICK = (2, False, False)


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



class _Arrays:
    """The call's jobs and cluster as ``fill_kernels`` reads them (its module doc): every job's
    demands per architecture (``c``, ``m``, ``q``, in the jobs' order; ``singles`` for some of
    them, in another order), the jobs in WFD's order (``wfd``: positions in ``jobs``; a stable
    sort on the expected runtime, as ``by_runtime``), the GPUs and nodes."""

    def __init__(self, jobs: list[Job], cluster: Cluster):
        load = self.load = Load(cluster)
        archs = tuple(load.by_arch)
        arch_no = {a: k for k, a in enumerate(archs)}
        k = self.n_arch = max(1, len(archs))
        table = self._table = demand_table(jobs, archs)      # read-only: columns sliced, copied
        self.all_single = float(_SUM(table[:, 2 * k + 2])) == len(jobs)   # each asks for >= 1 GPU
        self.wfd = np.argsort(-table[:, 2 * k], kind="stable")
        self.garch, self.gnode = np.array((list(map(arch_no.__getitem__, load.arch)), load.node),
                                          dtype=np.int64)
        self.free_c, self.free_m = np.array((load.free_c, load.free_m), dtype=np.float64)
        self.free_q = np.array(load.free_q, dtype=np.float64)
        self.devices = list(zip(load.keys))           # GPU i's answer: ((node_id, gpu_id),)

    @property
    def gpus(self) -> np.ndarray:
        """GPUs each job asks for, in the jobs' order."""
        return self._table[:, 2 * self.n_arch + 2].astype(np.int64)

    def _columns(self, table: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(c, m, q) of ``table``'s rows, each a new C-contiguous array."""
        k = self.n_arch
        return table[:, :k].copy(), table[:, k:2 * k].copy(), table[:, 2 * k + 1].copy()

    @property
    def c(self) -> np.ndarray:
        return self._in_order()[0]

    @property
    def m(self) -> np.ndarray:
        return self._in_order()[1]

    @property
    def q(self) -> np.ndarray:
        return self._in_order()[2]

    def _in_order(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(c, m, q) of every job in the jobs' order, made on first use."""
        found = self.__dict__.get("_cmq")
        if found is None:
            found = self._cmq = self._columns(self._table)
        return found

    def singles(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Demands (c, m, q) of the jobs at ``positions`` (in that order), contiguous."""
        return self._columns(self._table[positions])


def _density(c: np.ndarray, m: np.ndarray, q: np.ndarray, arrays: _Arrays, base: tuple) -> np.ndarray:
    """``density_order``'s order (positions) of the single-GPU jobs with demands ``c``/``m``
    (on the first architecture) and ``q``, on what ``base`` (compute, memory, cores) leaves
    (``fill_kernels.density_order``)."""
    return _kernels().density_order(c, m, q, *base)


def _polish(jobs: Sequence[Job], cluster: Cluster, start: Any, rounds: int, min_gain: float) -> dict:
    """``start`` (an assignment of single-GPU jobs) improved by add/swap, refill and evict moves
    while a pass of them gains (the kernels' ``polish``)."""
    jobs = list(jobs)
    arrays = _Arrays(jobs, cluster)
    c, m, q = arrays.c, arrays.m, arrays.q
    index = {key: i for i, key in enumerate(arrays.load.keys)}
    where = np.full(len(jobs), -1, dtype=np.int64)
    for p, job in enumerate(jobs):
        if job.id in start:
            where[p] = index[start[job.id][0]]
    fc, fm, fq = _kernels().retake(where, np.arange(len(jobs)), c, m, q, arrays.garch, arrays.gnode,
                           arrays.free_c, arrays.free_m, arrays.free_q)
    pool, npool, ong, nong = _kernels()._lists(where, c, arrays.garch, arrays.n_arch)
    _kernels().polish(rounds, max(min_gain, 2 * EPS), np.arange(len(arrays.garch)), True, c, m, q, arrays.garch, arrays.gnode, where, fc, fm, fq,
              pool, npool, ong, nong)
    return _answer(jobs, np.arange(len(jobs)), where, arrays.devices)


def _check(name: str, given: Any) -> int:
    return check_integer(f"placement.{name}", given, low=0)


def fill(jobs: Sequence[Job], cluster: Cluster, rounds: int = 2, min_gain: float = MIN_GAIN,
         steps: int = STEPS, polish: int = POLISH, enough: float = ENOUGH, kicks: int = KICKS,
         patience: int = PATIENCE, seed: int = 1, pivots: int = PIVOTS) -> dict[Hashable, tuple]:
    """The ``fill`` policy (module doc); ``rounds`` and ``min_gain`` as for ``improve``;
    ``steps``: subgradient steps of the price starts (0: no price starts); ``polish``: greedy
    starts improved besides WFD's; ``enough``: stop improving once the best answer is at least
    this fraction of the dual bound (> 1: never stop early); ``kicks``: perturbations of the best
    answer; ``seed``: their generator's seed; ``pivots``: simplex pivots of the LP bound (0:
    the subgradient's bound only)."""
    min_gain = _check_options(rounds, min_gain)
    enough = check_number("placement.enough", enough, low=0.0)
    for name, value in (("steps", steps), ("polish", polish), ("kicks", kicks), ("patience", patience),
                        ("seed", seed), ("pivots", pivots)):
        _check(name, value)
    jobs = list(jobs)
    if not jobs:
        return {}
    call = _prepare(jobs, cluster)
    if isinstance(call, dict):
        return call                          # WFD placed every job: no move of the search applies
    warn_interpreted("placement fill", len(jobs) * len(call.arrays.load.keys), INTERPRETED_WARN_PAIRS)
    where, _, _, _ = _search(call, rounds, min_gain, steps, polish, enough, kicks, patience, seed, pivots=pivots)
    answer = _answer(jobs, call.singles, where, call.arrays.devices)
    return {**call.fixed, **answer} if call.fixed else answer


def _answer(jobs: list[Job], singles: np.ndarray, where: np.ndarray, devices: list[tuple]) -> InJobOrder:
    """``{job id: (device,)}`` of the placed single-GPU jobs, in the jobs' order: job
    ``jobs[singles[t]]`` is on GPU ``where[t]`` (-1: not placed); ``devices[i]`` is GPU i's
    ``((node_id, gpu_id),)``."""
    at = np.empty(len(jobs), dtype=np.int64)
    at.fill(-1)
    at[singles] = where
    placed = (at >= 0).nonzero()[0]
    return InJobOrder(zip(map(_ID, map(jobs.__getitem__, placed.tolist())),
                          map(devices.__getitem__, at[placed].tolist())))


class _Call(NamedTuple):
    """What ``fill_kernels.fill_search`` reads of one call: the single-GPU jobs (``singles``:
    their positions in the jobs, in WFD's order) and their demands, the loads once the
    data-parallel jobs (``fixed``, placed by WFD, worth ``fixed_value``) are taken, WFD's start."""

    arrays: _Arrays
    singles: np.ndarray
    c: np.ndarray
    m: np.ndarray
    q: np.ndarray
    base: tuple[np.ndarray, np.ndarray, np.ndarray]
    wfd_where: np.ndarray
    fixed: dict
    fixed_value: float


def _prepare(jobs: list[Job], cluster: Cluster) -> _Call | dict[Hashable, tuple]:
    """The call's arrays and WFD's start; WFD's answer itself when it places every job."""
    arrays = _Arrays(jobs, cluster)
    keys = arrays.load.keys
    order = arrays.wfd                                   # WFD's order: job positions
    if arrays.all_single:
        singles = order
        c, m, q = arrays.singles(singles)
        base = (arrays.free_c, arrays.free_m, arrays.free_q)
        fc, fm, fq = (b.copy() for b in base)
        wfd_where = _kernels().wf_greedy(np.arange(len(singles)), c, m, q, arrays.garch, arrays.gnode, fc, fm, fq)
        if not len(singles) or _MIN(wfd_where) >= 0:
            return _answer(jobs, singles, wfd_where, arrays.devices)
        return _Call(arrays, singles, c, m, q, base, wfd_where, {}, 0.0)
    singles = order[arrays.gpus[order] == 1]
    c, m, q = arrays.singles(singles)
    wfd = [jobs[p] for p in order]
    start = LiveCluster(cluster).assign_checked(wfd, "wf", {}, keep=False, numbers=True)
    if len(start) == len(jobs):
        return {jid: tuple(keys[i] for i in devs) for jid, devs in start.items()}
    fixed = {jid: devs for jid, devs in start.items() if len(devs) > 1}
    index = {job.id: p for p, job in enumerate(jobs)}
    fixed_value = 0.0
    for jid, devs in fixed.items():
        for i in devs:
            fixed_value += float(arrays.c[index[jid], arrays.garch[i]])
    state = _Given(wfd, cluster, fixed, numbers=True)
    base = (np.array(state.load.free_c), np.array(state.load.free_m), np.array(state.load.free_q))
    position = {jobs[p].id: t for t, p in enumerate(singles)}
    wfd_where = np.full(len(singles), -1, dtype=np.int64)
    for jid, devs in start.items():
        if len(devs) == 1:
            wfd_where[position[jid]] = devs[0]
    fixed = {jid: tuple(keys[i] for i in devs) for jid, devs in fixed.items()}
    return _Call(arrays, singles, c, m, q, base, wfd_where, fixed, fixed_value)


def _search(call: _Call, rounds: int, min_gain: float, steps: int, polish: int, enough: float, kicks: int,
            patience: int, seed: int, sample: int = SAMPLE, pivots: int = PIVOTS) -> tuple[np.ndarray, float, float, int]:
    """``fill_kernels.fill_search`` on ``call``: (where per single-GPU job, its value, the dual
    bound + the data-parallel jobs' compute, how many starts were polished)."""
    arrays = call.arrays
    if len(call.singles) * len(arrays.garch) > LP_PAIRS:
        pivots = 0
    dense = _density(call.c, call.m, call.q, arrays, call.base)
    where, value, ceiling, tried = _kernels().fill_search(
        call.c, call.m, call.q, arrays.garch, arrays.gnode, len(arrays.free_q), arrays.n_arch, *call.base,
        call.wfd_where, dense, rounds, max(min_gain, 2 * EPS), steps, sample, _TARGETS, polish, enough, kicks,
        patience, seed, call.fixed_value, *_KICK, pivots)
    return where, float(value), float(ceiling), int(tried)
