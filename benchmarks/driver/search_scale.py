"""Model-based multi-fidelity search at ASHA's cost (issue 41): wall time and driver CPU per
report of ``asha`` + ``sampler: tpe``, ``hyperband`` and ``bohb`` against plain ``asha`` on
the same number of trials of a trivial multi-fidelity trainable.

The trainable: 3 parameters (``x``, ``y`` in [0, 1], ``lr`` log-uniform), loss
``(x - 0.3)^2 + (y - 0.6)^2 + |log10(lr) + 2| / 10 + 1 / step``, one report per step up to
``--max-t`` (27) steps; every algorithm runs ``min_t`` (``--min-t``, 1), ``max_t 27``, ``reduction_factor 3``
(ASHA in its default pause mode). Hyperband and BOHB run with no ``repeat`` (iterations until
``n_trials`` ends); code from before issue 41 (``PYTHONPATH=<old tree>``) stops after one
iteration without ``repeat``, so they get ``repeat: 1000`` there (the issue's workaround).

Two modes, each algorithm run by turns (asha, the others, asha, the others... ``--rounds``):

- ``--mode synthetic`` (default): the REAL loop, controller and SQLite store (durability
  ``process``, the group window of a real study) and the runner ``Study`` hands its
  algorithm for model fits (``ProposalRunner``; before issue 41 a one-thread pool), with a fake executor (``StepExecutor``) in place of
  worker processes: ``--concurrent`` trials at once, each reporting its next step as soon as
  its previous one was acknowledged, a paused trial resuming from its last step. Driver CPU
  per report = process CPU (the proposal thread included) minus the fake's own, over every
  report. This is how 10,000 trials fit on a 2-core machine.
- ``--mode real``: ``hypersack.Study(...).run(...)`` with ``--workers`` real worker processes
  (checkpoints as dicts), timed from ``Study(...)`` to the end of ``run``.

Printed per run: wall seconds, process CPU seconds (``cpu_s``: the driver's threads and, in
synthetic mode, the fake executor), reports, trials created, driver CPU per report, the ratios
of wall time (``ratio``) and of CPU (``cpu_ratio``: on a loaded machine the steadier figure) to
the same round's plain ``asha``, the steps trained against asha's on the same trials
(``work_ratio``: reports / asha's reports; with these settings a Hyperband trial trains ~2x the
steps of an ASHA trial, so its wall ratio compares unequal work), and (synthetic) how many new
configs came from the sampler's model and how many fell back to random (``fallbacks``: the
proposal was not ready).
``--sql-profile`` (synthetic): also SQLite's CPU per report by statement (``sql_us``, the
store's connection timed around each call), rows per report by statement and WAL frames per
commit; the timing adds to the driver's CPU, so compare profiled runs with profiled runs.
A final line per algorithm gives the worst ratio over the rounds (and the median, the steadier
figure on a shared machine) and PASS/FAIL (on the worst) against
``--max-ratio`` (1.5) and ``--max-cpu-us`` (100, synthetic only); the exit status is 1 on FAIL.

    python benchmarks/driver/search_scale.py --trials 1000 --rounds 2
    python benchmarks/driver/search_scale.py --trials 10000 --rounds 1
    python benchmarks/driver/search_scale.py --mode real --trials 1000 --rounds 1
    PYTHONPATH=/work/main python benchmarks/driver/search_scale.py --trials 1000   # old code

Every database goes to a temporary directory that is deleted afterwards.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable, Mapping

SPACE = {"x": {"type": "float", "low": 0.0, "high": 1.0},
         "y": {"type": "float", "low": 0.0, "high": 1.0},
         "lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True}}
ALGORITHMS = ("asha", "asha+tpe", "hyperband", "bohb")


def loss(config: Mapping[str, Any], step: int) -> float:
    return ((config["x"] - 0.3) ** 2 + (config["y"] - 0.6) ** 2
            + abs(math.log10(config["lr"]) + 2) / 10 + 1.0 / step)


def mf_trial(config: dict, ctx: Any, max_t: int = 27) -> None:
    """The real-worker trainable: resumes from its checkpoint's step."""
    saved = ctx.restore()
    for step in range((saved or {}).get("step", 0) + 1, max_t + 1):
        ctx.report(step, checkpoint={"step": step}, loss=loss(config, step))


