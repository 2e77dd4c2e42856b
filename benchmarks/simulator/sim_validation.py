"""Validate the simulator's makespan against real runs of the same small study on this machine.

    .venv/bin/python benchmarks/simulator/sim_validation.py            # 2 studies of 8 digits-MLP trials, 2 workers
    .venv/bin/python benchmarks/simulator/sim_validation.py --quick    # 4 trials each, 4 epochs

Method (CPU worker slots play the devices; the local executor runs the real study):
1. Calibration run A (seed 0): a real random-search study of the digits MLP. From its store we
   take, like the Profiler's job history, each batch size's median wall seconds per step (epoch
   plus checkpoint, report and acknowledgement), the median start-up of a trial on a warm worker
   (launch to first report, minus one step) and the extra warm-up of each worker's first trial.
2. The simulator runs study A (in-sample) and study B (seed 1: other configs, out-of-sample) on a
   cluster of one node with ``workers`` devices of arch ``cpu``, placement ``exclusive`` (one trial
   per slot, as the local executor does), with those profiles.
3. Study B runs for real; the error is (simulated - real) / real makespan. Makespan: the first
   launch to the last trial's end, as the controller saw them.
The machine is shared: timings are noisy, and one run of each is reported.
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from hypersack import Study
from hypersack.sim import scenario_from_dict, simulate

SPACE = {"lr": {"type": "float", "low": 3e-4, "high": 3e-2, "log": True},
         "weight_decay": {"type": "float", "low": 1e-6, "high": 1e-3, "log": True},
         "batch_size": {"type": "categorical", "choices": [16, 32, 64, 128]},
         "hidden": {"type": "int", "low": 32, "high": 256, "log": True},
         "optimizer": {"type": "categorical", "choices": ["adam", "adamw", "sgd", "rmsprop"]}}
CURVES = Path(__file__).resolve().parents[2] / "examples" / "sim" / "curves" / "digits_mlp.json"


def real_run(db: Path, name: str, seed: int, trials: int, epochs: int, workers: int) -> dict:
    """Run the study for real; return its makespan and per-trial timings from the store."""
    study = Study(SPACE, ("accuracy", "max"), name=name, algorithm="random", n_trials=trials,
                  storage=db, seed=seed, workers=workers, max_steps=epochs)
    t0 = time.time()
    study.run("digits_mlp", progress=False)
    wall = time.time() - t0
    con = sqlite3.connect(db)
    sid = con.execute("SELECT study_id FROM studies WHERE name = ?", (name,)).fetchone()[0]
    rows = con.execute("SELECT trial_id, config, started_at, finished_at, device FROM trials "
                       "WHERE study_id = ?", (sid,)).fetchall()
    reports = con.execute("SELECT trial_id, step, reported_at FROM results WHERE study_id = ? "
                          "ORDER BY trial_id, step", (sid,)).fetchall()
    con.close()
    trials_info = {t: {"config": json.loads(c), "start": s, "end": e, "device": d, "reports": []}
                   for t, c, s, e, d in rows}
    for t, step, at in reports:
        trials_info[t]["reports"].append(at)
    start = min(i["start"] for i in trials_info.values())
    end = max(i["end"] for i in trials_info.values())
    return {"makespan_s": end - start, "wall_s": wall, "trials": trials_info}


def calibrate(run: dict) -> tuple[list[dict], float, float]:
    """Profiles per batch size (median seconds per step), the median start-up of a trial on a
    warm worker, and the extra warm-up of the first trial on each worker (process + imports)."""
    per_batch: dict[int, list[float]] = {}
    first, later = [], []
    seen: set = set()
    for trial_id in sorted(run["trials"], key=lambda t: run["trials"][t]["start"]):
        info = run["trials"][trial_id]
        times = [info["start"]] + info["reports"]
        steps = [b - a for a, b in zip(times[1:], times[2:])]
        per_batch.setdefault(int(info["config"]["batch_size"]), []).extend(steps)
        if steps:
            cold = info["device"] not in seen
            (first if cold else later).append(times[1] - times[0] - statistics.median(steps))
        seen.add(info["device"])
    profiles = [{"arch": "cpu", "batch_size": b, "step_time_s": round(max(1e-3, statistics.median(v)), 5),
                 "utilization": 100, "memory_gb": 0.1, "cpus": 1} for b, v in sorted(per_batch.items()) if v]
    startup = max(0.0, statistics.median(later)) if later else 0.0
    warmup = max(0.0, statistics.median(first) - startup) if first else 0.0
    return profiles, startup, warmup


def sim_scenario(seed: int, trials: int, epochs: int, workers: int, profiles: list[dict],
                 startup: float, warmup: float) -> dict:
    known = {p["batch_size"] for p in profiles}
    fallback = statistics.median(p["step_time_s"] for p in profiles)
    rows = profiles + [{"arch": "cpu", "batch_size": b, "step_time_s": fallback, "utilization": 100,
                        "memory_gb": 0.1, "cpus": 1} for b in (16, 32, 64, 128) if b not in known]
    return {"name": f"validation-{seed}", "seed": seed, "policy": "exclusive",
            "cluster": {"nodes": [{"id": "local", "cpus": workers,
                                   "gpus": {"count": workers, "arch": "cpu", "memory_gb": 1000}}]},
            "study": {"space": SPACE, "objective": {"metric": "accuracy", "mode": "max"},
                      "algorithm": {"type": "random"}, "budget": {"trials": trials}, "max_steps": epochs},
            "workload": {"model": "digits_mlp", "batch_size_key": "batch_size", "profiles": rows,
                         "source": "calibration run A on this machine", "validated": True},
            "perf": {"startup_s": startup, "warmup_s": warmup, "checkpoint_s": 0.0, "restore_s": 0.0,
                     "interference": 0.0,
                     "calibrated": ["startup_s", "warmup_s", "checkpoint_s", "restore_s", "interference"]},
            "curves": {"type": "replay", "file": str(CURVES)}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="4 trials of 4 epochs")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.quick:
        args.trials, args.epochs = 4, 4
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "validation.db"
        a = real_run(db, "cal-a", 0, args.trials, args.epochs, args.workers)
        profiles, startup, warmup = calibrate(a)
        b = real_run(db, "val-b", 1, args.trials, args.epochs, args.workers)
    rows = []
    for label, seed, real in (("A (in-sample)", 0, a), ("B (out-of-sample)", 1, b)):
        sim = simulate(scenario_from_dict(sim_scenario(seed, args.trials, args.epochs, args.workers,
                                                       profiles, startup, warmup)), keep_log=False)
        err = (sim.makespan_s - real["makespan_s"]) / real["makespan_s"]
        rows.append({"study": label, "real_makespan_s": round(real["makespan_s"], 3),
                     "sim_makespan_s": round(sim.makespan_s, 3), "error_pct": round(100 * err, 1)})
    out = {"trials": args.trials, "epochs": args.epochs, "workers": args.workers,
           "startup_s": round(startup, 4), "warmup_s": round(warmup, 4), "profiles": profiles,
           "results": rows}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{args.trials} digits-MLP trials x {args.epochs} epochs, {args.workers} CPU workers; "
              f"calibrated start-up {startup:.3f} s, worker warm-up {warmup:.3f} s, step s by batch size "
              + ", ".join(f"{r['batch_size']}: {r['step_time_s']:.3f}" for r in profiles))
        print(f"{'study':<20}{'real makespan':>15}{'simulated':>12}{'error':>9}")
        for r in rows:
            print(f"{r['study']:<20}{r['real_makespan_s']:>13.2f} s{r['sim_makespan_s']:>10.2f} s"
                  f"{r['error_pct']:>8.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
