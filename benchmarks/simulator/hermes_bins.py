"""Hermes' bins in the simulator: time for the good jobs to make 90% of their loss reduction.

    python benchmarks/simulator/hermes_bins.py [--orders 5] [--models googlenet,vgg16,vgg19,resnet50]
                                               [--json out.json]

The setup is ``examples/sim/hermes_bins.yaml`` (4 devices, 16 jobs of 100 reported steps): for
each model of its ``reference.models`` (step times and suspend/restore costs), each bin (Bin 1:
4 good jobs of 16; Bin 2: 12 good, the 4 best measured), and ``--orders`` shuffled submission
orders (seeded), the same study runs under fifo, rr, slaq and hermes. A measured job's time is
when it first reports a step at which its noise-free curve has made ``target`` (90%) of its
reduction from its start to its value at the last step. Per model: the mean of those times over
bins, orders and measured jobs; the table gives FIFO's mean over each policy's (speed-up
against FIFO, > 1 is faster) beside the paper's figures (Hermes against FIFO).
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from hypersack.sim.run import simulate  # noqa: E402
from hypersack.sim.scenario import load_scenario, scenario_from_dict  # noqa: E402

SCENARIO = ROOT / "examples" / "sim" / "hermes_bins.yaml"
POLICIES = ("fifo", "rr", "slaq", "hermes")
GOOD_LRS = [round(0.01 * 10 ** (k / 11 - 0.5), 6) for k in range(12)]   # 0.0032 .. 0.032
BAD_LRS = [0.0001, 0.00012, 0.00014, 0.00016, 0.00018, 0.0002, 0.00022, 0.00025, 0.00028,
           0.00032, 0.00036, 0.0004]


def bin_jobs(good: int, bad: int) -> tuple[list[float], list[float]]:
    """Good and bad learning rates of a bin: the ``good`` best of GOOD_LRS (nearest the optimum
    in log distance), and ``bad`` of BAD_LRS spread over its range."""
    good_lrs = sorted(GOOD_LRS, key=lambda lr: abs(math.log10(lr / 0.01)))[:good]
    step = len(BAD_LRS) / bad
    bad_lrs = [BAD_LRS[int(i * step)] for i in range(bad)]
    return good_lrs, bad_lrs


def scenario_for(raw: dict, model: str, lrs: list[float], policy: str) -> Any:
    d = copy.deepcopy(raw)
    costs = d["reference"]["models"][model]
    d["name"] = f"hermes-{model}-{policy}"
    d["workload"]["model"] = model
    d["perf"].update(suspend_s=costs["suspend_s"], restore_s=costs["restore_s"])
    d["study"]["space"]["lr"]["choices"] = list(lrs)
    d["study"]["budget"]["trials"] = len(lrs)
    options = dict(d["study"].get("time_sharing") or {})
    if policy != "hermes":      # the baselines take their own defaults (30 s quanta, no growth)
        options = {"policy": policy, "max_jobs_per_device": options.get("max_jobs_per_device", 4)}
    d["study"]["time_sharing"] = options
    return scenario_from_dict(d, SCENARIO.parent)


def target_step(scenario: Any, lr: float, target: float, steps: int) -> int:
    """First step at which the noise-free curve of ``lr`` has made ``target`` of its reduction."""
    clean = copy.deepcopy(scenario.raw)
    clean["curves"]["noise"] = 0.0
    curve = scenario_from_dict(clean, SCENARIO.parent).curves.curve({"lr": lr}, 0)
    start = float(clean["curves"]["start"])
    end = curve.at(steps)["loss"]
    goal = start - target * (start - end)
    return next(s for s in range(1, steps + 1) if curve.at(s)["loss"] <= goal)


def times_to_target(result: Any, measured: dict[float, int]) -> list[float]:
    """Simulated seconds until each measured job (lr -> target step) reported its target step."""
    lr_of = {t.trial_id: t.config["lr"] for t in result.controller.trials.values()}
    reached: dict[float, float] = {}
    for at, kind, trial_id, detail in result.executor.log:
        if kind != "ResultReported":
            continue
        lr = lr_of[trial_id]
        if lr in measured and lr not in reached and detail[0] >= measured[lr]:
            reached[lr] = at
    return [reached[lr] for lr in measured]


def run(models: list[str], orders: int) -> dict[str, Any]:
    """Per model: each policy's mean time to target (s), its speed-up against FIFO, the same per
    bin, and how many relaunches (resumes after a preemption) it made."""
    base = load_scenario(SCENARIO)
    raw = base.raw
    bins = raw["reference"]["bins"]
    target = float(raw["reference"]["target"])
    steps = int(raw["study"]["max_steps"])
    out: dict[str, Any] = {}
    for model in models:
        times: dict[tuple[str, str], list[float]] = {}
        relaunches: dict[str, int] = {p: 0 for p in POLICIES}
        for bin_name, spec in bins.items():
            good, bad = bin_jobs(int(spec["good"]), int(spec["bad"]))
            top = good[:int(spec["measured"])]
            probe = scenario_for(raw, model, good + bad, "hermes")
            measured = {lr: target_step(probe, lr, target, steps) for lr in top}
            for order in range(orders):
                lrs = good + bad
                random.Random(f"{bin_name}-{order}").shuffle(lrs)
                for policy in POLICIES:       # the policies alternate within one order
                    result = simulate(scenario_for(raw, model, lrs, policy))
                    times.setdefault((policy, bin_name), []).extend(times_to_target(result, measured))
                    relaunches[policy] += sum(t.attempts - 1 for t in result.controller.trials.values())
        out[model] = {p: _summary(times, p, list(bins), relaunches[p]) for p in POLICIES}
    return out


def _summary(times: dict[tuple[str, str], list[float]], policy: str, bins: list[str],
             relaunches: int) -> dict[str, Any]:
    def mean(p: str, only: str | None = None) -> float:
        return statistics.fmean(t for b in bins if only in (None, b) for t in times[(p, b)])
    return {"mean_s": mean(policy), "speedup_vs_fifo": mean("fifo") / mean(policy),
            "per_bin": {b: {"mean_s": mean(policy, b), "speedup_vs_fifo": mean("fifo", b) / mean(policy, b)}
                        for b in bins},
            "relaunches": relaunches}


def table(results: dict[str, Any], paper: dict[str, float]) -> str:
    lines = ["| model | " + " | ".join(f"{p} s (x FIFO)" for p in POLICIES) + " | paper hermes |",
             "|---|" + "---:|" * (len(POLICIES) + 1)]
    for model, row in results.items():
        cells = [f"{row[p]['mean_s']:.1f} ({row[p]['speedup_vs_fifo']:.2f}x)" for p in POLICIES]
        lines.append(f"| {model} | " + " | ".join(cells) + f" | {paper.get(model, float('nan')):.2f}x |")
    for model, row in results.items():
        for b in row["fifo"]["per_bin"]:
            cells = [f"{row[p]['per_bin'][b]['mean_s']:.1f} ({row[p]['per_bin'][b]['speedup_vs_fifo']:.2f}x)"
                     for p in POLICIES]
            lines.append(f"| {model}, bin {b} | " + " | ".join(cells) + " | |")
    means = {p: statistics.fmean(r[p]["speedup_vs_fifo"] for r in results.values()) for p in POLICIES}
    lines.append("| mean | " + " | ".join(f"({means[p]:.2f}x)" for p in POLICIES)
                 + f" | {statistics.fmean(paper[m] for m in results if m in paper):.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=5)
    parser.add_argument("--models", default="googlenet,vgg16,vgg19,resnet50")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    started = time.perf_counter()
    results = run(args.models.split(","), args.orders)
    paper = load_scenario(SCENARIO).raw["reference"]["speedup_vs_fifo"]
    print(table(results, paper))
    print(f"({time.perf_counter() - started:.0f} s wall)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
