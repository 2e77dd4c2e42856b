"""The state monitor (HyperSack Sec. IV-C3): a background thread watching this node's GPUs.

Every ``interval_s`` it reads the devices (an :class:`~hypersack.runtime.devices.nvml.NvmlSource` or any
object with ``snapshot() -> list[DeviceInfo]``) and

- appends one :class:`Sample` per healthy device to that device's time series (for reports:
  occupancy = utilisation, memory used and the processes on it);
- turns changes of the inventory into events on a thread-safe queue that the study loop drains
  (``drain() -> list[Event]``, losses before additions): ``DeviceLost(node_id, gpu_id)`` once when a known device fails
  (NVML says lost) or disappears for ``misses_to_lose`` consecutive polls, and
  ``DeviceAdded(node_id, gpu)`` once when a device appears, or comes back after being lost.

Devices are tracked by UUID (NVML indices shift when a device disappears). A device keeps the id it
had when first seen (``gpu<index>``, the inventory's ids); only the visible devices
(CUDA_VISIBLE_DEVICES, read once at construction) are watched. Job completion is not watched here:
the executors report it.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Protocol

from hypersack.core.trial import DeviceAdded, DeviceLost
from hypersack.validation import check_integer, check_positive
from hypersack.runtime.devices.inventory import gpu_from_device, visible_devices
from hypersack.runtime.devices.nvml import DeviceInfo, GIB

__all__ = ["DeviceMonitor", "Sample", "DeviceSource"]

log = logging.getLogger(__name__)


class DeviceSource(Protocol):
    def snapshot(self) -> list[DeviceInfo]: ...


@dataclass(frozen=True)
class Sample:
    """One reading of one device: ``t`` in the monitor clock's seconds, ``utilization`` in percent
    (None: unsupported), ``memory_used_gb`` in GiB, ``processes`` = number of compute processes."""
    t: float
    utilization: float | None
    memory_used_gb: float
    processes: int


@dataclass
class _Tracked:
    gpu_id: str
    info: DeviceInfo
    present: bool = True
    misses: int = 0


class DeviceMonitor:
    """Watches one node's devices. ``start()`` runs :meth:`poll` every ``interval_s`` seconds on
    a daemon thread until ``stop()``; tests may call :meth:`poll` directly instead.

    ``initial``: the devices the study starts with (no DeviceAdded for them); None takes the
    first poll as the baseline. ``clock`` stamps samples; ``history`` bounds each time series.
    """

    def __init__(self, source: DeviceSource, node_id: str, *, interval_s: float = 2.0,
                 initial: Iterable[DeviceInfo] | None = None,
                 oversubscription: Mapping[str, float] | None = None,
                 cuda_visible: str | None = None, misses_to_lose: int = 1,
                 history: int = 3600, clock: Callable[[], float] = time.monotonic):
        check_positive("monitor.interval_s", interval_s, hint="(seconds)")
        check_integer("monitor.misses_to_lose", misses_to_lose, low=1)
        self.source = source
        self.node_id = node_id
        self.interval_s = float(interval_s)
        self.misses_to_lose = misses_to_lose
        self._overrides = dict(oversubscription or {})
        self._visible = cuda_visible
        self._clock = clock
        self._history = history
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._tracked: dict[str, _Tracked] = {}
        self._series: dict[str, deque[Sample]] = {}
        self._untaken: deque[tuple[str, Sample]] = deque(maxlen=history)   # for take_samples
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._baseline = initial is None
        self.errors = 0
        for info in initial or ():
            if not info.lost:
                self._track(info)

    # ---- the study loop's side ------------------------------------------------------------

    def drain(self) -> list[Any]:
        """Every event since the last drain, oldest first (never blocks)."""
        out = []
        while True:
            try:
                out.append(self._events.get_nowait())
            except queue.Empty:
                return out

    def series(self, gpu_id: str) -> list[Sample]:
        """The samples of one device, oldest first (empty for an unknown id)."""
        with self._lock:
            return list(self._series.get(gpu_id, ()))

    def take_samples(self) -> list[tuple[str, str, Sample]]:
        """Samples ``(node_id, gpu_id, sample)`` since the last call, oldest first (for the
        store; at most ``history`` are kept between calls, the oldest dropped)."""
        with self._lock:
            taken, self._untaken = list(self._untaken), deque(maxlen=self._history)
        return [(self.node_id, gpu_id, sample) for gpu_id, sample in taken]

    def report(self) -> dict[str, dict[str, Any]]:
        """Per device: sample count, mean and max utilisation (percent), peak memory (GiB)."""
        with self._lock:
            return {gpu_id: _summary(samples) for gpu_id, samples in self._series.items()}

    def uuid_of(self, gpu_id: str) -> str | None:
        """The UUID of a device by its id: a ``CUDA_VISIBLE_DEVICES`` value that stays right
        when NVML indices shift (ids are fixed when a device is first seen)."""
        with self._lock:
            return next((u for u, t in self._tracked.items() if t.gpu_id == gpu_id), None)

    def gpu_ids(self) -> list[str]:
        """Ids of the devices currently present and healthy."""
        with self._lock:
            return [t.gpu_id for t in self._tracked.values() if t.present]

    # ---- the thread -------------------------------------------------------------------------

    def start(self) -> "DeviceMonitor":
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="hypersack-monitor", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float | None = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> "DeviceMonitor":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception:            # a broken read must not kill the watch
                self.errors += 1
                log.exception("device monitor: poll failed")
            self._stop.wait(self.interval_s)

    # ---- one poll ---------------------------------------------------------------------------

    def poll(self) -> list[Any]:
        """Read the devices once; returns the events this poll queued."""
        devices = visible_devices(self.source.snapshot(), self._visible)
        now = self._clock()
        events: list[Any] = []
        with self._lock:
            seen: set[str] = set()
            for info in devices:
                seen.add(info.uuid)
                events.extend(self._observe(info, now))
            for uuid, tracked in self._tracked.items():
                if uuid not in seen and tracked.present:
                    events.extend(self._miss(tracked))
            self._baseline = False
        events.sort(key=lambda e: not isinstance(e, DeviceLost))   # losses first, stable
        for event in events:
            self._events.put(event)
        return events

    def _observe(self, info: DeviceInfo, now: float) -> list[Any]:
        tracked = self._tracked.get(info.uuid)
        if info.lost:
            return self._miss(tracked) if tracked is not None and tracked.present else []
        if tracked is None:
            tracked = self._track(info)
            self._sample(tracked, info, now)
            return [] if self._baseline else [DeviceAdded(self.node_id, self._gpu(tracked))]
        tracked.info, tracked.misses = info, 0
        self._sample(tracked, info, now)
        if tracked.present:
            return []
        tracked.present = True
        return [DeviceAdded(self.node_id, self._gpu(tracked))]

    def _miss(self, tracked: _Tracked) -> list[Any]:
        tracked.misses += 1
        if tracked.misses < self.misses_to_lose:
            return []
        tracked.present = False
        return [DeviceLost(self.node_id, tracked.gpu_id)]

    def _track(self, info: DeviceInfo) -> _Tracked:
        taken = {t.gpu_id for t in self._tracked.values()}
        gpu_id = f"gpu{info.index}"
        if gpu_id in taken:
            gpu_id = f"gpu-{info.uuid.removeprefix('GPU-')[:12]}"
        tracked = self._tracked[info.uuid] = _Tracked(gpu_id, info)
        self._series.setdefault(gpu_id, deque(maxlen=self._history))
        return tracked

    def _gpu(self, tracked: _Tracked) -> Any:
        gpu = gpu_from_device(tracked.info, self._overrides)
        if gpu.id != tracked.gpu_id:
            from dataclasses import replace
            gpu = replace(gpu, id=tracked.gpu_id)
        return gpu

    def _sample(self, tracked: _Tracked, info: DeviceInfo, now: float) -> None:
        sample = Sample(now, info.utilization, info.memory_used / GIB, len(info.processes))
        self._series[tracked.gpu_id].append(sample)
        self._untaken.append((tracked.gpu_id, sample))


def _summary(samples: Iterable[Sample]) -> dict[str, Any]:
    samples = list(samples)
    utils = [s.utilization for s in samples if s.utilization is not None]
    return {"samples": len(samples),
            "mean_utilization": sum(utils) / len(utils) if utils else None,
            "max_utilization": max(utils) if utils else None,
            "peak_memory_gb": max((s.memory_used_gb for s in samples), default=0.0)}
