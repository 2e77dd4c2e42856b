"""The exact reference (CP-SAT): feasible, and never worse than a heuristic on small instances."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from hypersack.errors import ConfigError
from hypersack.placement import GPU, Cluster, Job, Node, assign, check_placement, placed_compute, solve_mip

pytest.importorskip("ortools")

from test_placement_properties import HEURISTICS, jobs, loaded_clusters


def test_mip_beats_greedy_on_a_classic_bin_packing_trap():
    # Two GPUs of 100: 60+40 and 60+40 fill both; first-fit in this order strands 30 + 30.
    cluster = Cluster([Node("n", 8, [GPU(0, "A100", 40), GPU(1, "A100", 40)])])
    items = [Job("e", 30, 1), Job("a", 40, 1), Job("b", 60, 1), Job("c", 60, 1), Job("d", 40, 1)]
    greedy = placed_compute(items, cluster, assign(items, cluster, "ff"))
    assert greedy == pytest.approx(170)
    result = solve_mip(items, cluster, time_limit=10, workers=1)
    assert result.optimal and result.objective == pytest.approx(200)
    assert placed_compute(items, cluster, result.assignment) == pytest.approx(200)
    check_placement(items, cluster, result.assignment)


def test_mip_places_data_parallel_jobs_whole_or_not_at_all():
    cluster = Cluster([Node("n0", 4, [GPU(0, "A100", 40)]), Node("n1", 4, [GPU(0, "A100", 40)])])
    dp = Job("dp", compute=80, memory_gb=1, cpus=2, gpus=2)
    solo = Job("solo", compute=90, memory_gb=1)
    answer = assign([dp, solo], cluster, "mip", time_limit=10, workers=1)
    assert answer == {"dp": (("n0", 0), ("n1", 0))}       # 160 placed beats 90
    assert assign([Job("dp3", 10, 1, gpus=3)], cluster, "mip", time_limit=5, workers=1) == {}


def test_mip_options_are_validated():
    cluster = Cluster([Node("n0", 4, [GPU(0, "A100", 40)])])
    with pytest.raises(ConfigError) as err:
        assign([], cluster, "mip", time_limit=0)
    assert err.value.field == "placement.time_limit"
    with pytest.raises(ConfigError) as err:
        assign([], cluster, "mip", workers=0)
    assert err.value.field == "placement.workers"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loaded_clusters(), jobs(max_size=8))
def test_mip_is_feasible_and_at_least_as_good_as_every_heuristic(cluster, new_jobs):
    result = solve_mip(new_jobs, cluster, time_limit=10, workers=1)
    assert result.optimal, result.status
    check_placement(new_jobs, cluster, result.assignment)
    best = placed_compute(new_jobs, cluster, result.assignment)
    assert best == pytest.approx(result.objective, abs=1e-3 * (1 + len(new_jobs)))
    for policy in HEURISTICS:
        mine = placed_compute(new_jobs, cluster, assign(new_jobs, cluster, policy))
        assert best >= mine - 1e-6, policy
