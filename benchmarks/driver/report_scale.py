"""Report at scale: build the HTML report of a stored study of N trials; time and file size.

    .venv/bin/python benchmarks/driver/report_scale.py                # 10,000 trials, 3 builds
    .venv/bin/python benchmarks/driver/report_scale.py --trials 1000 --repeat 5

The study is written through the real SQLite store first (not timed): N trials of an ASHA-like
study on 64 GPUs of 8 nodes (rungs at 1, 3, 9, 27 steps: 2/3 of the trials stop at each rung,
so about 4 results a trial on average and N/27 trials with 27), 4 parameters (3 numbers, 1
categorical), one stay per launch, 4 trials at a time on each GPU (25% each), a pack id on half,
a failure with a traceback in 2% of the trials. Then ``hypersack report`` is built N times
(``build_report``: open read-only, load, compute the series, write the file), each build timed
from the call to the file on disk. Goal (issue 16): under 5 s and under 10 MB at 10,000 trials.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from hypersack.core.stays import Stay, StayOutcome
from hypersack.core.trial import TrialRecord, TrialState
from hypersack.report import build_report
from hypersack.runtime.storage.sqlite import Storage

RUNGS = (1, 3, 9, 27)


def _spec(name: str, trials: int) -> dict:
    import hypersack
    return hypersack.Study(name=name, objective=("val_loss", "min"), n_trials=trials, storage=":x:",
                           space={"lr": {"type": "float", "low": 1e-5, "high": 1.0, "log": True},
                                  "wd": {"type": "float", "low": 0.0, "high": 0.1},
                                  "width": {"type": "int", "low": 32, "high": 1024},
                                  "opt": {"type": "categorical", "choices": ["sgd", "adam", "adamw"]}}
                           ).spec.to_dict()


def fill(path: Path, trials: int, seed: int = 0) -> None:
    """Write the synthetic study (see the module doc) in batches of 500 trials."""
    rng = random.Random(seed)
    slots = [(f"node{n}", f"gpu{g}", k) for n in range(8) for g in range(8) for k in range(4)]
    free_at = {s: 0.0 for s in slots}       # 4 trials at a time on each GPU, 25% each
    t0 = time.time() - 40.0 * trials / len(slots)     # the study ends about now
    with Storage(path) as store:
        row = store.create_study("big", _spec("big", trials))
        batch_trials, batch_results, batch_stays = [], [], []
        for i in range(trials):
            config = {"lr": 10 ** rng.uniform(-5, 0), "wd": rng.uniform(0, 0.1),
                      "width": rng.randint(32, 1024), "opt": rng.choice(["sgd", "adam", "adamw"])}
            steps = next((r for r in RUNGS if rng.random() < 2 / 3), RUNGS[-1])
            slot = min(slots, key=free_at.__getitem__)
            device = slot[:2]
            start = t0 + free_at[slot]
            end = start + steps * rng.uniform(5, 15)
            free_at[slot] = end - t0
            failed = rng.random() < 0.02
            base = abs(config["lr"] - 0.01) + rng.random() * 0.3
            losses = [base + 1.0 / (s + 1) for s in range(1, steps + 1)]
            state = TrialState.FAILED if failed else (
                TrialState.COMPLETE if steps == RUNGS[-1] else TrialState.PRUNED)
            batch_trials.append(TrialRecord(
                i, config, seed=i, state=state, attempts=1, last_step=steps,
                metrics={"val_loss": losses[-1]}, value=None if failed else losses[-1],
                started_at=start, finished_at=end,
                error="CUDA out of memory" if failed else None,
                traceback=("Traceback (most recent call last):\n" + "  File \"train.py\", line 1\n" * 20 +
                           "RuntimeError: CUDA out of memory") if failed else None))
            batch_results += [(i, s, {"val_loss": v, "val_acc": 1 - v / 3}) for s, v in
                              enumerate(losses, start=1)]
            outcome = StayOutcome.FAILED if failed else (
                StayOutcome.FINISHED if steps == RUNGS[-1] else StayOutcome.PRUNED)
            batch_stays.append(Stay(i, 1, device[0], device[1], start, 25.0,
                                    pack=i // 8 if i % 2 else None, end=end, outcome=outcome))
            if len(batch_trials) == 500 or i == trials - 1:
                store.save_batch(row.study_id, batch_trials, batch_results, stays=batch_stays)
                batch_trials, batch_results, batch_stays = [], [], []
        store.set_status(row.study_id, "complete")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db, out = Path(tmp) / "big.db", Path(tmp) / "big.html"
        started = time.perf_counter()
        fill(db, args.trials)
        print(f"store of {args.trials} trials written in {time.perf_counter() - started:.1f} s "
              f"({db.stat().st_size / 2**20:.1f} MiB)")
        times = []
        for k in range(args.repeat):
            started = time.perf_counter()
            build_report(db, ["big"], out)
            times.append(time.perf_counter() - started)
            print(f"build {k + 1}: {times[-1]:.2f} s, {out.stat().st_size / 1e6:.2f} MB")
        print(f"report of {args.trials} trials: median {statistics.median(times):.2f} s "
              f"(min {min(times):.2f}, max {max(times):.2f}), {out.stat().st_size / 1e6:.2f} MB "
              f"(plotly.js {len(_plotly()) / 1e6:.2f} MB of it); load average "
              f"{os.getloadavg()[0]:.1f}")


def _plotly() -> str:
    from hypersack.report.html import plotly_js
    return plotly_js()


if __name__ == "__main__":
    main()
