"""LiveCluster (the mutable load with a persistent index) and the copy-on-write Cluster against a
Cluster built from scratch: same free compute/memory/cores bit for bit after any sequence of
occupy/release; ``assign`` answers from the live load equal those from a fresh one and, for
the greedy policies, the literal Algorithms 1-2 (placement_reference.py)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hypersack.placement.cluster import Running
from hypersack.placement.live import POLICIES, LiveCluster
from placement_reference import reference
from hypersack.errors import ConfigError
from hypersack.placement import GPU, Cluster, Job, Node, PlacementError, assign

ARCHS = ["A100", "H100"]
# Values whose float sums depend on their order (33.3, 0.1) next to round ones.
COMPUTE = st.sampled_from([0, 10, 25, 30, 33.3, 45, 50, 65, 100, 0.1])
MEMORY = st.sampled_from([0, 1, 2.5, 4, 8, 16, 0.3])
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def clusters(draw):
    nodes = []
    for k in range(draw(st.integers(1, 3))):
        gpus = [GPU(g, draw(st.sampled_from(ARCHS)), draw(st.sampled_from([16, 40, 80])),
                    oversubscription=draw(st.sampled_from([1, 2, 2.5]))) for g in range(draw(st.integers(0, 4)))]
        nodes.append(Node(f"n{k}", draw(st.sampled_from([0, 4, 8, 13.5])), gpus))
    return nodes


@st.composite
def a_job(draw, job_id, max_gpus=3):
    per_arch = None
    if draw(st.booleans()):
        per_arch = {"H100": {"compute": draw(COMPUTE), "memory_gb": draw(MEMORY),
                             "runtime": draw(st.integers(1, 50))}}
    return Job(job_id, draw(COMPUTE), draw(MEMORY), cpus=draw(st.sampled_from([0, 1, 2, 1.5])),
               runtime=draw(st.integers(1, 50)), per_arch=per_arch,
               gpus=draw(st.sampled_from([g for g in (1, 1, 1, 2, 3) if g <= max_gpus])))


@st.composite
def histories(draw):
    """Nodes and a list of operations: ("occupy", job, devices, strict) or ("release", k)."""
    nodes = draw(clusters())
    devices = [(n.id, g.id) for n in nodes for g in n.gpus]
    ops = []
    for t in range(draw(st.integers(0, 25))):
        if devices and draw(st.integers(0, 2)):
            job = draw(a_job(f"j{t}", max_gpus=min(3, len(devices))))
            chosen = draw(st.lists(st.sampled_from(devices), min_size=job.gpus, max_size=job.gpus, unique=True))
            ops.append(("occupy", job, tuple(chosen), draw(st.booleans())))
        else:
            ops.append(("release", draw(st.integers(0, 30))))
    return nodes, ops


def same_load(a, b) -> None:
    """Every GPU's and node's load of ``a`` and ``b`` (Cluster or LiveCluster) is equal, exactly."""
    for node in b.nodes:
        assert a.free_cpus(node.id) == b.free_cpus(node.id), node.id
        for gpu in node.gpus:
            assert a.free(node.id, gpu.id) == b.free(node.id, gpu.id), (node.id, gpu.id)


def same_index(live: LiveCluster, fresh: LiveCluster) -> None:
    """``live``'s load arrays and index equal ``fresh``'s (a LiveCluster built from scratch),
    exactly: free compute/memory/cores, idle GPUs, exact sums, and every tree's maxima once
    ``live`` is settled; before, its trees hold each node's cores at least as high as they are
    (an upper bound: no fitting GPU is pruned), compute and memory exactly."""
    for one in (live, fresh):
        assert all(held >= true for held, true in zip(one._index_q, one.load.free_q))
    fresh.settle()                 # a LiveCluster that occupied jobs itself holds them too
    for arch, tree in live._trees.items():
        other = fresh._trees[arch]
        assert (tree.c, tree.m) == (other.c, other.m), arch
        assert all(a >= b for a, b in zip(tree.q, other.q)), arch
    live.settle()
    for name in ("free_c", "free_m", "free_q"):
        assert getattr(live.load, name) == getattr(fresh.load, name), name
    for name in ("_idle_c", "_idle_m", "_idle_n", "_count", "_exact_c", "_exact_m", "_exact_q", "_used_c",
                 "_used_m", "_used_q"):
        assert getattr(live, name) == getattr(fresh, name), name
    assert live._trees.keys() == fresh._trees.keys()
    for arch, tree in live._trees.items():
        other = fresh._trees[arch]
        assert (tree.c, tree.m, tree.q) == (other.c, other.m, other.q), arch


def replay(nodes, ops):
    """Apply ``ops`` to a LiveCluster, a copy-on-write Cluster and a from-scratch one; compare."""
    live, cow, running = LiveCluster(Cluster(nodes)), Cluster(nodes), {}
    for op in ops:
        if op[0] == "occupy":
            _, job, devices, strict = op
            try:
                cow_next = cow.with_running(job, devices, strict=strict)
            except PlacementError as exc:
                with pytest.raises(PlacementError) as caught:
                    live.occupy(job, devices, strict=strict)
                assert str(caught.value) == str(exc)
                continue
            live.occupy(job, devices, strict=strict)
            cow = cow_next
            running[job.id] = cow.running[job.id]
        elif running:
            jid = list(running)[op[1] % len(running)]
            cow = cow.without(jid)
            live.release(jid)
            del running[jid]
        scratch = Cluster(nodes, running)
        same_load(live, scratch)
        same_load(cow, scratch)
        assert dict(cow.running) == dict(scratch.running) == live.running
        assert live.snapshot() == scratch
        same_index(live, LiveCluster(scratch))
        for node in nodes:
            for gpu in node.gpus:
                assert cow.jobs_on(node.id, gpu.id) == scratch.jobs_on(node.id, gpu.id)
    return live, Cluster(nodes, running)


@SETTINGS
@given(histories())
def test_incremental_load_equals_a_cluster_built_from_scratch(history):
    replay(*history)


@SETTINGS
@given(histories(), st.randoms(use_true_random=False))
def test_the_live_load_depends_on_which_jobs_run_not_on_the_order(history, rnd):
    """Release sequences: every job of a history occupied, then all released in a random order
    but a kept few, equals those few occupied alone (in another order), arrays and index alike;
    releasing the rest too leaves the empty cluster's index."""
    nodes, ops = history
    jobs = [(op[1], op[2]) for op in ops if op[0] == "occupy"]
    live = LiveCluster(Cluster(nodes))
    for job, devices in jobs:
        live.occupy(job, devices, strict=False)
    order = list(jobs)
    rnd.shuffle(order)
    keep = order[:rnd.randint(0, len(order))]
    kept = {job.id for job, _ in keep}
    for job, _ in order:
        if job.id not in kept:
            live.release(job.id)
    other = LiveCluster(Cluster(nodes))
    for job, devices in reversed(keep):
        other.occupy(job, devices, strict=False)
    same_index(live, other)
    same_index(live, LiveCluster(Cluster(nodes, {job.id: Running(job, devices) for job, devices in keep})))
    assert set(live.running) == kept
    for job, _ in keep:
        live.release(job.id)
    same_index(live, LiveCluster(Cluster(nodes)))


