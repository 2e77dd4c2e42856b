"""Tight GAP instances and their CP-SAT optima: how close each packer gets to the optimum.

    python benchmarks/placement/tight_instances.py --solve 60 --time-limit 20   # solve, write tight_optima.json
    python benchmarks/placement/tight_instances.py                              # ratios from the stored optima
    python benchmarks/placement/tight_instances.py --speed                      # ms at 384 x 16, 10,000 x 1,024
    python benchmarks/placement/tight_instances.py --speed --sizes 384x16 --policies wfd,fill,fill:kicks=0
    python benchmarks/placement/tight_instances.py --solve-speed 240 --sizes 384x16 --policies fill  # its optimum
    python benchmarks/placement/tight_instances.py --first-call                 # fill's first call: numba compiling

An instance (``make_instance(seed)``, seeded, no other input) is "tight" in the way the issue
asks: heterogeneous (nodes of A100 and H100, r from {1, 2, 3} per node, memory 40 or 80 GB), many
small jobs and a few large ones, CPU limits binding:

* 2-4 nodes of 4 GPUs, each node A100 (C = 100) or H100 (a job needs 0.7x its A100 compute);
* jobs: 85% small (compute 5-30% of an A100, 1-8 GB, 1-3 cores), 15% large (55-95%, 16-38 GB,
  4-8 cores); runtime 10-1000 s (so the decreasing policies' order is not the size order);
* as many jobs as make their compute 1.2-1.5x the cluster's r x C, and node cores 0.7-0.95x the
  cores the jobs would need if every job were placed: cores bind on every node.

The ratio of a policy on an instance = its placed compute (Eq. 5) / CP-SAT's best solution
(the optimum when CP-SAT proved it), and / CP-SAT's proven upper bound (a lower bound on the
ratio to the true optimum). CP-SAT's results are stored in benchmarks/placement/tight_optima.json with its
status, so the ratios are reproducible without re-solving. ``--speed``: the best of 5 ``assign()``
calls (``--repeats``) on SP4-like 384 jobs x 16 GPUs (of 2 at 10,000 jobs x 1,024 GPUs with two
architectures), tight instances of those sizes, the policies' calls taking turns.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from hypersack.placement.instances import tight_instance  # noqa: E402
from hypersack.placement import Cluster, Job, assign, check_placement, placed_compute  # noqa: E402

OPTIMA = Path(__file__).with_name("tight_optima.json")
POLICIES = ["ff", "ffd", "wf", "wfd", "wfd-ls", "fill", "lagrange", "auto"]


make_instance = tight_instance   # the generator lives in hypersack.placement.instances (shared with the tests)


def solve(count: int, time_limit: float, workers: int) -> None:
    from hypersack.placement import solve_mip
    out = json.loads(OPTIMA.read_text()) if OPTIMA.exists() else {}
    for seed in range(count):
        if str(seed) in out and out[str(seed)]["time_limit"] >= time_limit:
            continue
        jobs, cluster = make_instance(seed)
        result = solve_mip(jobs, cluster, time_limit=time_limit, workers=workers)
        check_placement(jobs, cluster, result.assignment)
        out[str(seed)] = {"jobs": len(jobs), "gpus": sum(len(n.gpus) for n in cluster.nodes),
                          "objective": placed_compute(jobs, cluster, result.assignment), "bound": result.bound,
                          "optimal": result.optimal, "status": result.status, "wall_s": round(result.wall_s, 2),
                          "time_limit": time_limit}
        OPTIMA.write_text(json.dumps(out, indent=1, sort_keys=True))
        print(seed, out[str(seed)], flush=True)


def ratios(policies: list[str], seeds: range | None = None) -> dict:
    """Per policy, over the stored instances (those of ``seeds`` only, when given): the worst and
    mean ratio to CP-SAT's best solution (the optimum where proven) and to CP-SAT's proven upper
    bound (a lower bound on the ratio to the true optimum), and the seed of the worst."""
    optima = {k: v for k, v in json.loads(OPTIMA.read_text()).items() if seeds is None or int(k) in seeds}
    rows: dict[str, dict[str, list[float]]] = {p: {"best": [], "bound": [], "seed": []} for p in policies}
    for seed, opt in sorted(optima.items(), key=lambda kv: int(kv[0])):
        jobs, cluster = make_instance(int(seed))
        for p in policies:
            name, options = _policy(p)
            value = placed_compute(jobs, cluster, assign(jobs, cluster, name, check=True, **options))
            rows[p]["best"].append(value / opt["objective"])
            rows[p]["bound"].append(value / opt["bound"])
            rows[p]["seed"].append(int(seed))
    gaps = [(o["bound"] - o["objective"]) / o["bound"] for o in optima.values()]
    return {"instances": len(optima), "proven_optimal": sum(1 for o in optima.values() if o["optimal"]),
            "cp_sat_gap_max": max(gaps), "cp_sat_gap_mean": sum(gaps) / len(gaps),
            "policies": {p: {"worst_vs_best": min(r["best"]), "worst_seed": r["seed"][r["best"].index(min(r["best"]))], "mean_vs_best": sum(r["best"]) / len(r["best"]),
                             "worst_vs_bound": min(r["bound"]), "mean_vs_bound": sum(r["bound"]) / len(r["bound"])}
                         for p, r in rows.items()}}


def _best_ms(fn, repeats: int = 5) -> dict[str, float]:
    """The best wall and the best CPU (this process) milliseconds of ``repeats`` calls."""
    wall = cpu = float("inf")
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = min(wall, time.perf_counter() - t), min(cpu, time.process_time() - c)
    return {"wall_ms": round(wall * 1000, 3), "cpu_ms": round(cpu * 1000, 3)}


def _policy(spec: str) -> tuple[str, dict]:
    """``name`` or ``name:option=value,...`` (integer or float values), e.g. ``fill:kicks=0``."""
    name, _, rest = spec.partition(":")
    options = {}
    for item in filter(None, rest.split(";")):
        key, _, value = item.partition("=")
        options[key] = float(value) if "." in value else int(value)
    return name, options


SIZES = {"384x16": (4, 4, 384), "1000x100": (25, 4, 1000), "10000x1024": (128, 8, 10_000)}


def speed_instance(label: str) -> tuple[list[Job], Cluster]:
    """The instance ``--speed`` times at ``label`` (e.g. ``384x16``): seed 7's jobs repeated."""
    nodes, per_node, jobs_wanted = SIZES[label]
    jobs, cluster = make_instance(7, nodes=nodes, gpus_per_node=per_node)
    jobs = (jobs * (jobs_wanted // len(jobs) + 1))[:jobs_wanted]
    return [job.renamed(f"x{i}") for i, job in enumerate(jobs)], cluster


def solve_speed(label: str, time_limit: float, workers: int, policies: list[str]) -> dict:
    """CP-SAT on ``speed_instance(label)``, and each policy's placed compute over its best."""
    from hypersack.placement import solve_mip
    jobs, cluster = speed_instance(label)
    result = solve_mip(jobs, cluster, time_limit=time_limit, workers=workers)
    best = placed_compute(jobs, cluster, result.assignment)
    out: dict = {"instance": label, "objective": best, "bound": result.bound, "optimal": result.optimal}
    for spec in policies:
        name, options = _policy(spec)
        value = placed_compute(jobs, cluster, assign(jobs, cluster, name, check=True, **options))
        out[spec] = {"value": value, "vs_best": value / best, "vs_bound": value / result.bound}
    return out


def speed(policies: list[str], sizes: list[str], repeats: int = 5) -> dict:
    """Per size: each policy's best wall and CPU ms of ``repeats`` ``assign()`` calls (of 2 at
    10,000 jobs), after one call that is not counted (numba's compilation or cache load). The
    policies' calls take turns (one call of each per round), so that the VM's slow and fast
    minutes reach them alike."""
    out = {}
    for label in sizes:
        jobs, cluster = speed_instance(label)
        archs = sorted({g.arch for n in cluster.nodes for g in n.gpus})
        count = repeats if len(jobs) < 1000 else 2
        calls = {}
        for spec in policies:
            name, options = _policy(spec)
            assign(jobs, cluster, name, **options)                 # warm: compiled or loaded
            calls[spec] = (lambda name=name, options=options: assign(jobs, cluster, name, **options))
        best = {spec: {"wall_ms": float("inf"), "cpu_ms": float("inf")} for spec in policies}
        for _ in range(count):
            for spec, call in calls.items():
                got = _best_ms(call, 1)
                best[spec] = {k: min(best[spec][k], got[k]) for k in got}
        out[label] = {"archs": archs, **best}
    return out


_FIRST_CALL = """
import sys, time
t, c = time.perf_counter(), time.process_time()
sys.path.insert(0, {bench!r})
from tight_instances import make_instance
from hypersack.placement import assign
import hypersack.placement.fill_kernels
jobs, cluster = make_instance(7)
t1, c1 = time.perf_counter(), time.process_time()
assign(jobs, cluster, "fill")
t2, c2 = time.perf_counter(), time.process_time()
print(round((t1 - t) * 1000), round((c1 - c) * 1000), round((t2 - t1) * 1000), round((c2 - c1) * 1000))
"""


def first_call() -> dict:
    """ms (wall, CPU) of a fresh process's imports and of its first ``fill`` call, with an empty
    numba cache (the kernels are compiled) and again with the cache that run wrote (loaded)."""
    import os
    import subprocess
    import tempfile
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
        for label in ("compiled", "cached"):
            proc = subprocess.run([sys.executable, "-c", _FIRST_CALL.format(bench=str(Path(__file__).parent))],
                                  env=env, capture_output=True, text=True, check=True)
            imp_wall, imp_cpu, call_wall, call_cpu = map(int, proc.stdout.split())
            out[label] = {"import_wall_ms": imp_wall, "import_cpu_ms": imp_cpu,
                          "first_call_wall_ms": call_wall, "first_call_cpu_ms": call_cpu}
    return out


def lagrange_bound(jobs: list[Job], cluster: Cluster) -> float:
    """An upper bound on any placement's compute: the dual of the placement LP (GPUs pooled per
    node and architecture, cores per node; ``hypersack.placement.prices``) at the prices
    ``lagrange`` computes, mapped to every group and node (weak duality: any prices >= 0 give a
    bound). Single-GPU jobs on an empty cluster only."""
    import numpy as np
    from hypersack.placement import lagrange as lg
    from hypersack.placement.load import Load
    load = Load(cluster)
    archs = list(load.by_arch)
    pools = lg._Pools(load, archs)
    units = lg._Units(pools)
    c, m, q = lg._demand_arrays(jobs, archs)
    cu, mu = c[:, units.arch], m[:, units.arch]
    fit = ((cu <= units.top_c[None, :] + lg.EPS) & (mu <= units.top_m[None, :] + lg.EPS)
           & (q[:, None] <= units.cap_q[units.holder][None, :] + lg.EPS))
    _, uc, um, uq = lg.unit_prices(cu, mu, q, fit, units.cap_c, units.cap_m, units.cap_q, units.holder,
                                   lg.STEPS, lg.SAMPLE, smooth=not units.single)
    unit_of = np.empty(len(pools.gpus), dtype=int)
    for u, gs in enumerate(units.groups):
        unit_of[gs] = u
    node_price = np.zeros(len(pools.cap_q))
    for g in range(len(pools.gpus)):                 # a node's cores: its (first) group's price
        n = pools.node[g]
        if node_price[n] == 0:
            node_price[n] = uq[units.holder[unit_of[g]]] if not units.single else uq[n]
    ucg, umg = uc[unit_of], um[unit_of]
    cg, mg = c[:, pools.arch], m[:, pools.arch]
    gfit = ((cg <= pools.top_c[None, :] + lg.EPS) & (mg <= pools.top_m[None, :] + lg.EPS)
            & (q[:, None] <= pools.cap_q[pools.node][None, :] + lg.EPS))
    r = np.where(gfit, cg * (1 - ucg) - mg * umg - q[:, None] * node_price[pools.node], -np.inf)
    gain = np.maximum(r.max(axis=1, initial=-np.inf), 0.0)
    return float((ucg * pools.cap_c).sum() + (umg * pools.cap_m).sum()
                 + (node_price * pools.cap_q).sum() + gain.sum())


def lp_bound(jobs: list[Job], cluster: Cluster) -> float:
    """The placement LP's optimum (GPUs pooled per node and architecture, a job only on groups
    with one GPU that takes it, cores per node; x in [0, 1]): an upper bound on any placement's
    compute, tighter than ``lagrange_bound``. Needs scipy (HiGHS); about a minute at 2,600 jobs
    x 32 groups on a busy 2-CPU machine."""
    import numpy as np
    from scipy.optimize import linprog  # type: ignore[import-untyped]
    from scipy.sparse import coo_matrix  # type: ignore[import-untyped]
    from hypersack.placement import lagrange as lg
    from hypersack.placement.load import Load
    load = Load(cluster)
    pools = lg._Pools(load, list(load.by_arch))
    c, m, q = lg._demand_arrays(jobs, list(load.by_arch))
    cg, mg = c[:, pools.arch], m[:, pools.arch]
    fit = ((cg <= pools.top_c[None, :] + lg.EPS) & (mg <= pools.top_m[None, :] + lg.EPS)
           & (q[:, None] <= pools.cap_q[pools.node][None, :] + lg.EPS))
    p, g = np.nonzero(fit)
    n_jobs, n_groups, n_vars = len(jobs), len(pools.gpus), len(p)
    rows = np.concatenate([p, n_jobs + g, n_jobs + n_groups + g, n_jobs + 2 * n_groups + pools.node[g]])
    matrix = coo_matrix((np.concatenate([np.ones(n_vars), cg[p, g], mg[p, g], q[p]]),
                         (rows, np.tile(np.arange(n_vars), 4))),
                        shape=(n_jobs + 2 * n_groups + len(pools.cap_q), n_vars)).tocsr()
    caps = np.concatenate([np.ones(n_jobs), pools.cap_c, pools.cap_m, pools.cap_q])
    result = linprog(-cg[p, g], A_ub=matrix, b_ub=caps, bounds=(0, 1), method="highs")
    return float(-result.fun)


def large(policies: list[str], seeds: range, lp: bool = False) -> dict:
    """Per seed, 32 nodes x 8 GPUs and 128 x 8 (tight instances of ``make_instance`` at those
    sizes, all their jobs): each policy's placed compute over ``lagrange_bound`` (a lower bound
    on its ratio to the optimum), with ``lp`` also over ``lp_bound`` at 32 x 8 (tighter), and its
    CPU ms for one call."""
    out: dict = {}
    for nodes in (32, 128):
        rows: dict[str, list[float]] = {p: [] for p in policies}
        cpu: dict[str, list[float]] = {p: [] for p in policies}
        sizes = []
        vs_lp: dict[str, list[float]] = {}
        for seed in seeds:
            jobs, cluster = make_instance(seed, nodes=nodes, gpus_per_node=8)
            bound = lagrange_bound(jobs, cluster)
            lp_value = lp_bound(jobs, cluster) if lp and nodes == 32 else None
            sizes.append(len(jobs))
            for p in policies:
                t = time.process_time()
                answer = assign(jobs, cluster, p)
                cpu[p].append((time.process_time() - t) * 1000)
                value = placed_compute(jobs, cluster, answer)
                rows[p].append(value / bound)
                if lp_value is not None:
                    vs_lp.setdefault(p, []).append(value / lp_value)
        out[f"{nodes}x8"] = {"jobs": sizes, **{p: {"worst_vs_bound": round(min(rows[p]), 4),
                                                     "mean_vs_bound": round(sum(rows[p]) / len(rows[p]), 4),
                                                     **({"worst_vs_lp": round(min(vs_lp[p]), 4),
                                                         "mean_vs_lp": round(sum(vs_lp[p]) / len(vs_lp[p]), 4)}
                                                        if p in vs_lp else {}),
                                                     "cpu_ms_mean": round(sum(cpu[p]) / len(cpu[p]), 1)}
                                                 for p in policies}}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--solve", type=int, default=0, metavar="N", help="solve instances 0..N-1 with CP-SAT")
    p.add_argument("--time-limit", type=float, default=20.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--speed", action="store_true")
    p.add_argument("--solve-speed", type=float, default=0.0, metavar="SECONDS",
                   help="CP-SAT on the --speed instance of --sizes (first size) for SECONDS; policies' ratios")
    p.add_argument("--sizes", default="384x16,10000x1024", help="with --speed: which sizes")
    p.add_argument("--repeats", type=int, default=5, help="with --speed: calls per policy (best kept)")
    p.add_argument("--first-call", action="store_true",
                   help="a fresh process's first fill call: numba compiling, then loading its cache")
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--seeds", default=None, metavar="A:B", help="ratios over seeds A..B-1 only")
    p.add_argument("--large", default=None, metavar="A:B",
                   help="seeds A..B-1 at 32 x 8 and 128 x 8 GPUs: ratios to the dual bound, CPU ms")
    p.add_argument("--lp", action="store_true", help="with --large: also the LP bound at 32 x 8 (scipy)")
    args = p.parse_args()
    policies = args.policies.split(",")
    if args.solve:
        solve(args.solve, args.time_limit, args.workers)
    seeds = None if args.seeds is None else range(*map(int, args.seeds.split(":")))
    if args.solve_speed:
        out = solve_speed(args.sizes.split(",")[0], args.solve_speed, args.workers, policies)
    elif args.first_call:
        out = first_call()
    elif args.large:
        out = large(policies, range(*map(int, args.large.split(":"))), args.lp)
    else:
        out = speed(policies, args.sizes.split(","), args.repeats) if args.speed else ratios(policies, seeds)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
