"""What a trial asks of a device (core.demand): the job history, OOM floors, MPS."""
from dataclasses import dataclass

import pytest

from hypersack.core.demand import (DEFAULT_CONTEXT_GB, history_demand,
                                   memory_floor_after_oom, needs_mps, with_history)
from hypersack.placement import Job
from hypersack.errors import ConfigError


@dataclass
class Measured:
    gpu_util_percent: float | None
    peak_memory_gb: float
    time_per_iter_s: float


def test_the_history_gives_utilisation_peak_plus_context_and_runtime():
    got = history_demand(Measured(40.0, 2.0, 0.5), None, "A100", iterations=10)
    assert got == (40.0, 2.0 + DEFAULT_CONTEXT_GB, 5.0)
    assert DEFAULT_CONTEXT_GB == 0.5
    assert history_demand(Measured(40.0, 2.0, 0.5), None, "cpu") == (40.0, 2.0, 0.5)
    assert history_demand(Measured(None, 2.0, 0.5), None, "cpu", context_gb=1.0) == (100.0, 3.0, 0.5)
    assert history_demand(Measured(0.2, 2.0, 0.5), None, "cpu")[0] == 1.0


def test_an_oom_floor_raises_memory_and_alone_places_an_unprofiled_job_alone():
    assert history_demand(Measured(40.0, 2.0, 0.5), 16.0, "cpu") == (40.0, 16.0, 0.5)
    assert history_demand(Measured(40.0, 20.0, 0.5), 16.0, "cpu") == (40.0, 20.0, 0.5)
    assert history_demand(None, 16.0, "A100") == (100.0, 16.0, 1.0)
    assert history_demand(None, None, "A100") is None


def test_an_oom_floor_is_at_least_the_device_and_never_drops():
    assert memory_floor_after_oom(None, 40.0) == 40.0
    assert memory_floor_after_oom(80.0, 40.0) == 80.0
    assert memory_floor_after_oom(20.0, 40.0) == 40.0
    for bad in (0, -1.0, float("nan"), True):
        with pytest.raises(ConfigError, match="device_memory_gb"):
            memory_floor_after_oom(None, bad)


def test_the_history_replaces_per_arch_demand_only_where_it_has_any():
    job = Job(3, 100.0, 1.0)
    assert with_history(job, {}) is job
    got = with_history(job, {"A100": {"compute": 40.0, "memory_gb": 2.5, "runtime": 1.0}})
    assert got.id == 3 and got.demand("A100").compute == 40.0 and got.compute == 100.0


def test_mps_starts_only_when_gpu_trials_may_share_a_gpu():
    assert needs_mps("wfd", [1.0, 2.5], gpu_slots=True)
    assert not needs_mps("exclusive", [2.5], gpu_slots=True)
    assert not needs_mps("wfd", [1.0, 1.0], gpu_slots=True)
    assert not needs_mps("wfd", [2.5], gpu_slots=False)
    assert not needs_mps("wfd", [], gpu_slots=True)
