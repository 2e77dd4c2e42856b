"""Inventory: NVML (fake), cluster YAML and CPU slots, all as placement Clusters."""
from __future__ import annotations

import pytest

from hypersack.errors import ConfigError
from hypersack.runtime.devices.inventory import (arch_from_name, cluster_from_cpu, cluster_from_nvml,
                                                 cluster_from_yaml, detect_cluster, oversubscription_for,
                                                 visible_devices)
from hypersack.runtime.devices.nvml import FakeNvml, NvmlSource


@pytest.mark.parametrize("name, arch", [
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA H100 PCIe", "H100"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA A100-SXM4-40GB", "A100"),
    ("NVIDIA A100 80GB PCIe", "A100"),
    ("NVIDIA A10", "A10"),
    ("NVIDIA A10G", "A10G"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40S", "L40S"),
    ("Tesla V100-SXM2-16GB", "V100"),
    ("Tesla T4", "T4"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada Generation"),
])
def test_arch_from_name(name, arch):
    assert arch_from_name(name) == arch


def test_default_ratios_are_the_papers():
    assert oversubscription_for("A100") == 3.0
    assert oversubscription_for("H100") == 2.5
    assert oversubscription_for("L4") == 2.0
    assert oversubscription_for("cpu") == 1.0
    assert oversubscription_for("A100", {"A100": 1.5}) == 1.5


def fake_machine() -> FakeNvml:
    return FakeNvml([("NVIDIA H100 80GB HBM3", 79.6), ("NVIDIA A100-SXM4-40GB", 39.4),
                     ("NVIDIA L4", 22.5)])


def test_cluster_from_nvml_one_node_per_host():
    with NvmlSource(fake_machine()) as source:
        cluster = cluster_from_nvml(source, node_id="host", cpus=32, cuda_visible=None)
    (node,) = cluster.nodes
    assert node.id == "host" and node.cpus == 32
    assert [(g.id, g.arch, g.oversubscription) for g in node.gpus] == [
        ("gpu0", "H100", 2.5), ("gpu1", "A100", 3.0), ("gpu2", "L4", 2.0)]
    assert node.gpus[0].memory_gb == pytest.approx(79.6)
    assert node.gpus[0].capacity == pytest.approx(250.0)


def test_cluster_from_nvml_study_overrides_and_bad_override():
    with NvmlSource(fake_machine()) as source:
        cluster = cluster_from_nvml(source, cpus=8, cuda_visible=None,
                                    oversubscription={"A100": 2, "L4": 1})
        assert [g.oversubscription for g in cluster.nodes[0].gpus] == [2.5, 2.0, 1.0]
        with pytest.raises(ConfigError, match=r"The value of oversubscription.H100 is -1, but"):
            cluster_from_nvml(source, cuda_visible=None, oversubscription={"H100": -1})


def test_cuda_visible_devices_filters_and_orders():
    fake = fake_machine()
    uuid_l4 = fake.devices[2].uuid
    with NvmlSource(fake) as source:
        cluster = cluster_from_nvml(source, cpus=4, cuda_visible=f"{uuid_l4},0")
        assert [g.id for g in cluster.nodes[0].gpus] == ["gpu2", "gpu0"]
        assert cluster_from_nvml(source, cpus=4, cuda_visible="").nodes[0].gpus == ()
        # CUDA stops at the first entry that names no device
        assert [g.id for g in cluster_from_nvml(source, cpus=4, cuda_visible="1,7,2").nodes[0].gpus] == ["gpu1"]


def test_visible_devices_uses_the_environment(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with NvmlSource(fake_machine()) as source:
        assert [g.id for g in cluster_from_nvml(source, cpus=4).nodes[0].gpus] == ["gpu1"]
        assert len(visible_devices(source.snapshot(), None)) == 3


def test_lost_devices_are_left_out():
    fake = fake_machine()
    fake.fail(fake.devices[1].uuid)
    with NvmlSource(fake) as source:
        assert [g.id for g in cluster_from_nvml(source, cpus=4, cuda_visible=None).nodes[0].gpus] == ["gpu0", "gpu2"]


def test_cpu_slots_split_memory():
    cluster = cluster_from_cpu(slots=4, cpus=8, memory_gb=32.0, node_id="laptop")
    (node,) = cluster.nodes
    assert node.cpus == 8
    assert [g.id for g in node.gpus] == ["cpu0", "cpu1", "cpu2", "cpu3"]
    assert {(g.arch, g.memory_gb, g.compute, g.oversubscription) for g in node.gpus} == {("cpu", 8.0, 100.0, 1.0)}
    with pytest.raises(ConfigError, match="workers"):
        cluster_from_cpu(slots=0)


def test_detect_cluster_falls_back_to_cpu_slots():
    assert {g.arch for _, g in detect_cluster(nvml=FakeNvml(init_error=9), slots=2).gpus()} == {"cpu"}
    assert {g.arch for _, g in detect_cluster(nvml=FakeNvml([]), slots=2).gpus()} == {"cpu"}
    found = detect_cluster(nvml=fake_machine(), cuda_visible=None)
    assert [g.arch for _, g in found.gpus()] == ["H100", "A100", "L4"]


CLUSTER_YAML = """\
oversubscription: {A100: 2.75}
nodes:
  - id: a0
    cpus: 64
    gpus: {count: 2, arch: A100, memory_gb: 40}
  - id: h0
    cpus: 96
    gpus:
      - {id: 0, arch: H100, memory_gb: 80}
      - {id: 1, arch: H100, memory_gb: 80, oversubscription: 1}
"""


def test_cluster_from_yaml(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER_YAML)
    cluster = cluster_from_yaml(path)
    ratios = [(n.id, g.arch, g.oversubscription) for n, g in cluster.gpus()]
    assert ratios == [("a0", "A100", 2.75), ("a0", "A100", 2.75), ("h0", "H100", 2.5), ("h0", "H100", 1.0)]
    plain = cluster_from_yaml(path, defaults=False)
    assert [g.oversubscription for _, g in plain.gpus()][2] == 1.0


def test_cluster_yaml_errors_name_file_and_line(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER_YAML.replace("{id: 1, arch: H100, memory_gb: 80,", "{id: 1, arch: H100, memory_gb: -5,"))
    with pytest.raises(ConfigError) as info:
        cluster_from_yaml(path)
    assert info.value.location == f"{path}:10"
    assert str(info.value).startswith(f"{path}:10: The value of ")
    path.write_text("nodes: [\n  {id: a")
    with pytest.raises(ConfigError, match="is malformed"):
        cluster_from_yaml(path)
    with pytest.raises(ConfigError, match="cannot be read"):
        cluster_from_yaml(tmp_path / "missing.yaml")
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        cluster_from_yaml(path)
