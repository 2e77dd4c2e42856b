"""End to end on this machine: the digits study under `exclusive` against `wfd` with oversubscription,
and ASHA against RASDA (data-parallel growth up to the devices there are).

Each study runs in a fresh temporary SQLite file with the built-in `digits_mlp` trainable on the
local worker pool (one device per CPU core here, one per GPU on a GPU machine). Reported per
study: makespan (wall seconds of `study.run()`, worker start-up included), trials per minute,
completed/pruned trials, and the best validation accuracy.

    python benchmarks/placement/study_placement.py [--part placement|idle|rasda|all] [--trials 16]
                                                   [--epochs 6] [--ratios 2,3] [--quick] [--json PATH]

`--part idle` runs the same comparison with a trainable that leaves its device idle half the
time (each step computes for about `--busy-s` seconds, then waits as long on a simulated input
pipeline): the situation of a light model on a large GPU, reproduced with CPU devices.

`--quick`: 8 trials of 3 epochs (a smoke run, not a measurement).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import hypersack  # noqa: E402

SPACE = {
    "lr": {"type": "float", "low": 0.0003, "high": 0.03, "log": True},
    "weight_decay": {"type": "float", "low": 0.000001, "high": 0.001, "log": True},
    "batch_size": {"type": "categorical", "choices": [16, 32, 64, 128]},
    "hidden": {"type": "int", "low": 32, "high": 256, "log": True},
    "optimizer": {"type": "categorical", "choices": ["adam", "adamw", "sgd", "rmsprop"]},
}


SPACE_IDLE: dict[str, Any] = {"lr": SPACE["lr"], "busy_s": 0.1}


def run_study(name: str, trials: int, epochs: int, trainable: Any = "digits_mlp",
              **options: Any) -> dict[str, Any]:
    """One digits study in a throw-away store; its makespan and outcome."""
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)           # trial folders go next to the store
        try:
            space = SPACE if isinstance(trainable, str) else SPACE_IDLE
            study = hypersack.Study(name=name, space=dict(space, epochs=epochs),
                                    objective=("accuracy", "max"), n_trials=trials,
                                    storage=Path(tmp) / "bench.db", max_steps="epochs", seed=0,
                                    **options)
            start = time.perf_counter()
            study.run(trainable, progress=False)
            wall = time.perf_counter() - start
            status, best = study.status(), study.best_trial()
        finally:
            os.chdir(cwd)
    return {"study": name, "makespan_s": round(wall, 2), "trials_per_min": round(60 * trials / wall, 1),
            "complete": status["complete"], "pruned": status.get("pruned", 0),
            "failed": status["failed"], "best_accuracy": best["value"] if best else None}


def half_idle(config: dict, ctx: Any) -> None:
    """``epochs`` steps of ``busy_s`` seconds of arithmetic then ``busy_s`` seconds of waiting."""
    state = ctx.restore() or {"step": 0, "x": 0.0}
    for step in range(state["step"] + 1, config["epochs"] + 1):
        end = time.perf_counter() + config["busy_s"]
        while time.perf_counter() < end:
            state["x"] = (state["x"] * 1.000001 + config["lr"]) % 1.0
        time.sleep(config["busy_s"])                       # the input pipeline keeps the device idle
        state["step"] = step
        ctx.checkpoint(state)
        ctx.report(step, accuracy=1.0 - abs(config["lr"] - 0.01) - 0.001 / step)


def placement_part(trials: int, epochs: int, ratios: list[float],
                   trainable: Any = "digits_mlp") -> list[dict[str, Any]]:
    rows = [dict(run_study("exclusive", trials, epochs, trainable, placement="exclusive"), ratio=1.0)]
    for r in ratios:
        rows.append(dict(run_study(f"wfd-r{r:g}", trials, epochs, trainable, placement="wfd",
                                   oversubscription=r), ratio=r))
    base = rows[0]["makespan_s"]
    for row in rows:
        row["speedup_vs_exclusive"] = round(base / row["makespan_s"], 2)
    return rows


def rasda_part(trials: int, epochs: int) -> list[dict[str, Any]]:
    devices = os.cpu_count() or 1
    asha = {"type": "asha", "min_t": 1, "max_t": epochs, "reduction_factor": 2, "mode": "stop"}
    rasda = {"type": "rasda", "min_t": 1, "max_t": epochs, "sf": 2, "rf": 2, "base_resources": 1,
             "max_resources": devices}
    rows = [run_study("asha", trials, epochs, algorithm=asha),
            run_study("rasda", trials, epochs, algorithm=rasda)]
    rows[1]["speedup_vs_asha"] = round(rows[0]["makespan_s"] / rows[1]["makespan_s"], 2)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=["placement", "idle", "rasda", "all"], default="all")
    p.add_argument("--busy-s", type=float, default=0.1)
    p.add_argument("--trials", type=int, default=16)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--ratios", default="2,3")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    trials, epochs = (8, 3) if args.quick else (args.trials, args.epochs)
    ratios = [float(r) for r in args.ratios.split(",") if r]
    out: dict[str, Any] = {"machine": f"{platform.node()} ({os.cpu_count()} cores)",
                           "date": _dt.date.today().isoformat(), "trials": trials, "epochs": epochs}
    if args.part in ("placement", "all"):
        out["placement"] = placement_part(trials, epochs, ratios)
        _table("exclusive vs wfd (digits MLP)", out["placement"])
    if args.part in ("idle", "all"):
        SPACE_IDLE.update(busy_s=args.busy_s)
        out["idle"] = placement_part(trials, epochs, ratios, trainable=half_idle)
        _table(f"exclusive vs wfd (half-idle trials, {args.busy_s:g} s busy + {args.busy_s:g} s idle per step)",
               out["idle"])
    if args.part in ("rasda", "all"):
        out["rasda"] = rasda_part(trials, epochs)
        _table("ASHA vs RASDA (digits MLP)", out["rasda"])
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


def _table(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    keys = list(rows[0].keys() | set().union(*rows))
    keys = [k for k in ["study", "ratio", "makespan_s", "trials_per_min", "complete", "pruned",
                        "failed", "best_accuracy", "speedup_vs_exclusive", "speedup_vs_asha"] if k in keys]
    print("  ".join(f"{k:>20}" for k in keys))
    for row in rows:
        print("  ".join(f"{str(row.get(k, '')):>20}" for k in keys))


if __name__ == "__main__":
    sys.exit(main())
