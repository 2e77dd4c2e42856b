"""The ``lagrange`` policy: Lagrangian prices, then one greedy pass (per group, or pooled by type)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from hypersack.placement import lagrange as lg
from hypersack.placement.load import Load
from hypersack.errors import ConfigError
from hypersack.placement import GPU, Cluster, Job, Node, assign, check_placement, placed_compute
from test_placement_fill import two_kinds
from test_placement_properties import SETTINGS, fits_alone_somewhere, jobs, loaded_clusters


def _prices(job_list, cluster, sample=10_000, steps=lg.STEPS, smooth=False):
    load = Load(cluster)
    archs = list(load.by_arch)
    pools = lg._Pools(load, archs)
    c, m, q = lg._demand_arrays(job_list, archs)
    cg, mg = c[:, pools.arch], m[:, pools.arch]
    fit = ((cg <= pools.top_c[None, :] + lg.EPS) & (mg <= pools.top_m[None, :] + lg.EPS)
           & (q[:, None] <= pools.cap_q[pools.node][None, :] + lg.EPS))
    return lg.unit_prices(cg, mg, q, fit, pools.cap_c, pools.cap_m, pools.cap_q, pools.node, steps, sample,
                          smooth=smooth)


@SETTINGS
@given(loaded_clusters(), jobs())
def test_pooled_by_type_the_answer_keeps_eq_1_to_4_and_leaves_hopeless_jobs_out(cluster, new_jobs):
    # MAX_UNITS 0: every cluster takes the path of large ones (groups pooled by type, numpy pass).
    empty = Cluster(cluster.nodes)
    hopeless = {job.id for job in new_jobs if not fits_alone_somewhere(job, empty)}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lg, "MAX_UNITS", 0)
        answer = assign(new_jobs, cluster, "lagrange", check=True)
    cluster.with_jobs(new_jobs, answer)
    assert not hopeless & set(answer)


@SETTINGS
@given(loaded_clusters(), jobs(multi=False))
def test_the_dual_bound_holds_for_every_answer(cluster, new_jobs):
    bound = _prices(new_jobs, cluster)[0]
    for policy in ("lagrange", "fill", "wfd"):
        assert placed_compute(new_jobs, cluster, assign(new_jobs, cluster, policy)) <= bound + 1e-6, policy


def test_each_kind_of_job_goes_where_it_strains_the_node_least():
    # Dense jobs on the compute node, fat ones on the memory node: 350 (either way round: 290).
    job_list, cluster = two_kinds()
    answer = assign(job_list, cluster, "lagrange")
    assert placed_compute(job_list, cluster, answer) == pytest.approx(350)
    assert {jid: devs[0][0] for jid, devs in answer.items()} == {**{f"f{i}": "m" for i in range(4)},
                                                                 **{f"d{i}": "c" for i in range(3)}}


def test_the_price_of_cores_puts_four_small_jobs_before_one_large_one():
    # 4 cores: one 50-compute job of 4 cores, or four 30-compute jobs of 1 core each (120).
    cluster = Cluster([Node("n", 4, [GPU(0, "A100", 80, oversubscription=3)])])
    job_list = [Job("large", 50, 1, cpus=4)] + [Job(f"s{i}", 30, 1, cpus=1) for i in range(4)]
    assert placed_compute(job_list, cluster, assign(job_list, cluster, "lagrange")) == pytest.approx(120)
    # Without prices the jobs go by compute: the large one first, and it takes every core.
    assert placed_compute(job_list, cluster, assign(job_list, cluster, "lagrange", steps=0)) == pytest.approx(50)


@pytest.mark.parametrize("max_units", [0, 16])
def test_a_job_needs_one_gpu_with_both_its_compute_and_its_memory(max_units):
    # GPU 0 has the compute, GPU 1 the memory: a job asking much of both fits neither.
    cluster = Cluster([Node("n", 8, [GPU(0, "A100", 4), GPU(1, "A100", 40, compute=10)])])
    job_list = [Job("both", 50, 20), Job("memory", 5, 20), Job("compute", 60, 2)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lg, "MAX_UNITS", max_units)
        answer = assign(job_list, cluster, "lagrange", check=True)
    assert answer == {"memory": (("n", 1),), "compute": (("n", 0),)}


@pytest.mark.parametrize("max_units", [0, 16])
def test_a_node_without_the_cores_takes_no_more_jobs(max_units):
    # Node "a" has 3 cores: of three 2-core jobs one goes there, one to "b" (2 cores), one stays out.
    cluster = Cluster([Node("a", 3, [GPU(0, "A100", 80, oversubscription=3)]),
                       Node("b", 2, [GPU(0, "A100", 80, oversubscription=3)])])
    job_list = [Job(f"j{i}", 20, 2, cpus=2) for i in range(3)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lg, "MAX_UNITS", max_units)
        answer = assign(job_list, cluster, "lagrange", check=True)
    assert sorted(devs[0][0] for devs in answer.values()) == ["a", "b"]


def test_the_pooled_path_places_the_most_profitable_jobs_of_a_wide_cluster():
    # 20 one-GPU nodes of 4 cores (pooled: more than MAX_UNITS groups); 40 jobs of 4 cores, half of
    # 60 compute, half of 10: the cores allow 20 jobs, the prices pick the 20 large ones.
    cluster = Cluster([Node(f"n{k}", 4, [GPU(0, "A100", 80, oversubscription=3)]) for k in range(20)])
    small = [Job(f"s{i}", 10, 1, cpus=4, runtime=1000) for i in range(20)]
    large = [Job(f"l{i}", 60, 1, cpus=4, runtime=1) for i in range(20)]
    answer = assign(small + large, cluster, "lagrange", check=True)
    assert set(answer) == {job.id for job in large}


def test_the_dual_bound_comes_down_from_the_sum_of_the_jobs():
    cluster = Cluster([Node("n", 4, [GPU(0, "A100", 80, oversubscription=3)])])
    job_list = [Job("large", 50, 1, cpus=4)] + [Job(f"s{i}", 30, 1, cpus=1) for i in range(4)]
    assert _prices(job_list, cluster, steps=0)[0] == np.inf
    bound = _prices(job_list, cluster)[0]
    assert 120 - 1e-6 <= bound < 170 - 10          # the optimum 120; all jobs 170


def test_lagrange_options_are_checked():
    job_list, cluster = two_kinds()
    for name, bad in (("steps", -1), ("sample", 0), ("steps", True)):
        with pytest.raises(ConfigError) as err:
            assign(job_list, cluster, "lagrange", **{name: bad})
        assert err.value.field == f"placement.{name}"
    check_placement(job_list, cluster, assign(job_list, cluster, "lagrange", steps=3, sample=2))
