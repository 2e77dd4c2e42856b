"""A literal reading of HyperSack's Algorithms 1 (first-fit) and 2 (worst-fit), and of the
exclusive baseline: every job scans every GPU, O(jobs x GPUs), no index, no shared helper from
``hypersack.placement`` (only the value types and EPS). The one implementation in
``live.py`` must give exactly these answers.

Deviations from the printed algorithms, all stated in ``live``'s docstring:

* ties in worst-fit go to the *earlier* GPU (Algorithm 2 as printed, ``C_nm >= WorstFit``,
  keeps the later one);
* a data-parallel job (``gpus`` = k) takes k GPUs of one node when a node has them (the first such
  node for first-fit; for worst-fit the node whose k best GPUs have the most compute left, more
  by EPS than an earlier node's), else the first k fitting GPUs over all nodes in the policy's
  order (worst-fit: most compute left, then GPU order; first-fit: GPU order), each node's cores
  shared by its chosen GPUs;
* ``exclusive``: idle GPUs only, each job alone (compute <= C, memory <= D).
"""
from __future__ import annotations

from hypersack.placement.model import EPS


def reference(jobs, cluster, policy):
    """``{job_id: ((node_id, gpu_id), ...)}`` for policy ff, ffd, wf, wfd or exclusive."""
    worst = policy in ("wf", "wfd")
    if policy in ("ffd", "wfd"):
        archs = cluster.architectures
        jobs = sorted(jobs, key=lambda job: job.expected_runtime(archs), reverse=True)
    gpus = [(node, gpu) for node, gpu in cluster.gpus()]
    free = [list(cluster.free(node.id, gpu.id)) for node, gpu in gpus]
    cores = {node.id: cluster.free_cpus(node.id) for node in cluster.nodes}
    busy = {dev for run in cluster.running.values() for dev in run.devices}
    idle = [(node.id, gpu.id) not in busy for node, gpu in gpus]
    out = {}
    for job in jobs:
        if policy == "exclusive":
            chosen = _exclusive(job, gpus, idle, cores)
        elif job.gpus == 1:
            chosen = _single(job, gpus, free, cores, worst)
        else:
            chosen = _multi(job, gpus, free, cores, worst)
        if chosen is None:
            continue
        for i in chosen:
            node, gpu = gpus[i]
            demand = job.demand(gpu.arch)
            free[i][0] -= demand.compute
            free[i][1] -= demand.memory_gb
            cores[node.id] -= job.cpus
            idle[i] = False
        out[job.id] = tuple((gpus[i][0].id, gpus[i][1].id) for i in chosen)
    return out


def _fits(job, gpu, left, node_cores, q):
    demand = job.demand(gpu.arch)
    return left[0] + EPS >= demand.compute and left[1] + EPS >= demand.memory_gb and node_cores + EPS >= q


def _single(job, gpus, free, cores, worst):
    best = None
    for i, (node, gpu) in enumerate(gpus):
        if _fits(job, gpu, free[i], cores[node.id], job.cpus):
            if not worst:
                return (i,)
            if best is None or free[i][0] > free[best][0]:
                best = i
    return None if best is None else (best,)


def _multi(job, gpus, free, cores, worst):
    k, q = job.gpus, job.cpus
    key = (lambda i: (-free[i][0], i)) if worst else (lambda i: i)
    best, best_score = None, None
    nodes = list(dict.fromkeys(node.id for node, _ in gpus))
    for node_id in nodes:
        if cores[node_id] + EPS < k * q:
            continue
        fitting = [i for i, (node, gpu) in enumerate(gpus)
                   if node.id == node_id and _fits(job, gpu, free[i], 0.0, 0.0)]
        if len(fitting) < k:
            continue
        chosen = sorted(fitting, key=key)[:k]
        if not worst:
            return tuple(chosen)
        score = sum(free[i][0] for i in chosen)
        if best_score is None or score > best_score + EPS:
            best, best_score = chosen, score
    if best is not None:
        return tuple(best)
    left, chosen = dict(cores), []
    for i in sorted(range(len(gpus)), key=key):
        node, gpu = gpus[i]
        if _fits(job, gpu, free[i], left[node.id], q):
            chosen.append(i)
            left[node.id] -= q
            if len(chosen) == k:
                return tuple(chosen)
    return None


def _alone(job, gpu):
    demand = job.demand(gpu.arch)
    return demand.compute <= gpu.compute + EPS and demand.memory_gb <= gpu.memory_gb + EPS


def _exclusive(job, gpus, idle, cores):
    k, q = job.gpus, job.cpus
    fitting = [i for i, (node, gpu) in enumerate(gpus) if idle[i] and _alone(job, gpu)]
    if k == 1:
        return next(((i,) for i in fitting if cores[gpus[i][0].id] + EPS >= q), None)
    for node_id in dict.fromkeys(gpus[i][0].id for i in fitting):
        here = [i for i in fitting if gpus[i][0].id == node_id]
        if len(here) >= k and cores[node_id] + EPS >= k * q:
            return tuple(here[:k])
    left, chosen = dict(cores), []
    for i in fitting:
        node_id = gpus[i][0].id
        if left[node_id] + EPS >= q:
            chosen.append(i)
            left[node_id] -= q
            if len(chosen) == k:
                return tuple(chosen)
    return None
