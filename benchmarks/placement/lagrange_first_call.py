"""The first ``lagrange`` call of a process against the next ones, at 10,000 jobs x 1,024 GPUs.

    python benchmarks/placement/lagrange_first_call.py           # numba's on-disk cache as it is
    python benchmarks/placement/lagrange_first_call.py --cold    # an empty cache: the first call compiles

The first call in a process pays numba: compiling the kernels (``--cold``, or after their source
changed) or loading them from the on-disk cache (``__pycache__`` beside
hypersack/placement/lagrange_kernels.py). Prints wall and CPU ms (this process) of the
import of hypersack.placement, of the first call and the best of ``--repeats`` later calls, on
``benchmarks/placement/tight_instances.py --speed``'s 10,000 x 1,024 instance (two architectures).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _ms(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, {"wall_ms": round((time.perf_counter() - wall) * 1000, 1),
                 "cpu_ms": round((time.process_time() - cpu) * 1000, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cold", action="store_true", help="compile into an empty numba cache")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    if args.cold:
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="numba-cold-")   # before numba loads
    _, imported = _ms(lambda: __import__("hypersack.placement"))
    from benchmarks.placement.tight_instances import make_instance
    from hypersack.placement import jit
    from hypersack.placement import assign
    jobs, cluster = make_instance(7, nodes=128, gpus_per_node=8)
    jobs = (jobs * (10_000 // len(jobs) + 1))[:10_000]
    jobs = [job.renamed(f"x{i}") for i, job in enumerate(jobs)]
    first_answer, first = _ms(lambda: assign(jobs, cluster, "lagrange"))
    later = []
    for _ in range(args.repeats):
        answer, took = _ms(lambda: assign(jobs, cluster, "lagrange"))
        assert answer == first_answer
        later.append(took)
    print(json.dumps({"compiled": jit.COMPILED, "cold_cache": args.cold, "import": imported, "first_call": first,
                      "later_best": {k: min(t[k] for t in later) for k in ("wall_ms", "cpu_ms")}}, indent=1))


if __name__ == "__main__":
    main()
