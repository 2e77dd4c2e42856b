"""``fill``'s kernels (hypersack/placement/fill_kernels.py): the compiled form and the Python
source give identical answers; the worst-fit kernel is WFD and the search kernel is ``wfd-ls``
move for move; the dual bound bounds every answer, also with sampled price steps; the kicks only
raise the placed compute. Compilation is paid once per process (cached on disk afterwards)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_placement_fill import tight_instance
from test_placement_properties import SETTINGS, jobs, loaded_clusters

from hypersack.placement import jit
from hypersack.placement import fill as F
from hypersack.placement import fill_kernels as fk
from hypersack.placement import Job, assign, check_placement, placed_compute

ROOT = Path(__file__).resolve().parents[3]


def _wfd_state(job_list, cluster):
    """The call's arrays, WFD's start by the kernel, and the loads with it taken in the jobs'
    given order (as ``wfd-ls`` takes its start)."""
    call = F._prepare(job_list, cluster)
    if not isinstance(call, F._Call):
        return None
    arrays = call.arrays
    given_order = np.argsort(call.singles, kind="stable")       # WFD positions in the given order
    fc, fm, fq = fk.retake(call.wfd_where, given_order, call.c, call.m, call.q, arrays.garch, arrays.gnode,
                           *call.base)
    return call, fc, fm, fq


@SETTINGS
@given(loaded_clusters(), jobs(multi=False, max_size=16))
def test_the_worst_fit_kernel_is_wfd_and_the_search_kernel_is_wfd_ls(cluster, job_list):
    wfd = assign(job_list, cluster, "wfd")
    state = _wfd_state(job_list, cluster)
    if state is None:                                    # WFD placed every job
        assert len(wfd) == len(job_list)
        return
    call, fc, fm, fq = state
    keys = call.arrays.load.keys
    ids = [job_list[p].id for p in call.singles]
    assert {ids[t]: (keys[i],) for t, i in enumerate(call.wfd_where) if i >= 0} == wfd
    where = call.wfd_where.copy()
    pool, npool, ong, nong = fk._lists(where, call.c, call.arrays.garch, call.arrays.n_arch)
    fk.search(2, 0.25, np.arange(len(keys)), call.c, call.m, call.q, call.arrays.garch, call.arrays.gnode,
              where, fc, fm, fq, pool, npool, ong, nong)
    assert {ids[t]: (keys[i],) for t, i in enumerate(where) if i >= 0} == assign(job_list, cluster, "wfd-ls",
                                                                                 rounds=2)


@SETTINGS
@given(loaded_clusters(), jobs())
def test_the_dual_bound_bounds_every_answer_also_with_sampled_price_steps(cluster, job_list):
    call = F._prepare(job_list, cluster)
    if not isinstance(call, F._Call):
        return
    best = max(placed_compute(job_list, cluster, assign(job_list, cluster, p)) for p in ("wfd", "wfd-ls"))
    for sample in (F.SAMPLE, 3):                         # 3: every k-th job, capacities scaled
        where, value, ceiling, _ = F._search(call, 2, 0.25, 40, 4, 2.0, 20, 0, 1, sample=sample)
        assert ceiling >= best - 1e-6
        assert ceiling >= call.fixed_value + value - 1e-6


def test_kicks_raise_the_placed_compute_where_starts_and_moves_are_stuck():
    job_list, cluster = tight_instance(30)               # 4 nodes of 4 GPUs of 40 GB; ~250 jobs
    def value(**options):
        answer = assign(job_list, cluster, "fill", check=True, **options)
        return placed_compute(job_list, cluster, answer)
    stuck = value(kicks=0)
    assert value(kicks=40) >= stuck - 1e-6
    assert value() > stuck + 20                          # CP-SAT found 2,575.1 in 20 s
    assert value(kicks=500, patience=1) <= value(kicks=500) + 1e-6


def _source(kernel: Any, compiled: bool) -> Any:
    """The kernel as called (compiled by numba), or its Python source (``.py_func``)."""
    return kernel if compiled else kernel.py_func


def _tight_call(seed: int) -> tuple:
    """``fill``'s call on tight instance ``seed`` (it has something to search), its arrays and
    its density order."""
    job_list, cluster = tight_instance(seed)
    call = F._prepare(job_list, cluster)
    assert isinstance(call, F._Call)
    return call, call.arrays, F._density(call.c, call.m, call.q, call.arrays, call.base)


def _kernel_answers(compiled: bool) -> list:
    """fill_search, prices and price_greedy on two tight instances, compiled or as Python."""
    out: list = []
    for seed in (3, 11):
        call, arrays, dense = _tight_call(seed)
        search = _source(fk.fill_search, compiled)
        where, value, ceiling, tried = search(
            call.c, call.m, call.q, arrays.garch, arrays.gnode, len(arrays.free_q), arrays.n_arch, *call.base,
            call.wfd_where, dense, 2, 0.25, 60, 48, F._TARGETS, 4, 2.0, 30, 0, 7, 0.0, *F._KICK, F.PIVOTS)
        out.append((where.tolist(), value, ceiling, tried))
        group, g_node, g_arch = fk.groups_of(arrays.garch, arrays.gnode)
        cg, sc, sm, sq, fit = fk._scaled(call.c, call.m, call.q, group, g_node, g_arch, *call.base)
        prices = _source(fk.prices, compiled)
        bound, kc, km, kq, count = prices(cg, sc, sm, sq, fit, g_node, len(arrays.free_q), 1000.0, 60)
        out.append((bound, kc.tolist(), km.tolist(), kq.tolist(), count))
        greedy = _source(fk.price_greedy, compiled)
        r = fk._reduced(cg, sc, sm, sq, fit, g_node, kc[0], km[0], kq[0])
        for regret in (False, True):
            fc, fm, fq = (b.copy() for b in call.base)
            out.append(greedy(r, cg, fit, regret, not regret, group, g_node, g_arch, call.c, call.m, call.q,
                              arrays.garch, arrays.gnode, fc, fm, fq).tolist())
    return out


@pytest.mark.skipif(not jit.COMPILED, reason="numba is not installed (pip install hypersack[fast])")
def test_compiled_kernels_and_their_python_source_give_identical_answers():
    assert _kernel_answers(True) == _kernel_answers(False)


_SCRIPT = """
import json, sys
sys.path.insert(0, {tests!r})
from test_placement_fill import tight_instance
from hypersack.placement import assign
out = []
for seed in (5, 8):
    job_list, cluster = tight_instance(seed)
    out.append(sorted((str(k), str(v)) for k, v in assign(job_list[:40], cluster, "fill", kicks=20).items()))
