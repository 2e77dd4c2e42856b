"""Fused training throughput: N models fused (horizontally, or vmap) vs a loop vs N processes.

For each model and N, reports model-steps/s (mini-batch updates summed over the N models),
steps/s per model, the speed-up of fused over loop, and peak memory. Every measurement runs in a
fresh subprocess, so peak memory is that configuration's own: the process's peak RSS on CPU,
``torch.cuda.max_memory_allocated`` on CUDA. For "procs" the figures are summed over the N
processes; they run ``--procs-parallel`` at a time, and the time counted is each batch's slowest
training loop (process start-up and imports excluded).

All models train on the same data with Adam, batch size 32, and different learning rates.
Models: ``mlp`` / ``cnn`` are the digits workloads (real data, hidden 64, channels 16);
``resnet18`` is a CIFAR-shaped ResNet-18 (BatchNorm) on synthetic 3x32x32 data (GPU use).

    python benchmarks/fusion/fusion_throughput.py --quick
    python benchmarks/fusion/fusion_throughput.py --models mlp,cnn --n 32 --modes fused,vmap --turns 3
    python benchmarks/fusion/fusion_throughput.py --models mlp,cnn --n 1,2,4,8,16,32,64 --json out.json
    python benchmarks/fusion/fusion_throughput.py --device cuda --models mlp,cnn,resnet18
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


# ---- workloads ---------------------------------------------------------------------------------

def _resnet18_task():
    import torch
    from torch import nn

    from hypersack.fusion.optim import OptimizerConfig
    from hypersack.fusion.task import FusableTask

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.skip = nn.Sequential()
            if stride != 1 or cin != cout:
                self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

        def forward(self, x):
            out = torch.relu(self.b1(self.c1(x)))
            return torch.relu(self.b2(self.c2(out)) + self.skip(x))

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            layers, cin = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()], 64
            for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
                layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
                cin = cout
            layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 10)]
            self.net = nn.Sequential(*layers)

        def forward(self, x):
            return self.net(x)

    class SyntheticCifar(FusableTask):
        name, architecture_keys = "resnet18", ()

        def __init__(self):
            g = torch.Generator().manual_seed(0)
            self.x = torch.randn(512, 3, 32, 32, generator=g)
            self.y = torch.randint(0, 10, (512,), generator=g)

        def build_model(self, config):
            return ResNet18()

        def optimizer(self, config, steps_per_epoch):
            return OptimizerConfig(kind="adam", lr=config["lr"])

        def batch_size(self, config):
            return config["batch_size"]

        def max_steps(self, config, default):
            return 1000

        def train_data(self):
            return self.x, self.y

        def val_data(self):
            return self.x[:64], self.y[:64]

        def loss(self, outputs, targets):
            return nn.functional.cross_entropy(outputs, targets, reduction="none")

        def metrics(self, outputs, targets):
            return {}

    return SyntheticCifar()


def task_for(model: str):
    if model == "resnet18":
        return _resnet18_task()
    from hypersack.workloads.digits_fused import DIGITS_CNN, DIGITS_MLP
    return DIGITS_MLP if model == "mlp" else DIGITS_CNN


def config_for(i: int, batch_size: int) -> dict:
    return {"lr": 1e-3 * (1 + i % 7), "optimizer": "adam", "batch_size": batch_size,
            "hidden": 64, "channels": 16, "dropout": 0.0, "epochs": 1000}


# ---- one measurement (runs in its own process) -------------------------------------------------

def _sync(device):
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure_fused(task, n, args, engine="auto") -> float:
    """A pack of ``n`` members on ``engine``: "auto" (horizontally fused) or "vmap"."""
    from hypersack.fusion.runner import Pack
    from hypersack.fusion.stack import StackOptions
    from hypersack.fusion.task import Member
    options = StackOptions(capacity=n, engine=engine, precision=args.precision)
    pack = Pack(task, args.device, options=options)
    for i in range(n):
        pack.load(Member(trial_id=i, config=config_for(i, args.batch_size), seed=i))
    for _ in range(args.warmup):
        pack.train_iteration()
    _sync(args.device)
    start = time.perf_counter()
    for _ in range(args.steps):
        pack.train_iteration()
    _sync(args.device)
    return time.perf_counter() - start


def measure_engines_by_turns(task, n, args) -> dict:
    """The fused and the vmap engine in this one process, taking turns: ``args.turns`` rounds
    of ``args.steps`` steps each, so a slow spell of a shared machine falls on both."""
    from hypersack.fusion.runner import Pack
    from hypersack.fusion.stack import StackOptions
    from hypersack.fusion.task import Member
    packs = {}
    for mode, engine in (("fused", "auto"), ("vmap", "vmap")):
        pack = Pack(task, args.device, options=StackOptions(capacity=n, engine=engine,
                                                            precision=args.precision))
        for i in range(n):
            pack.load(Member(trial_id=i, config=config_for(i, args.batch_size), seed=i))
        for _ in range(args.warmup):
            pack.train_iteration()
        packs[mode] = pack
    seconds = {mode: 0.0 for mode in packs}
    for _ in range(args.turns):
        for mode, pack in packs.items():
            _sync(args.device)
            start = time.perf_counter()
            for _ in range(args.steps):
                pack.train_iteration()
            _sync(args.device)
            seconds[mode] += time.perf_counter() - start
    return {mode: {"seconds": s, "steps": args.steps * args.turns} for mode, s in seconds.items()}


def measure_loop(task, n, args) -> float:
    """N plain nn.Modules with torch.optim.Adam, one after another each step (same data)."""
    import torch
    x, y = (t.to(args.device) for t in task.train_data())
    models, optimizers, orders = [], [], []
    for i in range(n):
        torch.manual_seed(i)
        model = task.build_model(config_for(i, args.batch_size)).to(args.device).train()
        models.append(model)
        optimizers.append(torch.optim.Adam(model.parameters(), lr=1e-3 * (1 + i % 7)))
        orders.append(torch.randperm(len(y), generator=torch.Generator().manual_seed(i))
                      .to(args.device))
    b = args.batch_size

    def step(k):
        for model, opt, order in zip(models, optimizers, orders):
            start = (k * b) % max(len(y) - b, 1)
            idx = order[start:start + b]
            opt.zero_grad(set_to_none=True)
            task.loss(model(x[idx]), y[idx]).mean().backward()
            opt.step()

    for k in range(args.warmup):
        step(k)
    _sync(args.device)
    start = time.perf_counter()
    for k in range(args.steps):
        step(k)
    _sync(args.device)
    return time.perf_counter() - start


def peak_memory_mb(device: str) -> float:
    import torch
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(args) -> None:
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    task = task_for(args.model)
    if args.mode == "engines":
        got = measure_engines_by_turns(task, args.members, args)
        peak = peak_memory_mb(args.device)
        print(json.dumps({mode: dict(r, peak_mb=peak) for mode, r in got.items()}))
        return
    if args.mode == "loop":
        seconds = measure_loop(task, args.members, args)
    else:
        seconds = measure_fused(task, args.members, args,
                                engine="vmap" if args.mode == "vmap" else "auto")
    print(json.dumps({"seconds": seconds, "steps": args.steps,
                      "peak_mb": peak_memory_mb(args.device)}))


# ---- driver ------------------------------------------------------------------------------------

def run_worker(model, mode, members, args) -> dict:
    cmd = [sys.executable, __file__, "--worker", "--model", model, "--mode", mode,
           "--members", str(members), "--device", args.device, "--threads", str(args.threads),
           "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--batch-size", str(args.batch_size), "--precision", args.precision,
           "--turns", str(args.turns)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure_procs(model, n, args) -> dict:
    """N single-model processes, ``procs_parallel`` at a time."""
    seconds, peak = 0.0, 0.0
    remaining = n
    while remaining:
        k = min(args.procs_parallel, remaining)
        procs = [subprocess.Popen(
            [sys.executable, __file__, "--worker", "--model", model, "--mode", "loop",
             "--members", "1", "--device", args.device, "--threads", str(args.threads),
             "--steps", str(args.steps), "--warmup", str(args.warmup),
             "--batch-size", str(args.batch_size)],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
            for _ in range(k)]
        results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
        seconds += max(r["seconds"] for r in results)
        peak += sum(r["peak_mb"] for r in results)
        remaining -= k
    return {"seconds": seconds, "steps": args.steps, "peak_mb": peak}


def measure_by_turns(model, n, modes, args) -> dict:
    """Each mode measured ``args.turns`` times, the modes taking turns (so a slow spell of a
    shared machine falls on all of them); seconds and steps summed over the turns. The fused
    and vmap engines take their turns inside one process (``measure_engines_by_turns``); their
    peak memory is that process's (both packs)."""
    results: dict = {}
    if "fused" in modes and "vmap" in modes:      # both engines in one process, by turns
        results.update(run_worker(model, "engines", n, args))
        modes = [m for m in modes if m not in results]
    for _ in range(args.turns):
        for mode in modes:
            got = measure_procs(model, n, args) if mode == "procs" \
                else run_worker(model, mode, n, args)
            total = results.setdefault(mode, {"seconds": 0.0, "steps": 0, "peak_mb": 0.0})
            total["seconds"] += got["seconds"]
            total["steps"] += got["steps"]
            total["peak_mb"] = max(total["peak_mb"], got["peak_mb"])
    return results


