"""Does a fused pack's step capture as a CUDA graph, and what does it gain (issue 38)?

    python benchmarks/gpu/graph_probe.py [--device cuda] [--n 32] [--tiny] [--steps 20]
        [--conv grouped,bmm] [--json PATH]

Per workload (ResNet-18 CIFAR, MobileNet-v3-small; ``--tiny``: the digits CNN at N = 2) and per
form of dense convolution in ``--conv`` (``StackOptions.conv``: "grouped" or "bmm", the A/B of
issue 38), builds a bf16 pack of N members with ``graphs`` on and prints every warning its
first steps raise (a failed capture says why, ``fusion.graphs``), whether a graph was captured
(``StepRunner.captures``), the member-steps/s of the steady step and the peak memory (CUDA).
Then the same pack with graphs off, for the ratio. Keys ``graphs_auto`` / ``graphs_off`` are
the grouped form's, ``bmm_graphs_auto`` / ``bmm_graphs_off`` the bmm form's. Prints one JSON
line per workload (and writes them all to ``--json``, rewritten after each workload).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _rate(pack, n: int, steps: int, device: str) -> float:
    import torch
    for _ in range(3):
        pack.train_iteration()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        pack.train_iteration()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return n * steps / (time.perf_counter() - t0)


def probe(name: str, n: int, steps: int, device: str, tiny: bool,
          convs: tuple[str, ...] = ("grouped",)) -> dict:
    import torch
    from gpu_checks_engines import engine_configs
    from gpu_checks_fusion import _task
    from hypersack.fusion.runner import Pack
    from hypersack.fusion.stack import StackOptions
    from hypersack.fusion.task import Member
    config = dict(engine_configs(tiny).get(name, {}))
    _, task = _task({"workload": name, "config": config})
    out: dict = {"workload": name, "n": n}
    for conv, graphs in ((c, g) for c in convs for g in ("auto", "off")):  # auto: on CUDA
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pack = Pack(task, device, options=StackOptions(capacity=n, precision="bf16",
                                                           graphs=graphs, conv=conv))
            for i in range(n):
                pack.load(Member(trial_id=i, config=dict(config, optimizer="adam",
                                                         lr=1e-3 * (1 + i % 7)), seed=i))
            rate = _rate(pack, n, steps, device)
        runner = pack.stack.runner
        out[("" if conv == "grouped" else f"{conv}_") + f"graphs_{graphs}"] = {
            "member_steps_per_s": round(rate, 1),
            "captures": getattr(runner, "captures", None), "enabled": runner.enabled,
            "peak_mb": (round(torch.cuda.max_memory_allocated() / 2**20)
                        if device.startswith("cuda") else None),
            "warnings": sorted({str(w.message)[:300] for w in caught})[:6]}
        del pack, runner
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    print(json.dumps(out), flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--workloads", default="resnet18_cifar,mobilenet_v3_small")
    p.add_argument("--conv", default="grouped",
                   help="forms of dense convolution, e.g. grouped,bmm (StackOptions.conv)")
    p.add_argument("--json", help="write every workload's line here")
    args = p.parse_args()
    from gpu_checks_engines import SMALL_CNN
    names = [SMALL_CNN] if args.tiny else args.workloads.split(",")
    lines = []
    for name in names:
        try:
            lines.append(probe(name, 2 if args.tiny else args.n, args.steps, args.device,
                               args.tiny, tuple(args.conv.split(","))))
        except Exception as exc:     # one workload's failure is a line, the next still runs
            lines.append({"workload": name, "error": f"{type(exc).__name__}: {exc}"[:500]})
            print(json.dumps(lines[-1]), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(lines, indent=1))


if __name__ == "__main__":
    main()
