"""The Python side of ``assign(jobs, cluster, "fill")`` at 384 jobs x 16 GPUs: everything but the
search kernel (``fill_kernels.fill_search`` is replaced by a stub that returns its first result),
best CPU ms of N calls. Run from a checkout's root with that checkout first on the path, so that
two checkouts can be compared in turn (the instance is ``tight_instances.py --speed``'s):

    PYTHONPATH=$PWD python benchmarks/fill_python_side.py [--repeats 400]
    cd ../main && PYTHONPATH=$PWD python ../pyside/benchmarks/fill_python_side.py

``same_jobs_ms``: the same Job objects every call (as ``--speed`` measures); ``fresh_jobs_ms``:
new Job objects every call (``Job.renamed`` copies of the instance's jobs, as a study's allocator
makes them), so no per-job cache helps.
"""
from __future__ import annotations

import argparse
import json
import time

from hypersack.core.placement import fill_kernels
from hypersack.instances import tight_instance
from hypersack.placement import assign

NODES, PER_NODE, JOBS = 4, 4, 384


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=400)
    args = parser.parse_args()
    base, cluster = tight_instance(7, nodes=NODES, gpus_per_node=PER_NODE)
    base = (base * (JOBS // len(base) + 1))[:JOBS]
    jobs = [job.renamed(f"x{i}") for i, job in enumerate(base)]
    search, memo = fill_kernels.fill_search, {}

    def stub(*args):
        if "answer" not in memo:
            memo["answer"] = search(*args)
        return memo["answer"]
    fill_kernels.fill_search = stub
    assign(jobs, cluster, "fill")
    same = float("inf")
    for _ in range(args.repeats):
        start = time.process_time()
        assign(jobs, cluster, "fill")
        same = min(same, time.process_time() - start)
    lists = [[job.renamed(f"x{i}") for i, job in enumerate(base)] for _ in range(min(args.repeats, 200))]
    fresh = float("inf")
    for new in lists:
        start = time.process_time()
        assign(new, cluster, "fill")
        fresh = min(fresh, time.process_time() - start)
    print(json.dumps({"same_jobs_ms": round(same * 1000, 3), "fresh_jobs_ms": round(fresh * 1000, 3)}))


if __name__ == "__main__":
    main()