@SETTINGS
@given(histories(), st.lists(st.integers(0, 10**6), max_size=10), st.data())
def test_live_assign_equals_assign_on_the_snapshot_and_changes_nothing(history, seeds, data):
    live, scratch = replay(*history)
    new_jobs = [data.draw(a_job(f"new{k}")) for k in range(len(seeds))]
    for policy in POLICIES:
        answer = live.assign(new_jobs, policy)
        assert answer == assign(new_jobs, scratch, policy), policy
        if policy not in ("hay", "ray"):
            assert answer == reference(new_jobs, scratch, policy), policy
        same_load(live, scratch)
        assert live.assign(new_jobs[:1], policy) == assign(new_jobs[:1], scratch, policy), policy


@SETTINGS
@given(histories(), st.lists(st.integers(0, 10**6), min_size=1, max_size=6), st.data())
def test_an_unsettled_live_load_answers_as_a_cluster_built_from_scratch(history, seeds, data):
    """Occupying leaves a node's cores stale-high in the trees (``LiveCluster.settle``); a live
    load that was never settled answers every policy's ``assign`` as the snapshot does, and
    the greedy ones as the literal Algorithms 1-2, call after call."""
    nodes, ops = history
    live = LiveCluster(Cluster(nodes))
    for op in ops:
        if op[0] == "occupy":
            try:
                live.occupy(op[1], op[2], strict=op[3])
            except PlacementError:
                pass
        elif live.running:
            live.release(list(live.running)[op[1] % len(live.running)])
    scratch = Cluster(nodes, live.running)
    new_jobs = [data.draw(a_job(f"new{k}")) for k in range(len(seeds))]
    for policy in POLICIES:
        for jobs in (new_jobs, new_jobs[:1], new_jobs[::-1]):
            answer = live.assign(jobs, policy)
            assert answer == assign(jobs, scratch, policy), policy
            if policy not in ("hay", "ray"):
                assert answer == reference(jobs, scratch, policy), policy
            same_load(live, scratch)
    same_index(live, LiveCluster(scratch))


