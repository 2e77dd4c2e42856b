"""The Python side of ``assign(jobs, cluster, "fill")`` at 384 jobs x 16 GPUs: everything but the
search kernel (``fill_kernels.fill_search`` is replaced by a stub that returns its first result),
best CPU ms of N calls. Run from a checkout's root with that checkout first on the path, so that
two checkouts can be compared in turn (the instance is ``tight_instances.py --speed``'s):

    PYTHONPATH=$PWD python benchmarks/placement/fill_python_side.py [--repeats 400]
    cd ../main && PYTHONPATH=$PWD python ../pyside/benchmarks/placement/fill_python_side.py

``same_jobs_ms``: the same Job objects every call (as ``--speed`` measures); ``fresh_jobs_ms``:
new Job objects every call (``Job.renamed`` copies of the instance's jobs, as a study's allocator
makes them), so no per-job cache helps. ``--parts`` (this branch's code only): how much the best
same-jobs time drops when one piece is replaced by its stored result (its cost within the call).
"""
from __future__ import annotations

import argparse
import json
import time

from hypersack.placement import fill_kernels
from hypersack.placement.instances import tight_instance
from hypersack.placement import assign

NODES, PER_NODE, JOBS = 4, 4, 384


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=400)
    parser.add_argument("--parts", action="store_true")
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
    same = _best(lambda: assign(jobs, cluster, "fill"), args.repeats)
    if args.parts:
        print(json.dumps({"same_jobs_ms": round(same * 1000, 3),
                          "part_us": _parts(jobs, cluster, same, args.repeats)}))
        return
    lists = [[job.renamed(f"x{i}") for i, job in enumerate(base)] for _ in range(min(args.repeats, 200))]
    fresh = float("inf")
    for new in lists:
        start = time.process_time()
        assign(new, cluster, "fill")
        fresh = min(fresh, time.process_time() - start)
    print(json.dumps({"same_jobs_ms": round(same * 1000, 3), "fresh_jobs_ms": round(fresh * 1000, 3)}))


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def _parts(jobs: list, cluster, whole: float, repeats: int) -> dict:
    """Per piece: microseconds the best call loses when that piece returns a stored result."""
    import numpy as np

    from hypersack.placement import api, fill
    call = fill._prepare(jobs, cluster)
    arrays = call.arrays
    stored = {
        (api, "check_job_list"): lambda o: (lambda job_list, running: job_list),
        (fill, "demand_table"): lambda o: (lambda job_list, archs, t=o(jobs, tuple(arrays.load.by_arch)): t),
        (fill, "Load"): lambda o: (lambda c, t=o(cluster): t),
        (fill, "_density"): lambda o: (lambda *a, t=o(call.c, call.m, call.q, arrays, call.base): t),
        (fill, "_answer"): lambda o: (lambda *a, t=o(jobs, call.singles, call.wfd_where, arrays.devices): t),
        (fill_kernels, "wf_greedy"): lambda o: (lambda *a, t=o(np.arange(len(call.singles)), call.c, call.m,
                                                              call.q, arrays.garch, arrays.gnode,
                                                              arrays.free_c.copy(), arrays.free_m.copy(),
                                                              arrays.free_q.copy()): t),
    }
    out = {}
    for (module, name), make in stored.items():
        original = getattr(module, name)
        setattr(module, name, make(original))
        try:
            out[name] = round((whole - _best(lambda: assign(jobs, cluster, "fill"), repeats)) * 1e6, 1)
        finally:
            setattr(module, name, original)
    return out


if __name__ == "__main__":
    main()
