"""Kill drivers and workers at random points of a real study; resume until done; check that every
stored result is exactly what an uninterrupted run stores.

    python benchmarks/driver/fault_injection.py --driver-kills 50 --worker-kills 50 --seed 1
    python benchmarks/driver/fault_injection.py --durability process --pipelined   # the other mode

``--durability`` sets the study's ``durability`` (power: synchronous=FULL, the default; process:
WAL synchronous=NORMAL). ``--pipelined``: the trials checkpoint every 3rd report and the
algorithm (ASHA with no milestone below ``max_t``) has no decision point, so the other reports
are pipelined (the worker goes on before they are durable).

The study runs ``synthetic_chain`` (each step a pure function of the step before it, with a
checkpoint in every report) through the real CLI (`hypersack run` / `hypersack resume`) in a
subprocess. Driver faults, chosen at random: SIGKILL, one SIGINT (graceful stop), two SIGINTs
(workers killed). Worker faults: SIGKILL of a random worker process while the driver runs on.
After each driver fault the study is resumed; a study that completes while faults remain is
followed by a fresh one (same store), until every fault has landed. At the end every trial of
every study must be COMPLETE with
steps 1..N stored once each (no gap, no extra), every value equal to ``chain_values`` of its
config and seed, no trial RUNNING, and no worker process left behind. Prints the counts as
JSON (``steps_lost`` and ``wrong_values`` must be 0).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path



@dataclass
class Outcome:
    driver_kills: dict[str, int] = field(default_factory=lambda: {"sigkill": 0, "sigint": 0,
                                                                   "sigint_twice": 0})
    worker_kills: int = 0
    resumes: int = 0
    studies: int = 0
    trials: int = 0
    steps_expected: int = 0
    steps_stored: int = 0
    steps_lost: int = 0
    steps_duplicated: int = 0
    wrong_values: int = 0
    not_complete: int = 0
    orphans: int = 0
    wall_s: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not (self.steps_lost or self.steps_duplicated or self.wrong_values
                    or self.not_complete or self.orphans)


def _study_yaml(name: str, trials: int, steps: int, sleep_s: float, workers: int,
                durability: str = "power", pipelined: bool = False) -> str:
    algorithm = f"{{type: asha, min_t: {steps}, max_t: {steps}}}" if pipelined else "random"
    extra = "  checkpoint_every: 3\n" if pipelined else ""
    return f"""name: {name}
