"""The device inventory: this machine (or a declared cluster) as a ``hypersack.placement.Cluster``.

Three sources, one result:

- :func:`cluster_from_nvml`: one node (this host, ``cpus = os.cpu_count()``), one GPU per visible
  NVML device. ``GPU.id`` is ``"gpu<N>"`` with N the device's physical index, what a worker puts
  in ``CUDA_VISIBLE_DEVICES`` (NVML numbers devices in PCI bus order: run workers with
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID``); the same key as ``devices.Slot.key``. Memory in
  GiB; the architecture name comes from the device name (:func:`arch_from_name`); the
  oversubscription ratio r from :data:`DEFAULT_OVERSUBSCRIPTION` (the paper's best values: A100 3,
  H100 2.5; others 2), overridable per study with ``oversubscription={"A100": 2.0}``.
- :func:`cluster_from_yaml`: a cluster file for simulation or remote runs, parsed by
  ``Cluster.from_dict``; every error names ``file:line``.
- :func:`cluster_from_cpu`: a machine without GPUs. Each CPU *slot* (default: one per core, as
  ``devices.default_slots`` does) becomes one pseudo-GPU of architecture ``"cpu"`` with id
  ``"cpu<N>"`` (``devices.Slot.key``), compute 100 (a slot runs at most one full-demand job), memory =
  the machine's RAM split evenly between slots, oversubscription 1 (CPU trials already use their
  slot's threads fully; oversubscribing only adds context switches).

:func:`detect_cluster` picks NVML when it works and finds a visible GPU, else CPU slots.
"""
from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any, Iterable, Mapping, cast

from hypersack.core.oversubscription import PAPER_FALLBACK, PAPER_RATIOS, Oversubscription
from hypersack.errors import ConfigError, MissingDependencyError
from hypersack.validation import check_integer, check_mapping
from hypersack.runtime.devices.nvml import DeviceInfo, NvmlSource, NvmlUnavailable

__all__ = ["DEFAULT_OVERSUBSCRIPTION", "FALLBACK_OVERSUBSCRIPTION", "CPU_ARCH", "arch_from_name",
           "oversubscription_for", "visible_devices", "gpu_from_device", "cluster_from_nvml",
           "cluster_from_yaml", "cluster_from_cpu", "detect_cluster", "host_memory_gb"]

CPU_ARCH = "cpu"
# The paper's measured best ratios (Fig. 13, 14): core.oversubscription's one table; everything
# else gets FALLBACK until profiled.
DEFAULT_OVERSUBSCRIPTION: dict[str, float] = PAPER_RATIOS
FALLBACK_OVERSUBSCRIPTION = PAPER_FALLBACK

# Most specific first: "GH200" before "H200", "A100" before "A10", "L40S" before "L40" before "L4".
_ARCH_PATTERNS = [
    "GB200", "GH200", "B200", "B100", "H200", "H100", "H800", "H20", "A100", "A800", "A40", "A30",
    "A10G", "A10", "A16", "A2", "L40S", "L40", "L20", "L4", "V100S", "V100", "P100", "P40", "P4",
    "T4", "K80",
]
_ARCH_RE = re.compile(r"(?<![A-Z0-9])(" + "|".join(_ARCH_PATTERNS) + r")(?![A-Z0-9])")
_NOISE_RE = re.compile(
    r"\b(NVIDIA|Tesla|GeForce|Quadro|\d+\s*[GM]B|HBM\d*e?|PCIe|SXM\d*|NVL\d*|MIG\s+\S+)\b", re.I)


def arch_from_name(name: str) -> str:
    """The architecture (product) name of an NVML device name.

    ``"NVIDIA H100 80GB HBM3"`` -> ``"H100"``, ``"NVIDIA A100-SXM4-40GB"`` -> ``"A100"``,
    ``"Tesla V100-SXM2-16GB"`` -> ``"V100"``. Unknown products keep their name without vendor,
    memory and form-factor words (``"NVIDIA GeForce RTX 4090"`` -> ``"RTX 4090"``).
    """
    upper = name.upper()
    match = _ARCH_RE.search(upper)
    if match:
        return match.group(1)
    cleaned = " ".join(_NOISE_RE.sub(" ", name.replace("-", " ")).split())
    return cleaned or name.strip() or "unknown"


