"""Ray's default scheduling of fractional-GPU tasks, as a baseline (the ``ray`` policy).

Ray's hybrid policy (``scheduler_spread_threshold`` 0.5): nodes in order, the first *feasible*
node whose GPU utilisation is below 50% wins (pack); when none is, the feasible node with the
lowest utilisation (spread; ties: the earlier node). Ray sees a node's GPUs as one number: a node
is feasible when its cores suffice and its *total* free GPU (the sum over its GPUs of free
compute / (r x C)) covers the request (compute / (r x C)); utilisation = 1 - total free / GPUs.
On the chosen node the job takes the first GPU by index where it fits. When none does (the free
capacity is spread over GPUs, each too small) the job is not placed: Ray's failure in
ray#52133, where such a task waits forever on that node. Jobs go in the given order. A
data-parallel job (a placement group of k bundles, PACK) takes the first k fitting GPUs of the
first node that has them, else the first k fitting GPUs across nodes. O(G) per job.
"""
from __future__ import annotations

from typing import Any, Hashable, Sequence

from hypersack.placement.load import demands, pick_k_in_order, pick_one_node
from hypersack.placement.model import EPS, Job

__all__ = ["ray_default", "SPREAD_THRESHOLD"]

SPREAD_THRESHOLD = 0.5


def ray_default(live: Any, jobs: Sequence[Job], journal: list) -> dict[Hashable, tuple[int, ...]]:
    """Place ``jobs`` in order on ``live`` (a LiveCluster inside its ``assign``)."""
    placed: dict[Hashable, tuple[int, ...]] = {}
    load = live.load
    for job, demand in zip(jobs, demands(jobs, list(load.by_arch))):
        if job.gpus == 1:
            chosen = _one(live, job, demand)
        else:
            found = pick_one_node(load, demand, job.cpus, job.gpus, lambda i: i, worst=False)
            if found is None:
                fitting = (i for i in range(len(load.keys)) if load.fits(i, *demand[load.arch[i]], 0.0))
                found = pick_k_in_order(fitting, load.node, load.free_q, job.cpus, job.gpus)
            chosen = None if found is None else tuple(found)
        if chosen is not None:
            placed[job.id] = chosen
            live.take(journal, chosen, demand, job.cpus, refresh=False)
    return placed


def _one(live: Any, job: Job, demand: dict) -> tuple[int, ...] | None:
    load = live.load
    best, best_util = None, None
    for n, gpus in enumerate(load.node_gpus):
        if not gpus or load.free_q[n] + EPS < job.cpus:
            continue
        free = sum(max(0.0, load.free_c[i]) / live.capacity(i) for i in gpus)
        ask = demand[load.arch[gpus[0]]][0] / live.capacity(gpus[0])
        if free + EPS < ask:
            continue                                  # infeasible by the node's total
        util = 1.0 - free / len(gpus)
        if util < SPREAD_THRESHOLD:
            best = n
            break
        if best_util is None or util < best_util:
            best, best_util = n, util
    if best is None:
        return None
    for i in load.node_gpus[best]:
        if load.fits(i, *demand[load.arch[i]], job.cpus):
            return (i,)
    return None
