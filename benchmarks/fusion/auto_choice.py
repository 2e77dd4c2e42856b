"""``execution: auto`` against the faster of ``separate`` and ``fused`` (issue 38, item 6b).

For each workload (the built-in digits MLP, digits CNN and a small ``resnet18_cifar``:
``auto_choice_tasks.SMALL_RESNET18``, the built-in workload over 512 images of 16 x 16) the same
32-trial study (random search, few epochs) runs with ``execution: separate``, ``fused`` and
``auto``, by turns (the order rotates each round), each as its own ``hypersack run`` process on
this machine's CPU slots, in a fresh folder: ``auto`` pays its fusion probe (a fresh job
history). ``auto-warm`` runs ``auto`` again in the folder of the round's ``auto`` run, a new
study on the same file: it decides from the kept probe. Wall time per run includes the driver's
start (imports) and every worker's.

Prints per workload the median seconds of each mode, what ``auto`` chose, and the ratio
auto / min(separate, fused); PASS when every ratio (cold and warm) is at most ``--goal`` (1.1),
else FAIL (exit 1).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/fusion/auto_choice.py [--rounds 1] [--only digits_mlp]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WORKLOADS = {
    "digits_mlp": {"space": {"lr": {"type": "float", "low": 3e-4, "high": 3e-2, "log": True},
                             "batch_size": {"type": "categorical", "choices": [32, 64, 128]},
                             "hidden": 64,
                             "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
                             "epochs": 2}},
    "digits_cnn": {"space": {"lr": {"type": "float", "low": 3e-4, "high": 3e-2, "log": True},
                             "batch_size": {"type": "categorical", "choices": [32, 64, 128]},
                             "hidden": 32, "channels": 8,
                             "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
                             "epochs": 1}},
    "resnet18_cifar": {"trainable": "auto_choice_tasks:SMALL_RESNET18",
                       "space": {"lr": {"type": "float", "low": 3e-4, "high": 3e-2, "log": True},
                                 "batch_size": {"type": "categorical", "choices": [32, 64]},
                                 "width": 8, "train_size": 512, "val_size": 128,
                                 "image_size": 16,
                                 "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
                                 "epochs": 1}},
}
MODES = ("separate", "fused", "auto")


def study_yaml(name: str, workload: str, mode: str, trials: int, members: int) -> str:
    spec = {"name": name, "trainable": WORKLOADS[workload].get("trainable", workload),
            "execution": mode,
            "pack": {"max_members": members}, "objective": {"metric": "loss", "mode": "min"},
            "space": WORKLOADS[workload]["space"], "algorithm": {"type": "random"}, "seed": 0,
            "budget": {"trials": trials}, "max_steps": "epochs"}
    return json.dumps(spec)        # JSON is YAML


def run_study(folder: Path, name: str, workload: str, mode: str, trials: int,
              members: int) -> tuple[float, str]:
    """Seconds of one ``hypersack run`` in ``folder``, and auto's choice lines (or "")."""
    path = folder / f"{name}.yaml"
    path.write_text(study_yaml(name, workload, mode, trials, members))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(Path(__file__).parent)])}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "hypersack", "run", str(path), "--progress",
                           "lines"], cwd=folder, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{workload} {mode} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    status = subprocess.run([sys.executable, "-m", "hypersack", "status", name, "--json"],
                            cwd=folder, env=env, capture_output=True, text=True)
    info = json.loads(status.stdout)
    if info["complete"] != trials:
        raise SystemExit(f"{workload} {mode}: {info['complete']} of {trials} trials complete")
    chosen = "; ".join(c["reason"] for c in info.get("execution_auto", []))
    return seconds, chosen


def _load() -> str:
    """The 1-minute load average (the machine is shared: read each figure beside it)."""
    return f"{os.getloadavg()[0]:.1f}"


def bench(workload: str, rounds: int, trials: int, members: int) -> dict:
    times: dict[str, list[float]] = {m: [] for m in (*MODES, "auto-warm")}
    chosen: dict[str, str] = {}
    for r in range(rounds):
        order = MODES[r % 3:] + MODES[:r % 3]
        auto_dir = None
        for mode in order:
            folder = Path(tempfile.mkdtemp(prefix=f"auto-choice-{mode}-"))
            seconds, why = run_study(folder, f"{workload}-{mode}", workload, mode, trials, members)
            times[mode].append(seconds)
            if mode == "auto":
                auto_dir, chosen["auto"] = folder, why
            print(f"  {workload} round {r + 1} {mode}: {seconds:.1f}s (load {_load()}) {why}",
                  flush=True)
        assert auto_dir is not None
        seconds, why = run_study(auto_dir, f"{workload}-auto-warm", workload, "auto", trials,
                                 members)
        times["auto-warm"].append(seconds)
        chosen["auto-warm"] = why
        print(f"  {workload} round {r + 1} auto-warm: {seconds:.1f}s (load {_load()}) {why}",
              flush=True)
    med = {m: statistics.median(t) for m, t in times.items()}
    best = min(med["separate"], med["fused"])
    return {"workload": workload, "median_s": med, "chosen": chosen,
            "auto_ratio": med["auto"] / best, "auto_warm_ratio": med["auto-warm"] / best,
            "runs": times}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--members", type=int, default=16, help="pack.max_members")
    parser.add_argument("--only", action="append", choices=sorted(WORKLOADS))
    parser.add_argument("--goal", type=float, default=1.1)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    results = [bench(w, args.rounds, args.trials, args.members) for w in (args.only or WORKLOADS)]
    ok = True
    print(f"{'workload':<16}{'separate':>10}{'fused':>10}{'auto':>10}{'auto-warm':>11}"
          f"{'auto/best':>11}{'warm/best':>11}")
    for r in results:
        m = r["median_s"]
        print(f"{r['workload']:<16}{m['separate']:>9.1f}s{m['fused']:>9.1f}s{m['auto']:>9.1f}s"
              f"{m['auto-warm']:>10.1f}s{r['auto_ratio']:>10.2f}x{r['auto_warm_ratio']:>10.2f}x")
        print(f"  auto chose: {r['chosen'].get('auto', '')}")
        ok &= r["auto_ratio"] <= args.goal and r["auto_warm_ratio"] <= args.goal
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(f"{'PASS' if ok else 'FAIL'}: auto within {args.goal:g}x of the faster of separate "
          "and fused for every workload, cold and warm")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
