"""NvmlSource over the in-memory FakeNvml (and the real pynvml's error classes when installed)."""
from __future__ import annotations

import builtins

import pytest

from hypersack.errors import MissingDependencyError
from hypersack.runtime.devices.nvml import (GIB, FakeNvml, NvmlSource, NvmlUnavailable, load_nvml)


def make_source(*devices: tuple[str, float]) -> tuple[FakeNvml, NvmlSource]:
    fake = FakeNvml(list(devices))
    return fake, NvmlSource(fake).open()


def test_reads_every_device():
    fake, source = make_source(("NVIDIA H100 80GB HBM3", 80), ("NVIDIA A100-SXM4-40GB", 40))
    fake.set_load(fake.devices[1].uuid, utilization=37.0, memory_used_gb=5,
                  processes={123: 2 * GIB, 456: None})
    devices = source.snapshot()
    assert [d.index for d in devices] == [0, 1]
    assert devices[0].name == "NVIDIA H100 80GB HBM3"        # bytes decoded
    assert devices[0].memory_total_gb == pytest.approx(80)
    assert devices[1].utilization == 37.0
    assert devices[1].memory_used_gb == pytest.approx(5)
    assert devices[1].processes == {123: 2 * GIB, 456: None}
    assert not any(d.lost for d in devices)


def test_gpu_is_lost_maps_to_a_lost_device_not_an_exception():
    fake, source = make_source(("NVIDIA L4", 24), ("NVIDIA L4", 24))
    fake.fail(fake.devices[0].uuid)
    first, second = source.snapshot()
    assert first.lost and "15" in first.error
    assert first.uuid == "index-0"     # a lost device cannot say its UUID: a placeholder
    assert not second.lost


def test_unsupported_utilisation_reads_as_none():
    fake, source = make_source(("NVIDIA A100 MIG 1g.5gb", 5))
    fake.devices[0].utilization = None
    (device,) = source.snapshot()
    assert device.utilization is None and not device.lost
    assert source.utilization(0) is None


def test_utilisation_of_one_device():
    fake, source = make_source(("NVIDIA T4", 16))
    fake.set_load(fake.devices[0].uuid, utilization=64)
    assert source.utilization(0) == 64.0
    assert source.utilization(5) is None          # no such device: None, never an exception


def test_init_failure_is_nvml_unavailable():
    with pytest.raises(NvmlUnavailable, match="cannot be initialised"):
        NvmlSource(FakeNvml(init_error=9)).open()   # driver not loaded


def test_open_and_close_are_reference_counted():
    fake = FakeNvml([("NVIDIA T4", 16)])
    with NvmlSource(fake) as source:
        assert fake.initialised == 1
        assert source.device_count() == 1
    assert fake.initialised == 0


def test_missing_package_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_pynvml(name, *args, **kwargs):
        if name == "pynvml":
            raise ImportError("no pynvml")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    with pytest.raises(MissingDependencyError, match=r"nvidia-ml-py.*hypersack\[gpu\]"):
        load_nvml()
    with pytest.raises(MissingDependencyError):
        NvmlSource()


def test_real_pynvml_error_classes_carry_codes_we_map():
    pynvml = pytest.importorskip("pynvml")
    from hypersack.runtime.devices.nvml import LOST_CODES
    assert pynvml.NVMLError_GpuIsLost().value in LOST_CODES
    assert pynvml.NVMLError_Unknown().value in LOST_CODES
    assert pynvml.NVMLError_NotSupported().value not in LOST_CODES


def test_real_pynvml_without_driver_is_unavailable_not_a_crash():
    pynvml = pytest.importorskip("pynvml")
    source = NvmlSource(pynvml)
    try:
        source.open()
    except NvmlUnavailable:
        return          # the expected case on a machine without an NVIDIA driver
    try:
        assert source.device_count() >= 0
    finally:
        source.close()
