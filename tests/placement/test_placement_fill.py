"""The ``fill`` packer (price starts, refill and evict moves) and the ``auto`` policy."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from hypersack.placement.auto import AUTO_PAIRS, auto_choice
from hypersack.placement.fill import POLISH, STEPS, _polish, _prepare, _search
from hypersack.placement.load import Load, demands
from hypersack.placement.prices import ORDERS, WITHIN, Groups, price_greedy, prices, reduced_profits
from hypersack.errors import ConfigError
from hypersack.placement.instances import tight_instance
from hypersack.placement import (GPU, Cluster, Job, Node, assign, check_placement, parse_placement, place,
                                 placed_compute)
from test_placement_properties import SETTINGS, jobs, loaded_clusters


def _groups(job_list, cluster):
    load = Load(cluster)
    singles = [job for job in job_list if job.gpus == 1]
    return load, singles, Groups(load, singles, demands(singles, list(load.by_arch)))


def two_kinds() -> tuple[list[Job], Cluster]:
    """Node "c" has compute to spare and little memory, node "m" the reverse: the dense jobs
    belong on "c", the fat ones on "m" (placed compute 350); by runtime WFD puts a fat job on
    "c"'s spare compute first and then has no memory there for the dense ones."""
    cluster = Cluster([Node("m", 64, (GPU(0, "A100", 80),)),
                       Node("c", 64, (GPU(0, "A100", 24, oversubscription=3),))])
    fat = [Job(f"f{i}", 20, 20, runtime=100) for i in range(4)]
    dense = [Job(f"d{i}", 90, 2, runtime=1) for i in range(3)]
    return fat + dense, cluster


def test_fill_sends_each_kind_of_job_where_its_resource_is_left():
    job_list, cluster = two_kinds()
    assert placed_compute(job_list, cluster, assign(job_list, cluster, "wfd")) < 350
    answer = place(job_list, cluster, "fill")
    assert placed_compute(job_list, cluster, answer) == pytest.approx(350)
    assert {jid for jid, dev in answer.items() if dev == ("c", 0)} == {"d0", "d1", "d2"}
    load, singles, groups = _groups(job_list, cluster)
    bound, kept = prices(groups, 0.0, 200)
    assert bound == pytest.approx(350)          # every job fits the pooled LP: L = their compute


def test_an_evict_move_takes_two_small_jobs_out_for_one_large_one():
    cluster = Cluster([Node("n0", 4, [GPU(0, "A100", 40, oversubscription=2)])])
    start = {"s1": (("n0", 0),), "s2": (("n0", 0),), "s3": (("n0", 0),)}   # 180 of 200, 32 GB of 40

    def case(memory: float, cpus: float) -> list[Job]:
        return [Job("s1", 40, 1, cpus=1), Job("s2", 40, 1, cpus=1), Job("s3", 100, 30, cpus=2),
                Job("big", 95, memory, cpus=cpus)]
    assert _polish(case(9.5, 2), cluster, start, 2, 0.25) == {"s3": (("n0", 0),), "big": (("n0", 0),)}
    # s1 and s2 out would leave 10 GB, or 2 cores: no move (s1 and s3 out would lose compute)
    assert _polish(case(10.5, 2), cluster, start, 2, 0.25) == start
    assert _polish(case(9.5, 3), cluster, start, 2, 0.25) == start


@SETTINGS
@given(loaded_clusters(), jobs(multi=False))
def test_every_price_greedy_answer_fits_and_the_dual_bound_holds(cluster, new_jobs):
    load, singles, groups = _groups(new_jobs, cluster)
    best = max(placed_compute(new_jobs, cluster, assign(new_jobs, cluster, p)) for p in ("wfd", "fill"))
    bound, kept = prices(groups, 0.0, 40, [10, 20])
    assert bound >= best - 1e-6                      # L bounds every feasible placement
    positions = list(range(len(singles)))
    for pc, pm, pq in kept:
        r = reduced_profits(groups, pc, pm, pq)
        assert np.all(np.isneginf(r) | groups.fit)
        for order in ORDERS:
            for within in WITHIN:
                fresh = Load(cluster)
                placed = price_greedy(fresh, groups, positions, demands(singles, list(fresh.by_arch)),
                                      singles, r, order, within)
                check_placement(singles, cluster, {singles[p].id: fresh.keys[i] for p, i in placed.items()})


