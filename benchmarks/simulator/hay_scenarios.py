"""Hay's figures in shape, on the simulator: training slowdown, small trials' makespan, GROW waits.

    python benchmarks/simulator/hay_scenarios.py                 # the table: exclusive, ray, wfd, hay
    python benchmarks/simulator/hay_scenarios.py --sweep         # Hay's weights (w_frag, w_entire)
    python benchmarks/simulator/hay_scenarios.py --json out.json
    python benchmarks/simulator/hay_scenarios.py --late          # the training trial arrives last

Scenarios: examples/sim/hay_dp8_s{40,80,160}_2x8xa100.yaml (one 8-GPU data-parallel training
trial plus 40/80/160 small trials on 2 x 8 A100; examples/sim/make_hay_scenarios.py documents
them) and examples/sim/hay_rasda_2x8xa100.yaml (RASDA, oversubscribed small trials).

Figures, all simulated seconds:

* training slowdown: the training trial's wall time under the policy over its wall time under
  ``exclusive`` (Ray's default without sharing: every trial alone on its GPUs), minus 1;
* small trials' makespan: when the last small trial ends; speed-up over ``ray`` = ray's makespan
  over the policy's (Hay's Figs. 5-8 normalise to Ray);
* ``--late``: the same scenarios with the training trial last in the grid (it is placed after the
  small trials already run: Hay must keep it to deactivated GPUs); ``train_start_s`` then says
  how long it waited for them, and the slowdown compares run times from its start;
* GROW wait (RASDA): for each relaunch on more GPUs than the trial's previous launch, the time
  between the end of the previous launch and the start of the new one; mean and max; and the
  study's makespan.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from hypersack.sim import load_scenario, simulate  # noqa: E402
from hypersack.sim.scenario import scenario_from_dict  # noqa: E402

DP = [ROOT / f"examples/sim/hay_dp8_s{n}_2x8xa100.yaml" for n in (40, 80, 160)]
RASDA = ROOT / "examples/sim/hay_rasda_2x8xa100.yaml"
POLICIES = ["exclusive", "ray", "wfd", "hay"]
SWEEP = [(1.0, 0.0), (1.0, 0.25), (1.0, 0.5), (1.0, 1.0), (1.0, 2.0), (1.0, 4.0), (1.0, 8.0), (0.0, 1.0)]


def launches(result):
    """trial id -> [(start, end, devices)] in start order."""
    out: dict = {}
    for iv in result.executor.timeline.intervals:
        out.setdefault(iv.trial_id, {}).setdefault((iv.attempt, iv.start), []).append(iv)
    return {t: sorted((min(i.start for i in ivs), max(i.end for i in ivs), len(ivs)) for ivs in by.values())
            for t, by in out.items()}


def dp_figures(scenario, policy) -> dict:
    result = simulate(scenario, policy)
    train = [t for t, r in result.controller.trials.items() if r.config.get("task") == "train"]
    runs = launches(result)
    t_start, t_end, t_gpus = runs[train[0]][0]
    small_end = max(end for t, rs in runs.items() if t not in train for _, end, _ in rs)
    devices = {(iv.node, iv.gpu) for iv in result.executor.timeline.intervals if iv.trial_id == train[0]}
    shared = sum(1 for iv in result.executor.timeline.intervals if iv.trial_id != train[0]
                 and (iv.node, iv.gpu) in devices and iv.start < t_end and iv.end > t_start)
    return {"policy": result.policy, "train_start_s": t_start, "train_s": t_end - t_start, "train_gpus": t_gpus,
            "small_on_train_gpus": shared,
            "small_makespan_s": small_end, "makespan_s": result.makespan_s, "trials": result.trials}


def rasda_figures(scenario, policy) -> dict:
    result = simulate(scenario, policy)
    waits = []
    for rs in launches(result).values():
        for (s0, e0, k0), (s1, e1, k1) in zip(rs, rs[1:]):
            if k1 > k0:
                waits.append(s1 - e0)
    return {"policy": result.policy, "grows": len(waits),
            "grow_wait_mean_s": statistics.fmean(waits) if waits else 0.0,
            "grow_wait_max_s": max(waits, default=0.0), "makespan_s": result.makespan_s,
            "best_value": result.best_value}


def late(path: Path):
    """The scenario at ``path`` with the training trial last in the grid."""
    d = yaml.safe_load(path.read_text())
    choices = d["study"]["space"]["task"]["choices"]
    d["study"]["space"]["task"]["choices"] = [c for c in choices if c != "train"] + ["train"]
    d["name"] += "-late"
    return scenario_from_dict(d, path.parent)


def table(policies, train_last: bool = False) -> dict:
    out = {"dp": [], "rasda": []}
    for path in DP:
        scenario = late(path) if train_last else load_scenario(path)
        rows = {p if isinstance(p, str) else json.dumps(p): dp_figures(scenario, p) for p in policies}
        base = rows["exclusive"]["train_s"]
        ray = rows["ray"]["small_makespan_s"]
        for row in rows.values():
            row["train_slowdown"] = row["train_s"] / base - 1
            row["small_speedup_vs_ray"] = ray / row["small_makespan_s"]
            out["dp"].append({"scenario": scenario.name, **row})
    scenario = load_scenario(RASDA)
    out["rasda"] = [{"scenario": scenario.name, **rasda_figures(scenario, p)} for p in policies]
    return out


def sweep() -> list[dict]:
    rows = []
    scenarios = [load_scenario(p) for p in DP]
    rasda = load_scenario(RASDA)
    base = {s.name: dp_figures(s, "exclusive")["train_s"] for s in scenarios}
    ray = {s.name: dp_figures(s, "ray")["small_makespan_s"] for s in scenarios}
    for w_frag, w_entire in SWEEP:
        policy = {"policy": "hay", "w_frag": w_frag, "w_entire": w_entire}
        figs = [dp_figures(s, policy) for s in scenarios]
        slow = [f["train_s"] / base[s.name] - 1 for f, s in zip(figs, scenarios)]
        speed = [ray[s.name] / f["small_makespan_s"] for f, s in zip(figs, scenarios)]
        grow = rasda_figures(rasda, policy)
        rows.append({"w_frag": w_frag, "w_entire": w_entire, "train_slowdown_max": max(slow),
                     "small_speedup_vs_ray_mean": statistics.fmean(speed), "small_speedup_vs_ray_min": min(speed),
                     "grow_wait_mean_s": grow["grow_wait_mean_s"], "rasda_makespan_s": grow["makespan_s"]})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweep", action="store_true", help="sweep Hay's weights instead")
    p.add_argument("--late", action="store_true", help="the training trial last in the grid")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    out = {"sweep": sweep()} if args.sweep else table(POLICIES, args.late)
    for key, rows in out.items():
        print(f"== {key}")
        for row in rows:
            print("  " + "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
