"""``fill``'s phases at 384 jobs x 16 GPUs and its mean time on the stored tight instances, CPU.

    python benchmarks/placement/fill_phases.py                          # this checkout
    python benchmarks/placement/fill_phases.py --compare /work/main     # alternating: ROOT, this, ROOT, this, ...

Phases (``fill_kernels.fill_search`` called alone, best CPU microseconds of ``--repeats`` calls,
the three calls interleaved so a burst of load hits them alike): ``starts`` = the greedy and price
starts only (no start polished, no kick), ``polish`` = with the polished starts, minus ``starts``;
``kicks`` = with the kicks too, minus both; ``polish_kicks`` = their sum. ``tight_ms``: the mean
(and max) CPU ms of one ``assign(jobs, cluster, "fill")`` call over the 140 stored tight instances
(best of 3 calls each). ``value``: the answer's placed compute at 384 x 16. ``--compare ROOT``
runs this script on ROOT's ``hypersack`` (another checkout) and on this one by turns, in
subprocesses, ``--rounds`` times each.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _instance_384():
    """``tight_instances.py --speed``'s 384 x 16 instance (seed 7's jobs repeated)."""
    from hypersack.placement.instances import tight_instance
    nodes, per_node, n = 4, 4, 384                              # tight_instances.SIZES["384x16"]
    jobs, cluster = tight_instance(7, nodes=nodes, gpus_per_node=per_node)
    jobs = (jobs * (n // len(jobs) + 1))[:n]
    return [job.renamed(f"x{i}") for i, job in enumerate(jobs)], cluster


def phases(repeats: int) -> dict:
    """Per-phase best CPU microseconds at 384 x 16 (module doc)."""
    from hypersack.placement import fill as F
    from hypersack.placement import fill_kernels
    K: Any = fill_kernels
    jobs, cluster = _instance_384()
    call = F._prepare(jobs, cluster)
    assert isinstance(call, F._Call)                           # WFD alone does not place them all
    arrays = call.arrays
    dense = F._density(call.c, call.m, call.q, arrays, call.base)

    lp = (F.PIVOTS,) if hasattr(F, "PIVOTS") else ()          # a checkout before the LP bound: none

    def run(polish: int, kicks: int, patience: int):
        return K.fill_search(call.c, call.m, call.q, arrays.garch, arrays.gnode, len(arrays.free_q), arrays.n_arch,
                             *call.base, call.wfd_where, dense, 2, 0.25, F.STEPS, F.SAMPLE, F._TARGETS, polish,
                             F.ENOUGH, kicks, patience, 1, call.fixed_value, *F._KICK, *lp)

    def cpu(fn) -> float:
        start = time.process_time()
        fn()
        return time.process_time() - start

    full = (F.POLISH, F.KICKS, F.PATIENCE)
    value = float(run(*full)[1]) + call.fixed_value          # also the warm call
    starts = polished = whole = float("inf")
    for _ in range(repeats):
        starts = min(starts, cpu(lambda: run(-1, 0, 0)))     # no start polished, no kick
        polished = min(polished, cpu(lambda: run(F.POLISH, 0, 0)))
        whole = min(whole, cpu(lambda: run(*full)))
    return {"starts_us": round(starts * 1e6), "polish_us": round((polished - starts) * 1e6),
            "kicks_us": round((whole - polished) * 1e6), "polish_kicks_us": round((whole - starts) * 1e6),
            "value": round(value, 3)}


def tight_ms() -> dict:
    """Mean and max CPU ms of one ``fill`` call over the 140 stored tight instances (best of 3)."""
    from hypersack.placement.instances import tight_instance
    from hypersack.placement import assign
    instances = [tight_instance(seed) for seed in range(140)]
    assign(*instances[0], "fill")
    times = []
    for jobs, cluster in instances:
        best = float("inf")
        for _ in range(3):
            start = time.process_time()
            assign(jobs, cluster, "fill")
            best = min(best, time.process_time() - start)
        times.append(best * 1000)
    return {"tight_mean_ms": round(sum(times) / len(times), 2), "tight_max_ms": round(max(times), 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--compare", help="another checkout's root, run by turns with this one")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-tight", action="store_true", help="skip the 140 tight instances")
    args = parser.parse_args()
    if args.compare:
        here = HERE.parents[1]
        for _ in range(args.rounds):
            for root in (Path(args.compare).resolve(), here):
                command = [sys.executable, str(HERE / "fill_phases.py"), "--repeats", str(args.repeats)]
                command += ["--no-tight"] if args.no_tight else []
                text = subprocess.run(command, env={**os.environ, "PYTHONPATH": str(root)}, cwd=root,
                                      capture_output=True, text=True, check=True).stdout.strip()
                print(json.dumps({"root": str(root), **json.loads(text)}), flush=True)
        return
    out = phases(args.repeats)
    if not args.no_tight:
        out.update(tight_ms())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