def test_a_search_turned_away_by_a_nodes_cores_settles_that_node():
    """A node out of cores whose GPUs still have room: the first search visits its leaves and
    is turned away, then the node's cores in the trees are the true ones (later searches prune
    it whole)."""
    nodes = [Node("a", 2, tuple(GPU(g, "A100", 40) for g in range(4))),
             Node("b", 8, tuple(GPU(g, "A100", 40) for g in range(4)))]
    live = LiveCluster(Cluster(nodes))
    live.occupy(Job("x", 10, 1, cpus=2), ("a", 0))
    assert live._index_q == [2.0, 8.0] and live.load.free_q == [0.0, 8.0]
    assert live.assign([Job("y", 10, 1, cpus=1)], "ff") == {"y": (("b", 0),)}
    assert live._index_q == [0.0, 8.0]
    live.release("x")
    assert live._index_q == [2.0, 8.0]


def test_a_cluster_derived_copy_on_write_leaves_the_original_unchanged():
    nodes = [Node("a", 8, (GPU(0, "A100", 40, oversubscription=2), GPU(1, "A100", 40)))]
    empty = Cluster(nodes)
    one = empty.with_running(Job("x", 33.3, 4, cpus=2), ("a", 0))
    two = one.with_running(Job("y", 50, 8, cpus=3, gpus=2), [("a", 0), ("a", 1)])
    back = two.without("x")
    assert empty.free("a", 0) == (200.0, 40.0) and empty.free_cpus("a") == 8.0
    assert one.free("a", 0) == (200 - 33.3, 36.0) and one.jobs_on("a", 0) == ["x"]
    assert two.jobs_on("a", 0) == ["x", "y"] and two.free_cpus("a") == 8 - 2 - 6
    assert back == Cluster(nodes, {"y": two.running["y"]})
    assert back.free("a", 0) == (150.0, 32.0) and back.free_cpus("a") == 2.0
    assert one.jobs_on("a", 0) == ["x"]                 # untouched by the later derivations


def test_live_cluster_answers_worst_fit_and_first_fit_from_its_index():
    nodes = [Node("a", 100, tuple(GPU(g, "A100", 80, oversubscription=2) for g in range(4)))]
    live = LiveCluster(Cluster(nodes))
    live.occupy(Job("busy", 150, 1), ("a", 0))
    live.occupy(Job("half", 100, 1), ("a", 1))
    probe = [Job("p", 40, 1)]
    assert live.assign(probe, "wf") == {"p": (("a", 2),)}        # most compute left, first of ties
    assert live.assign(probe, "ff") == {"p": (("a", 0),)}        # first GPU with room (50 left)
    assert live.assign([Job("big", 60, 1)], "ff") == {"big": (("a", 1),)}
    live.release("busy")
    assert live.assign(probe, "wf") == {"p": (("a", 0),)}
    assert live.free("a", 0) == (200.0, 80.0) and live.free_cpus("a") == 99.0


