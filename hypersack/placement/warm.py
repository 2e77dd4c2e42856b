"""Compile the placement policies' kernels before their first real call: ``python -m hypersack.placement.warm``.

With numba installed (``pip install hypersack[fast]``) the kernels of ``fill`` and ``lagrange`` are
compiled at their first call and cached on disk beside their modules; compiling them all costs
about 40 s of CPU on a 2-core VM, once per install (and again after their source changes). The
project's set-up (``make``) runs this module once, so neither a study nor the test suite pays it.
It places small instances that take every path of both policies (two architectures, data-parallel
jobs, more single-GPU jobs than ``fill`` prices whole, groups few enough to price one by one and
too many, so pooled by type). Without numba it only checks that the policies run (fast).
"""
from __future__ import annotations

import time

from hypersack.placement.jit import COMPILED
from hypersack.placement.api import assign
from hypersack.placement.cluster import Cluster
from hypersack.placement.model import GPU, Job, Node

__all__ = ["warm"]


def _instance(nodes: int, jobs: int) -> tuple[list[Job], Cluster]:
    """A deterministic tight instance: ``nodes`` nodes of 4 GPUs (A100 and H100 alternately,
    oversubscription 1-3), ``jobs`` small single-GPU jobs and a few large and data-parallel ones."""
    cluster = Cluster([Node(f"n{k}", 6 + k % 5, tuple(
        GPU(g, "A100" if k % 2 else "H100", 40 if k % 3 else 80, oversubscription=1 + k % 3)
        for g in range(4))) for k in range(nodes)])
    out = []
    for i in range(jobs):
        large = i % 7 == 0
        compute = 55 + i % 40 if large else 5 + (i * 7) % 25
        out.append(Job(f"j{i}", compute, 16 + i % 20 if large else 1 + i % 7, cpus=1 + i % 3,
                       runtime=10 + (i * 13) % 990, gpus=2 if i % 29 == 0 else 1,
                       per_arch={"H100": {"compute": round(0.7 * compute, 1)}}))
    return out, cluster


def warm() -> float:
    """Run ``fill`` and ``lagrange`` on the module's instances (compiling their kernels where numba
    is installed); returns the seconds of CPU it took."""
    start = time.process_time()
    for nodes, jobs in ((3, 300), (24, 400)):
        instance = _instance(nodes, jobs)
        for policy in ("fill", "lagrange", "auto"):
            assign(*instance, policy)
    return time.process_time() - start


if __name__ == "__main__":
    seconds = warm()
    print(f"placement kernels {'compiled' if COMPILED else 'not compiled (numba not installed)'}: "
          f"{seconds:.1f} s of CPU")
