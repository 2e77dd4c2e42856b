"""``fill`` at 384 x 16 on the same Job objects and on fresh renamed copies, CPU ms, by turns.

    python benchmarks/placement/fill_fresh_jobs.py [--repeats 60]

``same``: the speed instance's 384 Jobs placed again (their demand rows cached on them, as in
``tight_instances.py --speed``). ``fresh``: each call places 384 new ``renamed`` copies of 384
template Jobs, as a study's allocator makes one copy per pending trial on every call (the copies
are made before the timing; ``renaming_ms`` is what making them costs). The rows computed for the
first copies are stored on their templates (``Job.renamed``), so later copies start with them.
Best of ``--repeats`` calls each, the two kinds of call taking turns.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tight_instances import speed_instance  # noqa: E402
from hypersack.placement import assign  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=60)
    repeats = parser.parse_args().repeats
    jobs, cluster = speed_instance("384x16")
    templates = [dataclasses.replace(job, id=f"t{i}") for i, job in enumerate(jobs)]   # new objects

    def copies() -> list:
        return [t.renamed(f"x{i}") for i, t in enumerate(templates)]

    assign(jobs, cluster, "fill")
    assign(copies(), cluster, "fill")                      # the first copies: rows computed
    start = time.process_time()
    batches = [copies() for _ in range(repeats)]
    renaming = (time.process_time() - start) / repeats
    best = {"same": float("inf"), "fresh": float("inf")}
    for batch in batches:
        for kind, given in (("same", jobs), ("fresh", batch)):
            start = time.process_time()
            assign(given, cluster, "fill")
            best[kind] = min(best[kind], time.process_time() - start)
    print(json.dumps({"same_ms": round(best["same"] * 1e3, 3), "fresh_ms": round(best["fresh"] * 1e3, 3),
                      "renaming_ms": round(renaming * 1e3, 3)}))


if __name__ == "__main__":
    main()
