"""The state monitor over a fake inventory: device loss and gain become events exactly once."""
from __future__ import annotations

import threading
import time

import pytest

from hypersack.core.trial import DeviceAdded, DeviceLost
from hypersack.errors import ConfigError
from hypersack.runtime.devices.monitor import DeviceMonitor
from hypersack.runtime.devices.nvml import FakeNvml, NvmlSource


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


def setup(n: int = 2, **kwargs) -> tuple[FakeNvml, DeviceMonitor]:
    fake = FakeNvml([("NVIDIA H100 80GB HBM3", 80)] * n)
    source = NvmlSource(fake).open()
    monitor = DeviceMonitor(source, "node0", initial=source.snapshot(), clock=Clock(), **kwargs)
    return fake, monitor


def test_no_events_while_nothing_changes():
    _, monitor = setup()
    for _ in range(3):
        monitor.poll()
    assert monitor.drain() == []
    assert monitor.gpu_ids() == ["gpu0", "gpu1"]


def test_removed_device_is_lost_once():
    fake, monitor = setup()
    fake.remove(fake.devices[0].uuid)
    monitor.poll()
    monitor.poll()
    assert monitor.drain() == [DeviceLost("node0", "gpu0")]
    assert monitor.drain() == []
    assert monitor.gpu_ids() == ["gpu1"]     # the survivor keeps its id although its index shifted


def test_failed_device_is_lost_once_and_comes_back_once():
    fake, monitor = setup()
    uuid = fake.devices[1].uuid
    fake.fail(uuid)
    monitor.poll()
    monitor.poll()
    assert monitor.drain() == [DeviceLost("node0", "gpu1")]
    fake.heal(uuid)
    monitor.poll()
    monitor.poll()
    (event,) = monitor.drain()
    assert isinstance(event, DeviceAdded) and event.node_id == "node0"
    assert (event.gpu.id, event.gpu.arch, event.gpu.oversubscription) == ("gpu1", "H100", 2.5)


def test_added_device_is_announced_once_with_its_gpu():
    fake, monitor = setup(oversubscription={"A100": 2.0})
    fake.add("NVIDIA A100-SXM4-40GB", 40)
    monitor.poll()
    monitor.poll()
    (event,) = monitor.drain()
    assert isinstance(event, DeviceAdded)
    assert (event.gpu.id, event.gpu.arch, event.gpu.memory_gb, event.gpu.oversubscription) == (
        "gpu2", "A100", 40.0, 2.0)


def test_new_device_at_a_taken_index_gets_a_fresh_id():
    fake, monitor = setup()
    fake.remove(fake.devices[0].uuid)           # gpu1 now sits at index 0
    fake.add("NVIDIA L4", 24, uuid="GPU-abcdef123456789")   # appears at index 1: "gpu1" is taken
    monitor.poll()
    events = monitor.drain()
    assert events[0] == DeviceLost("node0", "gpu0")
    assert events[1].gpu.id == "gpu-abcdef123456"
    assert monitor.uuid_of("gpu-abcdef123456") == "GPU-abcdef123456789"
    assert monitor.uuid_of("gpu1") == fake.devices[0].uuid


def test_misses_to_lose_tolerates_a_transient_failure():
    fake, monitor = setup(misses_to_lose=2)
    uuid = fake.devices[0].uuid
    fake.fail(uuid)
    monitor.poll()
    fake.heal(uuid)
    monitor.poll()
    assert monitor.drain() == []
    fake.fail(uuid)
    monitor.poll()
    monitor.poll()
    assert monitor.drain() == [DeviceLost("node0", "gpu0")]


def test_first_poll_is_the_baseline_without_initial():
    fake = FakeNvml([("NVIDIA L4", 24)])
    monitor = DeviceMonitor(NvmlSource(fake).open(), "n", clock=Clock())
    monitor.poll()
    assert monitor.drain() == []
    fake.add("NVIDIA L4", 24)
    monitor.poll()
    assert [type(e) for e in monitor.drain()] == [DeviceAdded]


