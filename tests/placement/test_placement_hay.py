"""Hay (node score + GPU state machine) and the Ray-default baseline: examples, ray#52133, and
property tests over random place/release histories."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hypersack.placement.hay import (ACTIVATED, DEACTIVATED, UNAVAILABLE, gpu_state, gpu_states,
                                          node_score)
from hypersack.placement.live import LiveCluster
from hypersack.placement.model import EPS
from hypersack.errors import ConfigError
from hypersack.placement import GPU, Cluster, Job, Node, assign, check_placement, parse_placement

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def nodes(n_nodes=2, n_gpus=2, cpus=64, memory=40):
    return [Node(f"n{k}", cpus, tuple(GPU(g, "A100", memory) for g in range(n_gpus))) for k in range(n_nodes)]


def test_ray_52133_twenty_jobs_of_18_percent_on_2x2_gpus_all_placed_by_hay():
    cluster = Cluster(nodes())
    jobs = [Job(i, 18, 1, cpus=0) for i in range(20)]
    answer = assign(jobs, cluster, "hay", check=True)
    assert len(answer) == 20
    live = LiveCluster(cluster)                     # one at a time, as a study asks
    for job in jobs:
        placed = live.assign([job], "hay")
        assert placed, job.id
        live.occupy(job, placed[job.id])
    assert all(live.free(n.id, g.id)[0] == pytest.approx(10) for n in nodes() for g in n.gpus)


def test_ray_judges_a_node_by_its_total_free_gpu_and_strands_the_job_hay_filters_nodes():
    # n0: 10 + 10 free (90% used, feasible by its total of 20); n1: 0 + 18 free (91% used).
    cluster = Cluster(nodes())
    for k, (dev, c) in enumerate([(("n0", 0), 90), (("n0", 1), 90), (("n1", 0), 100), (("n1", 1), 82)]):
        cluster = cluster.with_running(Job(f"old{k}", c, 1, cpus=0), dev)
    job = [Job("new", 18, 1, cpus=0)]
    assert assign(job, cluster, "ray") == {}                          # ray#52133: stuck on n0
    assert assign(job, cluster, "hay") == {"new": (("n1", 1),)}


def test_ray_packs_the_first_node_to_half_then_spreads():
    cluster = Cluster(nodes(n_gpus=2))
    jobs = [Job(i, 30, 1, cpus=0) for i in range(6)]
    answer = assign(jobs, cluster, "ray")
    # n0 takes jobs while under 50% used (0%, 15%, 30%, 45%), each on its first GPU with room;
    # at 60% the next node under 50% (n1) takes them.
    assert [answer[i][0] for i in range(6)] == [("n0", 0), ("n0", 0), ("n0", 0), ("n0", 1),
                                                ("n1", 0), ("n1", 0)]


def test_hay_packs_fractional_jobs_onto_activated_gpus_and_keeps_whole_ones():
    cluster = Cluster(nodes(n_nodes=1, n_gpus=4))
    small = [Job(f"s{i}", 20, 1, cpus=0) for i in range(5)]
    answer = assign(small, cluster, "hay")
    assert {devs[0] for devs in answer.values()} == {("n0", 0)}       # one GPU activated, 5 x 20
    whole = [Job("w", 100, 1, cpus=0), Job("dp", 60, 1, cpus=0, gpus=2)]
    loaded = cluster.with_jobs(small, answer)
    assert assign(whole, loaded, "hay") == {"w": (("n0", 1),), "dp": (("n0", 2), ("n0", 3))}
    assert assign(whole, loaded, "wfd")["w"] == (("n0", 1),)


def test_hay_sends_work_to_the_node_with_the_highest_score():
    cluster = Cluster(nodes()).with_running(Job("dp", 70, 1, cpus=0, gpus=2), [("n0", 0), ("n0", 1)])
    live = LiveCluster(cluster)
    # n0: two activated GPUs with 30% free each: G_frag = 0.6; n1: two whole GPUs.
    assert node_score(live, 0, 1, 2) == pytest.approx((1 * 0.6 + 2 * 0) / 2)
    assert node_score(live, 1, 1, 2) == pytest.approx((1 * 0 + 2 * 2) / 2)
    assert assign([Job("s", 20, 1, cpus=0)], cluster, "hay") == {"s": (("n1", 0),)}
    # All the weight on fragments: n0 (0.3) beats n1 (0: no activated GPU).
    assert assign([Job("s", 20, 1, cpus=0)], cluster, "hay", w_frag=1, w_entire=0) == {"s": (("n0", 0),)}


def test_placement_options_parse_from_the_study_yaml_form():
    assert parse_placement("wfd") == ("wfd", {})
    assert parse_placement({"policy": "hay", "w_frag": 1, "w_entire": 3}) == ("hay", {"w_frag": 1, "w_entire": 3})
    with pytest.raises(ConfigError) as err:
        parse_placement({"policy": "hay", "w_frag": "x"})
    assert err.value.field == "placement.w_frag"
    with pytest.raises(ConfigError) as err:
        parse_placement({"policy": "wfd", "w_frag": 1})
    assert err.value.field == "placement.w_frag"
    with pytest.raises(ConfigError) as err:
        parse_placement({"w_frag": 1})
    assert err.value.field == "placement.policy"
    with pytest.raises(ConfigError):
        parse_placement("nope")


# ---- properties over random histories -----------------------------------------------------------

COMPUTE = st.sampled_from([5, 10, 18, 20, 25, 33.3, 40, 50, 60, 100])


@st.composite
def histories(draw):
    """Nodes, then ops: ("place", job) asks hay and occupies its answer; ("release", k)."""
    ns = [Node(f"n{k}", draw(st.sampled_from([2, 8, 64])),
               tuple(GPU(g, "A100", draw(st.sampled_from([16, 40]))) for g in range(draw(st.integers(1, 4)))))
          for k in range(draw(st.integers(1, 3)))]
    ops = []
    for t in range(draw(st.integers(1, 30))):
        if draw(st.integers(0, 3)):
            ops.append(("place", Job(f"j{t}", draw(COMPUTE), draw(st.sampled_from([1, 4, 8])),
                                     cpus=draw(st.sampled_from([0, 1])),
                                     gpus=draw(st.sampled_from([1, 1, 1, 2])))))
        else:
            ops.append(("release", draw(st.integers(0, 50))))
    weights = draw(st.sampled_from([(1.0, 2.0), (1.0, 0.0), (0.0, 1.0), (3.0, 1.0)]))
    return ns, ops, weights


def expected_state(live, i, jobs_on):
    load = live.load
    if not jobs_on:
        return DEACTIVATED
    return ACTIVATED if load.free_c[i] > EPS and load.free_m[i] > EPS else UNAVAILABLE


def check_one_placement(live, job, devices, before):
    """The GPU rules of Hay on the states ``before`` the job was placed."""
    index = {key: i for i, key in enumerate(live.load.keys)}
    whole = job.gpus > 1 or job.compute >= 100 - EPS
    if whole:
        assert all(before[d] == DEACTIVATED for d in devices), (job, devices, before)
        return
    (dev,) = devices
    assert before[dev] in (ACTIVATED, DEACTIVATED)
    if before[dev] == DEACTIVATED:        # then no activated GPU of that node could take it
        n = live.load.node[index[dev]]
        for i in live.load.node_gpus[n]:
            if before[live.load.keys[i]] == ACTIVATED:
                assert not (live.load.free_c[i] + EPS >= job.compute and live.load.free_m[i] + EPS >= job.memory_gb)
    else:                                 # the activated GPU of the node with the most room
        n = live.load.node[index[dev]]
        best = max(live.load.free_c[i] for i in live.load.node_gpus[n] if before[live.load.keys[i]] == ACTIVATED
                   and live.load.free_c[i] + EPS >= job.compute and live.load.free_m[i] + EPS >= job.memory_gb)
        assert live.load.free_c[index[dev]] == best


@SETTINGS
@given(histories())
def test_hay_keeps_eq_1_to_4_its_gpu_rules_and_its_states_after_each_place_and_release(history):
    ns, ops, (w_frag, w_entire) = history
    live = LiveCluster(Cluster(ns))
    running: dict = {}
    for op in ops:
        if op[0] == "place":
            job = op[1]
            before = gpu_states(live)
            answer = live.assign([job], "hay", w_frag=w_frag, w_entire=w_entire)
            assert gpu_states(live) == before                      # asking changes nothing
            if not answer:
                continue
            check_placement([job], live.snapshot(), answer)       # Eq. 1-4
            check_one_placement(live, job, answer[job.id], before)
            live.occupy(job, answer[job.id])
            running[job.id] = answer[job.id]
        elif running:
            jid = list(running)[op[1] % len(running)]
            live.release(jid)
            del running[jid]
        snapshot = live.snapshot()
        for i, (node_id, gpu_id) in enumerate(live.load.keys):
            assert gpu_state(live, i) == expected_state(live, i, snapshot.jobs_on(node_id, gpu_id))


@SETTINGS
@given(histories())
def test_hay_places_a_job_whenever_some_gpu_can_take_it(history):
    """The node filter: a fractional job is left out only when no activated or idle GPU fits it."""
    ns, ops, (w_frag, w_entire) = history
    live = LiveCluster(Cluster(ns))
    for op in ops:
        if op[0] != "place" or op[1].gpus != 1:
            continue
        job = op[1]
        answer = live.assign([job], "hay", w_frag=w_frag, w_entire=w_entire)
        load = live.load
        possible = any(load.fits(i, job.compute, job.memory_gb, job.cpus)
                       and (live.idle(i) or (job.compute < 100 - EPS and gpu_state(live, i) == ACTIVATED))
                       for i in range(len(load.keys)))
        assert bool(answer) == possible
        if answer:
            live.occupy(job, answer[job.id])
