"""What a short study costs from a cold start of its workers: CPU of the driver and of its worker
processes per study, for a trainable that imports nothing heavy (``synthetic_chain``).

Each study is new (its own store), so each starts its workers afresh: the interpreter, the
worker's modules, and whatever the worker imports for a trial on its own (before stop 35, numpy,
for seeding). The first study also pays the driver's imports and is left out of the figures.

    python benchmarks/driver/worker_start.py --studies 8 --trials 2 --workers 1

Compare two trees by turns, each with its own PYTHONPATH (RESULTS.md, "Stop 35").
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path


def _cpu() -> tuple[float, float]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, children.ru_utime + children.ru_stime


def measure(studies: int, trials: int, workers: int, folder: Path) -> dict:
    import hypersack
    rows = []
    for i in range(studies + 1):
        own0, children0 = _cpu()
        start = time.perf_counter()
        study = hypersack.Study(name=f"start{i}", space={"lr": hypersack.Float(0.4, 0.6), "steps": 3},
                                objective=("loss", "min"), n_trials=trials,
                                storage=folder / f"s{i}.db", workers=workers)
        run = study.run("synthetic_chain", progress=False)
        assert run.status == "complete", run.status
        own1, children1 = _cpu()
        rows.append({"driver_s": own1 - own0, "workers_s": children1 - children0,
                     "wall_s": time.perf_counter() - start})
    kept = rows[1:]                   # the first study pays the driver's own imports
    return {key: round(statistics.median(r[key] for r in kept), 3)
            for key in ("driver_s", "workers_s", "wall_s")} | {
        "hypersack": hypersack.__file__, "studies": studies, "trials": trials, "workers": workers}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", type=int, default=8)
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        print(json.dumps(measure(args.studies, args.trials, args.workers, Path(folder))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
