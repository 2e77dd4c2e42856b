"""Slots computed per member update in an ASHA study of fused packs (issue 38, item 3).

A fused stack computes every slot at every step, live or empty. Since issue 38 a pack is one
stack whatever its members' optimizer kinds, and it is compacted to its live members when they
fill half its slots or fewer (``hypersack.core.packs.compacted_capacity``). This runs one ASHA
study of the built-in ``digits_mlp`` task fused (64 trials, mixed batch sizes and optimizer
kinds, ``max_members`` 32, rungs at 1, 3 and 9 epochs) and reads each pack's ``pack stats`` line:
slot-steps (slots computed, summed over steps), member-steps (member updates), compactions and
graph captures. Goal: slot-steps per member-step <= 1.5.

For scale, ``fixed_cap_ratio`` is what the same iterations would cost with the cap's slots at
every step (iterations x max_members / member-steps); a pack before issue 38 computed at least
that on CUDA (its stacks had ``max_members`` slots each, one stack per optimizer kind), so the
figure is a lower bound on the old cost, computed from this run, not a run of the old code.

    python benchmarks/fusion/pack_slots.py [--trials 64] [--max-members 32] [--json PATH]
    python benchmarks/fusion/pack_slots.py --mixed [--compare ROOT] [--turns 3]

``--mixed``: the issue's case, 3 members of 2 optimizer kinds (adam, adam, sgd) in a pack of
capacity 32, and a full pack of 8 adam members (the digits MLP, batch 32): slots computed per
step and ms per step, by turns (A, B, A, B) with ``--compare ROOT``, another checkout (e.g.
``git archive 7bfe09a hypersack | tar -x -C ROOT``), each turn a fresh process.

Counts, not times: the figures do not depend on the machine's speed, only (slightly) on the
order in which members reach the packs.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import hypersack  # noqa: E402

SPACE = {
    "lr": {"type": "float", "low": 0.0003, "high": 0.03, "log": True},
    "batch_size": {"type": "categorical", "choices": [16, 32, 64, 128]},
    "optimizer": {"type": "categorical", "choices": ["adam", "adamw", "sgd", "rmsprop"]},
    "hidden": 64,
}
GOAL = 1.5

_STATS = re.compile(r"pack stats: (\d+) iterations .*slot-steps (\d+) for member-steps (\d+) "
                    r"\(.*\), compactions (\d+), graph captures (\d+)")


def pack_figures(logs: list[Path]) -> dict[str, int]:
    """Summed over the packs' ``pack stats`` lines."""
    total = {"packs": 0, "iterations": 0, "slot_steps": 0, "member_steps": 0, "compactions": 0,
             "captures": 0}
    for log in logs:
        for m in _STATS.finditer(log.read_text(errors="replace")):
            total["packs"] += 1
            for key, value in zip(("iterations", "slot_steps", "member_steps", "compactions",
                                   "captures"), m.groups()):
                total[key] += int(value)
    return total


