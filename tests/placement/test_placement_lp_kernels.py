"""lp_kernels: the simplex with generalized upper bounds finds the optimum of fill's relaxation
(checked against HiGHS), from any feasible start, and L at its duals bounds every placement
even when the pivots run out; fill stops on that bound only when its answer is within
``enough`` of it, and seeks it only up to ``LP_PAIRS``."""
from __future__ import annotations

import numpy as np
import pytest

from hypersack.placement import jit
from hypersack.placement import fill as F
from hypersack.placement import fill_kernels as fk
from hypersack.placement import lp_kernels as lk
from hypersack.placement.instances import tight_instance
from hypersack.placement import assign, placed_compute

linprog = pytest.importorskip("scipy.optimize").linprog


def _lp(seed, n_jobs=40, n_groups=3, n_nodes=2, holes=0.2):
    """A random relaxation in ``_columns``' form: (ct, tc, tm, tq, g_node), about 2-3 times
    more demand than capacity on every row, some (group, job) pairs barred (-inf)."""
    rng = np.random.default_rng(seed)
    g_node = np.arange(n_groups) % n_nodes
    ct = rng.uniform(1.0, 10.0, (n_groups, n_jobs))
    ct[rng.random((n_groups, n_jobs)) < holes] = -np.inf
    scale = 2.5 / n_jobs * n_groups
    tc = ct.clip(0, None) / 10.0 * rng.uniform(0.5, 1.5, (n_groups, n_jobs)) * scale
    tm = rng.uniform(0.0, 2.0, (n_groups, n_jobs)) * scale
    per_node = np.bincount(g_node, minlength=n_nodes)[g_node][:, None]
    tq = np.repeat(rng.uniform(0.0, 2.0, (1, n_jobs)), n_groups, axis=0) * scale / per_node
    tm[:, rng.random(n_jobs) < 0.1] = 0.0                  # some jobs need no memory
    return ct, tc, tm, tq, g_node, n_nodes


def _highs(ct, tc, tm, tq, g_node, n_nodes):
    """The LP's optimum by scipy's HiGHS."""
    n_groups, n_jobs = ct.shape
    allowed = np.isfinite(ct)
    g, p = np.nonzero(allowed)
    m = 2 * n_groups + n_nodes
    a = np.zeros((m + n_jobs, len(g)))
    cols = np.arange(len(g))
    a[g, cols] = tc[g, p]
    a[n_groups + g, cols] = tm[g, p]
    a[2 * n_groups + g_node[g], cols] = tq[g, p]
    a[m + p, cols] = 1.0
    result = linprog(-ct[g, p], A_ub=a, b_ub=np.ones(m + n_jobs), bounds=(0, None), method="highs")
    assert result.status == 0
    return -result.fun


def _bound(lp, pc, pm, pq):
    """L at the duals clipped to >= 0 (fill_kernels._dual)."""
    ct, tc, tm, tq, g_node, _ = lp
    n = ct.shape[1]
    return fk._dual(ct, tc, tm, tq, g_node, np.maximum(pc, 0), np.maximum(pm, 0), np.maximum(pq, 0), np.empty(n),
                    np.empty(n, dtype=np.int64))


def _greedy(lp, order):
    """A feasible start: jobs in ``order``, each on its first group with room on every row."""
    ct, tc, tm, tq, g_node, n_nodes = lp
    n_groups, n_jobs = ct.shape
    lc, lm, lq = np.ones(n_groups), np.ones(n_groups), np.ones(n_nodes)
    key = np.full(n_jobs, -1, dtype=np.int64)
    for p in order:
        for g in range(n_groups):
            if np.isfinite(ct[g, p]) and tc[g, p] <= lc[g] and tm[g, p] <= lm[g] and tq[g, p] <= lq[g_node[g]]:
                lc[g] -= tc[g, p]
                lm[g] -= tm[g, p]
                lq[g_node[g]] -= tq[g, p]
                key[p] = g
                break
    return key


SHAPES = [(40, 3, 2, 0.2), (60, 1, 1, 0.0), (30, 4, 4, 0.5), (80, 6, 3, 0.3), (5, 2, 1, 0.0)]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("shape", SHAPES)
def test_the_bound_at_the_duals_is_the_lp_optimum_from_any_feasible_start(seed, shape):
    lp = _lp(seed, *shape)
    want = _highs(*lp)
    n_jobs = lp[0].shape[1]
    starts = [np.full(n_jobs, -1, dtype=np.int64), _greedy(lp, range(n_jobs)),
              _greedy(lp, np.random.default_rng(seed).permutation(n_jobs))]
    for start in starts:
        pc, pm, pq, pivots, optimal = lk.lp_prices(*lp, start, 10_000)
        assert optimal and pivots < 10_000
        assert _bound(lp, pc, pm, pq) == pytest.approx(want, rel=1e-9, abs=1e-9)
        assert (pc >= -1e-9).all() and (pm >= -1e-9).all() and (pq >= -1e-9).all()   # optimal duals


