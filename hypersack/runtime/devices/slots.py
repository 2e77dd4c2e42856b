"""What this machine offers trials: one slot per GPU, or one per CPU core without GPUs."""
from __future__ import annotations

import math
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from hypersack.validation import check_workers_fit

__all__ = ["Slot", "detect_gpus", "default_slots", "slots_cluster"]


@dataclass(frozen=True)
class Slot:
    """One place a trial runs. ``gpu`` is the physical index (None on CPU); ``env`` is set in the
    worker process before anything imports torch."""
    index: int
    gpu: int | None
    env: dict[str, str]

    @property
    def device(self) -> str:
        """The device name the trial uses inside its worker (it sees only its own GPU)."""
        return "cuda:0" if self.gpu is not None else "cpu"

    @property
    def label(self) -> str:
        return f"cuda:{self.gpu}" if self.gpu is not None else f"cpu/{self.index}"

    @property
    def key(self) -> str:
        """The device's id in the placement model (slots on one GPU share it)."""
        return f"gpu{self.gpu}" if self.gpu is not None else f"cpu{self.index}"


def _ram_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return 8.0


def slots_cluster(slots: list[Slot], node_id: str = "local", oversubscription: float = 1.0,
                  cpus: int | None = None, gpu_memory_gb: float = 80.0) -> Any:
    """A one-node placement Cluster with one device per distinct slot key.

    CPU slots become devices of arch "cpu" (100% compute = the slot's share of the cores, memory
    = the slot's share of the machine's RAM); GPU slots (without NVML to say better) become
    devices of arch "gpu" with ``gpu_memory_gb``. The node's CPU cores are no limit beyond the
    slots themselves: ``cpus`` defaults to one per device and oversubscribed job.
    """
    from hypersack.placement import GPU, Cluster, Node
    seen: dict[str, Slot] = {}
    for slot in slots:
        seen.setdefault(slot.key, slot)
    ram_share = max(0.25, _ram_gb() / max(1, len(seen)))
    gpus = [GPU(key, "cpu", ram_share, oversubscription=oversubscription) if slot.gpu is None
            else GPU(key, "gpu", gpu_memory_gb, oversubscription=oversubscription)
            for key, slot in seen.items()]
    if cpus is None:
        cpus = len(gpus) * max(1, math.ceil(oversubscription))
    return Cluster([Node(node_id, cpus, tuple(gpus))])


def detect_gpus() -> list[int]:
    """Indices of the visible NVIDIA GPUs: NVML when nvidia-ml-py is installed, else nvidia-smi."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [int(x) for x in visible.split(",") if x.strip().isdigit()]
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            return list(range(pynvml.nvmlDeviceGetCount()))
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [i for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU ")]


def default_slots(workers: int | None = None, gpus: list[int] | None = None,
                  cpu_count: int | None = None) -> list[Slot]:
    """``workers`` slots (default: one per GPU, else one per CPU core). Slots share GPUs round-robin
    when there are more workers than GPUs; CPU slots split the cores for torch's thread pools."""
    gpus = detect_gpus() if gpus is None else gpus
    cores = cpu_count or os.cpu_count() or 1
    if workers is not None:   # before a list of 10**9 slots is built
        check_workers_fit("executor.workers", workers, cores, len(gpus))
    n = workers or (len(gpus) if gpus else cores)
    if gpus:
        threads = max(1, cores // n)
        return [Slot(i, gpus[i % len(gpus)], {"CUDA_VISIBLE_DEVICES": str(gpus[i % len(gpus)]),
                                              "OMP_NUM_THREADS": str(threads)}) for i in range(n)]
    threads = max(1, cores // n)
    return [Slot(i, None, {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": str(threads),
                           "MKL_NUM_THREADS": str(threads)}) for i in range(n)]
