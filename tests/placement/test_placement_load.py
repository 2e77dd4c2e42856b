"""``demand_table`` (the jobs' numbers as one array, cached per Job) and ``fill``'s arrays built
from it; ``InJobOrder`` answers returned by ``assign`` without re-ordering."""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypersack.placement import fill_kernels
from hypersack.placement.fill import _Arrays, _density, fill
from hypersack.placement.load import InJobOrder, Load, by_runtime, demand_table
from hypersack.placement import GPU, Cluster, Job, Node, assign
from test_placement_properties import ARCHS, SETTINGS, jobs, loaded_clusters


def reference(job_list: list[Job], archs: tuple[str, ...]) -> np.ndarray:
    """``demand_table`` job by job, through ``Job.demand`` and ``Job.expected_runtime``."""
    cols = archs or (None,)
    rows = []
    for job in job_list:
        demand = [job.demand(a) if a is not None else job.demand("") for a in cols]
        rows.append([d.compute for d in demand] + [d.memory_gb for d in demand]
                    + [job.expected_runtime(archs), job.cpus, job.gpus])
    return np.array(rows, dtype=np.float64).reshape(len(job_list), 2 * len(cols) + 3)


def mixed() -> list[Job]:
    """No per_arch; one arch; both; an arch the cluster lacks; only some fields; data-parallel."""
    return [Job("plain", 30, 4, cpus=2, runtime=50),
            Job("h", 30, 4, runtime=50, per_arch={"H100": {"compute": 21, "memory_gb": 3, "runtime": 80}}),
            Job("both", 40, 6, runtime=10, per_arch={"H100": {"compute": 28, "runtime": 5},
                                                     "A100": {"compute": 44, "runtime": 7}}),
            Job("other", 20, 2, runtime=30, per_arch={"V100": {"compute": 90, "runtime": 999}}),
            Job("rt", 10, 1, runtime=40, per_arch={"A100": {"runtime": 20}}),
            Job("dp", 50, 10, cpus=3, runtime=60, gpus=3, per_arch={"H100": {"compute": 35}})]


@pytest.mark.parametrize("archs", [("H100", "A100"), ("A100", "H100"), ("A100",), ()])
def test_demand_table_is_each_jobs_demand_per_architecture(archs):
    job_list = mixed()
    table = demand_table(job_list, archs)
    assert table.shape == (len(job_list), 2 * max(1, len(archs)) + 3)
    np.testing.assert_array_equal(table, reference(job_list, archs))
    if archs == ("H100", "A100"):       # spelled out once: the runtime is the longest over archs
        assert table[:, 4].tolist() == [50, 80, 7, 30, 40, 60]
        assert table[:, 0].tolist() == [30, 21, 28, 20, 10, 35]
    assert not table.flags.writeable


def test_the_cached_rows_are_read_back_and_kept_per_architecture_tuple():
    job_list = mixed()
    first = demand_table(job_list, ("H100", "A100")).copy()
    assert all(any(k.startswith("_demand_row_") for k in vars(job)) for job in job_list)
    np.testing.assert_array_equal(demand_table(job_list, ("H100", "A100")), first)
    # another tuple of architectures has its own rows: the columns follow its order
    np.testing.assert_array_equal(demand_table(job_list, ("A100", "H100")), reference(job_list, ("A100", "H100")))
    np.testing.assert_array_equal(demand_table(job_list, ("H100", "A100")), first)
    # some jobs cached, some not: all are computed again, with the same result
    fresh = mixed()
    both = [job_list[0], fresh[1], job_list[2]]
    np.testing.assert_array_equal(demand_table(both, ("H100", "A100")), first[:3])


def test_renamed_and_copied_jobs_keep_valid_rows_and_the_cache_changes_no_comparison():
    job = mixed()[2]
    twin = mixed()[2]
    demand_table([job], ("H100", "A100"))
    assert job == twin and hash(job) == hash(twin) and repr(job) == repr(twin)
    assert job.to_dict() == twin.to_dict()
    renamed = job.renamed("copy")                    # the rows do not hold the id
    np.testing.assert_array_equal(demand_table([renamed], ("H100", "A100")), reference([renamed], ("H100", "A100")))
    shallow = copy.copy(job)                         # (a Job cannot be deep-copied or pickled)
    assert shallow == job
    np.testing.assert_array_equal(demand_table([shallow], ("H100", "A100")), reference([job], ("H100", "A100")))


def test_rows_computed_for_renamed_copies_prime_their_template():
    template = mixed()[2]                                # as a study's Demand renames one per trial
    first = [template.renamed(f"t{i}") for i in range(3)]
    table = demand_table(first, ("H100", "A100")).copy()
    rows = {k for k in vars(template) if k.startswith("_demand_row_")}
    assert len(rows) == 1                                # the template holds the row now
    later = template.renamed("t9")
    assert rows <= set(vars(later))                      # and copies made from now on start with it
    np.testing.assert_array_equal(demand_table([later], ("H100", "A100")), table[:1])
    again = later.renamed("t10")                         # a copy of a copy: the origin stays the template
    assert vars(again)["_origin"] is template and "_origin" not in vars(template)
    assert later == template.renamed("t9") and later.to_dict()["id"] == "t9"


@dataclass(frozen=True)
class _Sub(Job):
    pass


