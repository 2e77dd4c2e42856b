"""Tight placement instances (``tight_instance(seed)``): seeded, deterministic, the generator of
``benchmarks/placement/tight_instances.py`` (whose CP-SAT optima are stored per seed in
``benchmarks/placement/tight_optima.json``), shared with the tests that score the placement policies on them.

Heterogeneous (nodes of A100 and H100, r from {1, 2, 3} per node, memory 40 or 80 GB), many small
jobs and a few large ones, CPU limits binding:

* ``nodes`` (default 2-4) nodes of ``gpus_per_node`` GPUs, each node A100 (C = 100) or H100 (a
  job needs 0.7x its A100 compute);
* jobs: 85% small (compute 5-30% of an A100, 1-8 GB, 1-3 cores), 15% large (55-95%, 16-38 GB,
  4-8 cores); runtime 10-1000 s (so the decreasing policies' order is not the size order);
* as many jobs as make their compute 1.2-1.5x the cluster's r x C, and node cores 0.7-0.95x the
  cores the jobs would need if every job were placed: cores bind on every node.
"""
from __future__ import annotations

import random

from hypersack.placement import GPU, Cluster, Job, Node

__all__ = ["tight_instance"]


def tight_instance(seed: int, nodes: int | None = None, gpus_per_node: int = 4) -> tuple[list[Job], Cluster]:
    """The instance of ``seed`` (module doc)."""
    rng = random.Random(seed)
    n_nodes = nodes or rng.randint(2, 4)
    specs = []
    for k in range(n_nodes):
        arch = rng.choice(["A100", "H100"])
        specs.append((f"n{k}", arch, rng.choice([1, 2, 3]), rng.choice([40, 80])))
    capacity = sum(r * 100 * gpus_per_node for _, _, r, _ in specs)
    jobs: list[Job] = []
    total = 0.0
    target = capacity * rng.uniform(1.2, 1.5)
    while total < target:
        i = len(jobs)
        if rng.random() < 0.85:
            c, m, q = rng.uniform(5, 30), rng.uniform(1, 8), rng.randint(1, 3)
        else:
            c, m, q = rng.uniform(55, 95), rng.uniform(16, 38), rng.randint(4, 8)
        c, m = round(c, 1), round(m, 1)
        runtime = round(rng.uniform(10, 1000), 1)
        jobs.append(Job(f"j{i}", c, m, cpus=q, runtime=runtime,
                        per_arch={"H100": {"compute": round(0.7 * c, 1), "runtime": round(0.6 * runtime, 1)}}))
        total += c
    cores_wanted = sum(job.cpus for job in jobs) / n_nodes
    cluster = Cluster([Node(name, round(cores_wanted * rng.uniform(0.7, 0.95)),
                            tuple(GPU(g, arch, mem, oversubscription=r) for g in range(gpus_per_node)))
                       for name, arch, r, mem in specs])
    return jobs, cluster
