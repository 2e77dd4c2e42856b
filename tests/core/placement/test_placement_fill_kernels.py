"""``fill``'s kernels (hypersack/core/placement/fill_kernels.py): the compiled form and the Python
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

from hypersack.core import jit
from hypersack.core.placement import fill as F
from hypersack.core.placement import fill_kernels as fk
from hypersack.placement import Job, assign, check_placement, placed_compute
from test_placement_fill import tight_instance
from test_placement_properties import SETTINGS, jobs, loaded_clusters

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


def _kernel_answers(compiled: bool) -> list:
    """fill_search, prices and price_greedy on two tight instances, compiled or as Python."""
    out: list = []
    for seed in (3, 11):
        job_list, cluster = tight_instance(seed)
        call = F._prepare(job_list, cluster)
        assert isinstance(call, F._Call)
        arrays = call.arrays
        dense = F._density(call.c, call.m, call.q, arrays, call.base)
        search = _source(fk.fill_search, compiled)
        where, value, ceiling, tried = search(
            call.c, call.m, call.q, arrays.garch, arrays.gnode, len(arrays.free_q), arrays.n_arch, *call.base,
            call.wfd_where, dense, 2, 0.25, 60, 48, F._TARGETS, 4, 2.0, 30, 0, 7, 0.0, *F._KICK)
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
