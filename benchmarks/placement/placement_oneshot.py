"""One-shot ``assign()`` cost on a fresh Cluster (what a benchmark or a user call pays; studies
keep one LiveCluster instead), best of N calls, in ms.

    python benchmarks/placement/placement_oneshot.py [--repeats 30]

Instances: 96 jobs x 4 A100 (r = 3) and 384 x 16 (4 nodes), jobs of 20-49% compute, 2-6 GB, 2
cores; and Table III's 10,000 x 1,024 (``placement_table3.build_jobs``/``build_cluster``, r = 3).
To compare two versions, run it from both checkouts in turn (A, B, A, B).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "placement"))

import numpy as np  # noqa: E402

import placement_table3 as table3  # noqa: E402
from hypersack.placement import GPU, Cluster, Job, Node, assign  # noqa: E402

POLICIES = ["exclusive", "ff", "wfd", "wfd-ls"]


def best_ms(jobs, cluster, policy, repeats):
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        assign(jobs, cluster, policy)
        best = min(best, time.perf_counter() - t)
    return best * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=30)
    args = p.parse_args()
    small = [Job(i, 20 + i % 30, 2 + i % 5, cpus=2, runtime=100 - i % 40) for i in range(384)]
    cases = [("96x4", small[:96], Cluster([Node("n0", 88, [GPU(g, "A100", 80, oversubscription=3) for g in range(4)])])),
             ("384x16", small, Cluster([Node(f"n{k}", 88, [GPU(g, "A100", 80, oversubscription=3) for g in range(4)])
                                        for k in range(4)]))]
    rng = np.random.default_rng(0)
    cases.append(("10000x1024", table3.build_jobs(list(table3.MODELS), 0, rng, 0.05, None, count=10_000),
                  table3.build_cluster(128, 8, 3.0, cores=256)))
    for name, jobs, cluster in cases:
        repeats = args.repeats if len(jobs) < 1000 else 3
        print(name, " ".join(f"{p}={best_ms(jobs, cluster, p, repeats):.3f}" for p in POLICIES), flush=True)


if __name__ == "__main__":
    main()