def row(model, mode, n, result) -> dict:
    total = n * result["steps"] / result["seconds"]
    return {"model": model, "mode": mode, "n": n, "model_steps_per_s": round(total, 1),
            "steps_per_s_per_model": round(total / n, 2), "peak_mb": round(result["peak_mb"], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--n", default="1,2,4,8,16,32,64")
    parser.add_argument("--modes", default="fused,loop,procs",
                        help="fused (horizontally fused engine), vmap (the vmap engine), loop, "
                             "procs")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--procs-parallel", type=int, default=2)
    parser.add_argument("--turns", type=int, default=1,
                        help="measure each mode this many times, the modes taking turns")
    parser.add_argument("--procs-max-n", type=int, default=16,
                        help="skip 'procs' above this N (each process costs seconds to start)")
    parser.add_argument("--quick", action="store_true", help="mlp, N in {1, 8, 32}, 15 steps")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--members", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    if args.quick:
        args.models, args.n, args.steps, args.modes = "mlp", "1,8,32", 15, "fused,loop"
    rows = []
    print(f"device={args.device} threads/process={args.threads} batch={args.batch_size} "
          f"steps={args.steps} procs {args.procs_parallel} at a time")
    print(f"{'model':9} {'N':>3} {'mode':6} {'model-steps/s':>14} {'per model':>10} "
          f"{'peak MB':>9} {'fused/this':>10}")
    for model in args.models.split(","):
        for n in (int(v) for v in args.n.split(",")):
            by_mode = {}
            modes = [m for m in args.modes.split(",") if m != "procs" or n <= args.procs_max_n]
            results = measure_by_turns(model, n, modes, args)
            for mode in modes:
                by_mode[mode] = r = row(model, mode, n, results[mode])
                rows.append(r)
                ratio = ""
                if mode != "fused" and "fused" in by_mode:
                    ratio = f"{by_mode['fused']['model_steps_per_s'] / r['model_steps_per_s']:.2f}x"
                    r["fused_speedup"] = round(float(ratio[:-1]), 2)
                print(f"{model:9} {n:>3} {mode:6} {r['model_steps_per_s']:>14} "
                      f"{r['steps_per_s_per_model']:>10} {r['peak_mb']:>9} {ratio:>10}",
                      flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
