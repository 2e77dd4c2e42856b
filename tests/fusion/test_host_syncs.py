"""A pack's steady step never waits for the host: no op in it reads a device value back.

Counted on the CPU with a TorchDispatchMode that flags the ops that synchronise on CUDA
(``_local_scalar_dense``: ``.item()``, ``bool()``, ``int()``; ``nonzero``, ``masked_select``,
``unique`` and friends: data-dependent shapes; a copy to the CPU from another device)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from fusion_helpers import TinyTask  # noqa: E402
from test_engine_packs import ConvTask  # noqa: E402

from hypersack.fusion.runner import Pack  # noqa: E402
from hypersack.fusion.stack import StackOptions  # noqa: E402
from hypersack.fusion.task import Member  # noqa: E402

SYNCING = {"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique2",
           "unique_consecutive", "is_nonzero", "equal", "masked_scatter_"}


class SyncCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.syncs: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in SYNCING:
            self.syncs.append(name)
        if name in ("_to_copy", "copy_") and _device_to_host(func, args, kwargs or {}):
            self.syncs.append(f"{name} to the host")
        return func(*args, **(kwargs or {}))


def _device_to_host(func, args, kwargs) -> bool:
    if func.overloadpacket.__name__ == "copy_":
        dst, src = args[0], args[1]
        return dst.device.type == "cpu" and src.device.type != "cpu"
    return args[0].device.type != "cpu" and kwargs.get("device") == torch.device("cpu")


def _pack(task, configs, graphs="off"):
    pack = Pack(task, "cpu", torch.float32, StackOptions(capacity=len(configs) + 1,
                                                         graphs=graphs))
    for i, config in enumerate(configs):
        pack.load(Member(i, config, seed=i))
    return pack


@pytest.mark.parametrize("task, configs", [
    (TinyTask(), [{"optimizer": "adam", "batch_size": 8, "dropout": 0.2},
                  {"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "batch_size": 5}]),
    (ConvTask(), [{"optimizer": "adamw", "lr": 0.01, "batch_size": 8, "dropout": 0.3},
                  {"optimizer": "rmsprop", "lr": 0.01, "batch_size": 16}]),
])
def test_the_device_step_reads_nothing_back(task, configs):
    pack = _pack(task, configs)
    pack.train_iteration()                       # first epoch's orders, lazily built tensors
    keys = []
    original = pack.stack.runner.step

    def counted(key):
        keys.append(key)
        with SyncCounter() as counter:
            original(key)
        assert counter.syncs == [], counter.syncs
    pack.stack.runner.step = counted
    for _ in range(6):                           # an epoch ends on the way (40 samples)
        pack.train_iteration()
    assert len(keys) == 6


def test_the_counter_sees_the_syncs_the_old_step_had():
    """The counter is not blind: ``.item()``, ``bool(t)`` and ``nonzero`` are flagged."""
    t = torch.arange(4.0)
    with SyncCounter() as counter:
        t.sum().item()
        bool(t.any())
        t.nonzero()
    assert counter.syncs == ["_local_scalar_dense", "_local_scalar_dense", "nonzero"]