def test_fill_options_are_checked():
    job_list, cluster = two_kinds()
    for name, bad in (("steps", -1), ("polish", 1.5), ("steps", True), ("kicks", -2), ("patience", 0.5),
                      ("seed", None)):
        with pytest.raises(ConfigError) as err:
            assign(job_list, cluster, "fill", **{name: bad})
        assert err.value.field == f"placement.{name}"
    plain = placed_compute(job_list, cluster, assign(job_list, cluster, "fill", steps=0, polish=0))
    assert plain <= placed_compute(job_list, cluster, assign(job_list, cluster, "fill"))


def test_auto_runs_fill_on_small_calls_and_lagrange_on_large_ones():
    job_list, cluster = two_kinds()
    assert auto_choice(job_list, cluster) == "fill" and len(job_list) * 2 <= AUTO_PAIRS
    assert auto_choice(job_list, cluster, pairs=13) == "lagrange"
    assert assign(job_list, cluster, "auto") == assign(job_list, cluster, "fill")
    assert assign(job_list, cluster, "auto", pairs=13) == assign(job_list, cluster, "lagrange")
    assert assign(job_list, cluster, "auto", pairs=14) == assign(job_list, cluster, "fill")
    with pytest.raises(ConfigError) as err:
        assign(job_list, cluster, "auto", pairs=-1)
    assert err.value.field == "placement.pairs"
    assert parse_placement("auto") == ("auto", {})
    assert parse_placement({"policy": "auto", "pairs": 10}) == ("auto", {"pairs": 10})


def test_the_dual_bound_comes_down_to_the_lp_bound():
    # compute binds on "a" (LP: 100 of the 120 asked), memory on "b" (LP: 40 GB of jobs with
    # 2.5 compute per GB: 100 of 150): L must come down from 270 to about 200
    cluster = Cluster([Node("a", 8, [GPU(0, "A100", 80)]), Node("b", 8, [GPU(0, "H100", 40, oversubscription=3)])])
    job_list = [Job("x", 60, 1, per_arch={"H100": {"memory_gb": 60}}),
                Job("y", 60, 1, per_arch={"H100": {"memory_gb": 60}}),
                Job("m1", 75, 30, per_arch={"A100": {"memory_gb": 90}}),
                Job("m2", 75, 30, per_arch={"A100": {"memory_gb": 90}})]
    load, singles, groups = _groups(job_list, cluster)
    bound, _ = prices(groups, 0.0, 300)
    assert 200 - 1e-6 <= bound <= 202


def test_fill_polishes_the_price_starts_unless_an_answer_is_proven_within_enough_of_the_bound():
    job_list, cluster = tight_instance(3)       # 107 jobs, 8 GPUs; CP-SAT found 1,761.2
    def value(**options):
        return placed_compute(job_list, cluster, assign(job_list, cluster, "fill", **options))
    wfd_start_only = value(polish=0, kicks=0)
    every_start = value(enough=2.0, kicks=0)
    assert every_start > wfd_start_only + 10      # the price starts matter here
    assert value(enough=0.5) == wfd_start_only    # proven at once: no price start polished, no kick
    call = _prepare(job_list, cluster)
    _, got, ceiling, tried = _search(call, 2, 0.25, STEPS, POLISH, 0.99, 0, 0, 1)
    assert tried < 1 + POLISH and got >= 0.99 * ceiling - 1e-6      # proven within 1%: stopped
    _, got_all, _, tried_all = _search(call, 2, 0.25, STEPS, POLISH, 2.0, 0, 0, 1)
    assert tried_all == 1 + POLISH and got_all == pytest.approx(every_start)
