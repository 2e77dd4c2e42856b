"""What this machine offers trials: one slot per GPU, or one per CPU core without GPUs."""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

__all__ = ["Slot", "detect_gpus", "default_slots"]


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
    n = workers or (len(gpus) if gpus else cores)
    if gpus:
        threads = max(1, cores // n)
        return [Slot(i, gpus[i % len(gpus)], {"CUDA_VISIBLE_DEVICES": str(gpus[i % len(gpus)]),
                                              "OMP_NUM_THREADS": str(threads)}) for i in range(n)]
    threads = max(1, cores // n)
    return [Slot(i, None, {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": str(threads),
                           "MKL_NUM_THREADS": str(threads)}) for i in range(n)]
