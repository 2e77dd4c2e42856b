"""The driver's CPU in its durable write, inside a real study with local workers: the part of
``benchmarks/driver/overhead.py``'s "driver CPU per report" spent in each turn's ``_store``
(``Storage.save_batch``: the trials, results, controller state and stays), the turn's transaction
(``BEGIN IMMEDIATE``; ``COMMIT`` with its fsync and the WAL checkpointer's poke) and the user
attribute importer (``AttrsImporter.listen``), per report. Each part is timed with
``time.process_time`` around the call (a few microseconds per call of its own, the same for any
checkout); the run is ``overhead.py``'s trivial study after a warm-up study.

Runs against any checkout (``PYTHONPATH=<checkout>``), so two can be compared turn by turn.

    python benchmarks/driver/store_path.py [--trials 300] [--reports 20] [--workers 2]
"""
from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import overhead  # noqa: E402
from hypersack.runtime.loop import run as loop_run  # noqa: E402
from hypersack.runtime.storage import sqlite, user_attrs  # noqa: E402

SPENT: collections.Counter[str] = collections.Counter()


def _timed(owner: Any, name: str, part: str) -> None:
    real: Callable[..., Any] = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return real(*args, **kwargs)
        finally:
            SPENT[part] += time.process_time() - start
    setattr(owner, name, timed)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=300)
    p.add_argument("--reports", type=int, default=20)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    _timed(loop_run, "_store", "store")
    _timed(sqlite._Transaction, "__enter__", "begin")
    _timed(sqlite._Transaction, "__exit__", "commit")
    _timed(user_attrs.AttrsImporter, "listen", "attrs")
    with tempfile.TemporaryDirectory() as d:
        overhead._hypersack_once(Path(d), "warm-up", args.workers, args.reports, args.workers)
        SPENT.clear()
        _, check = overhead._hypersack_once(Path(d), "store-path", args.trials, args.reports,
                                            args.workers)
    n = args.trials * args.reports
    parts = " ".join(f"{k} {1e6 * v / n:.1f}" for k, v in sorted(SPENT.items()))
    print(f"driver CPU {1e6 * check['driver_cpu_s'] / n:.1f} us/report; store path "
          f"{1e6 * sum(SPENT.values()) / n:.1f} us/report ({parts})")


if __name__ == "__main__":
    main()