def test_live_cluster_checks_its_input_like_assign_and_with_running():
    nodes = [Node("a", 4, (GPU(0, "A100", 16),))]
    live = LiveCluster(Cluster(nodes))
    live.occupy(Job("x", 50, 1), ("a", 0))
    with pytest.raises(ConfigError, match="cluster"):
        LiveCluster("not a cluster")
    with pytest.raises(ConfigError, match="placement"):
        live.assign([], "wfd-ls")
    with pytest.raises(ConfigError, match="placement.w_frag"):
        live.assign([], "wfd", w_frag=1)
    with pytest.raises(ConfigError, match="placement.w_entire"):
        live.assign([], "hay", w_entire=-1)
    with pytest.raises(ConfigError, match=r"jobs\[0\]"):
        live.assign(["job"], "wfd")
    with pytest.raises(ConfigError, match="already running"):
        live.assign([Job("x", 1, 1)], "wfd")
    with pytest.raises(ConfigError, match="unique"):
        live.assign([Job("y", 1, 1), Job("y", 1, 1)], "wfd")
    with pytest.raises(ConfigError, match="job_id"):
        live.release("nobody")
    with pytest.raises(PlacementError, match="no GPU"):
        live.occupy(Job("z", 1, 1), ("a", 7))
    with pytest.raises(PlacementError, match="already running"):
        live.occupy(Job("x", 1, 1), ("a", 0))
    with pytest.raises(PlacementError, match="Eq. 2"):
        live.occupy(Job("w", 60, 1), ("a", 0))
    live.occupy(Job("w", 60, 1), ("a", 0), strict=False)           # a load that is a fact
    assert live.free("a", 0) == (-10.0, 14.0)
    assert live.assign([Job("v", 1, 1)], "wf") == {}


def test_renamed_job_equals_one_built_anew_and_checks_the_id():
    job = Job("a", 30, 2, cpus=4, runtime=9, per_arch={"H100": {"compute": 20}}, gpus=2)
    assert job.renamed(7) == Job(7, 30, 2, cpus=4, runtime=9, per_arch={"H100": {"compute": 20}}, gpus=2)
    assert job.id == "a"
    with pytest.raises(ConfigError, match="job.id"):
        job.renamed(True)


def test_a_data_parallel_job_that_found_no_gpus_is_asked_again_after_a_release():
    nodes = [Node(n, 8, tuple(GPU(g, "A100", 40) for g in range(2))) for n in ("a", "b")]
    live = LiveCluster(Cluster(nodes))
    live.occupy(Job("x", 80, 1), ("a", 0))
    live.occupy(Job("y", 80, 1), ("b", 0))
    pair = [Job("dp", 50, 1, gpus=2)]
    assert live.assign(pair, "wfd") == {"dp": (("a", 1), ("b", 1))}        # across nodes
    live.occupy(Job("z", 80, 1), ("b", 1))
    assert live.assign(pair, "wfd") == {} and live.assign(pair, "ff") == {}
    live.occupy(Job("w", 10, 1), ("a", 1))                                 # more load: still none
    assert live.assign(pair, "wfd") == {} == assign(pair, live.snapshot(), "wfd")
    live.release("z")
    assert live.assign(pair, "wfd") == {"dp": (("b", 1), ("a", 1))} == assign(pair, live.snapshot(), "wfd")


@SETTINGS
@given(histories(), st.lists(st.integers(0, 10**6), min_size=1, max_size=6), st.data())
def test_one_job_is_answered_and_occupied_by_gpu_numbers_as_by_assign_and_occupy(history, seeds,
                                                                                  data):
    """The allocator's single-job path: ``assign_one`` (one search, no journal) answers every
    policy as ``assign_checked(numbers=True)`` does, on an unsettled live load; occupying that
    answer with ``occupy_numbers`` leaves the load and index that ``occupy`` leaves."""
    nodes, ops = history
    live, twin = LiveCluster(Cluster(nodes)), LiveCluster(Cluster(nodes))
    for op in ops:
        if op[0] == "occupy":
            for one in (live, twin):
                try:
                    one.occupy(op[1], op[2], strict=op[3])
                except PlacementError:
                    pass
        elif live.running:
            jid = list(live.running)[op[1] % len(live.running)]
            live.release(jid)
            twin.release(jid)
    for k in range(len(seeds)):
        job = data.draw(a_job(f"new{k}"))
        for policy in POLICIES:
            found = live.assign_one(job, policy, {})
            assert found == twin.assign_checked([job], policy, {}, numbers=True).get(job.id), policy
        if found:                              # the last policy's answer is taken
            live.occupy_numbers(job, found)
            twin.occupy(job, twin.keys_of(found), strict=False)
            with pytest.raises(PlacementError):
                live.occupy_numbers(job, found)
    same_load(live, Cluster(nodes, twin.running))
    same_index(live, twin)
