"""The machine set-up's rules as pure functions of core (``needs_profile``, ``group_of``,
``exclusive_demand``, ``relearned_ratio``, ``member_job``, ``Oversubscription``): what
``runtime/devices/machine.py`` and the simulator call instead of deciding in closures."""
from __future__ import annotations

import pytest

from hypersack.core.allocator import Demand
from hypersack.core.demand import needs_profile
from hypersack.core.execution import choose_execution, exclusive_demand, group_of
from hypersack.core.oversubscription import (ONLINE_STEP, Colocation, Oversubscription,
                                             auto_ratio, relearned_ratio)
from hypersack.core.packs import member_demand, member_job
from hypersack.core.trial import TrialRecord
from hypersack.errors import ConfigError

FULL = {"A100": {"compute": 300.0, "memory_gb": 4.0, "runtime": 1.0}}


def test_a_model_that_fills_every_device_alone_is_not_profiled_again():
    kw = dict(per_arch=FULL, capacity={"A100": 300.0}, archs=["A100"])
    assert not needs_profile(learning=False, alone_everywhere=True, **kw)
    assert needs_profile(learning=True, alone_everywhere=True, **kw)       # auto learns
    assert needs_profile(learning=False, alone_everywhere=False, **kw)     # measured beside others
    assert needs_profile(learning=False, alone_everywhere=True, per_arch=FULL,
                         capacity={"A100": 300.5}, archs=["A100"])          # room for another
    assert needs_profile(learning=False, alone_everywhere=True, per_arch=FULL,
                         capacity={"A100": 300.0, "H100": 250.0}, archs=["A100", "H100"])
    assert needs_profile(learning=False, alone_everywhere=True, per_arch={}, capacity={},
                         archs=[])                                           # no device kind


def test_the_execution_group_reads_the_busiest_profile_and_the_smallest_device():
    per_arch = {"A100": {"compute": 40.0, "memory_gb": 30.0, "runtime": 1.0},
                "H100": {"compute": 95.0, "memory_gb": 10.0, "runtime": 1.0}}
    group = group_of("m", per_arch, [80.0, 40.0])
    assert (group.compute_percent, group.memory_gb, group.device_memory_gb) == (95.0, 30.0, 40.0)
    assert choose_execution(group).mode == "exclusive"
    assert group_of("m", {}, []).compute_percent is None
    whole = exclusive_demand(per_arch, {"A100": 300.0})
    assert whole == {"A100": {"compute": 300.0, "memory_gb": 30.0, "runtime": 1.0}}


def test_the_run_keeps_its_ratio_until_auto_moves_it_by_more_than_the_step():
    saturated = [Colocation(300.0, 1.5)]          # capacity 200%: ratio 2
    assert auto_ratio("A100", saturated).ratio == 2.0
    assert relearned_ratio("A100", saturated, now=2.0) is None
    assert relearned_ratio("A100", saturated, now=2.0 * (1 + ONLINE_STEP)) is None
    moved = relearned_ratio("A100", saturated, now=2.0 * (1 + 2 * ONLINE_STEP))
    assert moved is not None and moved.ratio == 2.0
    assert relearned_ratio("A100", saturated, now=3.0).ratio == 2.0


def test_a_member_job_is_its_share_for_the_machine_and_the_simulator():
    record = TrialRecord(7, {"x": 1}, 0)
    job = member_job(record, Demand(100.0, 2.0, 4.0), 8)
    share = member_demand(Demand(100.0, 2.0, 4.0), 8)
    assert (job.id, job.compute, job.memory_gb, job.cpus) == (7, share.compute, 2.0, 0.5)
    sim = member_job(record, Demand(100.0, 2.0, 4.0), 4,
                     {"A100": {"memory_gb": 3.0, "runtime": 9.0}}, 9.0)
    a100 = sim.demand("A100")
    assert (a100.compute, a100.memory_gb, a100.runtime) == (25.0, 3.0, 9.0)
    assert sim.runtime == 9.0


def test_oversubscription_is_parsed_once_with_one_set_of_bounds():
    assert Oversubscription.parse(None).mode == "auto"
    assert Oversubscription.parse("paper").ratio("H100") == 2.5
    assert Oversubscription.parse("auto").ratio("cpu") == 1.0
    fixed = Oversubscription.parse({"A100": 4})
    assert fixed.mode == "fixed" and fixed.ratio("A100") == 4.0 and fixed.ratio("H100") == 2.5
    assert Oversubscription.parse(1.5).ratio("anything") == 1.5
    for bad, field in ((0.5, "oversubscription"), ({"A100": 0.9}, "oversubscription.A100"),
                       (1000, "oversubscription"), ("sometimes", "oversubscription")):
        with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
            Oversubscription.parse(bad)
