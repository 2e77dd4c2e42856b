"""One study whose trainables misbehave as issue 37 lists, beside good ones: a check.

The trials (a grid, 2 workers, the study's defaults unless ``--heartbeat-timeout-s``):
``good`` (three of them) reports and ends; ``escape`` starts ``setsid sleep 300`` (a process
in a session of its own) and ends; ``stop`` SIGSTOPs its own worker on its first attempt (no
heartbeat from then on), ends on its second; ``flood`` writes 50 MB to stdout (the default cap
is 32 MB); ``fifo`` plants a FIFO as its ``user_attrs.json``; ``oom`` raises MemoryError;
``step1`` reports its objective at step 1 only, then a loss up to step 10.

PASS when: the study completes; every trial but ``oom`` is complete (``stop`` after one retry),
``oom`` failed with "out of memory"; ``step1``'s value is shown at step 1; ``flood``'s log holds at
most the cap plus its mark; no worker process and no process a trial started is left once
``run`` returns. Prints the wall time of the run and each check; exits 1 on FAIL.

    PYTHONPATH=$PWD python benchmarks/driver/misbehaving_trainables.py [--heartbeat-timeout-s S]
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import hypersack

CASES = ["good", "escape", "stop", "flood", "fifo", "oom", "step1", "good", "good"]


def train(config, ctx):
    case, notes = config["case"], Path(config["notes"])
    with open(notes / "pids", "a") as f:
        f.write(f"{os.getpid()}\n")                   # the worker: must be gone at the end
    (notes / f"dir-{ctx.trial_id}").write_text(str(ctx.trial_dir))
    if case == "escape":
        child = subprocess.Popen(["setsid", "sleep", "300"])
        with open(notes / "pids", "a") as f:
            f.write(f"{child.pid}\n")
    elif case == "stop" and ctx.attempt == 1:
        ctx.report(1, score=0.5)
        os.kill(os.getpid(), signal.SIGSTOP)
    elif case == "flood":
        chunk = "x" * 999_999 + "\n"
        for _ in range(50):
            sys.stdout.write(chunk)
        sys.stdout.flush()
    elif case == "fifo":
        os.mkfifo(ctx.trial_dir / "user_attrs.json")
    elif case == "oom":
        raise MemoryError()
    elif case == "step1":
        ctx.report(1, score=0.25, loss=1.0)
        for step in range(2, 11):
            ctx.report(step, loss=1.0 / step)
        return
    ctx.report(1, score=1.0)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heartbeat-timeout-s", type=float, default=None,
                        help="the study's heartbeat_timeout_s (default: the study's default)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="hs-misbehaving-"))
    options = {} if args.heartbeat_timeout_s is None else {
        "heartbeat_timeout_s": args.heartbeat_timeout_s}
    space = {"case": {"type": "categorical", "choices": list(range(len(CASES)))},
             "notes": str(folder)}
    study = hypersack.Study(name="misbehaving", space=space, objective=("score", "max"),
                            algorithm="grid", n_trials=len(CASES), workers=2,
                            storage=folder / "s.db", **options)
    started = time.monotonic()
    run = study.run(lambda config, ctx: train({**config, "case": CASES[config["case"]]}, ctx),
                    progress=False)
    wall = time.monotonic() - started
    time.sleep(0.5)           # a SIGKILLed process leaves /proc within moments
    trials = {CASES[t["config"]["case"]] + str(t["trial_id"]): t for t in study.status()["trials"]}
    by_case = {t["config"]["case"]: t for t in study.status()["trials"]}
    pids = [int(p) for p in (folder / "pids").read_text().split()]
    left = [p for p in pids if not _gone(p)]
    flood = by_case[CASES.index("flood")]
    log = Path((folder / f"dir-{flood['trial_id']}").read_text()) / "trial.log"
    checks = {
        "the study completes": run.status == "complete",
        "every trial but oom is complete": all(
            t["state"] == "complete" for name, t in trials.items() if not name.startswith("oom")),
        "stop was retried once": by_case[CASES.index("stop")]["retries"] == 1,
        "oom failed with 'out of memory'": "out of memory" in (by_case[CASES.index("oom")]["error"] or ""),
        "step1's value is shown at step 1": by_case[CASES.index("step1")]["value_step"] == 1,
        "flood's log is capped (32 MB + its mark)": log.stat().st_size < 32_000_000 + 1_000,
        "no process left (workers and what trials started)": not left,
    }
    print(f"study run: {wall:.1f} s wall, {len(CASES)} trials, 2 workers, heartbeat_timeout_s "
          f"{args.heartbeat_timeout_s or 'default'}; {len(pids)} pids recorded, {len(left)} left")
    for name, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    passed = all(checks.values())
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
