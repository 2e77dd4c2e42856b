"""Search quality against the peers on multi-fidelity test functions (issue 41, item 3).

    python benchmarks/quality/mf_quality.py [--seeds 10] [--first-seed 0] [--budget 2000] [--quick]
        [--functions hartmann3,hartmann6,branin,hartmann6_bad] [--png PATH] [--json PATH]
        [--synetune-python PATH | --no-synetune]

What runs: on each test function of ``hypersack/sim/functions.py`` (Hartmann 3 and 6 with a
fidelity 1..100 whose bias and noise fade, as mf-prior-bench defines them; Branin in BOCA's
multi-fidelity form; Hartmann 6 with mf-prior-bench's "bad" bias and noise, whose low
fidelities are anti-correlated with the top), every arm runs once per seed, sequentially (one
worker), and each run is cut at ``--budget`` fidelity steps (one step = one report):

* HyperSack: ``random``, ``tpe``, ``asha`` (its default ``mode: pause``, promotions, and
  ``mode: stop``, as Syne Tune's ASHA and Optuna's pruners stop trials), each also with
  ``sampler: tpe`` (and ``asha`` + ``tpe`` with ``agreement: null``, its default before issue
  41's agreement; and with ``skip_disagreeing`` 0.3 and 0.0, ``-skip`` and ``-skip0``: ASHA
  does not decide at rungs that disagree, off by default), ``hyperband``, ``bohb`` (min_t 1, max_t 100, reduction factor 3), each the real algorithm, controller and loop in the
  simulator (``hypersack.sim``, a function scenario, 1 simulated device, 1 simulated second per
  step): the same decision code as a real study, without worker processes.
  ``hyperband``/``bohb`` get ``repeat`` large enough to use the budget.
* Optuna (``peers.py``): TPESampler with SuccessiveHalvingPruner and with HyperbandPruner.
* Syne Tune (``peers.py``, in its own virtual environment): ASHA and BOHB. Optional: without
  that environment the arm is skipped, and the output says so.

Reported: the regret (``hypersack.sim.quality``) of the best configuration trained to the top
fidelity at 25/50/100% of the budget, median and quartiles over seeds, and a PNG of the median
regret (with its interquartile band) against the budget. Goal: the best multi-fidelity
algorithm of HyperSack (the asha arms, hyperband, bohb: the one with the best mean rank over
the functions, or ``--hypersack``) has a median regret at 50% and at 100% of the budget no worse
than the best peer's, on every function: PASS/FAIL per function, exit 1 when one fails.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import RUNNERS, run_peer  # noqa: E402

from hypersack.sim import scenario_from_dict, simulate  # noqa: E402
from hypersack.sim.functions import FUNCTIONS  # noqa: E402
from hypersack.sim.quality import FRACTIONS, Trace, quality_rows, trace_of_simulation  # noqa: E402

MF = {"min_t": 1, "max_t": 100, "reduction_factor": 3}
HYPERSACK = {
    "hypersack-random": {"type": "random"},
    "hypersack-tpe": {"type": "tpe"},
    "hypersack-asha": {"type": "asha", **MF},
    "hypersack-asha+tpe": {"type": "asha", **MF, "sampler": "tpe"},
    "hypersack-asha+tpe-no-agreement": {"type": "asha", **MF, "sampler": "tpe", "agreement": None},
    "hypersack-asha+tpe-skip": {"type": "asha", **MF, "sampler": "tpe", "skip_disagreeing": 0.3},
    "hypersack-asha+tpe-skip0": {"type": "asha", **MF, "sampler": "tpe", "skip_disagreeing": 0.0},
    "hypersack-asha-stop": {"type": "asha", **MF, "mode": "stop"},
    "hypersack-asha-stop+tpe": {"type": "asha", **MF, "mode": "stop", "sampler": "tpe"},
    "hypersack-hyperband": {"type": "hyperband", **MF},
    "hypersack-bohb": {"type": "bohb", **MF},
}
MULTI_FIDELITY = ["hypersack-asha", "hypersack-asha+tpe", "hypersack-asha-stop",
                  "hypersack-asha-stop+tpe", "hypersack-hyperband", "hypersack-bohb"]
PEERS = list(RUNNERS)
DEFAULT_SYNETUNE = os.environ.get("HYPERSACK_SYNETUNE_PYTHON", "/tmp/synetune-venv/bin/python")
CURVE_FRACTIONS = tuple(round(0.05 * i, 2) for i in range(1, 21))


def scenario(name: str, algorithm: dict[str, Any], seed: int, budget: int) -> dict[str, Any]:
    """A function scenario: one simulated device, one second per fidelity step, no overheads."""
    f = FUNCTIONS[name]
    if algorithm["type"] in ("hyperband", "bohb"):
        algorithm = {**algorithm, "repeat": budget // f.max_fidelity + 1}
    return {
        "name": f"{name}-{algorithm['type']}", "seed": seed, "policy": "exclusive",
        "cluster": {"nodes": [{"id": "n0", "cpus": 1,
                               "gpus": {"count": 1, "arch": "cpu", "memory_gb": 100}}]},
        "study": {"space": f.space(), "objective": {"metric": "value", "mode": "min"},
                  "algorithm": algorithm, "budget": {"trials": budget, "time_s": 1.1 * budget + 10},
                  "max_steps": f.max_fidelity},
        "workload": {"profiles": [{"arch": "cpu", "step_time_s": 1, "utilization": 100, "cpus": 1}]},
        "perf": {"startup_s": 0, "warmup_s": 0, "checkpoint_s": 0, "restore_s": 0},
        "curves": {"type": "function", "function": f"hypersack.sim.functions:{name}"},
    }


def hypersack_trace(name: str, arm: str, seed: int, budget: int) -> Trace:
    sc = scenario_from_dict(scenario(name, HYPERSACK[arm], seed, budget))
    result = simulate(sc, keep_log=False, keep_results=True)
    return trace_of_simulation(result, sc.curves, sc.study.steps_for)


def peer_trace(name: str, run: dict[str, Any]) -> Trace:
    f = FUNCTIONS[name]
    reports = [(int(t), int(s), float(v)) for t, s, v in run["reports"]]
    truth = {int(t): f(c, f.max_fidelity) for t, c in run["configs"].items()}
    return Trace(reports, {t: f.max_fidelity for t, _, _ in reports}, truth)


def synetune_runs(python: str, names: list[str], seeds: list[int], budget: int) -> dict[str, Any] | str:
    """Every Syne Tune arm's runs (``peers.py synetune`` in its own environment), or why not."""
    if not Path(python).exists():
        return f"no Syne Tune environment at {python} (make one: python -m venv /tmp/synetune-venv && " \
               f"/tmp/synetune-venv/bin/pip install syne-tune==0.16.0; or --synetune-python PATH)"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "synetune.json"
        cmd = [python, str(Path(__file__).with_name("peers.py")), "synetune", "--functions",
               ",".join(names), "--seeds", ",".join(map(str, seeds)), "--budget", str(budget),
               "--out", str(out)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            return f"Syne Tune failed (exit {done.returncode}): {done.stderr.strip()[-500:]}"
        return json.loads(out.read_text())


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    names, budget = args.functions, args.budget
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    traces: dict[str, dict[str, list[Trace]]] = {n: {} for n in names}
    wall: dict[str, float] = {}
    notes: list[str] = []
    for arm in args.hypersack_arms:
        started = time.perf_counter()
        for name in names:
            traces[name][arm] = [hypersack_trace(name, arm, s, budget) for s in seeds]
        wall[arm] = time.perf_counter() - started
        print(f"  {arm}: {wall[arm]:.1f} s", file=sys.stderr, flush=True)
    for arm in [a for a in PEERS if RUNNERS[a][0] == "optuna" and "optuna" in args.peers]:
        started = time.perf_counter()
        for name in names:
            traces[name][arm] = [peer_trace(name, run_peer(arm, FUNCTIONS[name], s, budget)) for s in seeds]
        wall[arm] = time.perf_counter() - started
        print(f"  {arm}: {wall[arm]:.1f} s", file=sys.stderr, flush=True)
    if args.no_synetune or "synetune" not in args.peers:
        notes.append("Syne Tune skipped (--no-synetune or --peers)")
    else:
        started = time.perf_counter()
        runs = synetune_runs(args.synetune_python, names, seeds, budget)
        if isinstance(runs, str):
            notes.append(f"Syne Tune arms skipped: {runs}")
        else:
            for arm, per_function in runs.items():
                for name in names:
                    traces[name][arm] = [peer_trace(name, r) for r in per_function[name]]
            wall["synetune (all arms)"] = time.perf_counter() - started
    return {"traces": traces, "wall_s": wall, "notes": notes}


def tables(traces: dict[str, dict[str, list[Trace]]], budget: int,
           fractions: tuple[float, ...] = FRACTIONS) -> dict[str, Any]:
    return {name: quality_rows(per_arm, "min", optimum=FUNCTIONS[name].optimum, budget=budget,
                               fractions=fractions)
            for name, per_arm in traces.items()}


def medians(table: dict[str, Any]) -> dict[str, list[float]]:
    return {r["algorithm"]: [q[1] for q in r["regret"]] for r in table["rows"]}


def verdict(results: dict[str, Any], forced: str | None) -> dict[str, Any]:
    """The HyperSack multi-fidelity arm judged (``forced``, else the best mean rank at 50% and
    100% over the functions), and per function PASS when its median regret at 50% and at 100%
    is no worse than the best peer's there."""
    per_function = {name: medians(t) for name, t in results.items()}
    candidates = [a for a in MULTI_FIDELITY if all(a in m for m in per_function.values())]
    if not (forced or candidates):
        return {"judged": None, "mean_rank": {}, "functions": {}}
    ranks: dict[str, list[int]] = {a: [] for a in candidates}
    for m in per_function.values():
        for j in (1, 2):
            order = sorted(m, key=lambda a: m[a][j])
            for a in candidates:
                ranks[a].append(order.index(a))
    judged = forced or min(candidates, key=lambda a: (np.mean(ranks[a]), a))
    checks = {}
    for name, m in per_function.items():
        peers = [a for a in m if not a.startswith("hypersack-")]
        best = {j: min((m[a][j], a) for a in peers) for j in (1, 2)} if peers else {}
        ok = bool(peers) and all(m[judged][j] <= best[j][0] for j in (1, 2))
        checks[name] = {"pass": ok, "hypersack": [m[judged][1], m[judged][2]],
                        "best_peer": [best[j] for j in (1, 2)] if peers else None,
                        "passing_hypersack_arms": [a for a in candidates if peers and all(
                            m[a][j] <= best[j][0] for j in (1, 2))]}
    return {"judged": judged, "mean_rank": {a: float(np.mean(r)) for a, r in ranks.items()},
            "functions": checks}


def plot(curves: dict[str, Any], path: Path) -> str | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    names = list(curves)
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names):
        table = curves[name]
        xs = np.array(table["fractions"]) * 100
        colors = plt.get_cmap("tab20").colors
        for i, row in enumerate(table["rows"]):
            q = np.array(row["regret"], dtype=float)
            style = "-" if row["algorithm"].startswith("hypersack-") else "--"
            ax.plot(xs, q[:, 1], style, marker="." if len(xs) < 5 else None, label=row["algorithm"],
                    color=colors[(2 * i) % 20 + (2 * i) // 20])
            ax.fill_between(xs, q[:, 0], q[:, 2], color=colors[(2 * i) % 20], alpha=0.1)
        ax.set_yscale("log")
        ax.set_title(f"{name} ({table['rows'][0]['seeds']} seeds, {table['budget']:,} steps)", fontsize=9)
        ax.set_xlabel("% of the budget of fidelity steps")
        ax.set_ylabel("regret at the top fidelity (median, IQR)")
    axes[0][-1].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def report(results: dict[str, Any], judged: dict[str, Any], run: dict[str, Any], budget: int) -> None:
    def cell(q: list[float]) -> str:
        return "inf" if not np.isfinite(q[1]) else f"{q[1]:.4f} [{q[0]:.4f}, {q[2]:.4f}]"
    for name, table in results.items():
        seeds = table["rows"][0]["seeds"]
        print(f"\n### {name} (optimum {table['optimum']:.5f}; {seeds} seeds; each run cut at "
              f"{budget:,} fidelity steps; regret median [q1, q3])\n")
        print("| algorithm | 25% | 50% | 100% |\n|---|---:|---:|---:|")
        for row in table["rows"]:
            print(f"| {row['algorithm']} | " + " | ".join(cell(q) for q in row["regret"]) + " |")
    if judged["judged"] is None:
        print("\nNo HyperSack multi-fidelity arm ran: nothing judged (merge with --merge)")
    else:
        print(f"\nJudged: {judged['judged']} (best mean rank at 50%/100% among HyperSack's "
              f"multi-fidelity arms: " + ", ".join(f"{a} {r:.2f}" for a, r in judged["mean_rank"].items()) + ")")
    for name, c in judged["functions"].items():
        if c["best_peer"] is None:
            print(f"  {name}: FAIL (no peer ran)")
            continue
        (p50, a50), (p100, a100) = c["best_peer"]
        print(f"  {name}: {'PASS' if c['pass'] else 'FAIL'}: median regret at 50% {c['hypersack'][0]:.4f} "
              f"vs best peer {p50:.4f} ({a50}); at 100% {c['hypersack'][1]:.4f} vs {p100:.4f} ({a100}); "
              f"HyperSack arms that pass: {', '.join(c['passing_hypersack_arms']) or 'none'}")
    print("\nwall s per arm (all functions and seeds): " +
          ", ".join(f"{a} {s:.1f}" for a, s in run["wall_s"].items()))
    for note in run["notes"]:
        print(f"NOTE: {note}")


def merge(paths: list[str]) -> dict[str, Any]:
    """The tables of several ``--json`` files of one budget and seed count (disjoint arms, e.g.
    HyperSack's and a peer's run in separate processes), as one result: rows are per arm, so
    they combine exactly; ``curves`` (the plot's) only when every file has them."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    first = runs[0]
    for p, r in zip(paths, runs):
        if (r["budget"], r["seeds"], r.get("first_seed", 0)) != \
                (first["budget"], first["seeds"], first.get("first_seed", 0)):
            raise SystemExit(f"{p}: budget {r['budget']} and {r['seeds']} seeds from "
                             f"{r.get('first_seed', 0)} differ from {paths[0]}'s {first['budget']} "
                             f"and {first['seeds']} from {first.get('first_seed', 0)}")
    merged: dict[str, Any] = {"budget": first["budget"], "seeds": first["seeds"],
                              "first_seed": first.get("first_seed", 0), "tables": {},
                              "curves": {} if all("curves" in r for r in runs) else None,
                              "wall_s": {}, "notes": []}
    for r in runs:
        for key in ("tables", "curves"):
            if merged[key] is None:
                continue
            for name, table in r[key].items():
                into = merged[key].setdefault(name, {**table, "rows": []})
                into["rows"] += table["rows"]
        merged["wall_s"].update(r["wall_s"])
        merged["notes"] += [n for n in r["notes"] if "skipped" not in n]
    return merged


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0,
                   help="seeds first-seed .. first-seed + seeds - 1 (a range not used while tuning)")
    p.add_argument("--budget", type=int, default=2000, help="fidelity steps each run is cut at")
    p.add_argument("--functions", default=",".join(FUNCTIONS))
    p.add_argument("--arms", default=",".join(HYPERSACK), help="HyperSack arms to run")
    p.add_argument("--hypersack", default=None, help="the HyperSack arm judged (default: best mean rank)")
    p.add_argument("--quick", action="store_true", help="3 seeds, budget 1000: a smoke run")
    p.add_argument("--synetune-python", default=DEFAULT_SYNETUNE)
    p.add_argument("--no-synetune", action="store_true")
    p.add_argument("--png", default="benchmarks/results/mf-quality.png")
    p.add_argument("--peers", default="optuna,synetune", help="peer groups to run (optuna, synetune)")
    p.add_argument("--json", default=None)
    p.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                   help="report, judge and plot the --json files of runs with disjoint arms")
    args = p.parse_args(argv)
    if args.merge:
        return finish(merge(args.merge), args)
    if args.quick:
        args.seeds, args.budget = min(args.seeds, 3), min(args.budget, 1000)
    args.functions = args.functions.split(",")
    args.hypersack_arms = [a for a in args.arms.split(",") if a]
    args.peers = args.peers.split(",")
    unknown = [n for n in args.functions if n not in FUNCTIONS] + \
        [a for a in args.hypersack_arms if a not in HYPERSACK]
    if unknown:
        p.error(f"unknown function or arm: {unknown} (functions: {list(FUNCTIONS)}; arms: {list(HYPERSACK)})")
    run = run_all(args)
    result = {"budget": args.budget, "seeds": args.seeds, "first_seed": args.first_seed, "tables": tables(run["traces"], args.budget),
              "curves": tables(run["traces"], args.budget, CURVE_FRACTIONS),
              "wall_s": run["wall_s"], "notes": run["notes"]}
    return finish(result, args)


def finish(result: dict[str, Any], args: argparse.Namespace) -> int:
    """Judge, print, plot and (``--json``) write ``result``; exit 1 when a function FAILs."""
    judged = verdict(result["tables"], args.hypersack)
    report(result["tables"], judged, result, result["budget"])
    png = plot(result["curves"] or result["tables"], Path(args.png))
    print(f"plot: {png}" if png else "plot: matplotlib is not installed")
    if args.json:
        Path(args.json).write_text(json.dumps({**result, "verdict": judged}, indent=1, default=str))
    return 0 if all(c["pass"] for c in judged["functions"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
