"""What a trial asks of a device: the demand the job history gives, the
memory floor an out-of-memory leaves, whether trials share GPUs through MPS, and whether a
trial is profiled (``needs_profile``). Pure: used
alike by the local machine set-up (``runtime/devices/machine.py``, ``runtime/devices/job_history.py``) and the
simulator (``sim/perf.py``, ``sim/run.py``).

Units: ``compute`` in percent of one device (100: all of it), memory in GiB, ``cpus`` host cores
per device, runtimes in seconds.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Protocol

from hypersack.validation import check_choice, check_integer, check_positive

__all__ = ["history_demand", "memory_floor_after_oom", "with_history",
           "needs_mps", "needs_profile", "Measured", "DEFAULT_CONTEXT_GB", "DATA_MODES", "PIPELINE_CPUS",
           "data_mode", "trial_cpus", "loader_workers", "with_loader_cpus"]

#: Per-process CUDA context that ``torch.cuda.max_memory_allocated`` does not count (GiB).
DEFAULT_CONTEXT_GB = 0.5


class Measured(Protocol):
    """What the Profiler measured of a trial (``runtime.devices.profiler.Profile`` has these)."""

    @property
    def gpu_util_percent(self) -> float | None: ...

    @property
    def peak_memory_gb(self) -> float: ...

    @property
    def time_per_iter_s(self) -> float: ...


def history_demand(measured: Measured | None, floor_gb: float | None, arch: str, *,
                   iterations: int | None = None,
                   context_gb: float | None = None) -> tuple[float, float, float] | None:
    """``(compute percent, memory GiB, runtime s)`` of a trial from its job history, or None
    when it was never profiled nor ran out of memory.

    compute: the profiled utilisation, at least 1 (100 where none was measured: CPU, no NVML);
    memory: the profiled peak plus ``context_gb`` (default ``DEFAULT_CONTEXT_GB``, 0 on "cpu"),
    raised to ``floor_gb`` after an out-of-memory; runtime: seconds for ``iterations``
    iterations (per iteration when None). An out-of-memory with no profile gives
    ``(100, floor_gb, 1.0)``: the job is then placed alone.
    """
    if measured is None:
        return None if floor_gb is None else (100.0, float(floor_gb), 1.0)
    util = measured.gpu_util_percent
    compute = float(util) if util is not None else 100.0
    runtime = measured.time_per_iter_s * (iterations if iterations is not None else 1)
    if context_gb is None:
        context_gb = 0.0 if arch == "cpu" else DEFAULT_CONTEXT_GB
    memory = measured.peak_memory_gb + context_gb
    if floor_gb is not None:       # exactly the device's memory after an OOM: fits alone
        memory = max(memory, floor_gb)
    return (max(1.0, compute), float(memory), float(runtime))


def memory_floor_after_oom(floor_gb: float | None, device_memory_gb: float) -> float:
    """The memory floor of a trial's model after it ran out of memory co-located on a device of
    ``device_memory_gb``: at least the whole device, so its retry is placed alone."""
    check_positive("device_memory_gb", device_memory_gb, hint="(GiB)")
    return max(float(floor_gb or 0.0), float(device_memory_gb))


def with_history(job: Any, per_arch: Mapping[str, Mapping[str, float]]) -> Any:
    """``job`` (a placement Job from the study's declared resources) with the job history's
    per-architecture demand, where the history has any."""
    if not per_arch:
        return job
    import dataclasses
    return dataclasses.replace(job, per_arch=per_arch)


def needs_mps(policy: str, ratios: Iterable[float], gpu_slots: bool) -> bool:
    """Whether the run starts an MPS daemon: trials may share a GPU (a policy other than
    ``exclusive``, and a GPU with an oversubscription ratio above 1) and trials run on GPUs."""
    return policy != "exclusive" and gpu_slots and any(r > 1 for r in ratios)


#: A trial's ``data`` config key: ``synthetic`` (device-resident tensors, no input pipeline) or
#: ``pipeline`` (host-memory uint8 data through a DataLoader with CPU augmentation).
DATA_MODES = ("synthetic", "pipeline")
#: Host cores of a ``data: pipeline`` trial whose config sets no ``cpus``: the training process
#: and two loader workers.
PIPELINE_CPUS = 3
MAX_TRIAL_CPUS = 4096


def needs_profile(*, learning: bool, alone_everywhere: bool,
                  per_arch: Mapping[str, Mapping[str, float]], capacity: Mapping[str, float],
                  archs: Iterable[str]) -> bool:
    """Whether a trial of a model is profiled (the Profiler runs once per job-history key):
    always while ``oversubscription: auto`` is ``learning`` (it learns from every co-located
    run); else not when the model has a profile measured alone on every architecture of
    ``archs`` (``alone_everywhere``) with a demand (``per_arch[arch]["compute"]``) that fills a
    whole device there (``capacity[arch]``, r x C): no trial can share a device with it, so
    profiling it again measures neither a new alone profile nor a co-location."""
    if learning:
        return True
    archs = list(archs)
    fills = all(arch in per_arch and per_arch[arch]["compute"] >= capacity[arch]
                for arch in archs)
    return not (alone_everywhere and archs and fills)


def data_mode(config: Mapping[str, Any]) -> str:
    """The config's ``data`` mode (default ``synthetic``); ConfigError naming ``config.data``."""
    return str(check_choice("config.data", config.get("data", "synthetic"), DATA_MODES))


def trial_cpus(config: Mapping[str, Any]) -> int:
    """Host cores a trial uses: its config's ``cpus`` (an integer >= 1), else ``PIPELINE_CPUS``
    for ``data: pipeline`` and 1 otherwise. One core runs the training loop, the others the
    data loader's worker processes (``loader_workers``)."""
    default = PIPELINE_CPUS if data_mode(config) == "pipeline" else 1
    return int(check_integer("config.cpus", config.get("cpus", default), low=1, high=MAX_TRIAL_CPUS))


def loader_workers(config: Mapping[str, Any]) -> int:
    """DataLoader worker processes of a trial: ``trial_cpus - 1`` (0: load in the training
    process)."""
    return trial_cpus(config) - 1


def with_loader_cpus(job: Any, config: Mapping[str, Any]) -> Any:
    """``job`` (a placement Job) whose ``cpus`` covers the trial's loader workers: at least
    ``trial_cpus(config)``, so the node's core budget (the knapsack's Eq. 4) counts every loader
    process and placement refuses a device whose node has no cores left for them."""
    need = trial_cpus(config)
    if job.cpus >= need:
        return job
    import dataclasses
    return dataclasses.replace(job, cpus=need)