print(json.dumps(out))
"""


@pytest.mark.skipif(not jit.COMPILED, reason="numba is not installed (pip install hypersack[fast])")
def test_fill_without_numba_gives_the_compiled_answers():
    import json
    script = _SCRIPT.format(tests=str(Path(__file__).parent))
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1", "PYTHONPATH": str(ROOT)}
    plain = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    compiled = []
    for seed in (5, 8):
        job_list, cluster = tight_instance(seed)
        compiled.append(sorted((str(k), str(v)) for k, v in assign(job_list[:40], cluster, "fill", kicks=20).items()))
    assert json.loads(plain.stdout) == [[list(pair) for pair in answer] for answer in compiled]


def test_data_parallel_jobs_stay_where_wfd_put_them_and_the_rest_is_searched():
    job_list, cluster = tight_instance(3)
    wide = [Job("dp", 60, 10, cpus=2, runtime=5000, gpus=2)] + job_list
    answer = assign(wide, cluster, "fill", check=True)
    assert answer["dp"] == assign(wide, cluster, "wfd")["dp"]
    check_placement(wide, cluster, answer)
    assert placed_compute(wide, cluster, answer) >= placed_compute(wide, cluster, assign(wide, cluster, "wfd-ls"))


def test_sampled_price_steps_give_nearly_the_full_bound():
    job_list, cluster = tight_instance(3)                # 107 jobs: every 3rd with sample = 40
    call = F._prepare(job_list, cluster)
    assert isinstance(call, F._Call)
    _, _, full, _ = F._search(call, 2, 0.25, F.STEPS, F.POLISH, 2.0, 0, 0, 1)
    _, _, sampled, _ = F._search(call, 2, 0.25, F.STEPS, F.POLISH, 2.0, 0, 0, 1, sample=40)
    assert sampled <= 1.02 * full                        # prices scaled back to the whole capacity


# ---- the start phase: the faster kernels give the row-wise algorithm's answers ----------------------
# The reference: the price kernels as they were before the start phase was made cheaper (row-wise
# loops, one price_greedy per start), run as plain Python.

def _ref_prices(cg, sc, sm, sq, fit, g_node, n_nodes, target, steps):
    n_jobs, n_groups = cg.shape
    pc, pm, pq = np.zeros(n_groups), np.zeros(n_groups), np.zeros(n_nodes)
    best_c, best_m, best_q = pc.copy(), pm.copy(), pq.copy()
    kept_c, kept_m, kept_q = np.zeros((3, n_groups)), np.zeros((3, n_groups)), np.zeros((3, n_nodes))
    kept_version = np.full(3, -1, dtype=np.int64)
    count, version, best_l = 0, 0, np.inf
    if n_jobs == 0 or n_groups == 0:
        return 0.0, kept_c, kept_m, kept_q, 1
    first, second = steps // 4, steps * 2 // 4
    factor, stall = 2.0, 0
    for step_no in range(steps):
        if (step_no == first or step_no == second) and (count == 0 or kept_version[count - 1] != version):
            kept_c[count], kept_m[count], kept_q[count] = best_c, best_m, best_q
            kept_version[count] = version
            count += 1
        bound = 0.0
        for x in (*pc, *pm, *pq):
            bound += x
        g_c, g_m, g_q = np.ones(n_groups), np.ones(n_groups), np.ones(n_nodes)
        for p in range(n_jobs):
            top, gain = -1, -np.inf
            for g in range(n_groups):
                if fit[p, g]:
                    r = cg[p, g] - sc[p, g] * pc[g] - sm[p, g] * pm[g] - sq[p, g] * pq[g_node[g]]
                    if r > gain:
                        top, gain = g, r
            if top >= 0 and gain > 0:
                bound += gain
                g_c[top] -= sc[p, top]
                g_m[top] -= sm[p, top]
                g_q[g_node[top]] -= sq[p, top]
        if bound < best_l - fk.EPS:
            best_l, version, stall = bound, version + 1, 0
            best_c, best_m, best_q = pc.copy(), pm.copy(), pq.copy()
        else:
            stall += 1
            if stall >= fk.STALL:
                factor, stall = factor / 2, 0
        norm = 0.0
        for g in range(n_groups):
            if pc[g] <= 0 and g_c[g] > 0:
                g_c[g] = 0.0
            if pm[g] <= 0 and g_m[g] > 0:
                g_m[g] = 0.0
            norm += g_c[g] * g_c[g] + g_m[g] * g_m[g]
        for n in range(n_nodes):
            if pq[n] <= 0 and g_q[n] > 0:
                g_q[n] = 0.0
            norm += g_q[n] * g_q[n]
        if norm < 1e-12 or bound - target <= fk.EPS or factor < fk.SMALLEST:
            break
        step = factor * (bound - target) / norm
        for g in range(n_groups):
            pc[g] = max(0.0, pc[g] - step * g_c[g])
            pm[g] = max(0.0, pm[g] - step * g_m[g])
        for n in range(n_nodes):
            pq[n] = max(0.0, pq[n] - step * g_q[n])
    if count == 0 or kept_version[count - 1] != version:
        kept_c[count], kept_m[count], kept_q[count] = best_c, best_m, best_q
        count += 1
    return best_l, kept_c, kept_m, kept_q, count


def _ref_dual_bound(cg, sc, sm, sq, fit, g_node, pc, pm, pq):
    bound = 0.0
    for x in (*pc, *pm, *pq):
        bound += x
    for p in range(cg.shape[0]):
        gain = 0.0
        for g in range(cg.shape[1]):
            if fit[p, g]:
                gain = max(gain, cg[p, g] - sc[p, g] * pc[g] - sm[p, g] * pm[g] - sq[p, g] * pq[g_node[g]])
        bound += gain
    return bound


def _ref_price_greedy(r, cg, fit, regret, balanced, group, g_node, g_arch, jc, jm, jq, garch, gnode, fc, fm, fq):
    n_jobs, n_groups = r.shape
    where = np.full(n_jobs, -1, dtype=np.int64)
    size_c, size_m = np.maximum(fc, fk.EPS), np.maximum(fm, fk.EPS)
    def tops(g):
        mine = [i for i in range(len(garch)) if group[i] == g]
        return max((fc[i] for i in mine), default=-np.inf), max((fm[i] for i in mine), default=-np.inf)
    top = [tops(g) for g in range(n_groups)]
    prefs = [sorted(range(n_groups), key=lambda g: (-r[p, g], g)) for p in range(n_jobs)]
    key = np.empty(n_jobs)
    for p in range(n_jobs):
        k = r[p, prefs[p][0]]
        if regret and n_groups > 1:
            k = k - max(r[p, prefs[p][1]], 0.0)
        key[p] = k if np.isfinite(k) else -np.inf
    c_max = np.array([max([0.0, *cg[p]]) for p in range(n_jobs)])
    for p in np.lexsort((-c_max, -key)):
        for g in prefs[p]:
            if not fit[p, g]:
                break
            c, m, q = jc[p, g_arch[g]], jm[p, g_arch[g]], jq[p]
            if fq[g_node[g]] + fk.EPS < q or top[g][0] + fk.EPS < c or top[g][1] + fk.EPS < m:
                continue
            room = [i for i in range(len(garch)) if group[i] == g and fc[i] + fk.EPS >= c and fm[i] + fk.EPS >= m]
            if not room:
                continue
            chosen = room[0]
            if balanced:
                score = np.inf
                for i in room:
                    gap = abs((fc[i] - c) / size_c[i] - (fm[i] - m) / size_m[i])
                    if gap < score - fk.EPS:
                        chosen, score = i, gap
            fc[chosen] -= c
            fm[chosen] -= m
            fq[gnode[chosen]] -= q
            top[g] = tops(g)
            where[p] = chosen
            break
    return where


def _price_inputs(cluster, job_list):
    """The arrays the price kernels read, or None where fill has nothing to search."""
    call = F._prepare(job_list, cluster)
    if not isinstance(call, F._Call) or len(call.arrays.garch) == 0:
        return None
    arrays = call.arrays
    group, g_node, g_arch = fk.groups_of(arrays.garch, arrays.gnode)
    scaled = fk._scaled(call.c, call.m, call.q, group, g_node, g_arch, *call.base)
    return call, group, g_node, g_arch, scaled


@SETTINGS
@given(loaded_clusters(), jobs(multi=False, max_size=14), st.integers(0, 6))
def test_the_price_kernels_give_the_row_wise_algorithms_answers(cluster, job_list, repeats):
    job_list = job_list + [job.renamed(f"again{k}") for k, job in enumerate(job_list[:repeats])]  # same demands
    inputs = _price_inputs(cluster, job_list)
    if inputs is None:
        return
    call, group, g_node, g_arch, (cg, sc, sm, sq, fit) = inputs
    arrays, n_nodes = call.arrays, len(call.arrays.free_q)
    for target in (0.0, 50.0):
        got, want = fk.prices(cg, sc, sm, sq, fit, g_node, n_nodes, target, 24), _ref_prices(
            cg, sc, sm, sq, fit, g_node, n_nodes, target, 24)
        assert got[0] == want[0] and got[4] == want[4]
        for k in range(want[4]):
            assert all((a[k] == b[k]).all() for a, b in zip(got[1:4], want[1:4]))
            prices = (want[1][k], want[2][k], want[3][k])
            assert fk.dual_bound(cg, sc, sm, sq, fit, g_node, *prices) == _ref_dual_bound(
                cg, sc, sm, sq, fit, g_node, *prices)
            r = fk._reduced(cg, sc, sm, sq, fit, g_node, *prices)
            for regret in (False, True):
                for balanced in (False, True):
                    loads, ref_loads = [b.copy() for b in call.base], [b.copy() for b in call.base]
                    where = fk.price_greedy(r, cg, fit, regret, balanced, group, g_node, g_arch, call.c, call.m,
                                            call.q, arrays.garch, arrays.gnode, *loads)
                    want_where = _ref_price_greedy(r, cg, fit, regret, balanced, group, g_node, g_arch, call.c,
                                                   call.m, call.q, arrays.garch, arrays.gnode, *ref_loads)
                    assert where.tolist() == want_where.tolist()
                    assert all((a == b).all() for a, b in zip(loads, ref_loads))


@SETTINGS
@given(st.lists(st.one_of(st.sampled_from([0.0, -0.0, 1.0, 2.5, -3.0, -np.inf, np.inf, 1e300, -1e300]),
                          st.floats(-1e3, 1e3), st.floats(allow_nan=False, allow_infinity=False).map(lambda x: x ** 3
                                                                                                      if abs(x) < 1e100
                                                                                                      else x)),
                max_size=120), st.randoms(use_true_random=False))
def test_the_orders_are_the_stable_sort_by_key_descending(keys, rnd):
    key = np.array(keys, dtype=np.float64)
    ranked = np.arange(len(key))
    rnd.shuffle(ranked)
    want = ranked[np.argsort(-key[ranked], kind="mergesort")].tolist()
    for sort in (fk._order_by, fk._radix_order):
        assert sort(ranked, key).tolist() == want
        if jit.COMPILED:
            assert sort.py_func(ranked, key).tolist() == want


def test_a_crowded_bucket_is_sorted_by_radix_and_the_order_stays_the_sort():
    key = np.concatenate([np.linspace(0.0, 1e-6, 90), [1.0, 5.0], np.full(20, 3.0)])   # 90 in one bucket
    ranked = np.arange(len(key))[::-1].copy()
    assert fk._order_by(ranked, key).tolist() == ranked[np.argsort(-key[ranked], kind="mergesort")].tolist()


def test_jobs_of_one_kind_have_the_same_demands_and_the_first_of_them_is_its_kind():
    rng = np.random.default_rng(3)
    jc = np.stack([rng.integers(1, 6, 60), rng.integers(1, 3, 60)], axis=1).astype(float)
    jm = np.stack([rng.integers(1, 3, 60), np.ones(60)], axis=1)
    jq = rng.integers(1, 3, 60).astype(float)            # 8 kinds per compute on arch 0: all compared
    kind = fk._kinds(jc, jm, jq)
    for p in range(60):
        twins = [o for o in range(60) if (jc[o] == jc[p]).all() and (jm[o] == jm[p]).all() and jq[o] == jq[p]]
        assert kind[p] == twins[0]
    assert len(set(kind.tolist())) < 40
    jq = np.arange(60) % 20                              # 20 kinds of one compute: past KINDS, own kind
    kind = fk._kinds(np.ones((60, 1)), np.ones((60, 1)), jq.astype(float))
    assert all(kind[p] in (p, p % 20) for p in range(60)) and kind[20] == 0 and kind[30] == 30
    assert fk._kinds(np.zeros((3, 0)), np.zeros((3, 0)), np.zeros(3)).tolist() == [0, 1, 2]


@pytest.mark.skipif(not jit.COMPILED, reason="numba is not installed (pip install hypersack[fast])")
def test_the_start_phase_compiled_and_as_python_gives_identical_starts():
    for seed in (3, 11):
        call, arrays, dense = _tight_call(seed)
        args = (call.c, call.m, call.q, arrays.garch, arrays.gnode, len(arrays.free_q), *call.base, call.wfd_where,
                dense, 40, 50, F._TARGETS, F.PIVOTS)
        starts, values, low = fk._starts(*args)
        py_starts, py_values, py_low = fk._starts.py_func(*args)
        assert starts.tolist() == py_starts.tolist() and values.tolist() == py_values.tolist() and low == py_low
        assert np.isfinite(values).sum() > 1 and np.isfinite(low)