def _old_code() -> bool:
    """Code from before issue 41: Hyperband without ``repeat`` runs one iteration."""
    from hypersack.core.algorithms.sha import BracketSearch
    return not hasattr(BracketSearch, "position")


def spec_for(name: str, max_t: int, min_t: int = 1) -> dict[str, Any]:
    base = {"min_t": min_t, "max_t": max_t, "reduction_factor": 3}
    spec: dict[str, Any] = {
        "asha": {"type": "asha", **base},
        "asha+tpe": {"type": "asha", "sampler": "tpe", **base},
        "hyperband": {"type": "hyperband", **base},
        "bohb": {"type": "bohb", **base}}[name]
    if spec["type"] in ("hyperband", "bohb") and _old_code():
        spec["repeat"] = 1000
    return spec


# ---- synthetic: the real loop, controller and store; a fake executor ------------------------

def proposal_runner() -> Any:
    """The runner ``Study`` hands its algorithm (``ProposalRunner``), or before issue 41 a
    one-thread pool."""
    try:
        from hypersack.runtime.loop.proposals import ProposalRunner
    except ImportError:
        return ThreadPoolExecutor(1, thread_name_prefix="hypersack-suggest")
    return ProposalRunner()


class StepExecutor:
    """Executor protocol without processes: a launched trial reports its next step (from its
    last reported one: a resume continues) once its previous report was acknowledged; a
    trial told to stop, or past ``max_t``, finishes."""

    def __init__(self, cluster: Any, max_t: int):
        self.cluster, self.max_t = cluster, max_t
        self.configs: dict[int, dict[str, Any]] = {}
        self.last: dict[int, int] = {}
        self.ready: list[int] = []
        self.waiting: list[int] = []
        self.pending: list[Any] = []
        self.stopping: set[int] = set()
        self.reports = 0
        self.cpu_s = 0.0

    def start(self) -> None:
        pass

    def inventory(self) -> Any:
        return self.cluster

    def submit(self, command: Any) -> None:
        from hypersack.core.trial import Cancel, Launch, Stop, TrialStarted
        c0 = time.process_time()
        if isinstance(command, Launch):
            self.configs[command.trial_id] = command.config
            self.pending.append(TrialStarted(command.trial_id, "fake"))
            self.ready.append(command.trial_id)
        elif isinstance(command, (Stop, Cancel)):
            self.stopping.add(command.trial_id)
        self.cpu_s += time.process_time() - c0

    def poll(self, timeout: float) -> list[Any]:
        from hypersack.core.trial import ResultReported
        c0 = time.process_time()
        out, self.pending = self.pending, []
        ready, self.ready = self.ready, []
        for trial in ready:
            step = self.last.get(trial, 0) + 1
            self.last[trial] = step
            out.append(ResultReported(trial, step, {"loss": loss(self.configs[trial], step)},
                                      f"ck-{trial}-{step}"))
            self.waiting.append(trial)
        self.reports += len(ready)
        self.cpu_s += time.process_time() - c0
        return out

    def acknowledge(self, trial_ids: Iterable[int], free_below: Mapping[int, int]) -> None:
        from hypersack.core.trial import TrialFinished
        c0 = time.process_time()
        waiting, self.waiting = self.waiting, []
        for trial in waiting:
            if trial in self.stopping or self.last[trial] >= self.max_t:
                self.stopping.discard(trial)
                self.pending.append(TrialFinished(trial))
            else:
                self.ready.append(trial)
        self.cpu_s += time.process_time() - c0

    def shutdown(self, kill: bool = False) -> None:
        pass