trainable: synthetic_chain
space:
  lr: {{type: float, low: 0.05, high: 1.0}}
  steps: {steps}
  sleep_s: {sleep_s}
{extra}objective: {{metric: loss, mode: min}}
budget: {{trials: {trials}}}
algorithm: {algorithm}
seed: 7
durability: {durability}
executor: {{workers: {workers}, max_retries: 100}}
"""


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _workers_of(pid: int) -> list[int]:
    """Worker processes of a driver (its children, except multiprocessing's resource tracker)."""
    workers = []
    for child in _children(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"resource_tracker" not in cmd:
            workers.append(child)
    return workers


class Harness:
    def __init__(self, folder: Path, *, trials: int, steps: int, sleep_s: float, workers: int,
                 rng: random.Random, env: dict[str, str], durability: str = "power",
                 pipelined: bool = False):
        self.folder, self.rng, self.env = folder, rng, env
        self.shape = (trials, steps, sleep_s, workers, durability, pipelined)
        self.outcome = Outcome()
        self.study = ""
        self.known_workers: set[int] = set()

    def _new_study(self) -> subprocess.Popen:
        self.outcome.studies += 1
        self.study = f"faults-{self.outcome.studies}"
        (self.folder / f"{self.study}.yaml").write_text(_study_yaml(self.study, *self.shape))
        return self._spawn(["run", f"{self.study}.yaml", "--progress", "none"])

    def _resume(self) -> subprocess.Popen:
        if not self._stored():          # killed before it stored the study: run it again
            return self._spawn(["run", f"{self.study}.yaml", "--progress", "none"])
        self.outcome.resumes += 1
        return self._spawn(["resume", self.study, "--progress", "none"])

    def _stored(self) -> bool:
        path = self.folder / "hypersack.db"
        if not path.exists():
            return False
        db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        try:
            return db.execute("SELECT 1 FROM studies WHERE name = ?", (self.study,)).fetchone() is not None
        except sqlite3.OperationalError:
            return False
        finally:
            db.close()

    def _spawn(self, args: list[str]) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "hypersack", *args], cwd=self.folder,
                                env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def run(self, driver_kills: int, worker_kills: int, max_wait_s: float) -> Outcome:
        start = time.monotonic()
        plan = ["driver"] * driver_kills + ["worker"] * worker_kills
        self.rng.shuffle(plan)
        proc = self._new_study()
        while plan:
            time.sleep(self.rng.uniform(0.3, 3.0))
            if proc.poll() is not None:              # it ended before this fault landed
                self._wait_to_end(proc, max_wait_s)
                proc = self._new_study() if proc.returncode == 0 else self._resume()
                continue
            if plan[-1] == "worker":
                if self._kill_worker(proc):
                    plan.pop()
            else:
                plan.pop()
                self._kill_driver(proc)
                proc = self._resume()
        while True:                                  # no fault left: let the last study finish
            self._wait_to_end(proc, max_wait_s)
            if proc.returncode == 0:
                break
            proc = self._resume()
        self.outcome.wall_s = time.monotonic() - start
        self._check()
        return self.outcome

    def _kill_worker(self, proc: subprocess.Popen) -> bool:
        workers = _workers_of(proc.pid)
        self.known_workers.update(workers)
        if not workers:
            return False
        os.kill(self.rng.choice(workers), signal.SIGKILL)
        self.outcome.worker_kills += 1
        return True

    def _kill_driver(self, proc: subprocess.Popen) -> None:
        self.known_workers.update(_workers_of(proc.pid))
        kind = self.rng.choice(["sigkill", "sigint", "sigint_twice"])
        if kind == "sigkill":
            proc.kill()
        else:
            proc.send_signal(signal.SIGINT)
            if kind == "sigint_twice":
                time.sleep(self.rng.uniform(0.0, 0.5))
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
        self._wait_to_end(proc, 120.0)
        self.outcome.driver_kills[kind] += 1

    def _wait_to_end(self, proc: subprocess.Popen, timeout: float) -> None:
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            self.outcome.problems.append(f"a driver hung for {timeout:.0f} s and was killed")
        text = (err or b"").decode(errors="replace")
        if "Traceback" in text:
            self.outcome.problems.append("raw traceback from the driver: " + text[-2000:])
        if proc.returncode not in (0, 130, -9, -2):     # -2: SIGINT before Python started
            raise RuntimeError(f"the driver failed (exit code {proc.returncode}): {text[-2000:]}")

    def _check(self) -> None:
        from hypersack.workloads.chain import chain_values
        o = self.outcome
        time.sleep(0.5)
        o.orphans = sum(1 for pid in self.known_workers if _alive(pid))
        db = sqlite3.connect(self.folder / "hypersack.db")
        trials = db.execute("SELECT study_id, trial_id, state, config, seed FROM trials").fetchall()
        o.trials = len(trials)
        for study_id, trial_id, state, config, seed in trials:
            if state != "complete":
                o.not_complete += 1
                o.problems.append(f"study {study_id} trial {trial_id} ended {state}")
            expected = chain_values(json.loads(config), seed)
            rows = db.execute("SELECT step, metrics FROM results WHERE study_id = ? AND trial_id = ? "
                              "ORDER BY step", (study_id, trial_id)).fetchall()
            steps = [s for s, _ in rows]
            o.steps_expected += len(expected)
            o.steps_stored += len(rows)
            o.steps_lost += len(set(range(1, len(expected) + 1)) - set(steps))
            o.steps_duplicated += len(steps) - len(set(steps))
            for step, metrics in rows:
                if step < 1 or step > len(expected) or json.loads(metrics) != expected[step - 1]:
                    o.wrong_values += 1
        db.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def run_faults(*, driver_kills: int, worker_kills: int, seed: int, trials: int = 6,
               steps: int = 12, sleep_s: float = 0.05, workers: int = 2,
               folder: Path | None = None, max_wait_s: float = 600.0,
               durability: str = "power", pipelined: bool = False) -> Outcome:
    """Run one fault campaign in ``folder`` (a fresh temporary folder by default); see the
    module docstring for ``durability`` and ``pipelined``."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(folder or tmp)
        where.mkdir(parents=True, exist_ok=True)
        harness = Harness(where, trials=trials, steps=steps, sleep_s=sleep_s, workers=workers,
                          rng=random.Random(seed), env=env, durability=durability,
                          pipelined=pipelined)
        return harness.run(driver_kills, worker_kills, max_wait_s)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--driver-kills", type=int, default=50)
    p.add_argument("--worker-kills", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--trials", type=int, default=6)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--sleep-s", type=float, default=0.05)
    p.add_argument("--durability", choices=("power", "process"), default="power")
    p.add_argument("--pipelined", action="store_true")
    args = p.parse_args()
    outcome = run_faults(driver_kills=args.driver_kills, worker_kills=args.worker_kills,
                         seed=args.seed, trials=args.trials, steps=args.steps, sleep_s=args.sleep_s,
                         durability=args.durability, pipelined=args.pipelined)
    print(json.dumps({**asdict(outcome), "exact": outcome.exact}, indent=2))
    return 0 if outcome.exact and not outcome.problems else 1


if __name__ == "__main__":
    sys.exit(main())
