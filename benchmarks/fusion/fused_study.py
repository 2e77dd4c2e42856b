"""End to end: the digits study with `execution: separate` against `execution: fused`.

The same study (random search, one fixed MLP width so every trial can fuse, the built-in
`digits_mlp` trainable / its fusable task) runs in a fresh temporary SQLite file per mode on the
local worker pool (one device per CPU core here, one per GPU on a GPU machine). Reported per mode:
wall seconds of `study.run()` (worker start-up included), trials per minute, complete trials, the
best validation accuracy, the packs the fused run used and their slot occupancy (occupied
slots / cap per iteration, time-weighted, from the ``pack stats`` line of each pack's log).

    python benchmarks/fusion/fused_study.py [--trials 32] [--epochs 8] [--hidden 64]
                                            [--max-members 16] [--uniform] [--quick] [--json PATH]

By default batch sizes (16-128) and optimizers (4 kinds) vary per trial: a pack's one stack then
runs one optimizer update per kind present and pads every step to its largest batch. ``--uniform`` fixes
batch size 32 and adam, the case fusion is made for.

`--quick`: 8 trials of 2 epochs (a smoke run, not a measurement). CPU figures on a shared
machine are noisy: run it once, on an otherwise idle machine when you can.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
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
    "optimizer": {"type": "categorical", "choices": ["adam", "adamw", "sgd", "rmsprop"]},
}

# --uniform: one batch size and one optimizer, so each pack is one fused stack with no padding.
UNIFORM = {"batch_size": 32, "optimizer": "adam"}


def run_study(execution: str, trials: int, epochs: int, hidden: int,
              max_members: int, uniform: bool = False) -> dict[str, Any]:
    """One digits study in a throw-away store; its wall time and outcome."""
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)           # trial folders go next to the store
        try:
            study = hypersack.Study(name=f"bench-{execution}",
                                    space=dict(SPACE, epochs=epochs, hidden=hidden,
                                               **UNIFORM if uniform else {}),
                                    objective=("accuracy", "max"), n_trials=trials,
                                    storage=Path(tmp) / "bench.db", max_steps="epochs", seed=0,
                                    execution=execution, pack={"max_members": max_members})
            start = time.perf_counter()
            study.run("digits_mlp", progress=False)
            wall = time.perf_counter() - start
            status, best = study.status(), study.best_trial()
            # the run folder is hypersack-runs/<name>-<id>/ (hypersack.runtime.storage.sqlite)
            logs = list((Path(tmp) / "hypersack-runs").glob(f"{study.name}-*/packs/*.log"))
            packs, occupancy = len(logs), pack_occupancy(logs)
        finally:
            os.chdir(cwd)
    return {"execution": execution, "wall_s": round(wall, 2),
            "trials_per_min": round(60 * trials / wall, 1), "complete": status["complete"],
            "failed": status["failed"], "best_accuracy": round(best["value"], 4) if best else None,
            "packs": packs, "occupancy": occupancy}


_STATS = re.compile(r"pack stats: \d+ iterations in ([0-9.]+)s.*time-weighted ([0-9.]+)")


def pack_occupancy(logs: list[Path]) -> float | None:
    """Slot occupancy over the packs' logs (their ``PackStats`` lines): each pack's
    time-weighted occupancy, weighted by its training time; None without packs."""
    pairs = [(float(m[1]), float(m[2])) for log in logs
             for m in _STATS.finditer(log.read_text(errors="replace"))]
    seconds = sum(s for s, _ in pairs)
    return round(sum(s * o for s, o in pairs) / seconds, 3) if seconds > 0 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--max-members", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="8 trials of 2 epochs (smoke run)")
    parser.add_argument("--uniform", action="store_true",
                        help="batch size 32 and adam for every trial (one stack per pack)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    trials, epochs = (8, 2) if args.quick else (args.trials, args.epochs)
    rows = [run_study(mode, trials, epochs, args.hidden, args.max_members, args.uniform)
            for mode in ("separate", "fused")]
    print(f"digits MLP (hidden {args.hidden}), {trials} trials x {epochs} epochs, "
          f"max_members {args.max_members}, {'uniform' if args.uniform else 'mixed'} batch "
          f"sizes/optimizers, {os.cpu_count()} CPUs, {platform.machine()}")
    header = ["execution", "wall_s", "trials_per_min", "complete", "failed", "best_accuracy", "packs",
              "occupancy"]
    print(" | ".join(f"{h:>14}" for h in header))
    for row in rows:
        print(" | ".join(f"{row[h]!s:>14}" for h in header))
    print(f"speed-up fused / separate: {rows[0]['wall_s'] / rows[1]['wall_s']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"trials": trials, "epochs": epochs, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
