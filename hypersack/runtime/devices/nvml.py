"""A thin wrapper over NVML (package nvidia-ml-py, module ``pynvml``; extra ``[gpu]``).

Everything above this module reads devices through an :class:`NvmlSource`, which takes an injected
``nvml``-like module: the real ``pynvml`` on a GPU machine, a fake in tests. The fake needs only the
functions used here (``nvmlInit``, ``nvmlShutdown``, ``nvmlDeviceGetCount``,
``nvmlDeviceGetHandleByIndex``, ``nvmlDeviceGetUUID``, ``nvmlDeviceGetName``,
``nvmlDeviceGetMemoryInfo``, ``nvmlDeviceGetUtilizationRates``,
``nvmlDeviceGetComputeRunningProcesses``) and an ``NVMLError`` class whose instances carry the NVML
return code in ``.value``.

Errors that mean the device itself is gone or broken (GPU is lost, reset required, not found,
timeout, unknown...) turn the device's :class:`DeviceInfo` into ``lost=True`` instead of raising;
a query the device does not support (utilisation on some MIG slices) reads as ``None``.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from hypersack.errors import HyperSackError, MissingDependencyError

__all__ = ["DeviceInfo", "NvmlSource", "NvmlUnavailable", "FakeNvml", "load_nvml", "LOST_CODES", "GIB"]

GIB = 1024 ** 3

# NVML return codes (stable across driver versions) that mean "this device cannot be used".
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_UNKNOWN = 999
LOST_CODES = frozenset({NVML_ERROR_NOT_FOUND, NVML_ERROR_TIMEOUT, NVML_ERROR_IRQ_ISSUE,
                        NVML_ERROR_CORRUPTED_INFOROM, NVML_ERROR_GPU_IS_LOST,
                        NVML_ERROR_RESET_REQUIRED, NVML_ERROR_UNKNOWN})


class NvmlUnavailable(HyperSackError):
    """NVML is installed but cannot be used here (no driver, no GPU, library not found)."""


@dataclass(frozen=True)
class DeviceInfo:
    """One NVML device at one instant.

    ``index`` is NVML's (PCI bus order, all devices, ignoring CUDA_VISIBLE_DEVICES). Memory in
    bytes; ``utilization`` in percent of the sampling period the GPU was busy (0-100), None where
    unsupported; ``processes`` maps pid -> used GPU memory in bytes (None: not reported).
    A ``lost`` device carries only what was read before it failed, and ``error`` says why.
    """
    index: int
    uuid: str
    name: str = ""
    memory_total: int = 0
    memory_used: int = 0
    utilization: float | None = None
    processes: dict[int, int | None] = field(default_factory=dict)
    lost: bool = False
    error: str | None = None

    @property
    def memory_total_gb(self) -> float:
        return self.memory_total / GIB

    @property
    def memory_used_gb(self) -> float:
        return self.memory_used / GIB


def load_nvml() -> Any:
    """The ``pynvml`` module, or MissingDependencyError naming the ``[gpu]`` extra."""
    try:
        import pynvml
    except ImportError:
        raise MissingDependencyError("GPU monitoring", "nvidia-ml-py", "gpu") from None
    return pynvml


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


class NvmlSource:
    """Reads NVML devices. ``open()`` initialises NVML (reference counted, like NVML itself);
    every read method needs it open. Thread-safe: NVML calls are serialised by one lock.

    ``nvml``: the module to use; None imports ``pynvml`` (MissingDependencyError if absent).
    """

    def __init__(self, nvml: Any = None):
        self._nvml = load_nvml() if nvml is None else nvml
        self._lock = threading.Lock()
        self._opened = 0

    @property
    def module(self) -> Any:
        return self._nvml

    def open(self) -> "NvmlSource":
        """Initialise NVML; NvmlUnavailable when the driver or library cannot be used."""
        with self._lock:
            try:
                self._nvml.nvmlInit()
            except self._nvml.NVMLError as exc:
                raise NvmlUnavailable(f"NVML cannot be initialised: {exc}") from None
            self._opened += 1
        return self

    def close(self) -> None:
        with self._lock:
            if self._opened:
                self._opened -= 1
                try:
                    self._nvml.nvmlShutdown()
                except self._nvml.NVMLError:
                    pass

    def __enter__(self) -> "NvmlSource":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def device_count(self) -> int:
        """Number of devices NVML enumerates; NvmlUnavailable if NVML itself fails."""
        with self._lock:
            try:
                return int(self._nvml.nvmlDeviceGetCount())
            except self._nvml.NVMLError as exc:
                raise NvmlUnavailable(f"NVML cannot count devices: {exc}") from None

    def device(self, index: int) -> DeviceInfo:
        """Everything we read about device ``index``; ``lost=True`` when it fails as a device."""
        with self._lock:
            return self._read(index)

    def snapshot(self) -> list[DeviceInfo]:
        """Every enumerated device, lost ones included (in NVML index order)."""
        return [self.device(i) for i in range(self.device_count())]

    def utilization(self, index: int) -> float | None:
        """Utilisation of device ``index`` in percent, None if unsupported or the device failed."""
        with self._lock:
            nv = self._nvml
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                return float(nv.nvmlDeviceGetUtilizationRates(handle).gpu)
            except nv.NVMLError:
                return None

    # ---- internals (called with the lock held) ----------------------------------------------

    def _read(self, index: int) -> DeviceInfo:
        nv = self._nvml
        uuid, name = f"index-{index}", ""
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nv.nvmlDeviceGetUUID(handle))
            name = _text(nv.nvmlDeviceGetName(handle))
            memory = nv.nvmlDeviceGetMemoryInfo(handle)
            return DeviceInfo(index=index, uuid=uuid, name=name, memory_total=int(memory.total),
                              memory_used=int(memory.used),
                              utilization=self._optional_utilization(handle),
                              processes=self._optional_processes(handle))
        except nv.NVMLError as exc:
            return DeviceInfo(index=index, uuid=uuid, name=name, lost=True,
                              error=f"{type(exc).__name__}: {exc}")

    def _optional_utilization(self, handle: Any) -> float | None:
        try:
            return float(self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except self._nvml.NVMLError as exc:
            if _code(exc) in LOST_CODES:
                raise
            return None

    def _optional_processes(self, handle: Any) -> dict[int, int | None]:
        try:
            procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except self._nvml.NVMLError as exc:
            if _code(exc) in LOST_CODES:
                raise
            return {}
        return {int(p.pid): (None if p.usedGpuMemory is None else int(p.usedGpuMemory))
                for p in procs}


# ---- an in-memory NVML, for tests and simulations ---------------------------------------------

class FakeNvmlError(Exception):
    """Raised by :class:`FakeNvml`; ``value`` is the NVML return code."""

    def __init__(self, value: int):
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class _FakeDevice:
    uuid: str
    name: str
    memory_total: int
    memory_used: int = 0
    utilization: float | None = 0.0
    processes: dict[int, int | None] = field(default_factory=dict)
    error: int | None = None       # every query on this device raises this code


@dataclass(frozen=True)
class _Memory:
    total: int
    used: int
    free: int


@dataclass(frozen=True)
class _Utilization:
    gpu: float
    memory: float = 0.0


@dataclass(frozen=True)
class _Process:
    pid: int
    usedGpuMemory: int | None


class FakeNvml:
    """Duck-types the parts of ``pynvml`` that :class:`NvmlSource` uses, over a mutable list of
    devices: ``add``, ``remove`` (the device disappears: indices shift), ``fail`` (queries raise
    ``code``, GPU_IS_LOST by default), ``heal``. Handles are the device UUIDs."""

    NVMLError = FakeNvmlError

    def __init__(self, devices: list[tuple[str, float]] | None = None, *, init_error: int | None = None):
        self.devices: list[_FakeDevice] = []
        self.init_error = init_error
        self.initialised = 0
        self._added = 0
        for name, memory_gb in devices or []:
            self.add(name, memory_gb)

    # ---- mutation (test side) --------------------------------------------------------------
    def add(self, name: str, memory_gb: float, uuid: str | None = None) -> str:
        self._added += 1
        uuid = uuid or f"GPU-fake-{self._added:04d}"
        self.devices.append(_FakeDevice(uuid, name, int(memory_gb * GIB)))
        return uuid

    def remove(self, uuid: str) -> None:
        self.devices = [d for d in self.devices if d.uuid != uuid]

    def fail(self, uuid: str, code: int = NVML_ERROR_GPU_IS_LOST) -> None:
        self._find(uuid).error = code

    def heal(self, uuid: str) -> None:
        self._find(uuid).error = None

    def set_load(self, uuid: str, utilization: float | None = None, memory_used_gb: float | None = None,
                 processes: dict[int, int | None] | None = None) -> None:
        device = self._find(uuid)
        if utilization is not None:
            device.utilization = utilization
        if memory_used_gb is not None:
            device.memory_used = int(memory_used_gb * GIB)
        if processes is not None:
            device.processes = dict(processes)

    def _find(self, uuid: str) -> _FakeDevice:
        for d in self.devices:
            if d.uuid == uuid:
                return d
        raise FakeNvmlError(NVML_ERROR_NOT_FOUND)

    def _ok(self, handle: str) -> _FakeDevice:
        if not self.initialised:
            raise FakeNvmlError(1)   # NVML_ERROR_UNINITIALIZED
        device = self._find(handle)
        if device.error is not None:
            raise FakeNvmlError(device.error)
        return device

    # ---- the pynvml surface ----------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise FakeNvmlError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised = max(0, self.initialised - 1)

    def nvmlDeviceGetCount(self) -> int:
        if not self.initialised:
            raise FakeNvmlError(1)
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        if not self.initialised:
            raise FakeNvmlError(1)
        if not 0 <= index < len(self.devices):
            raise FakeNvmlError(NVML_ERROR_NOT_FOUND)
        return self.devices[index].uuid

    def nvmlDeviceGetUUID(self, handle: str) -> str:
        return self._ok(handle).uuid

    def nvmlDeviceGetName(self, handle: str) -> bytes:
        return self._ok(handle).name.encode()   # old pynvml returns bytes: exercise the decode

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> _Memory:
        d = self._ok(handle)
        return _Memory(d.memory_total, d.memory_used, d.memory_total - d.memory_used)

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> _Utilization:
        d = self._ok(handle)
        if d.utilization is None:
            raise FakeNvmlError(3)   # NVML_ERROR_NOT_SUPPORTED
        return _Utilization(d.utilization)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[_Process]:
        return [_Process(pid, used) for pid, used in self._ok(handle).processes.items()]
