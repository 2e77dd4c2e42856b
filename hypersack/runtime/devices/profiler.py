"""The profiler (the HyperSack paper's Sampler, Sec. IV-C1): profile a job over a few training iterations.

Inside a worker, around the trainable's iterations::

    profiler = Profiler(device=ctx.device)
    for batch_idx in range(n):
        with profiler.iteration():
            x, y = next(loader)
            profiler.data_loaded()          # optional: the time before this is data loading
            train_step(x, y)
        if profiler.done:
            break
    profile = profiler.profile()

Measured (``warmup`` iterations excluded, the paper excludes the first one, which sets the
pipeline up): wall time per iteration, the share of it spent loading data, peak memory
(``torch.cuda.max_memory_allocated`` on a GPU; the process's peak resident set on CPU, reset at
the first measured iteration where Linux allows it) and, on a GPU, the mean NVML utilisation
sampled by a background thread during the measured iterations. Utilisation is the whole device's,
so profile a job alone on its GPU.

Iterations may also be delimited by calls to :meth:`Profiler.mark` (each call ends one iteration);
:func:`hypersack.runtime.devices.profile_trainable.profile_trainable` uses that to profile an unmodified ``train(config, ctx)``: every
``ctx.report`` ends an iteration unless the trainable uses ``ctx.profiler`` itself.
"""
from __future__ import annotations

import contextlib
import os
import resource
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from hypersack.errors import HyperSackError
from hypersack.validation import check_integer

__all__ = ["Profile", "Profiler", "NullProfiler", "UtilizationMeter",
           "ProfilingError"]

GIB = 1024 ** 3


class ProfilingError(HyperSackError):
    """The job ended before one iteration could be measured."""


@dataclass(frozen=True)
class Profile:
    """A job's measured demand on one device architecture.

    ``time_per_iter_s``: median wall seconds per training iteration (data loading included);
    ``peak_memory_gb``: GiB; ``gpu_util_percent``: 0-100, None on CPU or without NVML;
    ``data_time_fraction``: 0-1 of the iteration time spent before ``data_loaded()``.
    """
    time_per_iter_s: float
    peak_memory_gb: float
    gpu_util_percent: float | None
    data_time_fraction: float
    iters_measured: int
    device_arch: str

    def epoch_time_s(self, iters_per_epoch: int) -> float:
        """Expected seconds for one epoch of ``iters_per_epoch`` iterations."""
        return self.time_per_iter_s * iters_per_epoch

    def job_time_s(self, iters_per_epoch: int, epochs: float) -> float:
        """Expected seconds for the whole job."""
        return self.epoch_time_s(iters_per_epoch) * epochs

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Profile":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


class UtilizationMeter:
    """A daemon thread calling ``read() -> percent | None`` every ``interval_s`` seconds between
    ``start()`` and ``stop()``; ``mean`` is the mean of the non-None readings (None if none)."""

    def __init__(self, read: Callable[[], float | None], interval_s: float = 0.05):
        self._read = read
        self.interval_s = interval_s
        self.readings: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hypersack-util", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
        self._take()     # at least one reading, however short the window was

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.readings) if self.readings else None

    def _take(self) -> None:
        try:
            value = self._read()
        except Exception:
            return
        if value is not None:
            self.readings.append(float(value))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()