def oversubscription_for(arch: str, overrides: Mapping[str, float] | None = None) -> float:
    """The oversubscription ratio r for ``arch``: the study's override, else the paper's
    (``core.oversubscription.Oversubscription.ratio``)."""
    if overrides and arch in overrides:
        return float(overrides[arch])
    return Oversubscription().ratio(arch)


def _check_overrides(overrides: Mapping[str, Any] | None) -> dict[str, float]:
    if overrides is None:
        return {}
    check_mapping("oversubscription", overrides,
                  what="a mapping of architecture name to ratio, e.g. {'A100': 3}")
    return dict(Oversubscription.parse(overrides).per_arch or {})


def visible_devices(devices: Iterable[DeviceInfo], cuda_visible: str | None) -> list[DeviceInfo]:
    """The devices CUDA_VISIBLE_DEVICES lets this process use, in its order.

    None (unset): all. Entries are physical indices or UUIDs (``GPU-8f0c...``, unique prefixes
    allowed); as CUDA does, the list ends at the first entry that matches nothing, and "" or
    "-1" hides every device.
    """
    devices = list(devices)
    if cuda_visible is None:
        return devices
    chosen: list[DeviceInfo] = []
    for entry in (e.strip() for e in cuda_visible.split(",")):
        match = _match_entry(devices, entry)
        if match is None:
            break
        if match not in chosen:
            chosen.append(match)
    return chosen


def _match_entry(devices: list[DeviceInfo], entry: str) -> DeviceInfo | None:
    if entry.isdigit():
        return next((d for d in devices if d.index == int(entry)), None)
    if not entry or entry.startswith("-"):
        return None
    hits = [d for d in devices if d.uuid.startswith(entry) or d.uuid.startswith("GPU-" + entry)]
    return hits[0] if len(hits) == 1 else None


def _placement() -> Any:
    """The public placement API (``hypersack.placement``, else its home in core)."""
    import importlib
    try:
        return importlib.import_module("hypersack.placement")
    except ImportError:
        return importlib.import_module("hypersack.placement")


def gpu_from_device(device: DeviceInfo, overrides: Mapping[str, float] | None = None) -> Any:
    """The placement ``GPU`` for one NVML device (id ``"gpu<physical index>"``)."""
    arch = arch_from_name(device.name)
    return _placement().GPU(id=f"gpu{device.index}", arch=arch,
                            memory_gb=round(device.memory_total_gb, 3),
                            oversubscription=oversubscription_for(arch, overrides))


def cluster_from_nvml(source: NvmlSource, *, node_id: str | None = None, cpus: int | None = None,
                      oversubscription: Mapping[str, float] | None = None,
                      cuda_visible: str | None | object = ...) -> Any:
    """One node holding this host's visible, healthy GPUs. ``source`` must be open.

    ``cuda_visible``: defaults to the CUDA_VISIBLE_DEVICES of this process. Lost devices are left
    out (the monitor reports them if they come back).
    """
    overrides = _check_overrides(oversubscription)
    if cuda_visible is ...:
        cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = [d for d in visible_devices(source.snapshot(), cast("str | None", cuda_visible))
               if not d.lost]
    p = _placement()
    node = p.Node(id=node_id or socket.gethostname(), cpus=cpus or os.cpu_count() or 1,
                  gpus=[gpu_from_device(d, overrides) for d in devices])
    return p.Cluster(nodes=[node])