class TimedConnection:
    """``--sql-profile``: the store's connection with every ``execute``/``executemany`` timed
    (process CPU, by the statement's first words) and the WAL frames each COMMIT appended
    (``mxFrame`` of the wal-index after it; a drop is a restarted WAL). Everything else is the
    connection's own. The timing adds its own cost to the driver's CPU: compare profiled runs
    with profiled runs."""

    def __init__(self, db: Any, frames: Any):
        self._db, self._frames = db, frames
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.rows: dict[str, int] = {}
        self.wal_frames = 0
        self._last_frames = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def _time(self, fn: Any, many: bool, sql: str, *args: Any) -> Any:
        c0 = time.process_time()
        out = fn(sql, *args)
        spent = time.process_time() - c0
        words = sql.split()
        key = " ".join(words[:words.index("INTO") + 2] if "INTO" in words[:4] else words[:3])
        self.cpu[key] = self.cpu.get(key, 0.0) + spent
        self.calls[key] = self.calls.get(key, 0) + 1
        if many:
            self.rows[key] = self.rows.get(key, 0) + len(args[0])
        if key == "COMMIT" and self._frames is not None:
            now = self._frames() or 0
            self.wal_frames += now - self._last_frames if now >= self._last_frames else now
            self._last_frames = now
        return out

    def execute(self, sql: str, *args: Any) -> Any:
        return self._time(self._db.execute, False, sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        args = (list(args[0]), *args[1:])
        return self._time(self._db.executemany, True, sql, *args)


def _profile(conn: TimedConnection, reports: int, commits: int) -> dict[str, Any]:
    """Per report: SQLite's CPU by statement (us), in all, and WAL frames per commit."""
    by = {k: round(1e6 * v / max(1, reports), 1)
          for k, v in sorted(conn.cpu.items(), key=lambda kv: -kv[1])}
    return {"sql_us": round(1e6 * sum(conn.cpu.values()) / max(1, reports), 1),
            "sql_by_statement_us": by,
            "sql_rows_per_report": {k: round(v / max(1, reports), 2) for k, v in conn.rows.items()},
            "commits": commits,
            "reports_per_commit": round(reports / max(1, commits), 2),
            "wal_frames_per_commit": round(conn.wal_frames / max(1, commits), 2)}


def run_synthetic(tmp: Path, name: str, trials: int, concurrent: int, max_t: int,
                  inline: bool = False, min_t: int = 1, sql_profile: bool = False) -> dict[str, Any]:
    from hypersack.core.algorithms import make_algorithm
    from hypersack.core.controller import Budget, Controller, ControllerOptions
    from hypersack.core.objective import Objective
    from hypersack.core.space import SearchSpace
    from hypersack.placement import GPU, Cluster, Node
    from hypersack.runtime.loop.run import GROUP_WINDOW_S, run_loop
    from hypersack.runtime.storage.sqlite import Storage

    objective = Objective("loss", "min")
    algorithm = make_algorithm(spec_for(name, max_t, min_t), SearchSpace(SPACE), objective, 0)
    pool = proposal_runner()
    if not inline:
        algorithm.use_background(pool)               # as Study does
    cluster = Cluster([Node("n0", 10**6, tuple(GPU(f"g{i}", "cpu", 1.0)
                                                 for i in range(concurrent)))])
    controller = Controller(algorithm, objective, Budget(trials=trials), max_retries=0,
                            options=ControllerOptions(inventory=cluster))
    executor = StepExecutor(cluster, max_t)
    db = tmp / f"{name}-{trials}-{time.time_ns()}.db"
    with Storage(db, durability="process") as store:
        row = store.create_study("scale", {})
        store.acquire_lease(row)
        timed = None
        if sql_profile:
            from hypersack.runtime.storage.wal import _WalFrames
            timed = store._db = TimedConnection(store._db, _WalFrames.find(db))
        c0, w0 = time.process_time(), time.perf_counter()
        run_loop(controller, executor, store, row, group_window_s=GROUP_WINDOW_S)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        commits = store.commits
        if timed is not None:
            store._db = timed._db
        stored = store.connection.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        parts = store.connection.execute("SELECT COUNT(*) FROM state_parts").fetchone()[0] \
            if hasattr(store, "connection") else None
    if hasattr(pool, "shutdown"):
        pool.shutdown(wait=True)
    model = getattr(algorithm, "_rung_model", None)
    out = {"algorithm": name, "trials": trials, "created": len(controller.trials),
           "reports": executor.reports, "stored": stored, "wall_s": round(wall, 3),
           "cpu_s": round(cpu, 3),
           "driver_cpu_us": round(1e6 * (cpu - executor.cpu_s) / max(1, executor.reports), 1),
           "state_parts": parts}
    if timed is not None:
        out.update(_profile(timed, executor.reports, commits))
    if model is not None:
        out["fallbacks"] = getattr(model, "fallbacks", None)
        out["model_proposals"] = sum(
            1 for m in model.models.values() for e in m.trials() if e.get("s") == "F")
    return out


# ---- real workers ---------------------------------------------------------------------------

def run_real(tmp: Path, name: str, trials: int, workers: int, max_t: int,
             min_t: int = 1) -> dict[str, Any]:
    import functools

    import hypersack
    Study = hypersack.Study
    t0, c0 = time.perf_counter(), time.process_time()
    study = Study(name=f"scale-{name.replace('+', '-')}", space=SPACE, objective=("loss", "min"),
                  algorithm=spec_for(name, max_t, min_t), n_trials=trials,
                  storage=tmp / f"{name}-{time.time_ns()}.db", workers=workers, seed=0,
                  max_steps=max_t, durability="process")
    study.run(functools.partial(mf_trial, max_t=max_t), if_exists="replace", progress=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    reports = len(study.results())
    return {"algorithm": name, "trials": trials, "reports": reports, "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3), "driver_cpu_us": round(1e6 * cpu / max(1, reports), 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("synthetic", "real"), default="synthetic")
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--concurrent", type=int, default=8, help="synthetic: trials at once")
    parser.add_argument("--workers", type=int, default=1, help="real: worker processes")
    parser.add_argument("--max-t", type=int, default=27)
    parser.add_argument("--min-t", type=int, default=1, help="grace period (steps)")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS))
    parser.add_argument("--max-ratio", type=float, default=1.5)
    parser.add_argument("--max-cpu-us", type=float, default=100.0)
    parser.add_argument("--inline", action="store_true",
                        help="synthetic: no proposal thread (proposals on the loop's thread)")
    parser.add_argument("--sql-profile", action="store_true",
                        help="synthetic: SQLite's CPU per report by statement, WAL frames per "
                             "commit (the timing adds to the driver's CPU)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    names = [n for n in args.algorithms.split(",") if n]
    if names[0] != "asha":
        names = ["asha"] + [n for n in names if n != "asha"]
    rows: list[dict[str, Any]] = []
    if any(spec_for(n, args.max_t).get("type") == "bohb" or "sampler" in spec_for(n, args.max_t)
           for n in names):
        import optuna                    # imported before the clock starts, as by a warm study
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        for turn in range(args.rounds):
            base = None
            for name in names:
                if args.mode == "synthetic":
                    row = run_synthetic(Path(tmp), name, args.trials, args.concurrent, args.max_t,
                                        args.inline, args.min_t, args.sql_profile)
                else:
                    row = run_real(Path(tmp), name, args.trials, args.workers, args.max_t,
                                   args.min_t)
                base = (row["wall_s"], row["cpu_s"], row["reports"]) if name == "asha" else base
                row["round"] = turn + 1
                row["ratio"] = round(row["wall_s"] / base[0], 2) if base else None
                row["cpu_ratio"] = round(row["cpu_s"] / base[1], 2) if base else None
                row["work_ratio"] = round(row["reports"] / base[2], 2) if base else None
                rows.append(row)
                print(json.dumps(row), flush=True)
    ok = True
    for name in names[1:]:
        mine = [r for r in rows if r["algorithm"] == name]
        worst = max(r["ratio"] for r in mine)
        worst_cpu = max(r["cpu_ratio"] for r in mine)
        cpu = max(r["driver_cpu_us"] for r in mine + [r for r in rows if r["algorithm"] == "asha"])
        work = max(r["work_ratio"] for r in mine)
        middle = statistics.median(r["ratio"] for r in mine)
        middle_cpu = statistics.median(r["cpu_ratio"] for r in mine)
        passed = worst <= args.max_ratio and (args.mode != "synthetic" or cpu <= args.max_cpu_us)
        ok &= passed
        print(f"{name}: worst wall ratio to asha {worst:.2f} (goal <= {args.max_ratio}; median "
              f"over the rounds {middle:.2f}), worst process CPU ratio {worst_cpu:.2f} (median "
              f"{middle_cpu:.2f}), steps trained {work:.2f}x asha's, "
              f"worst driver CPU {cpu:.1f} us/report"
              f"{f' (goal <= {args.max_cpu_us:g})' if args.mode == 'synthetic' else ''}: "
              f"{'PASS' if passed else 'FAIL'}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
