"""Record learning curves (and per-epoch CPU times) of the digits MLP for the simulator to replay.

    .venv/bin/python examples/sim/record_digits_curves.py --configs 32 --epochs 12 \
        --out examples/sim/curves/digits_mlp.json

Each config is drawn from ``examples/digits.yaml``'s space with a seeded numpy Generator and
trained in this process with ``hypersack.workloads.digits.train_mlp`` (one thread, like a worker
slot of the local executor). The JSON holds, per config: the config, the reported metrics of
every epoch, and the wall seconds of every epoch (the simulator's calibration for the ``cpu``
profile). Timings depend on this machine's load; the file says when and where it was recorded.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import numpy as np


class _RecordingContext:
    """The parts of ``TrialContext`` the digits trainables use; keeps every report in memory."""

    def __init__(self, seed: int, max_steps: int):
        self.seed, self.max_steps, self.device = seed, max_steps, "cpu"
        self.trial_id, self.attempt = 0, 1
        self.reports: list[dict] = []
        self.epoch_seconds: list[float] = []
        self._t = time.perf_counter()

    def restore(self):
        return None

    def should_stop(self) -> bool:
        return False

    def checkpoint(self, state) -> None:
        return None

    def report(self, step: int, **metrics: float) -> None:
        now = time.perf_counter()
        self.epoch_seconds.append(round(now - self._t, 5))
        self.reports.append({"step": step, **{k: round(float(v), 6) for k, v in metrics.items()}})
        self._t = time.perf_counter()


def sample_config(rng: np.random.Generator) -> dict:
    """One config from examples/digits.yaml's space (log-uniform floats, log-uniform int)."""
    def log_uniform(low: float, high: float) -> float:
        return float(math.exp(rng.uniform(math.log(low), math.log(high))))
    return {
        "lr": log_uniform(3e-4, 3e-2),
        "weight_decay": log_uniform(1e-6, 1e-3),
        "batch_size": int(rng.choice([16, 32, 64, 128])),
        "hidden": int(round(log_uniform(32, 256))),
        "optimizer": str(rng.choice(["adam", "adamw", "sgd", "rmsprop"])),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", type=int, default=32)
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="examples/sim/curves/digits_mlp.json")
    args = p.parse_args()
    import torch
    torch.set_num_threads(1)
    from hypersack.workloads.digits import load_digits_split, train_mlp
    load_digits_split()
    rng = np.random.default_rng(args.seed)
    curves = []
    for i in range(args.configs):
        config = sample_config(rng)
        ctx = _RecordingContext(seed=1000 + i, max_steps=args.epochs)
        train_mlp({**config, "epochs": args.epochs}, ctx)
        curves.append({"config": config, "reports": ctx.reports, "epoch_seconds": ctx.epoch_seconds})
        print(f"{i + 1}/{args.configs} acc={ctx.reports[-1]['accuracy']:.3f} "
              f"epoch_s={np.median(ctx.epoch_seconds):.3f} {config}", flush=True)
    out = {"workload": "digits_mlp", "metric": "accuracy", "mode": "max", "epochs": args.epochs,
           "recorded": {"at": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": platform.node(),
                        "python": platform.python_version(), "torch": torch.__version__,
                        "threads": 1},
           "curves": curves}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
