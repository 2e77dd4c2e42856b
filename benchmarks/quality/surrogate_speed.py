"""A surrogate benchmark at scale in the simulator: N trials of an algorithm on a test function
(``curves: {type: function}``) or on a table of learning curves (``curves: {type: table}``, a
CSV of M configs x max_t steps written from the same function, nearest row for new configs).

    python benchmarks/quality/surrogate_speed.py [--trials 100000] [--workers 64]
        [--curves function|table] [--algorithm asha] [--max-t 27] [--table-configs 1000]
        [--goal-cpu-s 15] [--compare asha,hyperband,bohb]

Prints wall and process CPU seconds of ``simulate()`` (the table's loading apart), trials and
reports per wall and per CPU second, the best value found and a fingerprint of the trial table
(every trial's config, state, value, last step and end time, hashed: two runs that decide
anything differently differ there). Each simulated worker trains one trial at a time, one
fidelity step per simulated second; the function is Hartmann 6 with fidelity 1..max_t.

Goal (issue 41, item 4): 100,000 trials of the default scenario (``asha``, stop mode, 64
workers, max_t 27) in at most ``--goal-cpu-s`` CPU seconds. With ``--trials`` >= 100,000 the run
itself is judged; with fewer, the line says what its rate projects to 100,000 trials (labelled
so). The script exits 1 when the goal is missed.

``--compare a,b,..``: ``simulate --compare``'s quality table (``sim.compare.compare_quality``:
regret at 25/50/100% of the steps, one seed) of those algorithms on the same scenario at
``--trials`` each, with the CPU seconds of the whole comparison; no goal is judged then.

Runs against another checkout by its PYTHONPATH (the script reads only the public API), e.g.
main before the fast paths: ``PYTHONPATH=/tmp/old python benchmarks/quality/surrogate_speed.py``.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
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
    "hyperband": {"type": "hyperband", "min_t": 1, "reduction_factor": 3},
    "bohb": {"type": "bohb", "min_t": 1, "reduction_factor": 3},
}
GOAL_TRIALS = 100_000


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


def fingerprint(result) -> str:
    """The first 16 hex digits of a sha256 of every trial's (id, config, state, value, last
    step, end time), floats to 12 significant digits."""
    def g(v):
        return format(v, ".12g") if isinstance(v, float) else repr(v)
    rows = []
    for tid, r in sorted(result.controller.trials.items()):
        config = ",".join(f"{k}={g(v)}" for k, v in sorted(r.config.items()))
        rows.append(f"{tid}|{config}|{r.state.value}|{g(r.value)}|{r.last_step}|{g(r.finished_at)}")
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]


def verdict(trials: int, cpu_s: float, goal_cpu_s: float) -> tuple[str, float]:
    """``PASS``/``FAIL`` against the goal, and the CPU seconds judged (measured at >= 100,000
    trials, else this run's rate projected to 100,000)."""
    judged = cpu_s if trials >= GOAL_TRIALS else cpu_s * GOAL_TRIALS / max(1, trials)
    return ("PASS" if judged <= goal_cpu_s else "FAIL"), judged


def compare(args: argparse.Namespace) -> dict:
    """``simulate --compare``'s quality table of ``--compare``'s algorithms (one seed each, every
    run cut at the same budget of steps), with the CPU seconds of the whole comparison."""
    from hypersack.sim.compare import compare_quality
    labels = [a.strip() for a in args.compare.split(",") if a.strip()]
    algorithms = {}
    for label in labels:
        algorithm = dict(ALGORITHMS[label])
        if "min_t" in algorithm:
            algorithm["max_t"] = args.max_t
        algorithms[label] = algorithm
    sc = scenario_from_dict(scenario(args, None))
    cpu = time.process_time()
    runs, table = compare_quality(sc, algorithms)
    cpu = time.process_time() - cpu
    return {"trials": args.trials, "workers": args.workers, "max_t": args.max_t,
            "cpu_s": round(cpu, 2), "trials_run": {label: r.trials for label, r in runs},
            "budget_steps": table["budget"],
            "regret_q1_median_q3_at_25_50_100": {
                row["algorithm"]: [[round(q, 4) for q in r] for r in row["regret"]]
                for row in table["rows"]}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=64)
    p.add_argument("--curves", choices=["function", "table"], default="function")
    p.add_argument("--algorithm", choices=list(ALGORITHMS), default="asha")
    p.add_argument("--max-t", type=int, default=27)
    p.add_argument("--table-configs", type=int, default=1000)
    p.add_argument("--goal-cpu-s", type=float, default=15.0)
    p.add_argument("--compare", default="", help="comma-separated algorithms: the quality table")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.compare:
        out = compare(args)
        print(json.dumps(out) if args.json else "\n".join(f"{k:20s} {v}" for k, v in out.items()))
        return 0
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
           "trials_per_cpu_s": round(result.trials / cpu) if cpu > 0 else None,
           "best_value": result.best_value, "simulated_s": round(result.makespan_s, 1),
           "fingerprint": fingerprint(result)}
    default = (args.algorithm == "asha" and args.curves == "function" and args.workers == 64
               and args.max_t == 27)
    if default:
        word, judged = verdict(result.trials, cpu, args.goal_cpu_s)
        how = "measured" if result.trials >= GOAL_TRIALS else f"projected from {result.trials:,} trials"
        out["goal"] = (f"{word}: {GOAL_TRIALS:,} trials in {judged:.1f} CPU s ({how}), "
                       f"goal <= {args.goal_cpu_s:g} s")
    print(json.dumps(out) if args.json else "\n".join(f"{k:20s} {v}" for k, v in out.items()))
    return 1 if default and out["goal"].startswith("FAIL") else 0


if __name__ == "__main__":
    raise SystemExit(main())
