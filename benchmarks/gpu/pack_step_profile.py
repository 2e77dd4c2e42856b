"""Where a fused pack's training step spends its time: a per-op profile of one step (issue 38).

    python benchmarks/gpu/pack_step_profile.py [--device cuda] [--n 32] [--tiny] [--json PATH]
        [--precisions fp32,bf16] [--conv grouped,bmm]

For each workload (ResNet-18 CIFAR, MobileNet-v3-small; ``--tiny``: the digits CNN at N = 2),
builds a fused pack of N members (``hypersack.fusion.runner.Pack``, Adam, eager, in each of
``--precisions`` and each form of dense convolution in ``--conv``: "grouped", one grouped
convolution, mode ``fused_<precision>``; "bmm", im2col and one batched GEMM over the members,
mode ``fused_<precision>_bmm``: the A/B of ``StackOptions.conv``) and one plain model with
``torch.optim.Adam(foreach=True)`` (the trial alone), warms each
up, then profiles ``--steps`` steps with ``torch.profiler`` (CPU and, on CUDA, CUDA activity).
Per mode it reports, per training step: wall ms (synchronised host clock), the host's CPU ms
spent dispatching, the device's busy ms (sum of kernel times), kernels launched, aten ops
dispatched, the peak memory (CUDA), and the ten ops with the most device time (CPU time on the
CPU). Member-steps/s and the pack's speed-up over the trial alone follow from the wall times.
The JSON is rewritten after each workload, so a run cut by its time limit keeps what it did.

What it tells: device busy time far under wall time means the step is bound by launches or
host work (the fix is fewer ops or a CUDA graph); kernels per member-step tells how much of the
per-member cost fusion removed; the top ops say where the device time goes (grouped conv, batch
norm, optimizer passes). No goal is checked here: check 5 of ``gpu_suite.py`` holds the goals.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _sync(device: str) -> None:
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _alone_step(workload: Any, task: Any, config: dict, device: str) -> Callable[[int], None]:
    """The trial alone: one plain model, torch.optim.Adam(foreach=True), fp32 eager."""
    import torch
    x, y = (t.to(device) for t in task.train_data())
    torch.manual_seed(0)
    model = workload.build(workload.with_defaults(config)).to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    b = int(workload.with_defaults(config)["batch_size"])

    def step(k: int) -> None:
        start = (k * b) % max(len(y) - b, 1)
        optimizer.zero_grad(set_to_none=True)
        workload.per_sample_loss(model(x[start:start + b]), y[start:start + b]).mean().backward()
        optimizer.step()
    return step


def _pack_step(task: Any, device: str, config: dict, n: int, precision: str,
               conv: str = "grouped") -> Callable[[int], None]:
    from hypersack.fusion.runner import Pack
    from hypersack.fusion.stack import StackOptions
    from hypersack.fusion.task import Member
    pack = Pack(task, device, options=StackOptions(capacity=n, precision=precision, graphs="off",
                                                   conv=conv))
    for i in range(n):
        pack.load(Member(trial_id=i, config=dict(config, optimizer="adam",
                                                 lr=1e-3 * (1 + i % 7)), seed=i))
    return lambda k: pack.train_iteration()


def _profile(step: Callable[[int], None], device: str, warmup: int, steps: int) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    for k in range(warmup):
        step(k)
    _sync(device)
    t0 = time.perf_counter()
    for k in range(steps):
        step(warmup + k)
    _sync(device)
    wall = (time.perf_counter() - t0) / steps
    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for k in range(steps):
            step(warmup + steps + k)
        _sync(device)
    events = prof.key_averages()
    cuda = device.startswith("cuda")

    def dev_us(e: Any) -> float:
        return float(getattr(e, "self_device_time_total", 0.0) or getattr(e, "self_cuda_time_total", 0.0))
    kernels = [e for e in prof.events() if cuda and getattr(e, "device_type", None) is not None
               and str(e.device_type).endswith("CUDA")]
    aten = [e for e in events if e.key.startswith("aten::")]
    top = sorted(events, key=(dev_us if cuda else (lambda e: e.self_cpu_time_total)),
                 reverse=True)[:10]
    return {
        "wall_ms": round(wall * 1e3, 3),
        "host_cpu_ms": round(sum(e.self_cpu_time_total for e in events) / 1e3 / steps, 3),
        "device_busy_ms": round(sum(dev_us(e) for e in kernels) / 1e3 / steps, 3) if cuda else None,
        "kernels": round(len(kernels) / steps, 1) if cuda else None,
        "aten_ops": round(sum(e.count for e in aten) / steps, 1),
        "peak_mb": round(torch.cuda.max_memory_allocated() / 2**20) if cuda else None,
        "top": [{"op": e.key[:60], "count": e.count // steps,
                 "ms": round((dev_us(e) if cuda else e.self_cpu_time_total) / 1e3 / steps, 3)}
                for e in top],
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--workloads", default="resnet18_cifar,mobilenet_v3_small")
    p.add_argument("--precisions", default="fp32,bf16", help="fused packs' precisions")
    p.add_argument("--conv", default="grouped,bmm",
                   help="forms of dense convolution to measure (StackOptions.conv)")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    from gpu_checks_engines import SMALL_CNN, engine_configs
    from gpu_checks_fusion import _task
    import torch
    if args.device.startswith("cuda"):
        torch.backends.cudnn.benchmark = True
    names = [SMALL_CNN] if args.tiny else args.workloads.split(",")
    n = 2 if args.tiny else args.n
    out: dict[str, Any] = {"device": args.device, "n": n, "torch": torch.__version__,
                           "device_name": (torch.cuda.get_device_name() if
                                           args.device.startswith("cuda") else "cpu"),
                           "workloads": {}}
    for name in names:
        config = dict(engine_configs(args.tiny).get(name, {}))
        workload, task = _task({"workload": name, "config": config})
        rows: dict[str, Any] = {}
        try:
            rows["alone_fp32"] = _profile(_alone_step(workload, task, config, args.device),
                                          args.device, args.warmup, args.steps)
            for precision in args.precisions.split(","):
                for conv in args.conv.split(","):
                    mode = f"fused_{precision}" + ("" if conv == "grouped" else f"_{conv}")
                    rows[mode] = _profile(
                        _pack_step(task, args.device, config, n, precision, conv),
                        args.device, args.warmup, args.steps)
                    if args.device.startswith("cuda"):
                        torch.cuda.empty_cache()
        except Exception as exc:   # one workload's failure is a row, the others still run
            rows["error"] = f"{type(exc).__name__}: {exc}"[:400]
        for mode, row in rows.items():
            if isinstance(row, dict) and "alone_fp32" in rows and mode != "alone_fp32":
                row["member_steps_vs_alone"] = round(
                    n * rows["alone_fp32"]["wall_ms"] / row["wall_ms"], 2)
        out["workloads"][name] = rows
        print(f"== {name} (N = {n})")
        for mode, row in rows.items():
            if not isinstance(row, dict):
                print(f"  {mode}: {row}")
                continue
            print(f"  {mode:15s} wall {row['wall_ms']:8.2f} ms  host {row['host_cpu_ms']:8.2f} ms"
                  f"  device {row['device_busy_ms']} ms  kernels {row['kernels']}"
                  f"  aten {row['aten_ops']}  peak {row['peak_mb']} MB"
                  f"  vs alone {row.get('member_steps_vs_alone')}")
            for t in row["top"][:6]:
                print(f"      {t['ms']:8.3f} ms  x{t['count']:<5d} {t['op']}")
        if args.json:       # after each workload: a run cut short keeps what it measured
            Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