@pytest.mark.parametrize("seed", range(4))
def test_a_pivot_cap_leaves_a_valid_bound(seed):
    lp = _lp(seed, 80, 6, 3, 0.3)
    want = _highs(*lp)
    start = np.full(lp[0].shape[1], -1, dtype=np.int64)
    _, _, _, needed, _ = lk.lp_prices(*lp, start, 10_000)
    assert needed > 4
    for cap in (0, 1, needed // 2, needed - 1):
        pc, pm, pq, pivots, optimal = lk.lp_prices(*lp, start, cap)
        assert pivots == cap and not optimal
        assert _bound(lp, pc, pm, pq) >= want - 1e-9            # weak duality: never below the optimum


def test_the_factors_solve_both_systems():
    rng = np.random.default_rng(0)
    for m in (1, 3, 12):
        w = rng.normal(size=(m, m)) + np.eye(m) * 0.1
        b = rng.normal(size=m)
        lu, perm = w.copy(), np.empty(m, dtype=np.int64)
        assert lk._factor(lu, perm)
        x, y = np.empty(m), np.empty(m)
        lk._solve(lu, perm, b, x)
        lk._solve_transposed(lu, perm, b, np.empty(m), y)
        assert np.allclose(w @ x, b) and np.allclose(w.T @ y, b)
    assert not lk._factor(np.zeros((2, 2)), np.empty(2, dtype=np.int64))


@pytest.mark.skipif(not jit.COMPILED, reason="numba is not installed (pip install hypersack[fast])")
def test_compiled_and_as_python_give_identical_prices():
    for seed, shape in ((1, SHAPES[0]), (2, SHAPES[3])):
        lp = _lp(seed, *shape)
        start = _greedy(lp, range(lp[0].shape[1]))
        got = lk.lp_prices(*lp, start, 10_000)
        plain = lk.lp_prices.py_func(*lp, start, 10_000)
        for a, b in zip(got[:3], plain[:3]):
            assert a.tolist() == b.tolist()
        assert got[3:] == plain[3:]


def _tight(seed):
    jobs, cluster = tight_instance(seed)
    call = F._prepare(list(jobs), cluster)
    assert not isinstance(call, dict)
    return jobs, cluster, call


def _search(call, **options):
    args = dict(rounds=2, min_gain=F.MIN_GAIN, steps=F.STEPS, polish=F.POLISH, enough=F.ENOUGH, kicks=F.KICKS,
                patience=F.PATIENCE, seed=1)
    args.update(options)
    return F._search(call, **args)


def _highs_of(call):
    """HiGHS's optimum of the call's relaxation (its single-GPU jobs on the loads ``base``)."""
    arrays = call.arrays
    group, g_node, g_arch = fk.groups_of(arrays.garch, arrays.gnode)
    cg, sc, sm, sq, fit = fk._scaled(call.c, call.m, call.q, group, g_node, g_arch, *call.base)
    return _highs(*fk._columns(cg, sc, sm, sq, fit, 1, 1.0), g_node, len(arrays.free_q))


@pytest.mark.parametrize("seed", [3, 93])
def test_fill_bounds_with_the_lp_and_stops_only_within_enough_of_it(seed):
    jobs, cluster, call = _tight(seed)
    where, value, ceiling, tried = _search(call)
    _, _, sub_ceiling, _ = _search(call, pivots=0)
    lp = call.fixed_value + _highs_of(call)
    assert ceiling == pytest.approx(lp, rel=1e-9) and ceiling < sub_ceiling
    answer = assign(jobs, cluster, "fill", check=True)
    assert placed_compute(jobs, cluster, answer) >= F.ENOUGH * lp - 1e-6
    full = assign(jobs, cluster, "fill", enough=2.0)       # never stops early: at least as good
    assert placed_compute(jobs, cluster, full) >= placed_compute(jobs, cluster, answer) - 1e-6


def test_the_lp_stop_skips_the_kicks_where_the_answer_is_within_enough():
    jobs, cluster, call = _tight(93)
    where, value, ceiling, tried = _search(call)
    assert call.fixed_value + value >= F.ENOUGH * ceiling
    _, value_sub, _, _ = _search(call, pivots=0)               # the looser bound: kicks run, gain
    assert value_sub > value


def test_no_lp_above_lp_pairs():
    jobs, cluster = tight_instance(7)
    per_job = sum(len(node.gpus) for node in cluster.nodes)        # single-GPU jobs x GPUs
    jobs = [job.renamed(f"x{i}") for i, job in enumerate((jobs * 10)[:F.LP_PAIRS // per_job + 1])]
    call = F._prepare(jobs, cluster)
    assert not isinstance(call, dict) and len(call.singles) * per_job == F.LP_PAIRS + per_job - F.LP_PAIRS % per_job
    assert _search(call)[2] == _search(call, pivots=0)[2]
    small = F._prepare(jobs[:-1], cluster)
    assert not isinstance(small, dict) and len(small.singles) * per_job <= F.LP_PAIRS
    assert _search(small)[2] < _search(small, pivots=0)[2]


def test_fill_checks_pivots():
    jobs, cluster = tight_instance(3)
    with pytest.raises(Exception, match="placement.pivots"):
        assign(jobs, cluster, "fill", pivots=-1)


def test_fill_bounds_at_the_duals_clipped_to_zero(monkeypatch):
    ct, tc, tm, tq, g_node, n_nodes = _lp(0, *SHAPES[0])
    lp = (ct, tc, tm * 0.05, tq, g_node, n_nodes)                # memory never binds: its dual is 0
    want = _highs(*lp)
    n_groups, n_jobs = ct.shape
    pc, pm, pq, _, optimal = lk.lp_prices(*lp, np.full(n_jobs, -1, dtype=np.int64), 10_000)
    assert optimal and (pm == 0).all()

    def negative(*args):                 # duals of a basis short of the optimum may be negative
        return pc, pm - 1.0, pq, 0, False
    monkeypatch.setattr(fk, "lp_prices", negative)
    group = np.arange(n_groups)
    where = np.full(n_jobs, -1, dtype=np.int64)
    got = fk._lp_bound.py_func(where, group, *lp, 10, np.empty(n_jobs), np.empty(n_jobs, dtype=np.int64))
    assert got == pytest.approx(want, rel=1e-9)                  # not below: the memory prices as 0


def test_fill_kernels_holds_the_current_hash_of_lp_kernels():
    """numba would keep fill_kernels' cached code, with the old LP inside, after a change to
    lp_kernels alone: the hash in fill_kernels.py makes its text change too."""
    import hashlib
    from pathlib import Path
    digest = hashlib.sha256(Path(lk.__file__).read_bytes()).hexdigest()[:16]
    assert fk.LP_KERNELS_SHA == digest, f"set fill_kernels.LP_KERNELS_SHA = {digest!r} (lp_kernels.py changed)"


@pytest.mark.parametrize("seed", range(8))
def test_degenerate_lps_with_repeated_jobs_and_round_demands_reach_the_optimum(seed):
    """Jobs repeated 3 times with demands in quarters of a row (ties in every ratio test and
    pricing): the simplex still ends at HiGHS's optimum, within its pivots."""
    rng = np.random.default_rng(100 + seed)
    n_groups, n_nodes, kinds = 3, 2, 10
    g_node = np.array([0, 0, 1])
    ct = np.repeat(rng.integers(1, 5, (n_groups, kinds)).astype(float), 3, axis=1)
    tc = np.repeat(rng.integers(0, 3, (n_groups, kinds)) / 4.0, 3, axis=1)
    tm = np.repeat(rng.integers(0, 3, (n_groups, kinds)) / 4.0, 3, axis=1)
    tq = np.repeat(rng.integers(0, 2, (1, kinds)) / 4.0, 3, axis=1).repeat(n_groups, axis=0)
    ct[:, :3] = -np.inf if seed % 2 else ct[:, :3]          # a kind no group takes
    lp = (ct, tc, tm, tq, g_node, n_nodes)
    want = _highs(*lp)
    for start in (np.full(ct.shape[1], -1, dtype=np.int64), _greedy(lp, range(ct.shape[1]))):
        pc, pm, pq, pivots, optimal = lk.lp_prices(*lp, start, 10_000)
        assert optimal
        assert _bound(lp, pc, pm, pq) == pytest.approx(want, rel=1e-9, abs=1e-9)
