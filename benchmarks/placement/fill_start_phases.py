"""CPU microseconds of ``fill``'s start phase (the greedy and price starts, before polishing) at
384 jobs x 16 GPUs, per phase, for this checkout's kernels and optionally another version's.

    python benchmarks/placement/fill_start_phases.py                          # this checkout
    python benchmarks/placement/fill_start_phases.py --baseline OLD.py        # and another fill_kernels.py
    git show main:hypersack/placement/fill_kernels.py > /tmp/fk_main.py   # e.g. main's

The other version is loaded from its file as a second module (numba caches it beside that
file); the calls alternate between the versions, each figure is the best of ``--repeats``
(CPU time, ``time.process_time``). "start phase" = ``fill_search`` with the price runs
(``steps`` = STEPS) less ``fill_search`` without (``steps`` = 0), both with no polished start
but WFD's and no kicks; one row is the whole ``fill_search`` with ``fill``'s defaults; the other
rows call the kernels one by one as ``fill_search`` does.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "placement"))

from tight_instances import SIZES, make_instance

from hypersack.placement import fill as F
from hypersack.placement import fill_kernels
from hypersack.placement.improve import MIN_GAIN


def _load(path: str) -> Any:
    """Another version of ``fill_kernels`` from its file."""
    spec = importlib.util.spec_from_file_location(f"fill_kernels_{Path(path).stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module             # numba's cache finds the module by name
    spec.loader.exec_module(module)
    return module


def _call() -> tuple[Any, np.ndarray]:
    """fill's arrays (and the density order) for the 384 x 16 speed instance (``tight_instances --speed``'s)."""
    nodes, per_node, n = SIZES["384x16"]
    jobs, cluster = make_instance(7, nodes=nodes, gpus_per_node=per_node)
    jobs = (jobs * (n // len(jobs) + 1))[:n]
    jobs = [j.renamed(f"x{i}") for i, j in enumerate(jobs)]
    call = F._prepare(jobs, cluster)
    assert isinstance(call, F._Call)
    return call, F._density(call.c, call.m, call.q, call.arrays, call.base)


def phases(K: Any, call: Any, dense: np.ndarray) -> dict[str, Callable[[], Any]]:
    """The phases of ``fill_search``'s start part, as calls of module ``K``'s kernels."""
    A = call.arrays
    jc, jm, jq, garch, gnode = call.c, call.m, call.q, A.garch, A.gnode
    bc, bm, bq = call.base
    n_nodes = len(A.free_q)

    def search(steps: int, polish: int = 0, enough: float = 2.0, kicks: int = 0) -> Any:
        return K.fill_search(jc, jm, jq, garch, gnode, n_nodes, A.n_arch, bc, bm, bq, call.wfd_where, dense,
                             2, MIN_GAIN, steps, F.SAMPLE, F._TARGETS, polish, enough, kicks, F.PATIENCE, 1,
                             call.fixed_value, *F._KICK, F.PIVOTS)

    group, g_node, g_arch = K.groups_of(garch, gnode)
    cg, sc, sm, sq, fit = K._scaled(jc, jm, jq, group, g_node, g_arch, bc, bm, bq)
    n = len(jc)
    stride = max(1, -(-n // F.SAMPLE))
    share = (-(-n // stride)) / n
    target = 1800.0
    out: dict[str, Callable[[], Any]] = {
        "start phase (fill_search 60 steps - 0 steps)": lambda: None,   # filled by the caller
        "fill_search steps=60": lambda: search(F.STEPS),
        "fill_search steps=0": lambda: search(0),
        "fill_search with fill's defaults (2 polished starts, 300 kicks)": lambda: search(F.STEPS, F.POLISH, F.ENOUGH,
                                                                                       F.KICKS),
        "scaled": lambda: K._scaled(jc, jm, jq, group, g_node, g_arch, bc, bm, bq),
    }
    if hasattr(K, "_starts"):                   # this branch: columns, shared orders, _place
        ct, tc, tm, tq = K._columns(cg, sc, sm, sq, fit, 1, 1.0)
        cs = K._columns(cg, sc, sm, sq, fit, stride, share)
        _, kc, km, kq, _ = K._price_steps(*cs, g_node, n_nodes, target * share, F.STEPS)
        gain, top = np.empty(n), np.empty(n, dtype=np.int64)
        members, n_members = K._members(group, len(g_node))
        size_c, size_m = K._sizes(bc, bm)
        by_size = K._by_size(cg)
        G = len(g_node)
        rt, keys, prefs = np.empty((G, n)), np.empty((2, n)), np.empty((G, n), dtype=np.int64)
        rank = np.empty(n, dtype=np.int64)
        top_c, top_m = np.empty(G), np.empty(G)
        kind, dead = K._kinds(jc, jm, jq), np.empty(n, dtype=np.bool_)

        def four() -> None:
            K._reduced_columns(ct, tc, tm, tq, g_node, kc[0], km[0], kq[0], rt)
            K._keys(rt, keys)
            K._preferences(rt, prefs, rank)
            for regret in range(2):
                order = K._order_by(by_size, keys[regret])
                for balanced in (False, True):
                    fc, fm, fq = bc.copy(), bm.copy(), bq.copy()
                    K._place(order, prefs, fit, balanced, members, n_members, g_node, g_arch, jc, jm, jq, gnode,
                             size_c, size_m, kind, fc, fm, fq, top_c, top_m, dead, np.full(n, -1, dtype=np.int64))

        out.update({
            "columns (all + sampled)": lambda: (K._columns(cg, sc, sm, sq, fit, 1, 1.0),
                                                K._columns(cg, sc, sm, sq, fit, stride, share)),
            "prices, one run (sampled jobs)": lambda: K._price_steps(*cs, g_node, n_nodes, target * share, F.STEPS),
            "dual bound, one price vector (all jobs)": lambda: K._dual(ct, tc, tm, tq, g_node, kc[0], km[0], kq[0],
                                                                       gain, top),
            "4 greedy starts of one price vector": four,
        })
    else:                                       # main before: row-wise prices, price_greedy
        cg_s, fit_s = cg[::stride].copy(), fit[::stride].copy()
        sc_s, sm_s, sq_s = sc[::stride] / share, sm[::stride] / share, sq[::stride] / share
        _, kc, km, kq, _ = K.prices(cg_s, sc_s, sm_s, sq_s, fit_s, g_node, n_nodes, target * share, F.STEPS)

        def four() -> None:
            r = K._reduced(cg, sc, sm, sq, fit, g_node, kc[0], km[0], kq[0])
            for regret in (False, True):
                for balanced in (False, True):
                    fc, fm, fq = bc.copy(), bm.copy(), bq.copy()
                    K.price_greedy(r, cg, fit, regret, balanced, group, g_node, g_arch, jc, jm, jq, garch, gnode,
                                   fc, fm, fq)

        out.update({
            "columns (all + sampled)": lambda: (cg[::stride].copy(), fit[::stride].copy(), sc[::stride] / share,
                                                sm[::stride] / share, sq[::stride] / share),
            "prices, one run (sampled jobs)": lambda: K.prices(cg_s, sc_s, sm_s, sq_s, fit_s, g_node, n_nodes,
                                                               target * share, F.STEPS),
            "dual bound, one price vector (all jobs)": lambda: K.dual_bound(cg, sc, sm, sq, fit, g_node, kc[0], km[0],
                                                                            kq[0]),
            "4 greedy starts of one price vector": four,
        })
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", help="another fill_kernels.py to compare with (alternated)")
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    call, dense = _call()
    versions = {"this checkout": fill_kernels}
    if args.baseline:
        versions = {"baseline": _load(args.baseline), **versions}
    calls = {name: phases(K, call, dense) for name, K in versions.items()}
    for table in calls.values():                # compile or load the cache first
        for fn in table.values():
            fn()
    best = {name: {row: np.inf for row in table} for name, table in calls.items()}
    for _ in range(args.repeats):
        for name, table in calls.items():       # alternate the versions
            for row, fn in table.items():
                start = time.process_time()
                fn()
                best[name][row] = min(best[name][row], time.process_time() - start)
    for name, rows in best.items():
        rows["start phase (fill_search 60 steps - 0 steps)"] = (rows["fill_search steps=60"]
                                                                  - rows["fill_search steps=0"])
    names = list(best)
    print(f"| phase (us CPU, best of {args.repeats}) | {' | '.join(names)} |")
    print("|---|" + "---:|" * len(names))
    for row in best[names[0]]:
        print(f"| {row} | " + " | ".join(f"{best[name][row] * 1e6:,.1f}" for name in names) + " |")


if __name__ == "__main__":
    main()
