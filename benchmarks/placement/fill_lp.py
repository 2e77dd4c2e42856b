"""``fill``'s LP bound (``lp_kernels``): exactness, pivots and cost, and what it changes.

    python benchmarks/placement/fill_lp.py              # the 170 stored tight instances and 384 x 16
    python benchmarks/placement/fill_lp.py --sizes      # the LP's cost at larger sizes (why LP_PAIRS)
    python benchmarks/placement/fill_lp.py --per-instance   # fill with and without it, per tight instance
    python benchmarks/placement/fill_lp.py --fuzz 3000      # random degenerate LPs against HiGHS

Per instance, on ``fill``'s own arrays (its single-GPU jobs, the greedy starts' best as the first
basis): the bound at the simplex's duals against HiGHS's optimum of the same LP (scipy), the
subgradient's L of the price runs, the pivots, and the LP's CPU microseconds (best of 20). Then
the summary: the largest relative difference from HiGHS, the pivots' mean and maximum, and how
much tighter the LP is than L. ``--sizes``: tight instances of seed 7's jobs repeated on larger
clusters, with ``fill``'s CPU ms with the LP (``pivots`` = 200, ``LP_PAIRS`` lifted) and without
(best of 3), its answers' values, and the LP's pivots. ``--per-instance``: ``fill``'s CPU ms on
each of the first 140 tight instances with the LP and with ``pivots=0`` (best of 3 each, by
turns): the 5 slowest, the means, and how many are more than 5% slower with it. ``--fuzz N``: N
random degenerate LPs (1-5 groups, jobs repeated 1-3 times, demands in halves to thousandths of
a row, some pairs barred), each from no placement and from a random greedy one: how many bounds
are below HiGHS's optimum (invalid), optimal but not equal to it, or capped at 5,000 pivots.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tight_instances import make_instance, speed_instance  # noqa: E402
from hypersack.placement import fill as F  # noqa: E402
from hypersack.placement import fill_kernels as K  # noqa: E402
from hypersack.placement import lp_kernels as LP  # noqa: E402


def _highs(ct, tc, tm, tq, g_node, n_nodes) -> float:
    """The LP's optimum by HiGHS (scipy)."""
    from scipy.optimize import linprog  # type: ignore[import-untyped]
    from scipy.sparse import coo_matrix  # type: ignore[import-untyped]
    n_groups, n_jobs = ct.shape
    g, p = np.nonzero(np.isfinite(ct))
    m = 2 * n_groups + n_nodes
    rows = np.concatenate([g, n_groups + g, 2 * n_groups + g_node[g], m + p])
    values = np.concatenate([tc[g, p], tm[g, p], tq[g, p], np.ones(len(g))])
    a = coo_matrix((values, (rows, np.tile(np.arange(len(g)), 4))), shape=(m + n_jobs, len(g))).tocsr()
    return float(-linprog(-ct[g, p], A_ub=a, b_ub=np.ones(m + n_jobs), bounds=(0, None), method="highs").fun)


def _relaxation(jobs, cluster):
    """fill's call, its LP columns, the groups' nodes and the best greedy start as groups."""
    call = F._prepare(list(jobs), cluster)
    if isinstance(call, dict):
        return None
    a = call.arrays
    group, g_node, g_arch = K.groups_of(a.garch, a.gnode)
    cg, sc, sm, sq, fit = K._scaled(call.c, call.m, call.q, group, g_node, g_arch, *call.base)
    ct, tc, tm, tq = K._columns(cg, sc, sm, sq, fit, 1, 1.0)
    n_nodes = len(a.free_q)
    dense = F._density(call.c, call.m, call.q, a, call.base)
    starts, values, low = K._starts(call.c, call.m, call.q, a.garch, a.gnode, n_nodes, *call.base, call.wfd_where,
                                    dense, F.STEPS, F.SAMPLE, F._TARGETS, 0)
    best = starts[int(np.argmax(values))]
    return call, (ct, tc, tm, tq, g_node, n_nodes), group, best, low


