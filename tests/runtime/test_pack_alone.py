"""A trial alone in its algorithm pack (``pack_size`` 1) is a plain trial on the local side too:
it demands a plain trial's share of its device, the study's pack plan does not fuse it, and the
controller seats it in no pack (its Launch has none)."""
from __future__ import annotations

import pytest

from hypersack.core.spec import StudySpec
from hypersack.core.trial import TrialRecord
from hypersack.runtime.executors.packs import TaskPackPlan
from hypersack.runtime.devices.machine import Machine, _fused_demand

SPEC = StudySpec.from_dict({"name": "s", "space": {"x": 1}, "objective": ["y", "max"],
                            "budget": {"trials": 1}, "pack": {"max_members": 10},
                            "resources": {"compute": 60, "memory_gb": 4, "cpus": 1}})


def _record(pack_size):
    info = {} if pack_size is None else {"pack": 7, "pack_size": pack_size}
    return TrialRecord(0, {"x": 1}, seed=0, info=info)


@pytest.mark.parametrize("pack_size, member", [(None, True), (3, True), (1, False)])
def test_a_lone_trial_demands_a_plain_trials_share(pack_size, member):
    machine = Machine(slots=[], cluster=None)
    _fused_demand(machine, SPEC, lambda config, size: size != 1)
    job = machine.demand(_record(pack_size))
    assert job.cpus == pytest.approx(0.1 if member else 1.0)    # a member: cpus / max_members


def test_the_pack_plan_does_not_fuse_a_lone_trial():
    plan = TaskPackPlan(task=object(), ref=None, mode="fused", max_members=4)
    assert not plan.fuses({"x": 1}, 1) and plan.fuses({"x": 1}, 2) and plan.fuses({"x": 1})
