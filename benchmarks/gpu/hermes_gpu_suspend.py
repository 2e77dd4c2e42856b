"""Suspend and resume of a time-shared trial on a GPU: seconds and device memory freed.

    python benchmarks/gpu/hermes_gpu_suspend.py [--batch 64] [--iters 20] [--repeats 3] [--json out.json]

What HyperSack does when time-sharing preempts a trial (Hermes, Sec. 3.4): the trial saves its
state after its current step (``hypersack.runtime.worker.checkpoints.write_checkpoint``, fsync'd), its
worker process exits, and the device memory is free for the next trial; resuming starts a new
process that reads the checkpoint (``read_checkpoint``: safe ``torch.load``) and goes on. Here a
ResNet-18 (the project's CIFAR one, ``hypersack.workloads.vision.ResNet18``: 11 M parameters,
3x32x32 inputs, SGD with momentum) trains ``--iters`` steps in a child
process, which then saves and exits; a second child restores and runs one step. Printed, per
repeat: save seconds, restore seconds (read + load_state_dict onto the GPU), the new process's
start-up (spawn, imports, CUDA context) until it is ready to restore, the memory the trainer held
(torch.cuda.memory_reserved, and NVML's device-wide used memory while it ran and after it exited),
and for contrast what freeing in-process (``del`` + ``torch.cuda.empty_cache()``) leaves behind
(the CUDA context stays). The paper reports 0.67 s (GoogleNet) to 1.57 s (VGG19) save + restore.

Without CUDA it says so and exits with status 2. It runs in well under two minutes on one GPU.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def nvml_used_gb() -> float | None:
    """Device 0's used memory (GB) by NVML, or None without nvidia-ml-py."""
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
            return info.used / 1e9
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def _setup(batch: int) -> tuple[Any, Any, Any, Any]:
    import torch
    torch.manual_seed(0)
    from hypersack.workloads.vision import ResNet18
    model = ResNet18(classes=10).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 32, 32, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    return model, optimizer, x, y


def _step(model: Any, optimizer: Any, x: Any, y: Any) -> float:
    import torch.nn.functional as F
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return float(loss)


def train_then_suspend(folder: str, batch: int, iters: int, out: Any) -> None:
    """Child 1: train, save (timed), report memory, exit (the suspension)."""
    import torch

    from hypersack.runtime.worker.checkpoints import write_checkpoint
    model, optimizer, x, y = _setup(batch)
    for _ in range(iters):
        loss = _step(model, optimizer, x, y)
    torch.cuda.synchronize()
    started = time.perf_counter()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": iters}
    name = write_checkpoint(Path(folder), state, attempt=1, sequence=1)
    save_s = time.perf_counter() - started
    out.put({"save_s": save_s, "checkpoint": name, "loss": loss,
             "reserved_gb": torch.cuda.memory_reserved() / 1e9,
             "allocated_gb": torch.cuda.memory_allocated() / 1e9, "nvml_used_gb": nvml_used_gb(),
             "checkpoint_mb": (Path(folder) / name).stat().st_size / 1e6})


def resume(folder: str, name: str, batch: int, spawned_at: float, out: Any) -> None:
    """Child 2: a new process restores (timed) and runs one step."""
    import torch

    from hypersack.runtime.worker.checkpoints import read_checkpoint
    model, optimizer, x, y = _setup(batch)
    torch.cuda.synchronize()
    ready = time.monotonic()
    state = read_checkpoint(Path(folder), name)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.cuda.synchronize()
    restore_s = time.monotonic() - ready
    loss = _step(model, optimizer, x, y)
    torch.cuda.synchronize()
    out.put({"restore_s": restore_s, "startup_s": ready - spawned_at,
             "first_step_s": time.monotonic() - ready - restore_s, "loss": loss})


def in_process_free(batch: int, iters: int, out: Any) -> None:
    """For contrast: free in the process (del + empty_cache) instead of exiting."""
    import gc

    import torch
    model, optimizer, x, y = _setup(batch)
    for _ in range(iters):
        _step(model, optimizer, x, y)
    torch.cuda.synchronize()
    before = nvml_used_gb()
    del model, optimizer, x, y
    gc.collect()
    torch.cuda.empty_cache()
    out.put({"reserved_after_gb": torch.cuda.memory_reserved() / 1e9,
             "nvml_before_gb": before, "nvml_after_free_gb": nvml_used_gb()})


def _child(target: Any, *args: Any) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(target=target, args=(*args, queue))
    process.start()
    result = queue.get(timeout=300)
    process.join(60)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("hermes_gpu_suspend: no CUDA device here (torch.cuda.is_available() is False); "
              "this benchmark measures GPU suspend/resume: run it on a machine with an NVIDIA GPU.")
        return 2
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
          f"ResNet-18, batch {args.batch}, {args.iters} steps before each suspension")
    idle = nvml_used_gb()
    rows = []
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory() as folder:
            suspended = _child(train_then_suspend, folder, args.batch, args.iters)
            after_exit = nvml_used_gb()
            resumed = _child(resume, folder, suspended["checkpoint"], args.batch, time.monotonic())
        row = {**suspended, **{f"resume_{k}": v for k, v in resumed.items()},
               "nvml_idle_gb": idle, "nvml_after_exit_gb": after_exit}
        rows.append(row)
        freed = (f"{row['nvml_used_gb'] - after_exit:.2f} GB" if after_exit is not None
                 and row["nvml_used_gb"] is not None else "n/a (no NVML)")
        print(f"repeat {repeat + 1}: save {row['save_s']:.3f} s ({row['checkpoint_mb']:.0f} MB), "
              f"restore {row['resume_restore_s']:.3f} s, new process ready in "
              f"{row['resume_startup_s']:.1f} s; trainer reserved {row['reserved_gb']:.2f} GB "
              f"(allocated {row['allocated_gb']:.2f}); NVML freed by the exit: {freed}")
    contrast = _child(in_process_free, args.batch, args.iters)
    print(f"in-process free instead: torch reserved after empty_cache "
          f"{contrast['reserved_after_gb']:.2f} GB; NVML used {contrast['nvml_before_gb']} GB "
          f"-> {contrast['nvml_after_free_gb']} GB (the CUDA context stays until the process exits)")
    best = min(rows, key=lambda r: r["save_s"] + r["resume_restore_s"])
    print(f"save + restore (best of {len(rows)}): {best['save_s'] + best['resume_restore_s']:.3f} s "
          "(Hermes' paper: 0.67 s GoogleNet to 1.57 s VGG19)")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "in_process": contrast}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
