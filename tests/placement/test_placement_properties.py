"""Property tests over random heterogeneous clusters with load and random jobs: every policy's
answer satisfies Eq. 1-4; the fast indexes agree with a literal O(jobs x GPUs) reading of the
paper's Algorithms 1 and 2 (tests/placement/placement_reference.py); the decreasing
policies are their plain twins on sorted jobs."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hypersack.placement.model import EPS
from hypersack.placement.improve import improve
from placement_reference import reference
from hypersack.placement import (GPU, Cluster, Job, Node, PlacementError, assign, check_placement,
                                 placed_compute)

HEURISTICS = ["ff", "ffd", "wf", "wfd", "exclusive", "wfd-ls", "hay", "ray", "fill", "lagrange", "auto"]
ARCHS = ["A100", "H100", "V100"]
# Round numbers on purpose: GPUs filled exactly to the brim are where off-by-epsilon bugs live.
COMPUTE = st.sampled_from([0, 3, 5, 10, 20, 25, 30, 40, 50, 60, 75, 97, 100, 120, 33.3])
MEMORY = st.sampled_from([0, 1, 2, 4, 8, 10, 16, 20, 30, 50])
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def gpus(draw, node_index):
    count = draw(st.integers(0, 3))
    return [GPU(g, draw(st.sampled_from(ARCHS)), draw(st.sampled_from([8, 16, 40, 80])),
                compute=draw(st.sampled_from([50, 100])),
                oversubscription=draw(st.sampled_from([1, 1.5, 2.5, 3]))) for g in range(count)]


@st.composite
def jobs(draw, prefix="j", max_size=12, multi=True):
    n = draw(st.integers(0, max_size))
    out = []
    for i in range(n):
        per_arch = None
        if draw(st.booleans()):
            arch = draw(st.sampled_from(ARCHS))
            per_arch = {arch: {"compute": draw(COMPUTE), "memory_gb": draw(MEMORY),
                               "runtime": draw(st.integers(1, 100))}}
        out.append(Job(f"{prefix}{i}", compute=draw(COMPUTE), memory_gb=draw(MEMORY),
                       cpus=draw(st.integers(0, 4)), runtime=draw(st.integers(1, 100)), per_arch=per_arch,
                       gpus=draw(st.sampled_from([1, 1, 1, 1, 2, 3])) if multi else 1))
    return out


@st.composite
def loaded_clusters(draw):
    """A cluster with some jobs already running (placed at random where they fit)."""
    nodes = [Node(f"n{k}", draw(st.integers(0, 16)), draw(gpus(k))) for k in range(draw(st.integers(1, 3)))]
    cluster = Cluster(nodes)
    devices = [(node.id, gpu.id) for node, gpu in cluster.gpus()]
    if devices:
        for job in draw(jobs(prefix="old", max_size=6, multi=False)):
            try:
                cluster = cluster.with_running(job, draw(st.sampled_from(devices)))
            except PlacementError:
                pass
    return cluster


def gpus_of_others(cluster, answer):
    """Every (job, device) pair: the running load and the new answer together."""
    pairs = [(jid, dev) for jid, run in cluster.running.items() for dev in run.devices]
    return pairs + [(jid, dev) for jid, devs in answer.items() for dev in devs]


@SETTINGS
@given(loaded_clusters(), jobs())
def test_every_policy_satisfies_eq_1_to_4_on_top_of_the_load(cluster, new_jobs):
    for policy in HEURISTICS:
        answer = assign(new_jobs, cluster, policy, check=True)      # raises on any violation
        by_id = {job.id: job for job in new_jobs}
        for jid, devices in answer.items():
            assert len(devices) == by_id[jid].gpus and len(set(devices)) == len(devices)
        cluster.with_jobs(new_jobs, answer)                          # strict: fits the load


@SETTINGS
@given(loaded_clusters(), jobs())
def test_exclusive_never_colocates(cluster, new_jobs):
    answer = assign(new_jobs, cluster, "exclusive")
    pairs = gpus_of_others(cluster, answer)
    new_devices = [dev for devs in answer.values() for dev in devs]
    assert len(set(new_devices)) == len(new_devices)
    busy = {dev for jid, dev in pairs if jid in cluster.running}
    assert not busy & set(new_devices)
    for jid, devices in answer.items():
        job = next(j for j in new_jobs if j.id == jid)
        for node_id, gpu_id in devices:
            gpu = cluster.gpu(node_id, gpu_id)
            assert job.demand(gpu.arch).compute <= gpu.compute + EPS     # no oversubscription


def fits_alone_somewhere(job, cluster):
    """Could ``job`` run in the empty cluster? (k GPUs it fits individually, on nodes with the
    cores for them.)"""
    count = 0
    for node in cluster.nodes:
        fitting = [g for g in node.gpus if job.demand(g.arch).compute <= g.capacity + EPS
                   and job.demand(g.arch).memory_gb <= g.memory_gb + EPS]
        usable = len(fitting) if job.cpus == 0 else min(len(fitting), int(node.cpus // job.cpus + EPS))
        count += usable
    return count >= job.gpus


@SETTINGS
@given(loaded_clusters(), jobs())
def test_a_job_that_fits_no_gpu_of_the_empty_cluster_is_absent(cluster, new_jobs):
    empty = Cluster(cluster.nodes)
    hopeless = {job.id for job in new_jobs if not fits_alone_somewhere(job, empty)}
    for policy in HEURISTICS:
        assert not hopeless & set(assign(new_jobs, cluster, policy)), policy


def by_runtime(new_jobs, cluster):
    archs = cluster.architectures
    return sorted(new_jobs, key=lambda job: job.expected_runtime(archs) if job.per_arch else job.runtime,
                  reverse=True)


@SETTINGS
@given(loaded_clusters(), jobs())
def test_decreasing_policies_are_the_plain_ones_on_jobs_sorted_by_runtime(cluster, new_jobs):
    ordered = by_runtime(new_jobs, cluster)
    runtimes = [max((j.demand(a).runtime for a in cluster.architectures), default=j.runtime) for j in ordered]
    assert runtimes == sorted(runtimes, reverse=True)
    assert assign(new_jobs, cluster, "ffd") == assign(ordered, cluster, "ff")
    assert assign(new_jobs, cluster, "wfd") == assign(ordered, cluster, "wf")


@SETTINGS
@given(loaded_clusters(), jobs(max_size=16))
def test_every_greedy_policy_is_the_literal_algorithm(cluster, new_jobs):
    """The one implementation (live.py's index) against Algorithms 1-2 read literally."""
    for policy in ("ff", "ffd", "wf", "wfd", "exclusive"):
        assert assign(new_jobs, cluster, policy) == reference(new_jobs, cluster, policy), policy


@SETTINGS
@given(loaded_clusters(), jobs())
def test_checker_rejects_any_single_extra_job_that_breaks_a_constraint(cluster, new_jobs):
    """Mutation check of the checker itself: move one placed job onto another GPU; the checker
    accepts it exactly when the hand-computed totals still satisfy Eq. 2-4."""
    answer = assign(new_jobs, cluster, "wfd")
    devices = [(n.id, g.id) for n, g in cluster.gpus()]
    singles = [jid for jid, devs in answer.items() if len(devs) == 1]
    if not singles or len(devices) < 2:
        return
    jid = singles[0]
    job = next(j for j in new_jobs if j.id == jid)
    target = next(d for d in devices if d != answer[jid][0])
    moved = {**answer, jid: (target,)}
    loaded = cluster.with_jobs(new_jobs, {k: v for k, v in answer.items() if k != jid}, strict=False)
    gpu = cluster.gpu(*target)
    c, m = loaded.free(*target)
    ok = (job.demand(gpu.arch).compute <= c + EPS and job.demand(gpu.arch).memory_gb <= m + EPS
          and job.cpus <= loaded.free_cpus(target[0]) + EPS)
    try:
        check_placement(new_jobs, cluster, moved)
        accepted = True
    except PlacementError:
        accepted = False
    assert accepted == ok


@SETTINGS
@given(loaded_clusters(), jobs())
def test_local_search_only_raises_placed_compute_and_keeps_data_parallel_jobs(cluster, new_jobs):
    for policy in ["ff", "wf", "wfd", "exclusive"]:
        start = assign(new_jobs, cluster, policy)
        better = improve(new_jobs, cluster, start, rounds=3, min_gain=0)
        check_placement(new_jobs, cluster, better)
        assert placed_compute(new_jobs, cluster, better) >= placed_compute(new_jobs, cluster, start) - 1e-6
        multi = {jid: devs for jid, devs in start.items() if len(devs) > 1}
        assert {jid: better[jid] for jid in multi} == multi
    wfd = placed_compute(new_jobs, cluster, assign(new_jobs, cluster, "wfd"))
    wfd_ls = placed_compute(new_jobs, cluster, assign(new_jobs, cluster, "wfd-ls", rounds=2))
    assert wfd_ls >= wfd - 1e-6
    assert placed_compute(new_jobs, cluster, assign(new_jobs, cluster, "fill")) >= wfd_ls - 1e-6
