"""``lagrange``'s kernels (hypersack/placement/lagrange_kernels.py): the same answers compiled
and as plain Python; the greedy's GPU rules on hand-made arrays; the vectorised demand arrays and
job-list check. The compiled-against-Python tests run the Python form on small instances only
(a few seconds in all)."""
from __future__ import annotations

import numpy as np
import pytest

from hypersack.placement import jit
from hypersack.placement import lagrange as lg
from hypersack.placement import lagrange_kernels as kernels
from hypersack.errors import ConfigError
from hypersack.placement import GPU, Cluster, Job, Node, assign, placed_compute
from test_placement_fill import tight_instance

compiled_only = pytest.mark.skipif(not jit.COMPILED, reason="numba absent or disabled: one form only")
KERNELS = ("greedy", "smooth_prices", "_unit_bounds")


def _as_python(patch: pytest.MonkeyPatch) -> None:
    for name in KERNELS:
        patch.setattr(kernels, name, getattr(kernels, name).py_func)


@compiled_only
@pytest.mark.parametrize("seed,max_units,steps", [(3, 16, 120), (30, 0, 30), (45, 0, 120)])
def test_compiled_and_python_kernels_place_the_same_jobs_on_the_same_gpus(seed, max_units, steps):
    job_list, cluster = tight_instance(seed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lg, "MAX_UNITS", max_units)      # 0: groups pooled by type, smoothed prices
        fast = assign(job_list, cluster, "lagrange", check=True, steps=steps)
        _as_python(patch)
        slow = assign(job_list, cluster, "lagrange", check=True, steps=steps)
    assert fast == slow and len(fast) > 0


@compiled_only
def test_compiled_and_python_smoothed_prices_are_equal_to_the_last_bit():
    rng = np.random.default_rng(5)
    jobs, units, holders = 40, 5, 3
    base = np.where(rng.random((jobs, units)) < 0.8, rng.uniform(5, 60, (jobs, units)), -np.inf)
    sc, sm, sq = (rng.uniform(0, 0.6, (jobs, units)) for _ in range(3))
    holder = np.array([0, 0, 1, 2, 2], dtype=np.int64)
    kc, holder_c = rng.uniform(100, 300, units), rng.uniform(100, 300, holders)
    fast = kernels.smooth_prices(base, sc, sm, sq, holder, holders, kc, holder_c, 60, 3.0, 0.2)
    slow = kernels.smooth_prices.py_func(base, sc, sm, sq, holder, holders, kc, holder_c, 60, 3.0, 0.2)
    assert fast[0] == slow[0]
    for a, b in zip(fast[1:], slow[1:]):
        assert np.array_equal(a, b) and a.any()


def _one_unit(free_c, free_m, free_q, gpu_node):
    """Arrays for ``kernels.greedy``: one unit of one group per node, GPUs numbered in order."""
    nodes = sorted(set(gpu_node))
    members = [[i for i, n in enumerate(gpu_node) if n == k] for k in nodes]
    group_ptr = np.cumsum([0] + [len(g) for g in members]).astype(np.int64)
    group_gpus = np.array([i for g in members for i in g], dtype=np.int64)
    top_c = np.array([max(free_c[i] for i in g) for g in members], dtype=float)
    top_m = np.array([max(free_m[i] for i in g) for g in members], dtype=float)
    return dict(unit_ptr=np.array([0, len(nodes)], dtype=np.int64), unit_groups=np.arange(len(nodes), dtype=np.int64),
                group_ptr=group_ptr, group_gpus=group_gpus, group_node=np.array(nodes, dtype=np.int64),
                free_c=np.array(free_c, dtype=float), free_m=np.array(free_m, dtype=float),
                free_q=np.array(free_q, dtype=float), top_c=top_c, top_m=top_m)


def _greedy(demands, state):
    c = np.array([[d[0]] for d in demands], dtype=float)
    m = np.array([[d[1]] for d in demands], dtype=float)
    q = np.array([d[2] for d in demands], dtype=float)
    n = len(demands)
    return kernels.greedy(np.arange(n, dtype=np.int64), np.zeros((n, 1), dtype=np.int64),
                          np.ones((n, 1), dtype=bool), c, m, q, **state).tolist()


