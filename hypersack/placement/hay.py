"""Hay (Huang et al.): a node busyness score, then a GPU state machine (the ``hay`` policy).

Node choice (Hay Eq. 1). Only nodes where some GPU can take the job are scored (the node filter:
Ray judges a node by its total free GPU and can pick one where no single GPU fits, ray#52133);
among them the highest ``score = (w_frag x G_frag + w_entire x G_entire) / G_total`` wins, ties
the earlier node. ``G_frag``: free fractional capacity of the node's *activated* GPUs, in GPUs
(free compute / (r x C), summed); ``G_entire``: its *deactivated* GPUs (whole ones); ``G_total``:
its GPUs. The paper gives no weights: the defaults come from a simulated sweep
(benchmarks/simulator/hay_scenarios.py --sweep, figures in benchmarks/RESULTS.md).

GPU choice within the node. A *whole-GPU* request is a data-parallel job (``gpus`` > 1) or a job
asking for at least a whole GPU (compute >= C); any other is *fractional*.

* fractional: the activated GPU that fits with the most compute left (ties: the lower GPU);
  only when no activated GPU of the node fits, the deactivated one that fits with the most
  compute left (ties: the lower GPU);
* whole-GPU: deactivated GPUs only (k of one node when a node has them, by node score; else the
  deactivated GPUs of the best-scoring nodes in turn). Jobs are placed in the given order (Hay is
  an online scheduler: no sorting).

GPU states (Hay Fig. 4, which the paper gives as a picture only), read from the load:
deactivated = holds no job; activated = holds a job and has room (compute and memory left > 0);
unavailable = holds a job and has no room.

=============  =================================================  =============
from           event                                              to
=============  =================================================  =============
deactivated    fractional job placed, room left                   activated
deactivated    fractional or whole-GPU job placed, no room left   unavailable
deactivated    whole-GPU job placed, room left                    activated
activated      fractional job placed, room left                   activated
activated      fractional job placed, no room left                unavailable
activated      a job ends, others remain                          activated
activated      its last job ends                                  deactivated
unavailable    a job ends, others remain (room again)             activated
unavailable    its last job ends                                  deactivated
=============  =================================================  =============

An activated or unavailable GPU never takes a whole-GPU request; an unavailable one takes
nothing. Cost: O(G) per job (every node is scored), no index: Hay is meant for a few nodes.
"""
from __future__ import annotations

from typing import Any, Hashable, Sequence

from hypersack.placement.load import demands, pick_k_in_order
from hypersack.placement.model import EPS, Job

__all__ = ["hay", "gpu_state", "gpu_states", "node_score", "W_FRAG", "W_ENTIRE",
           "DEACTIVATED", "ACTIVATED", "UNAVAILABLE"]

#: Default weights of Eq. 1 (see benchmarks/RESULTS.md, "Hay weights"): whole GPUs weigh more
#: than the same capacity in fragments, so a node keeps its whole GPUs for whole-GPU requests.
W_FRAG = 1.0
W_ENTIRE = 4.0
DEACTIVATED, ACTIVATED, UNAVAILABLE = "deactivated", "activated", "unavailable"


def gpu_state(live: Any, i: int) -> str:
    """The state of GPU number ``i`` of ``live`` (a LiveCluster), per the module's table."""
    if live.idle(i):
        return DEACTIVATED
    load = live.load
    return ACTIVATED if load.free_c[i] > EPS and load.free_m[i] > EPS else UNAVAILABLE


def gpu_states(live: Any) -> dict[Hashable, str]:
    """``{(node_id, gpu_id): state}`` for every GPU of ``live``."""
    return {key: gpu_state(live, i) for i, key in enumerate(live.load.keys)}


def node_score(live: Any, n: int, w_frag: float = W_FRAG, w_entire: float = W_ENTIRE) -> float:
    """Hay's Eq. 1 for node number ``n`` (0 for a node without GPUs)."""
    gpus = live.load.node_gpus[n]
    if not gpus:
        return 0.0
    frag = entire = 0.0
    free_c = live.load.free_c
    for i in gpus:
        state = gpu_state(live, i)
        if state == DEACTIVATED:
            entire += 1.0
        elif state == ACTIVATED:
            frag += max(0.0, free_c[i]) / live.capacity(i)
    return (w_frag * frag + w_entire * entire) / len(gpus)


def hay(live: Any, jobs: Sequence[Job], journal: list, w_frag: float = W_FRAG,
        w_entire: float = W_ENTIRE) -> dict[Hashable, tuple[int, ...]]:
    """Place ``jobs`` in order on ``live`` (a LiveCluster inside its ``assign``): job id -> GPU
    numbers. Takes go to ``journal``."""
    placed: dict[Hashable, tuple[int, ...]] = {}
    for job, demand in zip(jobs, demands(jobs, list(live.load.by_arch))):
        if job.gpus == 1:
            chosen = _one(live, job, demand, w_frag, w_entire)
        else:
            chosen = _many(live, job, demand, w_frag, w_entire)
        if chosen is not None:
            placed[job.id] = chosen
            live.take(journal, chosen, demand, job.cpus, refresh=False)
    return placed


def _fits(live: Any, i: int, demand: dict) -> bool:
    c, m = demand[live.load.arch[i]]
    return live.load.free_c[i] + EPS >= c and live.load.free_m[i] + EPS >= m


def _whole(live: Any, i: int, demand: dict) -> bool:
    return demand[live.load.arch[i]][0] >= live.whole(i) - EPS


def _best(live: Any, gpus: list[int]) -> int | None:
    """The GPU of ``gpus`` with the most compute left (ties: the lower number)."""
    free_c = live.load.free_c
    best = None
    for i in gpus:
        if best is None or free_c[i] > free_c[best]:
            best = i
    return best


def _one(live: Any, job: Job, demand: dict, w_frag: float, w_entire: float) -> tuple[int, ...] | None:
    load = live.load
    best_node, best_score, best_gpu = None, None, None
    for n, gpus in enumerate(load.node_gpus):
        if load.free_q[n] + EPS < job.cpus:
            continue
        active, idle = [], []
        for i in gpus:
            if not _fits(live, i, demand):
                continue
            state = gpu_state(live, i)
            if state == DEACTIVATED:
                idle.append(i)
            elif state == ACTIVATED and not _whole(live, i, demand):
                active.append(i)
        if not active and not idle:
            continue                              # the node filter: no GPU here takes the job
        score = node_score(live, n, w_frag, w_entire)
        if best_score is None or score > best_score:
            best_node, best_score, best_gpu = n, score, _best(live, active) if active else _best(live, idle)
    return None if best_node is None or best_gpu is None else (best_gpu,)


def _many(live: Any, job: Job, demand: dict, w_frag: float, w_entire: float) -> tuple[int, ...] | None:
    """k deactivated GPUs: of the best-scoring node that has k (and the cores), else across the
    nodes from the best score down."""
    load, k, q = live.load, job.gpus, job.cpus
    ranked = []
    for n, gpus in enumerate(load.node_gpus):
        idle = [i for i in gpus if live.idle(i) and _fits(live, i, demand)]
        if idle:
            ranked.append((-node_score(live, n, w_frag, w_entire), n, idle))
    ranked.sort(key=lambda t: (t[0], t[1]))
    for _, n, idle in ranked:
        if len(idle) >= k and load.free_q[n] + EPS >= k * q:
            return tuple(idle[:k])
    chosen = pick_k_in_order((i for _, _, idle in ranked for i in idle), load.node, load.free_q, q, k)
    return None if chosen is None else tuple(chosen)
