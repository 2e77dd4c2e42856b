"""Which of ``fill``'s greedy starts matter: on the stored tight instances (and the 384 x 16 speed
instance), which starts are among the ``POLISH`` polished ones and which one the answer descends
from (the polished start that the kicks then improve), per variant: the density start, or run f
of the price runs, its kept price vector k (a quarter, half, all of the steps), jobs by reduced
profit or by regret, first-fit or balanced GPU.

    python benchmarks/placement/fill_start_usage.py

Mirrors ``fill_kernels.fill_search``'s start phase and polishing with ``fill``'s defaults.
"""
from __future__ import annotations

import collections
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "placement"))

from tight_instances import SIZES, make_instance

from hypersack.placement import fill as F
from hypersack.placement import fill_kernels as K
from hypersack.placement.improve import MIN_GAIN


def _labels(call: Any) -> list[str]:
    """The name of each start of ``fill_kernels._starts`` (the runs' kept vectors as they come)."""
    A = call.arrays
    jc, jm, jq = call.c, call.m, call.q
    bc, bm, bq = call.base
    n, n_nodes = len(jc), len(A.free_q)
    group, g_node, g_arch = K.groups_of(A.garch, A.gnode)
    cg, sc, sm, sq, fit = K._scaled(jc, jm, jq, group, g_node, g_arch, bc, bm, bq)
    ct, tc, tm, tq = K._columns(cg, sc, sm, sq, fit, 1, 1.0)
    stride = max(1, -(-n // F.SAMPLE))
    share = (-(-n // stride)) / n
    cs, ts_c, ts_m, ts_q = K._columns(cg, sc, sm, sq, fit, stride, share) if stride > 1 else (ct, tc, tm, tq)
    dense = F._density(jc, jm, jq, A, call.base)
    _, values, _ = K._starts(jc, jm, jq, A.garch, A.gnode, n_nodes, bc, bm, bq, call.wfd_where, dense, F.STEPS,
                             F.SAMPLE, F._TARGETS, F.PIVOTS)
    floor = max(values[0], K.value_of(call.wfd_where, jc, A.garch))
    labels, low = ["dense"], np.inf
    gain, top = np.empty(n), np.empty(n, dtype=np.int64)
    for f in range(len(F._TARGETS)):
        target = floor if f == 0 else floor + F._TARGETS[f] * (low - floor)
        if stride == 1:
            bound, kc, km, kq, count = K._price_steps(ct, tc, tm, tq, g_node, n_nodes, target, F.STEPS)
        else:
            _, kc, km, kq, count = K._price_steps(cs, ts_c, ts_m, ts_q, g_node, n_nodes, target * share,
                                                    F.STEPS)
            bound = np.inf
            for k in range(count):
                kc[k] /= share
                km[k] /= share
                kq[k] /= share
                bound = min(bound, K._dual(ct, tc, tm, tq, g_node, kc[k], km[k], kq[k], gain, top))
        low = min(low, bound)
        labels += [f"run{f} v{k} {('profit', 'regret')[r]} {('first', 'balanced')[b]}"
                   for k in range(count) for r in range(2) for b in range(2)]
    return labels


def usage(call: Any) -> tuple[list[str], str]:
    """(the polished greedy starts, the start the answer descends from: 'wfd' or a label)."""
    A = call.arrays
    jc, jm, jq = call.c, call.m, call.q
    bc, bm, bq = call.base
    dense = F._density(jc, jm, jq, A, call.base)
    starts, values, low = K._starts(jc, jm, jq, A.garch, A.gnode, len(A.free_q), bc, bm, bq, call.wfd_where, dense,
                                    F.STEPS, F.SAMPLE, F._TARGETS, F.PIVOTS)
    labels = _labels(call)
    ceiling = call.fixed_value + low
    ranked = np.argsort(-values, kind="mergesort")
    ident, every = np.arange(len(jc)), np.arange(len(A.garch))
    polished, best, source = [], -np.inf, "wfd"
    for t in range(-1, F.POLISH):
        if t >= 0 and not np.isfinite(values[ranked[t]]):
            break
        where = call.wfd_where.copy() if t < 0 else starts[ranked[t]].copy()
        if t >= 0:
            polished.append(labels[ranked[t]])
        fc, fm, fq = K.retake(where, ident, jc, jm, jq, A.garch, A.gnode, bc, bm, bq)
        pool, npool, ong, nong = K._lists(where, jc, A.garch, A.n_arch)
        K.polish(2, max(MIN_GAIN, 2 * K.EPS), every, True, jc, jm, jq, A.garch, A.gnode, where, fc, fm, fq, pool,
                 npool, ong, nong)
        got = K.value_of(where, jc, A.garch)
        if got > best + K.EPS:
            best, source = got, ("wfd" if t < 0 else labels[ranked[t]])
        if call.fixed_value + best >= F.ENOUGH * ceiling - K.EPS:
            break
    return polished, source


def main() -> None:
    polished_count: collections.Counter = collections.Counter()
    source_count: collections.Counter = collections.Counter()
    instances = [make_instance(seed) for seed in range(140)]
    nodes, per_node, n = SIZES["384x16"]
    jobs, cluster = make_instance(7, nodes=nodes, gpus_per_node=per_node)
    jobs = [j.renamed(f"x{i}") for i, j in enumerate((jobs * (n // len(jobs) + 1))[:n])]
    instances.append((jobs, cluster))
    for jobs, cluster in instances:
        call = F._prepare(jobs, cluster)
        if not isinstance(call, F._Call):
            source_count["(WFD placed every job)"] += 1
            continue
        polished, source = usage(call)
        polished_count.update(polished)
        source_count[source] += 1
    names = sorted(set(polished_count) | set(source_count), key=lambda x: (-source_count[x], -polished_count[x]))
    print(f"{len(instances)} instances (140 tight seeds + 384x16)")
    print("| start | polished on | the answer descends from it on |")
    print("|---|---:|---:|")
    for name in names:
        print(f"| {name} | {polished_count[name]} | {source_count[name]} |")


if __name__ == "__main__":
    main()
