"""What SQLite's integrity checks cost on a large study store: the quick check a resume and an
export run first, and the full check of ``hypersack check``.

    python benchmarks/driver/store_check_cost.py --trials 10000 --results 10

Builds a store of one study with ``--trials`` complete trials of ``--results`` results each
(``Storage.save_batch``, one transaction), then times ``check_integrity()`` (quick) and
``check_integrity(full=True)`` on a read-only connection, best of ``--repeat``. Prints JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from hypersack.core.trial import TrialRecord, TrialState
from hypersack.runtime.storage.sqlite import Storage


def build(path: Path, trials: int, results: int) -> None:
    with Storage(path, durability="process") as store:
        sid = store.create_study("big", {}).study_id
        with store.transaction():
            for t in range(trials):
                record = TrialRecord(t, {"lr": t / trials, "batch_size": 32}, seed=t,
                                     state=TrialState.COMPLETE, last_step=results, value=0.5,
                                     metrics={"loss": 0.5})
                store.save_batch(sid, [record], [(t, k, {"loss": 1.0 / k, "accuracy": 0.1 * k})
                                                 for k in range(1, results + 1)])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=10000)
    p.add_argument("--results", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.db"
        build(path, args.trials, args.results)
        out = {"trials": args.trials, "results": args.trials * args.results,
               "file_mb": round(os.path.getsize(path) / 1e6, 2)}
        with Storage(path, readonly=True) as store:
            for name, full in (("quick_check_s", False), ("integrity_check_s", True)):
                times = []
                for _ in range(args.repeat):
                    start = time.perf_counter()
                    if store.check_integrity(full):
                        raise SystemExit("the check found damage in a fresh store")
                    times.append(time.perf_counter() - start)
                out[name] = round(min(times), 3)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
