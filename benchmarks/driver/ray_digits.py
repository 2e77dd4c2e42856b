"""The digits ASHA demo on the local executor against the same study on a local 2-node Ray cluster.

    python benchmarks/driver/ray_digits.py [--rounds 2] [--nodes 2] [--json PATH]

Runs examples/digits.yaml (local executor, ``workers`` = the cluster's CPUs) and
examples/digits_ray.yaml (Ray executor on ``--nodes`` raylets of this machine, one CPU slot
per CPU each) in alternating rounds (local, ray, local, ray, ...), each from ``Study`` to the end of
``run()`` (the Ray run includes starting and ending its agents; the cluster is started once,
outside the timing). Prints each wall time, the best accuracy and how many trials completed,
and the ratio ray / local of the summed wall times. Databases go to a temporary folder.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))


def run_once(file: str, db: Path, executor: dict[str, Any]) -> dict[str, Any]:
    from hypersack import Study
    from hypersack.config import load_study_file
    data = load_study_file(REPO / "examples" / file)
    data["executor"] = {**data.get("executor", {}), **executor}
    t0 = time.perf_counter()
    study = Study.from_spec(data, storage=db)
    ended = study.run(if_exists="replace", progress=False)
    wall = time.perf_counter() - t0
    status = study.status()
    return {"wall_s": round(wall, 2), "status": ended.status, "complete": status["complete"],
            "pruned": status["pruned"], "failed": status["failed"],
            "best": round(status["best"]["value"], 4) if status["best"] else None}


def main(argv: list[str] | None = None) -> int:
    from overhead import machine_info

    from hypersack.runtime.executors.ray_cluster import local_cluster
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    cpus = max(1, (os.cpu_count() or 1) // args.nodes)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hypersack-bench-") as tmp, \
            local_cluster(args.nodes, cpus):
        for r in range(args.rounds):
            for backend, file, executor in (
                    ("local", "digits.yaml", {"workers": cpus * args.nodes}),
                    ("ray", "digits_ray.yaml", {})):
                row = {"backend": backend, "round": r + 1,
                       **run_once(file, Path(tmp) / f"{backend}-{r}.db", executor)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    total = {b: sum(x["wall_s"] for x in rows if x["backend"] == b) for b in ("local", "ray")}
    ratio = total["ray"] / total["local"]
    print(f"wall time ray / local: {ratio:.2f} ({total['ray']:.1f} s / {total['local']:.1f} s "
          f"over {args.rounds} rounds)")
    if args.json:
        Path(args.json).write_text(json.dumps({"benchmark": "ray_digits", "machine": machine_info(),
                                               "nodes": args.nodes, "cpus_per_node": cpus,
                                               "rows": rows, "ratio": round(ratio, 3)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
