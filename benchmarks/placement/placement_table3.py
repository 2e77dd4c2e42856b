"""Placement policies against the MIP optimum: the shape of HyperSack's Table III.

    python benchmarks/placement/placement_table3.py [--quick] [--mip-time 60] [--ratios 1,3] [--json PATH]

Instances (all seeded, ``--seed``):

* SP3: 96 jobs = ResNet-18 x batch {64,128,256,512} x 24 learning rates, on 1 node with 4
  A100-80GB and 88 cores (the paper's Sec. V-A node).
* SP4: 384 jobs = 6 models (ShuffleNet, MobileNet, ViT-Tiny, DeiT-Tiny, ResNet-18, ResNet-34) x
  4 batch sizes x 16 learning rates, on 4 such nodes (16 GPUs).
* speed: 10,000 jobs drawn from the SP4 profiles, on 128 nodes x 8 A100-80GB (1,024 GPUs), and
  the same with 32 of the nodes H100 (per-architecture demands). No MIP there.

Job demands. The paper publishes no per-job profile, only (Sec. I, Fig. 1) that A100 utilisation
of these models ranges from 22% (ShuffleNet) to 50% (Pythia-31M) over 2.3M to 31M parameters. So a
model's utilisation at batch 128 is interpolated on log(parameters) between those two published
points, scaled by (batch/128)^0.25 (bigger batches keep the GPU busier), times a seeded per-job
profiling noise of ``--noise`` (relative, default 5%). Memory (GB) = 0.5 (context) + 16 bytes per
parameter (weights, gradients, Adam) + activation MB per sample x batch. Runtime (s) = 10 epochs x
(50,000 / batch) iterations x (4 ms + batch x per-sample us). Each job asks for 2 CPU cores. On
H100 a job needs 0.75x the compute and 0.6x the runtime. These are modelled figures (see
``PROFILES``), not measurements: pass ``--profiles FILE`` (JSON {model: {batch: {compute,
memory_gb, runtime}}}) to use measured ones.

The paper does not state the oversubscription ratio r behind Table III; both r = 1 and r = 3 (the
ratio it found best on A100) are run by default. Occupancy = placed compute / sum(r x C), as in
Table III. Time = the best of ``--repeats`` calls of ``assign`` (the public entry point, with its
input validation), plus the policy function alone. MIP = OR-Tools CP-SAT with ``--mip-time`` s
(``--quick``: 5 s), hinted with the WFD solution; its line also shows the solver's proven upper
bound on occupancy. Every answer is verified with ``check_placement``.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

from hypersack.placement import GPU, Cluster, Job, Node, assign, check_placement, get_policy, occupancy

POLICIES = ["exclusive", "ff", "ffd", "wf", "wfd", "wfd-ls"]
BATCHES = [64, 128, 256, 512]
# model: (parameters in millions, activation MB per sample, us per sample per iteration)
MODELS = {"shufflenet": (2.3, 4.0, 20.0), "mobilenet": (3.5, 6.0, 25.0), "vit_tiny": (5.7, 5.0, 30.0),
          "deit_tiny": (5.7, 5.0, 30.0), "resnet18": (11.7, 8.0, 40.0), "resnet34": (21.8, 13.0, 70.0)}


def modelled_profile(model: str, batch: int) -> dict[str, float]:
    """A100 demand of one (model, batch) job, built from the paper's published range (see top)."""
    params, act_mb, us = MODELS[model]
    util = 22.0 + 28.0 * math.log(params / 2.3) / math.log(31.0 / 2.3)
    return {"compute": util * (batch / 128) ** 0.25,
            "memory_gb": 0.5 + params * 16e6 / 1e9 + act_mb * batch / 1e3,
            "runtime": 10 * (50_000 / batch) * (4e-3 + batch * us * 1e-6)}


def build_jobs(models: list[str], lrs: int, rng: np.random.Generator, noise: float,
               profiles: dict | None, h100: bool = False, count: int | None = None) -> list[Job]:
    combos = [(m, b) for m in models for b in BATCHES]
    if count is None:
        picks = [(m, b, k) for m, b in combos for k in range(lrs)]
    else:
        picks = [(*combos[i], k) for k, i in enumerate(rng.integers(len(combos), size=count))]
    jobs = []
    for model, batch, k in picks:
        base = (profiles or {}).get(model, {}).get(str(batch)) or modelled_profile(model, batch)
        jitter = np.clip(1 + noise * rng.standard_normal(3), 0.5, 1.5)
        c, m, t = (base[key] * j for key, j in zip(("compute", "memory_gb", "runtime"), jitter))
        per_arch = {"H100": {"compute": 0.75 * c, "runtime": 0.6 * t}} if h100 else None
        jobs.append(Job(f"{model}-b{batch}-lr{k}", compute=float(c), memory_gb=float(m), cpus=2,
                        runtime=float(t), per_arch=per_arch))
    return jobs