@pytest.mark.parametrize("python", [False, True])
def test_the_greedy_takes_the_best_fitting_gpu_of_the_first_group_that_has_one(python):
    state = _one_unit([50, 30, 26, 90], [40, 40, 6, 40], [8, 8], [0, 0, 0, 1])
    with pytest.MonkeyPatch.context() as patch:
        if python and jit.COMPILED:
            _as_python(patch)
        # 25 / 8 GB: GPU 2 (26 left) lacks the memory, GPU 1 (30 left) fits it best; then 28: GPU 0.
        assert _greedy([(25, 8, 1), (28, 8, 1)], state) == [1, 0]
    assert state["free_c"].tolist() == [22, 5, 26, 90] and state["free_m"].tolist() == [32, 32, 6, 40]
    assert state["free_q"].tolist() == [6, 8] and state["top_c"].tolist() == [26, 90]


def test_the_greedy_counts_memory_and_cores_of_every_job_it_places():
    # One GPU with compute for four and memory for two; a node with cores for three.
    state = _one_unit([400], [40], [3], [0])
    assert _greedy([(10, 20, 1)] * 4, state) == [0, 0, -1, -1]
    state = _one_unit([400], [400], [3], [0])
    assert _greedy([(10, 20, 1)] * 4, state) == [0, 0, 0, -1]


def test_the_greedy_moves_on_to_a_later_group_when_the_first_lacks_the_cores():
    state = _one_unit([100, 100], [40, 40], [1, 4], [0, 1])
    assert _greedy([(10, 1, 2), (10, 1, 1)], state) == [1, 0]


def test_pooled_prices_of_cores_put_four_small_jobs_before_one_large_one():
    cluster = Cluster([Node("n", 4, [GPU(0, "A100", 80, oversubscription=3)])])
    job_list = [Job("large", 50, 1, cpus=4)] + [Job(f"s{i}", 30, 1, cpus=1) for i in range(4)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lg, "MAX_UNITS", 0)
        assert placed_compute(job_list, cluster, assign(job_list, cluster, "lagrange")) == pytest.approx(120)


def test_demand_arrays_take_each_architecture_s_own_demand():
    job_list = [Job("plain", 30, 4, cpus=2),
                Job("own", 150, 50, per_arch={"H100": {"compute": 80, "memory_gb": 30}}),
                Job("part", 40, 8, cpus=3, per_arch={"A100": {"memory_gb": 9}})]
    c, m, q = lg._demand_arrays(job_list, ["A100", "H100"])
    assert c.tolist() == [[30, 30], [150, 80], [40, 40]]
    assert m.tolist() == [[4, 4], [50, 30], [9, 8]]
    assert q.tolist() == [2, 1, 3]
    cluster = Cluster([Node("a", 8, [GPU(0, "A100", 80)]), Node("h", 8, [GPU(0, "H100", 80)])])
    assert assign(job_list[1:2], cluster, "lagrange", check=True) == {"own": (("h", 0),)}


@pytest.mark.parametrize("policy", ["lagrange", "wfd"])
def test_the_job_check_names_the_first_offender(policy):
    cluster = Cluster([Node("n", 8, [GPU(0, "A100", 80)])])
    running = cluster.with_jobs([Job("r", 10, 1)], {"r": (("n", 0),)})
    jobs = [Job(f"j{i}", 10, 1) for i in range(4)]
    cases = [(jobs + [jobs[1]], "jobs[4].id", "unique"), (jobs[:2] + ["x"] + jobs[2:], "jobs[2]", "a Job"),
             (jobs + [Job("r", 5, 1)], "jobs[4].id", "already running")]
    for job_list, field, words in cases:
        with pytest.raises(ConfigError, match=words) as err:
            assign(job_list, running, policy)
        assert err.value.field == field
    assert list(assign(list(reversed(jobs)), running, policy)) == ["j3", "j2", "j1", "j0"]   # job order


def test_assign_answers_in_the_given_job_order_whatever_the_policy_s_order():
    cluster = Cluster([Node("n", 8, [GPU(0, "A100", 80), GPU(1, "A100", 80)])])
    jobs = [Job(f"j{i}", 10, 1) for i in range(4)]

    def backwards(job_list, _cluster):
        return {job.id: ("n", i % 2) for i, job in reversed(list(enumerate(job_list)))}
    assert list(assign(jobs, cluster, backwards)) == ["j0", "j1", "j2", "j3"]
