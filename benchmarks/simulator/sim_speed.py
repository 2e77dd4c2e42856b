"""Simulator speed: a study of N trials with ASHA + a placement policy on G simulated GPUs.

    .venv/bin/python benchmarks/simulator/sim_speed.py                 # 10,000 trials, 1,024 GPUs, ASHA + WFD
    .venv/bin/python benchmarks/simulator/sim_speed.py --quick         # 1,000 trials, 128 GPUs
    .venv/bin/python benchmarks/simulator/sim_speed.py --profile 25    # + the 25 costliest functions (cProfile)
    .venv/bin/python benchmarks/simulator/sim_speed.py --sweep         # 1k/128, 2k/256, 10k/1024 in one table
    .venv/bin/python benchmarks/simulator/sim_speed.py --algorithm rasda   # data-parallel trials that grow

Prints wall seconds, simulated seconds, simulated seconds per wall second, events and turns per
wall second. The cluster is 8 A100 per node (64 cores, r = 2); trials are ResNet-18-like
(batch 64/128/256/512 profiles), ASHA min_t=1, max_t=9, rf=3 (stop mode), parametric curves;
``--algorithm rasda``: RASDA with the same rungs (sf = rf = 3, at most 8 GPUs per trial).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time

from hypersack.sim import scenario_from_dict, simulate


ALGORITHMS = {"asha": {"type": "asha", "min_t": 1, "max_t": 9, "reduction_factor": 3},
              "rasda": {"type": "rasda", "min_t": 1, "max_t": 9, "sf": 3, "rf": 3, "max_resources": 8}}


def scenario(trials: int, gpus: int, policy: str, mode: str, algorithm: str = "asha") -> dict:
    batches = [64, 128, 256, 512]
    profiles = [{"arch": "A100", "batch_size": b, "step_time_s": 20.0 * (1.5, 1.0, 0.8, 0.7)[i],
                 "utilization": (30, 45, 55, 65)[i], "memory_gb": (2, 3, 5, 8)[i], "cpus": 4}
                for i, b in enumerate(batches)]
    return {
        "name": "speed", "seed": 0, "policy": policy,
        "cluster": {"oversubscription": {"A100": 2},
                    "nodes": [{"id": f"n{i}", "cpus": 64, "gpus": {"count": 8, "arch": "A100", "memory_gb": 80}}
                              for i in range(gpus // 8)]},
        "study": {"space": {"lr": {"type": "float", "low": 1e-5, "high": 0.1, "log": True},
                            "batch_size": {"type": "categorical", "choices": batches}},
                  "objective": {"metric": "accuracy", "mode": "max"},
                  "algorithm": ALGORITHMS[algorithm] | {"mode": mode},
                  "budget": {"trials": trials}},
        "workload": {"model": "resnet18", "batch_size_key": "batch_size", "profiles": profiles},
        "perf": {"saturation": {"A100": 1.4}},
        "curves": {"type": "parametric", "metric": "accuracy", "start": 0.1, "best": 0.93, "worst": 0.1,
                   "lr_optimum": 0.01, "tau": 2.0, "noise": 0.01, "clip": [0, 1]},
    }


SWEEP = [(1000, 128), (2000, 256), (10_000, 1024)]
COLUMNS = ["trials", "gpus", "algorithm", "policy", "mode", "wall_s", "simulated_s", "sim_s_per_wall_s", "events",
           "events_per_wall_s", "reports"]


def run(trials: int, gpus: int, policy: str, mode: str, profile: int = 0,
        algorithm: str = "asha") -> tuple[dict, str]:
    """One simulated study; its figures, and the cProfile table when ``profile`` > 0."""
    sc = scenario_from_dict(scenario(trials, gpus, policy, mode, algorithm))
    profiler = cProfile.Profile() if profile else None
    t0, c0 = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    result = simulate(sc, keep_log=True)
    if profiler:
        profiler.disable()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    row = {"trials": result.trials, "gpus": gpus, "algorithm": algorithm, "policy": policy, "mode": mode,
           "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "simulated_s": round(result.makespan_s, 1),
           "sim_s_per_wall_s": round(result.makespan_s / wall, 1), "events": result.events,
           "events_per_wall_s": round(result.events / wall), "reports": result.reports,
           "states": result.states, "profiled": bool(profiler)}
    table = ""
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(profile)
        table = out.getvalue()
    return row, table


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=10_000)
    p.add_argument("--gpus", type=int, default=1024, help="a multiple of 8")
    p.add_argument("--policy", default="wfd")
    p.add_argument("--mode", default="stop", choices=["stop", "pause"], help="ASHA/RASDA mode")
    p.add_argument("--algorithm", default="asha", choices=sorted(ALGORITHMS))
    p.add_argument("--quick", action="store_true", help="1,000 trials on 128 GPUs")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="print the N costliest functions")
    p.add_argument("--sweep", action="store_true", help="1k/128, 2k/256 and 10k/1024, one row each")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.quick:
        args.trials, args.gpus = 1000, 128
    sizes = SWEEP if args.sweep else [(args.trials, args.gpus)]
    rows = []
    for trials, gpus in sizes:
        row, table = run(trials, gpus, args.policy, args.mode, args.profile, args.algorithm)
        rows.append(row)
        if args.json:
            print(json.dumps(row))
        elif not args.sweep:
            for k, v in row.items():
                print(f"{k:>18}  {v}")
        if table:
            print(table)
    if args.sweep and not args.json:
        print("  ".join(f"{c:>17}" for c in COLUMNS))
        for row in rows:
            print("  ".join(f"{row[c]!s:>17}" for c in COLUMNS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