def build_cluster(nodes: int, gpus_per_node: int, r: float, cores: int = 88, h100_nodes: int = 0) -> Cluster:
    out = []
    for n in range(nodes):
        arch, ratio = ("H100", 2.5 * r / 3) if n >= nodes - h100_nodes else ("A100", r)
        out.append(Node(f"n{n}", cores, [GPU(g, arch, 80, oversubscription=ratio) for g in range(gpus_per_node)]))
    return Cluster(out)


def timed(fn, repeats: int) -> tuple[object, float]:
    best, result = math.inf, None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return result, best


def run_heuristics(name: str, r: float, jobs: list[Job], cluster: Cluster, repeats: int) -> list[dict]:
    rows = []
    for policy in POLICIES:
        answer, t_assign = timed(lambda: assign(jobs, cluster, policy), repeats)
        _, t_policy = timed(lambda: get_policy(policy)(jobs, cluster), repeats)
        check_placement(jobs, cluster, answer)
        rows.append({"instance": name, "r": r, "policy": policy, "jobs": len(jobs), "gpus": sum(1 for _ in cluster.gpus()),
                     "placed": len(answer), "occupancy": occupancy(cluster.with_jobs(jobs, answer, strict=False)),
                     "assign_ms": t_assign * 1e3, "policy_ms": t_policy * 1e3})
    return rows


def run_mip(name: str, r: float, jobs: list[Job], cluster: Cluster, seconds: float, workers: int) -> dict:
    from hypersack.placement import solve_mip
    start = time.perf_counter()
    result = solve_mip(jobs, cluster, time_limit=seconds, workers=workers)
    wall = time.perf_counter() - start
    check_placement(jobs, cluster, result.assignment)
    capacity = sum(g.capacity for _, g in cluster.gpus())
    return {"instance": name, "r": r, "policy": "mip", "jobs": len(jobs), "gpus": sum(1 for _ in cluster.gpus()),
            "placed": len(result.assignment),
            "occupancy": occupancy(cluster.with_jobs(jobs, result.assignment, strict=False)),
            "assign_ms": wall * 1e3, "policy_ms": result.wall_s * 1e3, "optimal": result.optimal,
            "bound": min(1.0, result.bound / capacity) if result.bound == result.bound else None}


def print_table(rows: list[dict]) -> None:
    print(f"{'instance':<14}{'r':>4}{'policy':>11}{'placed':>12}{'occupancy':>11}{'assign ms':>12}"
          f"{'policy ms':>12}  note")
    for row in rows:
        note = ""
        if row["policy"] == "mip":
            note = ("optimal" if row["optimal"] else "time limit") + \
                (f", bound {100 * row['bound']:.2f}%" if row.get("bound") is not None else "")
        print(f"{row['instance']:<14}{row['r']:>4g}{row['policy']:>11}{row['placed']:>6}/{row['jobs']:<5}"
              f"{100 * row['occupancy']:>10.2f}%{row['assign_ms']:>12.3f}{row['policy_ms']:>12.3f}  {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="MIP limit 5 s, fewer timing repeats")
    parser.add_argument("--mip-time", type=float, default=None, help="CP-SAT time limit, s (default 60)")
    parser.add_argument("--mip-workers", type=int, default=8)
    parser.add_argument("--skip-mip", action="store_true")
    parser.add_argument("--ratios", default="1,3", help="oversubscription ratios r for SP3/SP4")
    parser.add_argument("--noise", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=None, help="timing repeats (default 50, quick 10)")
    parser.add_argument("--profiles", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    mip_time = args.mip_time or (5.0 if args.quick else 60.0)
    repeats = args.repeats or (10 if args.quick else 50)
    profiles = json.loads(args.profiles.read_text()) if args.profiles else None
    if not args.skip_mip:
        try:
            import ortools  # noqa: F401
        except ImportError:
            print("ortools is not installed (pip install 'hypersack[mip]'): MIP skipped", file=sys.stderr)
            args.skip_mip = True
    rows: list[dict] = []
    for r in (float(x) for x in args.ratios.split(",")):
        for name, models, lrs, nodes in [("SP3", ["resnet18"], 24, 1), ("SP4", list(MODELS), 16, 4)]:
            rng = np.random.default_rng(args.seed)
            jobs = build_jobs(models, lrs, rng, args.noise, profiles)
            cluster = build_cluster(nodes, 4, r)
            rows += run_heuristics(name, r, jobs, cluster, repeats)
            if not args.skip_mip:
                rows.append(run_mip(name, r, jobs, cluster, mip_time, args.mip_workers))
    for name, h100_nodes in [("10k x 1024", 0), ("10k x 1024 het", 32)]:
        rng = np.random.default_rng(args.seed)
        jobs = build_jobs(list(MODELS), 0, rng, args.noise, profiles, h100=h100_nodes > 0, count=10_000)
        cluster = build_cluster(128, 8, 3.0, cores=256, h100_nodes=h100_nodes)
        rows += run_heuristics(name, 3.0, jobs, cluster, max(3, repeats // 10))
    print_table(rows)
    if args.json:
        meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "platform": platform.platform(),
                "python": platform.python_version(), "args": {k: str(v) for k, v in vars(args).items()},
                "mip_time": mip_time, "repeats": repeats}
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