def test_samples_form_a_time_series_and_a_report():
    fake, monitor = setup(n=1, history=3)
    uuid = fake.devices[0].uuid
    for util, mem in [(10, 1), (30, 4), (50, 2), (70, 3)]:
        fake.set_load(uuid, utilization=util, memory_used_gb=mem, processes={1: None, 2: None})
        monitor.poll()
    series = monitor.series("gpu0")
    assert [s.utilization for s in series] == [30, 50, 70]     # bounded history
    assert [s.t for s in series] == [2.0, 3.0, 4.0]
    assert series[0].processes == 2 and series[0].memory_used_gb == pytest.approx(4)
    report = monitor.report()["gpu0"]
    assert report["samples"] == 3 and report["mean_utilization"] == pytest.approx(50)
    assert report["max_utilization"] == 70 and report["peak_memory_gb"] == pytest.approx(4)
    assert monitor.series("nope") == []


def test_only_visible_devices_are_watched():
    fake = FakeNvml([("NVIDIA L4", 24)] * 3)
    source = NvmlSource(fake).open()
    monitor = DeviceMonitor(source, "n", cuda_visible="2", clock=Clock())
    monitor.poll()
    fake.fail(fake.devices[0].uuid)        # invisible to this study: no event
    monitor.poll()
    assert monitor.drain() == [] and monitor.gpu_ids() == ["gpu2"]


def test_background_thread_reports_a_loss_and_survives_read_errors():
    fake, monitor = setup()
    broken = threading.Event()

    class Flaky:
        def snapshot(self):
            if broken.is_set():
                broken.clear()
                raise RuntimeError("driver hiccup")
            return monitor_source.snapshot()

    monitor_source = monitor.source
    monitor.source = Flaky()
    monitor.interval_s = 0.01
    with monitor:
        broken.set()
        fake.remove(fake.devices[1].uuid)
        deadline = time.monotonic() + 10
        events = []
        while not events and time.monotonic() < deadline:
            events = monitor.drain()
            time.sleep(0.01)
    assert events == [DeviceLost("node0", "gpu1")]
    assert monitor._thread is None


def test_bad_arguments_are_config_errors():
    source = NvmlSource(FakeNvml([])).open()
    with pytest.raises(ConfigError, match="interval_s"):
        DeviceMonitor(source, "n", interval_s=0)
    with pytest.raises(ConfigError, match="misses_to_lose"):
        DeviceMonitor(source, "n", misses_to_lose=0)


def test_take_samples_hands_each_sample_over_once():
    fake, monitor = setup(n=2)
    uuid = fake.devices[1].uuid
    fake.set_load(uuid, utilization=40, memory_used_gb=2, processes={1: None})
    monitor.poll()
    taken = monitor.take_samples()
    assert [(node, gpu) for node, gpu, _ in taken] == [("node0", "gpu0"), ("node0", "gpu1")]
    assert taken[1][2].utilization == 40 and taken[1][2].processes == 1
    assert monitor.take_samples() == []
    monitor.poll()
    assert len(monitor.take_samples()) == 2


def test_a_machine_with_nvml_hands_wall_clock_samples_to_the_store(tmp_path, monkeypatch):
    from hypersack.core.spec import StudySpec
    from hypersack.runtime.devices.machine import prepare_machine
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    spec = StudySpec.from_dict({"name": "s", "space": {"x": 1.0}, "placement": "exclusive",
                                "objective": {"metric": "score", "mode": "max"}, "budget": {"trials": 1}})
    fake = FakeNvml([("NVIDIA L4", 24)])
    fake.set_load(fake.devices[0].uuid, utilization=35, memory_used_gb=3, processes={7: None})
    before = time.time()
    with prepare_machine(spec, tmp_path / "runs" / "s", tmp_path / "s.db", trainable_name="t",
                         nvml=fake) as machine:
        assert machine.samples is not None
        deadline = time.monotonic() + 10
        taken = []
        while not taken and time.monotonic() < deadline:
            taken = machine.samples()
            time.sleep(0.05)
    node, gpu, sample = taken[0]
    assert (node, gpu, sample.utilization, sample.processes) == ("local", "gpu0", 35, 1)
    assert before <= sample.t <= time.time()          # wall time: comparable with the stays
