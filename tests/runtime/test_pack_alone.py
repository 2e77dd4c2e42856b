"""A trial alone in its algorithm pack (``pack_size`` 1) is a plain trial on the local side too:
it demands a plain trial's share of its device, and the executor's pack host does not take it."""
from __future__ import annotations

import pytest

from hypersack.core.spec import StudySpec
from hypersack.core.trial import Launch, TrialRecord
from hypersack.runtime.executors.packs import PackHost
from hypersack.runtime.machine import Machine, _fused_demand
from hypersack.runtime.pack_worker import PackPlan

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


def test_the_pack_host_routes_a_lone_trial_to_a_plain_worker():
    plan = PackPlan(task=object(), ref=None, mode="fused", max_members=4)
    host = PackHost(plan, pool=None, trial_dir=lambda t: None, steps_for=lambda c: None,  # type: ignore[arg-type]
                    unsafe_checkpoints=False)
    lone = Launch(0, {"x": 1}, seed=0, attempt=1, group=7, pack_size=1)
    member = Launch(1, {"x": 1}, seed=1, attempt=1, group=8, pack_size=2)
    assert not host.fuses(lone) and host.fuses(member)
