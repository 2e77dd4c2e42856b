"""Cost of the GPU plumbing itself: is the Profiler, the state monitor and the job history cheap?

- Profiler: extra time per timed iteration (``with profiler.iteration(): profiler.data_loaded()``
  around an empty body) against the bare loop, in microseconds.
- DeviceMonitor.poll over the in-memory FakeNvml with D devices (what one poll of the thread costs
  in Python; real NVML calls add the driver's own latency, measured with ``--real-nvml`` where a
  GPU and nvidia-ml-py are present).
- ProfileStore: put and get latency on a temporary SQLite file (WAL), in milliseconds.
- profile_trainable on a small torch MLP (CPU), wall seconds for 1 warm-up + 10 measured
  iterations, best of 3 (the first run pays torch's lazy initialisation).

    python benchmarks/gpu/gpu_runtime_cost.py [--quick] [--real-nvml] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from hypersack.runtime.devices.monitor import DeviceMonitor
from hypersack.runtime.devices.nvml import FakeNvml, NvmlSource
from hypersack.runtime.devices.profile_trainable import profile_trainable
from hypersack.runtime.devices.profiler import Profile, Profiler
from hypersack.runtime.devices.job_history import ProfileKey, ProfileStore


def best_of(fn: Callable[[], float], repeats: int) -> float:
    return min(fn() for _ in range(repeats))


def sampler_overhead_us(n: int) -> float:
    def bare() -> float:
        t = time.perf_counter()
        for _ in range(n):
            pass
        return time.perf_counter() - t

    def sampled() -> float:
        s = Profiler(iterations=n, warmup=1, peak_memory=lambda: 0, reset_memory=lambda: None)
        t = time.perf_counter()
        for _ in range(n):
            with s.iteration():
                s.data_loaded()
        return time.perf_counter() - t
    return (best_of(sampled, 3) - best_of(bare, 3)) / n * 1e6


def monitor_poll_ms(devices: int, polls: int) -> float:
    fake = FakeNvml([("NVIDIA H100 80GB HBM3", 80)] * devices)
    source = NvmlSource(fake).open()
    monitor = DeviceMonitor(source, "n0", initial=source.snapshot())
    times = []
    for _ in range(polls):
        t = time.perf_counter()
        monitor.poll()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def real_nvml_poll_ms(polls: int) -> float | None:
    try:
        source = NvmlSource().open()
    except Exception:
        return None
    monitor = DeviceMonitor(source, "n0", initial=source.snapshot())
    times = []
    for _ in range(polls):
        t = time.perf_counter()
        monitor.poll()
        times.append(time.perf_counter() - t)
    source.close()
    return statistics.median(times) * 1e3


def store_latency_ms(keys: int) -> tuple[float, float]:
    profile = Profile(0.05, 3.0, 35.0, 0.1, 10, "A100")
    with tempfile.TemporaryDirectory() as tmp, ProfileStore(Path(tmp) / "h.db") as store:
        t = time.perf_counter()
        for i in range(keys):
            store.put(ProfileKey(f"sig{i}", 64, "A100"), profile)
        put = (time.perf_counter() - t) / keys
        t = time.perf_counter()
        for i in range(keys):
            store.get(ProfileKey(f"sig{i}", 64, "A100"))
        get = (time.perf_counter() - t) / keys
    return put * 1e3, get * 1e3


def torch_profile_s() -> float | None:
    try:
        import torch
    except ImportError:
        return None

    def train(config: dict, ctx: Any) -> None:
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(10_000):
            with ctx.profiler.iteration():
                x, y = torch.randn(config["batch_size"], 64), torch.randint(0, 10, (config["batch_size"],))
                ctx.profiler.data_loaded()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()

    def once() -> float:
        t = time.perf_counter()
        profile_trainable(train, {"batch_size": 128}, n_iters=10)
        return time.perf_counter() - t
    return best_of(once, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, a few seconds")
    parser.add_argument("--real-nvml", action="store_true", help="also poll this machine's NVML")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args()
    n_iter, polls, keys = (20_000, 50, 100) if args.quick else (200_000, 200, 1000)
    rows: list[tuple[str, float | None, str]] = [
        ("sampler overhead per iteration", sampler_overhead_us(n_iter), "us")]
    for d in (8, 64):   # one node; the fake's own lookups are O(devices)
        rows.append((f"monitor poll, {d} fake devices", monitor_poll_ms(d, polls), "ms"))
    if args.real_nvml:
        rows.append(("monitor poll, real NVML", real_nvml_poll_ms(polls), "ms"))
    put, get = store_latency_ms(keys)
    rows += [("profile store put", put, "ms"), ("profile store get", get, "ms"),
             ("profile_trainable, torch MLP, 10 iters", torch_profile_s(), "s")]
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'value':>10}  unit")
    for name, value, unit in rows:
        shown = "n/a" if value is None else f"{value:10.3f}"
        print(f"{name:<{width}}  {shown:>10}  {unit}")
    if args.json:
        args.json.write_text(json.dumps([{"measure": n, "value": v, "unit": u} for n, v, u in rows], indent=2))


if __name__ == "__main__":
    main()