def host_memory_gb() -> float:
    """Physical RAM of this machine in GiB (8 if it cannot be read)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 1024 ** 3
    except (ValueError, OSError, AttributeError):
        return 8.0


def cluster_from_cpu(*, slots: int | None = None, cpus: int | None = None,
                     memory_gb: float | None = None, node_id: str | None = None) -> Any:
    """A GPU-less machine as one node of ``slots`` pseudo-GPUs (see the module docstring)."""
    cpus = cpus or os.cpu_count() or 1
    slots = cpus if slots is None else slots
    check_integer("workers", slots, low=1, hint="(CPU slots)")
    share = round((host_memory_gb() if memory_gb is None else memory_gb) / slots, 3)
    p = _placement()
    gpus = [p.GPU(id=f"cpu{i}", arch=CPU_ARCH, memory_gb=share, oversubscription=1.0)
            for i in range(slots)]
    return p.Cluster(nodes=[p.Node(id=node_id or socket.gethostname(), cpus=cpus, gpus=gpus)])


def detect_cluster(*, nvml: Any = None, oversubscription: Mapping[str, float] | None = None,
                   slots: int | None = None, cuda_visible: str | None | object = ...) -> Any:
    """NVML's GPUs when nvidia-ml-py is installed, the driver answers and a GPU is visible;
    otherwise CPU slots. ``nvml``: an injected nvml-like module (tests)."""
    try:
        source = NvmlSource(nvml)
        with source:
            cluster = cluster_from_nvml(source, oversubscription=oversubscription,
                                        cuda_visible=cuda_visible)
        if any(node.gpus for node in cluster.nodes):
            return cluster
    except (MissingDependencyError, NvmlUnavailable):
        pass
    return cluster_from_cpu(slots=slots)


# ---- cluster YAML ----------------------------------------------------------------------------

def cluster_from_yaml(path: str | Path, *, defaults: bool = True) -> Any:
    """Read a cluster file; ConfigError with ``location="file:line"`` on any problem.

    ``defaults``: GPUs whose architecture has no ratio in the file (neither per GPU nor in the
    top-level ``oversubscription`` mapping) get :func:`oversubscription_for`'s default, as an
    NVML inventory would; False leaves them to ``Cluster.from_dict`` (ratio 1).

    The file holds what ``Cluster.from_dict`` accepts, e.g.::

        nodes:
          - id: n0
            cpus: 64
            gpus:
              - {id: "0", arch: A100, memory_gb: 40, oversubscription: 3}
    """
    from hypersack.config import load_yaml_mapping

    data, lines = load_yaml_mapping(path, "cluster file", "a mapping with a 'nodes' list")
    try:
        return _placement().Cluster.from_dict(_with_default_ratios(data) if defaults else data)
    except ConfigError as exc:
        line = _line_of(exc.field, lines)
        exc.location = f"{path}:{line}" if line else str(path)
        exc.args = (f"{exc.location}: {exc.args[0]}",)
        raise


def _with_default_ratios(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with a top-level ``oversubscription`` entry for every architecture it names."""
    ratios = data.get("oversubscription")
    if ratios is not None and not isinstance(ratios, Mapping):
        return data          # from_dict reports the bad mapping
    archs: set[str] = set()
    for node in data.get("nodes") or []:
        gpus = node.get("gpus", []) if isinstance(node, Mapping) else []
        for gpu in [gpus] if isinstance(gpus, Mapping) else gpus if isinstance(gpus, list) else []:
            if isinstance(gpu, Mapping) and isinstance(gpu.get("arch"), str):
                archs.add(gpu["arch"])
    filled = {arch: oversubscription_for(arch) for arch in sorted(archs)}
    filled.update(ratios or {})
    return {**data, "oversubscription": filled} if filled else data


def _line_of(field: str, lines: dict[str, int]) -> int | None:
    """Line of ``field`` (``nodes[0].gpus[1].arch`` or ``nodes.0.gpus.1.arch``, with or without
    from_dict's ``cluster.`` prefix) or of its nearest parent."""
    field = field.removeprefix("cluster.")
    normal = re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", field)
    parts = re.findall(r"[^.\[\]]+|\[\d+\]", normal)
    while parts:
        path = "".join(p if p.startswith("[") else f".{p}" for p in parts).lstrip(".")
        if path in lines:
            return lines[path]
        parts.pop()
    return None