def test_subclasses_of_job_are_read_but_never_cached():
    job_list = [_Sub("s", 30, 4, runtime=9, per_arch={"A100": {"compute": 20}}), mixed()[0]]
    np.testing.assert_array_equal(demand_table(job_list, ("A100",)), reference(job_list, ("A100",)))
    assert not any(k.startswith("_demand_row_") for job in job_list for k in vars(job))


@SETTINGS
@given(jobs(max_size=20), st.lists(st.sampled_from(ARCHS), unique=True, max_size=len(ARCHS)))
def test_demand_table_matches_the_jobs_on_any_architectures(new_jobs, archs):
    archs = tuple(archs)
    np.testing.assert_array_equal(demand_table(new_jobs, archs), reference(new_jobs, archs))
    np.testing.assert_array_equal(demand_table(new_jobs, archs), reference(new_jobs, archs))   # cached


@SETTINGS
@given(loaded_clusters(), jobs(max_size=20))
def test_fill_arrays_are_the_jobs_demands_in_wfd_order(cluster, new_jobs):
    arrays = _Arrays(new_jobs, cluster)
    archs = list(Load(cluster).by_arch)
    table = reference(new_jobs, tuple(archs))
    k = max(1, len(archs))
    np.testing.assert_array_equal(arrays.c, table[:, :k])
    np.testing.assert_array_equal(arrays.m, table[:, k:2 * k])
    np.testing.assert_array_equal(arrays.q, [job.cpus for job in new_jobs])
    np.testing.assert_array_equal(arrays.gpus, [job.gpus for job in new_jobs])
    assert arrays.all_single == all(job.gpus == 1 for job in new_jobs)
    assert [new_jobs[p].id for p in arrays.wfd] == [job.id for job in by_runtime(new_jobs, archs)]
    positions = arrays.wfd[::-1].copy()
    for got, want in zip(arrays.singles(positions), (arrays.c, arrays.m, arrays.q)):
        np.testing.assert_array_equal(got, want[positions])
        assert got.flags.c_contiguous and got.flags.writeable


def _shuffled_case() -> tuple[list[Job], Cluster]:
    cluster = Cluster([Node("a", 6, (GPU(0, "A100", 40), GPU(1, "H100", 40))),
                       Node("b", 4, (GPU(0, "A100", 40),))])
    runtimes = [5, 90, 20, 70, 1, 60, 30, 80, 10, 40]
    job_list = [Job(f"j{i}", 35, 9, cpus=1, runtime=r, per_arch={"H100": {"compute": 25}} if i % 2 else None)
                for i, r in enumerate(runtimes)]
    return job_list, cluster


@pytest.mark.parametrize("policy", ["fill", "auto", "wfd-ls"])
def test_assign_answers_in_the_given_order_as_a_plain_dict(policy):
    job_list, cluster = _shuffled_case()
    answer = assign(job_list, cluster, policy, check=True)
    assert type(answer) is dict and 0 < len(answer) < len(job_list)      # some are left out
    ids = [job.id for job in job_list]
    assert list(answer) == [jid for jid in ids if jid in answer]
    dp = [*job_list, Job("dp", 20, 5, gpus=2, runtime=1000)]               # data-parallel: fixed first
    answer = assign(dp, cluster, policy, check=True)
    assert list(answer) == [job.id for job in dp if job.id in answer]


def test_fill_builds_its_answer_in_the_jobs_order():
    job_list, cluster = _shuffled_case()
    answer = fill(job_list, cluster)
    assert isinstance(answer, InJobOrder)
    assert list(answer) == [job.id for job in job_list if job.id in answer]
    everything = fill(job_list[:2], cluster)          # WFD places all: its answer, in order too
    assert isinstance(everything, InJobOrder) and list(everything) == ["j0", "j1"]


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from([0, 5, 10, 20, 30]), st.sampled_from([0, 1, 2, 4]),
                          st.sampled_from([0, 1, 2]), st.sampled_from([1, 2, 3])), max_size=24))
def test_the_density_order_is_lexsorts_also_for_jobs_of_equal_density(shapes):
    """A job scaled by k has the density of the original, with k x its compute: it goes first
    (the fast path is a sort on density alone, checked for such ties)."""
    cluster = Cluster([Node("n", 16, (GPU(0, "A100", 40), GPU(1, "H100", 80)))])
    job_list = [Job(f"j{i}", c * k, m * k, cpus=q * k) for i, (c, m, q, k) in enumerate(shapes)]
    if not job_list:
        return
    arrays = _Arrays(job_list, cluster)
    base = (arrays.free_c, arrays.free_m, arrays.free_q)
    got = _density(arrays.c, arrays.m, arrays.q, arrays, base)
    c0, m0, q = arrays.c[:, 0], arrays.m[:, 0], arrays.q
    count = 2
    weights = [(want / cap) / (cap / count) for want, cap in ((c0.sum(), 200.0), (q.sum(), 16.0), (m0.sum(), 120.0))]
    cost = weights[0] * c0 + weights[1] * q + weights[2] * m0
    density = np.where(cost > 1e-9, c0 / np.where(cost > 1e-9, cost, 1.0), np.inf)
    assert got.tolist() == np.lexsort((-c0, -density)).tolist()
    plain = getattr(fill_kernels.density_order, "py_func", fill_kernels.density_order)
    assert plain(arrays.c, arrays.m, arrays.q, *base).tolist() == got.tolist()     # compiled = Python