def _cpu_us(fn, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best * 1e6


def exactness() -> dict:
    rows = []
    cases = [(str(s), make_instance(s)) for s in range(170)] + [("384x16", speed_instance("384x16"))]
    for name, instance in cases:
        found = _relaxation(*instance)
        if found is None:
            continue
        call, lp, group, best, low = found
        n = lp[0].shape[1]
        gain, top = np.empty(n), np.empty(n, dtype=np.int64)
        start = np.where(best >= 0, group[np.maximum(best, 0)], -1)
        pivots = int(LP.lp_prices(*lp, start, 10_000)[3])
        bound = K._lp_bound(best, group, *lp, 10_000, gain, top)
        us = _cpu_us(lambda: K._lp_bound(best, group, *lp, F.PIVOTS, gain, top), 20)
        rows.append({"instance": name, "lp": bound, "highs": _highs(*lp), "L": low, "pivots": pivots, "us": us})
    big = next(r for r in rows if r["instance"] == "384x16")
    return {"instances": len(rows),
            "max_rel_diff_vs_highs": max(abs(r["lp"] - r["highs"]) / r["highs"] for r in rows),
            "pivots_mean": float(np.mean([r["pivots"] for r in rows])),
            "pivots_max": max(r["pivots"] for r in rows),
            "over_200_pivots": sum(r["pivots"] > F.PIVOTS for r in rows),
            "L_over_lp_mean": float(np.mean([r["L"] / r["lp"] for r in rows])),
            "L_over_lp_max": max(r["L"] / r["lp"] for r in rows),
            "lp_us_mean": float(np.mean([r["us"] for r in rows])),
            "384x16": big}


def sizes() -> list:
    from hypersack.placement.instances import tight_instance
    from hypersack.placement import assign, placed_compute
    out = []
    for seed, nodes, per_node, n in ((7, 4, 4, 384), (7, 8, 4, 800), (3, 8, 8, 1500), (7, 16, 4, 1560)):
        jobs, cluster = tight_instance(seed, nodes=nodes, gpus_per_node=per_node)
        jobs = [job.renamed(f"x{i}") for i, job in enumerate((jobs * (n // len(jobs) + 1))[:n])]
        row: dict = {"size": f"{n}x{nodes * per_node}"}
        found = _relaxation(jobs, cluster)
        if found is not None:
            call, lp, group, best, low = found
            start = np.where(best >= 0, group[np.maximum(best, 0)], -1)
            row["pivots"] = int(LP.lp_prices(*lp, start, 100_000)[3])
        saved = F.LP_PAIRS
        F.LP_PAIRS = 10 ** 9
        try:
            for label, options in (("with_lp", {}), ("without", {"pivots": 0})):
                answer = assign(jobs, cluster, "fill", **options)
                row[label + "_ms"] = round(_cpu_us(lambda: assign(jobs, cluster, "fill", **options), 3) / 1000, 2)
                row[label + "_value"] = round(placed_compute(jobs, cluster, answer), 1)
        finally:
            F.LP_PAIRS = saved
        out.append(row)
        print(json.dumps(row), flush=True)
    return out


def per_instance() -> dict:
    from hypersack.placement import assign
    rows = []
    for seed in range(140):
        jobs, cluster = make_instance(seed)
        best = {"lp": np.inf, "no_lp": np.inf}
        assign(jobs, cluster, "fill")
        for _ in range(3):
            for label, options in (("lp", {}), ("no_lp", {"pivots": 0})):
                start = time.process_time()
                assign(jobs, cluster, "fill", **options)
                best[label] = min(best[label], time.process_time() - start)
        rows.append({"seed": seed, "jobs": len(jobs), "lp_ms": round(best["lp"] * 1e3, 2),
                     "no_lp_ms": round(best["no_lp"] * 1e3, 2)})
    rows.sort(key=lambda r: -r["lp_ms"])
    return {"slowest": rows[:5], "mean_lp_ms": round(float(np.mean([r["lp_ms"] for r in rows])), 2),
            "mean_no_lp_ms": round(float(np.mean([r["no_lp_ms"] for r in rows])), 2),
            "slower_by_5pct": sum(r["lp_ms"] > 1.05 * r["no_lp_ms"] for r in rows)}


def _greedy_start(lp, order) -> np.ndarray:
    """Jobs in ``order``, each on its first group with room on every row (a feasible start)."""
    ct, tc, tm, tq, g_node, n_nodes = lp
    left = np.ones(2 * ct.shape[0] + n_nodes)
    key = np.full(ct.shape[1], -1, dtype=np.int64)
    for p in order:
        for g in range(ct.shape[0]):
            rows = (g, ct.shape[0] + g, 2 * ct.shape[0] + g_node[g])
            need = (tc[g, p], tm[g, p], tq[g, p])
            if np.isfinite(ct[g, p]) and all(d <= left[r] for r, d in zip(rows, need)):
                for r, d in zip(rows, need):
                    left[r] -= d
                key[p] = g
                break
    return key


def fuzz(count: int) -> dict:
    out = {"lps": 0, "invalid": 0, "not_exact": 0, "capped": 0, "max_pivots": 0}
    for seed in range(count):
        rng = np.random.default_rng(seed)
        n_groups = int(rng.integers(1, 6))
        n_nodes = int(rng.integers(1, n_groups + 1))
        g_node = np.sort(np.concatenate([np.arange(n_nodes), rng.integers(0, n_nodes, n_groups - n_nodes)]))
        kinds, repeat, unit = int(rng.integers(1, 15)), int(rng.integers(1, 4)), int(rng.choice([2, 4, 8, 1000]))
        ct = np.repeat(rng.integers(0, 6, (n_groups, kinds)).astype(float), repeat, axis=1)
        ct[rng.random(ct.shape) < 0.2] = -np.inf
        tc, tm = (np.repeat(rng.integers(0, 4, (n_groups, kinds)) / unit, repeat, axis=1) for _ in range(2))
        tq = np.repeat(rng.integers(0, 3, (1, kinds)) / unit, repeat, axis=1).repeat(n_groups, axis=0)
        lp = (ct, tc, tm, tq, g_node, n_nodes)
        want = _highs(*lp) if np.isfinite(ct).any() else 0.0
        n = ct.shape[1]
        gain, top = np.empty(n), np.empty(n, dtype=np.int64)
        for start in (np.full(n, -1, dtype=np.int64), _greedy_start(lp, rng.permutation(n))):
            pc, pm, pq, pivots, optimal = LP.lp_prices(*lp, start, 5_000)
            bound = K._dual(ct, tc, tm, tq, g_node, np.maximum(pc, 0), np.maximum(pm, 0), np.maximum(pq, 0), gain, top)
            tol = 1e-7 * max(1.0, abs(want))
            out["lps"] += 1
            out["max_pivots"] = max(out["max_pivots"], int(pivots))
            out["capped"] += not optimal
            out["invalid"] += bound < want - tol
            out["not_exact"] += bool(optimal and abs(bound - want) > tol)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", action="store_true")
    parser.add_argument("--per-instance", action="store_true")
    parser.add_argument("--fuzz", type=int, default=0, metavar="N")
    args = parser.parse_args()
    if args.fuzz:
        print(json.dumps(fuzz(args.fuzz)))
    elif args.sizes:
        sizes()
    elif args.per_instance:
        print(json.dumps(per_instance(), indent=1))
    else:
        print(json.dumps(exactness(), indent=1))


if __name__ == "__main__":
    main()
