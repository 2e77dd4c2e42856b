"""Pack sizing from memory: a pack's cap comes from the measured per-member and base memory
(``fusion.memory``) and the device's free memory, with ``core.packs.pack_cap``'s headroom."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fusion_helpers import TinyTask  # noqa: E402

from hypersack.core.packs import pack_cap  # noqa: E402
from hypersack.fusion import memory  # noqa: E402
from hypersack.fusion.memory import MemoryProfile  # noqa: E402
from hypersack.runtime.worker import pack as pack_worker  # noqa: E402

GIB = 2.0 ** 30


@pytest.fixture
def fake_gpu(monkeypatch):
    """A CUDA device of ``free`` bytes on which a member measures ``profile``."""
    device = {"free": 40 * GIB, "profile": MemoryProfile(2 * GIB, 3 * GIB, True), "asked": []}

    def measure(task, config, where, *args, **kwargs):
        device["asked"].append((config, where))
        return device["profile"]
    monkeypatch.setattr(memory, "measure_member_memory", measure)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d=None: (device["free"], 80 * GIB))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    return device


def test_the_cap_is_what_free_memory_holds_after_the_base(fake_gpu):
    cap = pack_worker._memory_cap(TinyTask(), {"hidden": 8}, "cuda:0", 64)
    assert cap == pack_cap(64, 40 * GIB, 3 * GIB, 2 * GIB)
    assert 1 <= cap < 40 // 3                 # less than free / per-member: base and headroom
    assert fake_gpu["asked"] == [({"hidden": 8}, "cuda:0")]     # measured for this config


def test_max_members_bounds_the_cap_and_more_memory_never_lowers_it(fake_gpu):
    caps = []
    for free in (4, 10, 40, 79):
        fake_gpu["free"] = free * GIB
        caps.append(pack_worker._memory_cap(TinyTask(), {}, "cuda:0", 16))
    assert caps == sorted(caps) and caps[0] >= 1 and caps[-1] == 16


def test_on_the_cpu_nothing_is_measured(fake_gpu):
    assert pack_worker._memory_cap(TinyTask(), {}, "cpu", 12) == 12
    assert fake_gpu["asked"] == []
