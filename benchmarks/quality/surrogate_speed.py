"""A surrogate benchmark at scale in the simulator: N trials of an algorithm on a test function
(``curves: {type: function}``) or on a table of learning curves (``curves: {type: table}``, a
CSV of M configs x max_t steps written from the same function, nearest row for new configs).

    python benchmarks/quality/surrogate_speed.py [--trials 100000] [--workers 64]
        [--curves function|table] [--algorithm asha] [--max-t 27] [--table-configs 1000]

Prints wall and process CPU seconds of ``simulate()`` (the table's loading apart), trials and
reports per wall second, and the best value found. Each simulated worker trains one trial at a
time, one fidelity step per simulated second; the function is Hartmann 6 with fidelity 1..max_t.
"""
from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from hypersack.sim import scenario_from_dict, simulate
from hypersack.sim.functions import MFHartmann

ALGORITHMS = {
    "random": {"type": "random"},
    "asha": {"type": "asha", "min_t": 1, "reduction_factor": 3, "mode": "stop"},
    "asha-pause": {"type": "asha", "min_t": 1, "reduction_factor": 3},
}


def write_table(path: Path, configs: int, max_t: int, seed: int = 0) -> None:
    f = MFHartmann(6, max_fidelity=max_t)
    rng = np.random.default_rng(seed)
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow([f"x{i}" for i in range(6)] + ["step", "value"])
        for x in rng.random((configs, 6)):
            for step in range(1, max_t + 1):
                out.writerow([*x.tolist(), step, f.value(x, step)])


def scenario(args: argparse.Namespace, table: Path | None) -> dict:
    f = MFHartmann(6, max_fidelity=args.max_t)
    algorithm = dict(ALGORITHMS[args.algorithm])
    if "min_t" in algorithm:
        algorithm["max_t"] = args.max_t
    curves = ({"type": "table", "file": str(table)} if table is not None else
              {"type": "function", "function": "hypersack.sim.functions:MFHartmann",
               "options": {"dims": 6, "max_fidelity": args.max_t}})
    return {
        "name": "surrogate-speed", "seed": 0, "policy": "exclusive",
        "cluster": {"nodes": [{"id": "n0", "cpus": args.workers,
                               "gpus": {"count": args.workers, "arch": "cpu", "memory_gb": 100}}]},
        "study": {"space": f.space(), "objective": {"metric": "value", "mode": "min"},
                  "algorithm": algorithm, "budget": {"trials": args.trials}, "max_steps": args.max_t},
        "workload": {"profiles": [{"arch": "cpu", "step_time_s": 1, "utilization": 100, "cpus": 1}]},
        "perf": {"startup_s": 0, "warmup_s": 0, "checkpoint_s": 0, "restore_s": 0},
        "curves": curves,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=64)
    p.add_argument("--curves", choices=["function", "table"], default="function")
    p.add_argument("--algorithm", choices=list(ALGORITHMS), default="asha")
    p.add_argument("--max-t", type=int, default=27)
    p.add_argument("--table-configs", type=int, default=1000)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        table = None
        if args.curves == "table":
            table = Path(tmp) / "curves.csv"
            write_table(table, args.table_configs, args.max_t)
        started = time.perf_counter()
        sc = scenario_from_dict(scenario(args, table))
        load_s = time.perf_counter() - started
        wall, cpu = time.perf_counter(), time.process_time()
        result = simulate(sc, keep_log=False)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    out = {"trials": result.trials, "workers": args.workers, "curves": args.curves,
           "algorithm": args.algorithm, "max_t": args.max_t, "reports": result.reports,
           "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "load_s": round(load_s, 2),
           "trials_per_wall_s": round(result.trials / wall), "reports_per_wall_s": round(result.reports / wall),
           "best_value": result.best_value, "simulated_s": round(result.makespan_s, 1)}
    print(json.dumps(out) if args.json else "\n".join(f"{k:20s} {v}" for k, v in out.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
