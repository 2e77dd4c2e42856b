"""Local worker slots are checked against what the machine holds before any slot is built."""
from __future__ import annotations

import pytest

from hypersack.errors import ConfigError
from hypersack.runtime.devices import slots as devices
from hypersack.runtime.devices.slots import default_slots
from hypersack.validation import MAX_LOCAL_WORKERS_PER_CPU, MAX_LOCAL_WORKERS_PER_GPU


def test_a_billion_workers_is_refused_naming_the_limit(monkeypatch):
    def no_slot(*args):
        pytest.fail("a slot was built before the worker count was checked")
    monkeypatch.setattr(devices, "Slot", no_slot)
    with pytest.raises(ConfigError) as exc:
        default_slots(1_000_000_000, gpus=[], cpu_count=2)
    assert exc.value.field == "executor.workers"
    assert f"in [1, {2 * MAX_LOCAL_WORKERS_PER_CPU}]" in exc.value.problem
    assert "2 CPU cores and 0 GPUs" in exc.value.problem


def test_workers_up_to_the_limit_get_slots():
    limit = 2 * MAX_LOCAL_WORKERS_PER_CPU + 2 * MAX_LOCAL_WORKERS_PER_GPU
    slots = default_slots(limit, gpus=[0, 1], cpu_count=2)
    assert len(slots) == limit
    with pytest.raises(ConfigError):
        default_slots(limit + 1, gpus=[0, 1], cpu_count=2)


def test_no_workers_given_means_one_per_core():
    assert len(default_slots(None, gpus=[], cpu_count=3)) == 3