def run(trials: int, max_members: int, epochs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            study = hypersack.Study(
                name="pack-slots", space=dict(SPACE, epochs=epochs),
                objective=("accuracy", "max"), n_trials=trials, storage=Path(tmp) / "b.db",
                max_steps="epochs", seed=0, execution="fused",
                pack={"max_members": max_members},
                algorithm={"type": "asha", "min_t": 1, "max_t": epochs, "reduction_factor": 3,
                           "mode": "stop"})
            start = time.perf_counter()
            study.run("digits_mlp", progress=False)
            wall = time.perf_counter() - start
            status = study.status()
            logs = list((Path(tmp) / "hypersack-runs").glob(f"{study.name}-*/packs/*.log"))
            figures = pack_figures(logs)
        finally:
            os.chdir(cwd)
    member = max(1, figures["member_steps"])
    return dict(figures, trials=trials, max_members=max_members, epochs=epochs,
                complete=status["complete"], stopped=status.get("pruned"),
                failed=status["failed"], wall_s=round(wall, 1),
                ratio=round(figures["slot_steps"] / member, 3),
                fixed_cap_ratio=round(figures["iterations"] * max_members / member, 3))


MIXED = r"""
import json, sys, time
import torch
torch.set_num_threads(1)
from hypersack.fusion.runner import Pack
from hypersack.fusion.stack import StackOptions
from hypersack.fusion.task import Member
from hypersack.workloads.digits_fused import DIGITS_MLP
pack = Pack(DIGITS_MLP, "cpu", options=StackOptions(capacity=CAPACITY))
for i, kind in enumerate(KINDS):
    pack.load(Member(i, {"optimizer": kind, "lr": 0.01, "batch_size": 32, "hidden": 64,
                         "epochs": 9}, seed=i))
for _ in range(3):
    pack.train_iteration()
from torch.utils._python_dispatch import TorchDispatchMode
class Ops(TorchDispatchMode):
    count = 0
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        Ops.count += 1
        return func(*args, **(kwargs or {}))
with Ops():
    pack.train_iteration()
stacks = list(pack.stacks.values()) if hasattr(pack, "stacks") else [pack.stack]
start = time.perf_counter()
for _ in range(STEPS):
    pack.train_iteration()
ms = 1000 * (time.perf_counter() - start) / STEPS
print(json.dumps({"slots": sum(s.capacity for s in stacks), "stacks": len(stacks), "ms": ms,
                  "ops": Ops.count}))
"""


# name: (members' optimizer kinds, capacity): the issue's case, and a full pack of one kind
# (nothing to save there: it shows the step did not get slower).
SCENARIOS = {"3 members of 2 kinds, capacity 32": (("adam", "adam", "sgd"), 32),
             "8 adam members, capacity 8": (("adam",) * 8, 8)}


def mixed_turn(root: Path, steps: int, kinds: tuple[str, ...], capacity: int) -> dict[str, Any]:
    """One turn of a scenario's pack in a fresh process on checkout ``root``."""
    import subprocess
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    code = MIXED.replace("STEPS", str(steps)).replace("CAPACITY", str(capacity)) \
        .replace("KINDS", repr(kinds))
    done = subprocess.run([sys.executable, "-c", code],
                          capture_output=True, text=True, env=env, check=True, cwd=root)
    return json.loads(done.stdout.strip().splitlines()[-1])


def mixed(compare: Path | None, turns: int, steps: int) -> int:
    for scenario, (kinds, capacity) in SCENARIOS.items():
        roots = {"this": ROOT} | ({"compare": compare} if compare else {})
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in roots}
        for _ in range(turns):
            for name, root in roots.items():
                runs[name].append(mixed_turn(root, steps, kinds, capacity))
        rows = {name: {"slots": r[0]["slots"], "stacks": r[0]["stacks"], "ops": r[0]["ops"],
                       "ms_per_step": round(sorted(x["ms"] for x in r)[len(r) // 2], 2),
                       "ms_turns": [round(x["ms"], 2) for x in r]} for name, r in runs.items()}
        print(json.dumps({"scenario": scenario, **rows}))
        if compare:
            this, other = rows["this"], rows["compare"]
            print(f"{scenario}: this checkout {this['slots']} slots in {this['stacks']} "
                  f"stack(s), {this['ops']} aten ops, {this['ms_per_step']} ms/step; {compare} "
                  f"{other['slots']} slots in {other['stacks']}, {other['ops']} aten ops, "
                  f"{other['ms_per_step']} ms/step: "
                  f"{other['ms_per_step'] / this['ms_per_step']:.2f}x (median of {turns} turns)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--max-members", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=9)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--mixed", action="store_true",
                        help="the 3-members-of-2-kinds pack at capacity 32, ms per step")
    parser.add_argument("--compare", type=Path, help="--mixed: another checkout, by turns")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    if args.mixed:
        return mixed(args.compare, args.turns, args.steps)
    row = run(args.trials, args.max_members, args.epochs)
    print(json.dumps(row))
    verdict = "PASS" if row["member_steps"] and row["ratio"] <= GOAL else "FAIL"
    print(f"{verdict}: slot-steps per member-step {row['ratio']} (goal <= {GOAL}; the cap's "
          f"slots at every step would be {row['fixed_cap_ratio']}), {row['packs']} packs, "
          f"{row['compactions']} compactions; trials: {row['complete']} complete, "
          f"{row['stopped']} stopped by ASHA, {row['failed']} failed of {row['trials']}")
    if args.json:
        args.json.write_text(json.dumps(row, indent=2))
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