class Profiler:
    """Measures ``iterations`` iterations after ``warmup`` unmeasured ones.

    ``device``: "cpu" or "cuda[:N]"; ``arch``: the device's architecture name for the profile
    (default: ``"cpu"``, or the CUDA device name's architecture). Injected for tests:
    ``clock`` (seconds), ``peak_memory`` (``() -> bytes`` since the last ``reset_memory()``),
    ``reset_memory``, ``utilization`` (``() -> percent | None``; default on a GPU: NVML on the
    device this process sees first, when nvidia-ml-py is installed).
    """

    def __init__(self, *, iterations: int = 10, warmup: int = 1, device: str = "cpu",
                 arch: str | None = None, clock: Callable[[], float] = time.perf_counter,
                 peak_memory: Callable[[], float] | None = None,
                 reset_memory: Callable[[], None] | None = None,
                 utilization: Callable[[], float | None] | None = None,
                 util_interval_s: float = 0.05):
        for name, value, low in (("iterations", iterations, 1), ("warmup", warmup, 0)):
            check_integer(f"profiling.{name}", value, low=low)
        self.iterations, self.warmup, self.device = iterations, warmup, device
        gpu = device.startswith("cuda")
        self.arch = arch or (_cuda_arch(device) if gpu else "cpu")
        self._clock = clock
        self._peak = peak_memory or (_cuda_peak(device) if gpu else _cpu_peak_rss)
        self._reset = reset_memory or (_cuda_reset(device) if gpu else _cpu_reset_peak)
        read = utilization if utilization is not None else (_nvml_reader() if gpu else None)
        self._util = UtilizationMeter(read, util_interval_s) if read is not None else None
        self._seen = 0
        self._times: list[float] = []
        self._data: list[float] = []
        self._start: float | None = None
        self._loaded: float | None = None
        self._last_mark: float | None = None
        self._measuring = False

    @property
    def done(self) -> bool:
        """True once ``warmup + iterations`` iterations have run."""
        return self._seen >= self.warmup + self.iterations

    @property
    def measured(self) -> int:
        return len(self._times)

    @property
    def times(self) -> tuple[float, ...]:
        """The measured iterations' wall seconds, in order (warm-up excluded)."""
        return tuple(self._times)

    @contextlib.contextmanager
    def iteration(self) -> Iterator["Profiler"]:
        """Times one iteration (a failing iteration is not counted)."""
        self._begin(self._clock())
        yield self
        self._end(self._clock())

    def data_loaded(self) -> None:
        """Inside ``iteration()``: the batch is ready; the time so far was data loading."""
        if self._start is not None:
            self._loaded = self._clock()

    def mark(self) -> None:
        """Ends an iteration that started at the previous mark (the first mark only starts one)."""
        now = self._clock()
        if self._last_mark is not None:
            self._start, self._loaded = self._last_mark, None
            self._end(now)
        if self._seen == self.warmup:
            self._on_measuring()   # the iteration starting now is the first measured one
        self._last_mark = now

    def profile(self) -> Profile:
        """The profile so far; ProfilingError before the first measured iteration."""
        if self._util is not None:
            self._util.stop()
        if not self._times:
            raise ProfilingError(
                f"No iteration was measured ({self._seen} ran, {self.warmup} of them warm-up): "
                f"the job must run at least {self.warmup + 1} iterations to be profiled")
        total = sum(self._times)
        return Profile(time_per_iter_s=statistics.median(self._times),
                       peak_memory_gb=max(0.0, float(self._peak())) / GIB,
                       gpu_util_percent=self._util.mean if self._util is not None else None,
                       data_time_fraction=min(1.0, sum(self._data) / total) if total > 0 else 0.0,
                       iters_measured=len(self._times), device_arch=self.arch)

    # ---- internals --------------------------------------------------------------------------

    def _begin(self, now: float) -> None:
        if self._seen == self.warmup:
            self._on_measuring()
        self._start, self._loaded = now, None

    def _end(self, now: float) -> None:
        start, loaded = self._start, self._loaded
        self._start = self._loaded = None
        self._seen += 1
        if start is None or self._seen <= self.warmup or len(self._times) >= self.iterations:
            return
        self._times.append(max(0.0, now - start))
        self._data.append(max(0.0, loaded - start) if loaded is not None else 0.0)

    def _on_measuring(self) -> None:
        if self._measuring:
            return
        self._measuring = True
        self._reset()
        if self._util is not None:
            self._util.start()


class NullProfiler:
    """The Profiler's interface doing nothing: what ``ctx.profiler`` can be outside profiling, so a
    trainable may always write ``with ctx.profiler.iteration():``."""

    done = False
    measured = 0

    @contextlib.contextmanager
    def iteration(self) -> Iterator["NullProfiler"]:
        yield self

    def data_loaded(self) -> None:
        pass

    def mark(self) -> None:
        pass


# ---- memory and utilisation probes -----------------------------------------------------------

def _cpu_peak_rss() -> float:
    """Peak resident set of this process in bytes (VmHWM; ru_maxrss where /proc is missing)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _cpu_reset_peak() -> None:
    """Linux >= 4.0: writing 5 to clear_refs resets VmHWM to the current RSS."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _cuda_index(device: str) -> int:
    return int(device.split(":", 1)[1]) if ":" in device else 0


def _cuda_peak(device: str) -> Callable[[], float]:
    def peak() -> float:
        import torch
        return float(torch.cuda.max_memory_allocated(_cuda_index(device)))
    return peak


def _cuda_reset(device: str) -> Callable[[], None]:
    def reset() -> None:
        import torch
        torch.cuda.reset_peak_memory_stats(_cuda_index(device))
    return reset


def _cuda_arch(device: str) -> str:
    from hypersack.runtime.devices.inventory import arch_from_name
    try:
        import torch
        return arch_from_name(torch.cuda.get_device_name(_cuda_index(device)))
    except Exception:
        return "gpu"


def _nvml_reader(nvml: Any = None,
                 cuda_visible: str | None | object = ...) -> Callable[[], float | None] | None:
    """A reader of the NVML utilisation of this process's first visible GPU, or None when
    nvidia-ml-py is missing or NVML does not answer."""
    from hypersack.errors import MissingDependencyError
    from hypersack.runtime.devices.inventory import visible_devices
    from hypersack.runtime.devices.nvml import NvmlSource, NvmlUnavailable
    try:
        source = NvmlSource(nvml).open()
        if cuda_visible is ...:
            cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        devices = visible_devices(source.snapshot(), cuda_visible if isinstance(cuda_visible, str) else None)
    except (MissingDependencyError, NvmlUnavailable):
        return None
    if not devices:
        source.close()
        return None
    index = devices[0].index
    return lambda: source.utilization(index)
