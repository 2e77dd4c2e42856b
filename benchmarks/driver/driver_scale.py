"""One driver under load: synthetic reports through the REAL loop, controller and SQLite store.

A fake executor (``FeedExecutor``) stands in for the workers: it runs every trial the controller
launches on a simulated cluster (``--gpus`` devices, each taking ``--per-gpu`` trials) and feeds
reports at ``--rate`` reports per second (0: as fast as the driver takes them). A trial reports
``--reports`` steps, waiting for each report's ack before its next one (as a worker does), then
finishes and a new trial is launched, until ``--trials`` trials were created or ``--measure``
reports were acknowledged. Everything else is the study's own code: ``run_loop`` (with the
group window of a real study), ``Controller`` with random search and WFD placement, ``Storage``
(SQLite) with the chosen durability.

Printed per run (measured after a warm-up of the first fifth of the reports, which includes
launching the first ``--gpus x --per-gpu`` trials at once): reports acknowledged per second, driver CPU per report (process CPU time minus
the fake executor's own), commits (durable transactions) and reports per commit, p50/p99 ack
latency (from the moment a report was due to its ack), and where the driver's time goes (time and CPU in
the store's commits, the controller, the loop; with ``--profile N`` the N costliest functions).

The same load for Optuna (``--optuna``): ``--concurrent`` trials are asked at once from a SQLite
RDB storage, each ``trial.report(value, step)`` per step (round robin) and ``study.tell`` at the
end: CPU and wall per report.

    python benchmarks/driver/driver_scale.py --trials 10000 --reports 5 --durability process
    python benchmarks/driver/driver_scale.py --sweep                   # the table in benchmarks/RESULTS.md
    python benchmarks/driver/driver_scale.py --trials 1000 --reports 10 --rate 5000
    python benchmarks/driver/driver_scale.py --optuna --trials 300 --reports 10
    PYTHONPATH=<checkout before issue 18> python benchmarks/driver/driver_scale.py ...   # the old driver

Every database goes to a temporary directory that is deleted afterwards.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from hypersack.core.algorithms import make_algorithm
from hypersack.core.allocator import Demand
from hypersack.core.controller import Budget, Controller, ControllerOptions
from hypersack.core.objective import Objective
from hypersack.placement import GPU, Cluster, Node
from hypersack.core.space import SearchSpace
from hypersack.core.trial import (Cancel, Launch, ResultReported, Stop, TrialFinished,
                                  TrialStarted)
from hypersack.runtime.loop.run import run_loop
from hypersack.runtime.storage.sqlite import Storage

try:                      # the same harness runs against code before group commit (``--before``)
    from hypersack.runtime.loop.run import GROUP_WINDOW_S
except ImportError:       # pragma: no cover - older HyperSack
    GROUP_WINDOW_S = 0.0
GROUP_COMMIT = hasattr(Storage, "transaction")


class FeedExecutor:
    """Executor protocol, no processes: reports due at ``rate`` per second (0: unlimited) from
    the running trials that are not waiting for an ack, round robin."""

    def __init__(self, cluster: Cluster, reports: int, rate: float, measure: int,
                 max_batch: int = 1024):
        self.cluster = cluster
        self.reports = reports
        self.rate = rate
        self.measure = measure
        self.max_batch = max_batch
        self.ready: list[int] = []               # trials that may report now, FIFO
        self.head = 0
        self.step: dict[int, int] = {}
        self.waiting: dict[int, float] = {}      # trial -> when its unacked report was due
        self.stopping: set[int] = set()
        self.pending: list[Any] = []
        self.latencies: list[float] = []
        self.emitted = 0
        self.acked = 0
        self.t0 = 0.0
        self.cpu_s = 0.0                         # this fake's own CPU time (subtracted)
        self.done_at: float | None = None
        self.warmup = 0                          # reports acked before measuring starts
        self.warm: tuple[float, float, float, int] | None = None   # cpu, wall, own cpu, commits
        self.store: Any = None
        self.polled = False
        self.acked_warm = 0
        self.marks: list[tuple[int, float, float]] = []   # (acked, process cpu, own cpu) per tenth
        self.profiler: Any = None                # enabled once ``profile_at`` reports were acked
        self.profile_at = 0

    def start(self) -> None:
        self.t0 = time.perf_counter()

    def inventory(self) -> Cluster:
        return self.cluster

    def submit(self, command: Any) -> None:
        c0 = time.process_time()
        if isinstance(command, Launch):
            self.step[command.trial_id] = 0
            self.pending.append(TrialStarted(command.trial_id, "fake"))
            self.ready.append(command.trial_id)
        elif isinstance(command, (Stop, Cancel)):
            self.stopping.add(command.trial_id)
        self.cpu_s += time.process_time() - c0

    def _due(self, now: float) -> int:
        if self.rate <= 0:
            return self.max_batch
        return int((now - self.t0) * self.rate) - self.emitted

    def poll(self, timeout: float) -> list[Any]:
        c0 = time.process_time()
        if not self.polled:      # the rate's clock starts once the first trials are launched
            self.polled, self.t0 = True, time.perf_counter()
        out, self.pending = self.pending, []
        now = time.perf_counter()
        due = self._due(now)
        if due <= 0 and not out:
            wait = min(timeout, (self.emitted + 1) / self.rate - (now - self.t0))
            self.cpu_s += time.process_time() - c0
            time.sleep(max(0.0, wait))
            c0 = time.process_time()
            now = time.perf_counter()
            due = self._due(now)
        if self.acked >= self.measure:
            if self.done_at is None:
                self.done_at = now
            self.cpu_s += time.process_time() - c0
            raise KeyboardInterrupt     # enough measured: the loop shuts down
        for _ in range(min(max(0, due), self.max_batch)):
            if self.head >= len(self.ready):
                break
            trial = self.ready[self.head]
            self.head += 1
            step = self.step[trial]
            self.step[trial] = step + 1
            self.emitted += 1
            due_at = self.t0 + self.emitted / self.rate if self.rate > 0 else now
            self.waiting[trial] = min(due_at, now)
            out.append(ResultReported(trial, step, {"loss": 1.0 / (step + 1)}))
        if self.head > 4096:
            del self.ready[:self.head]
            self.head = 0
        self.cpu_s += time.process_time() - c0
        return out

    def acknowledge(self, trial_ids: Iterable[int], free_below: Mapping[int, int]) -> None:
        c0 = time.process_time()
        now = time.perf_counter()
        if self.warm is None and self.acked >= self.warmup:
            self.warm = (c0, now, self.cpu_s, self.store.commit_count if self.store else 0)
            self.acked_warm = self.acked
        if self.acked >= len(self.marks) * self.measure / 10:
            self.marks.append((self.acked, c0, self.cpu_s))
        if self.profiler is not None and self.acked >= self.profile_at:
            self.profiler.enable()
            self.profiler, self.profile_at = None, self.measure + 1
        for trial, due_at in self.waiting.items():
            if self.warm is not None:
                self.latencies.append(now - due_at)
            self.acked += 1
            if self.step[trial] >= self.reports or trial in self.stopping:
                self.pending.append(TrialFinished(trial))
                del self.step[trial]
                self.stopping.discard(trial)
            else:
                self.ready.append(trial)
        self.waiting = {}
        self.cpu_s += time.process_time() - c0

    def shutdown(self, kill: bool = False) -> None:
        if self.done_at is None:
            self.done_at = time.perf_counter()


class CountingStore(Storage):
    """The SQLite store, timing its batches and commits (a store without group commit makes one
    commit per batch)."""
    save_s = 0.0
    save_cpu_s = 0.0       # process CPU time inside save_batch (SQLite's C code included)
    tx_s = 0.0
    batches = 0

    def __init__(self, path: Path, durability: str):
        if GROUP_COMMIT:
            super().__init__(path, durability=durability)
        else:                  # before group commit: synchronous=FULL only
            super().__init__(path)

    @property
    def commit_count(self) -> int:
        return self.commits if GROUP_COMMIT else self.batches

    def save_batch(self, *args: Any, **kwargs: Any) -> None:
        t0, c0 = time.perf_counter(), time.process_time()
        self.batches += 1
        super().save_batch(*args, **kwargs)
        self.save_s += time.perf_counter() - t0
        self.save_cpu_s += time.process_time() - c0

    def transaction(self, doing: str = "store the study's progress") -> Any:
        outer = self

        class _Timed:
            def __enter__(self) -> None:
                self.tx = Storage.transaction(outer, doing)
                self.tx.__enter__()

            def __exit__(self, *exc: Any) -> None:
                t0 = time.perf_counter()
                self.tx.__exit__(*exc)
                outer.tx_s += time.perf_counter() - t0
        return _Timed()


class GcPauses:
    """A ``gc.callbacks`` entry: total and longest collection time, full collections (while
    ``measuring()``)."""

    def __init__(self, measuring: Any = lambda: True) -> None:
        self.total = self.longest = 0.0
        self.full = 0
        self._t0 = 0.0
        self._measuring = measuring

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if not self._measuring():
            return
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        took = time.perf_counter() - self._t0
        self.total += took
        self.longest = max(self.longest, took)
        self.full += info["generation"] == 2


class _DefaultHeap:
    """Stands in for ``heap.LoopHeap``: the collector as Python runs it (A/B runs)."""
    def __enter__(self) -> "_DefaultHeap":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def after_turn(self) -> None:
        pass


def use_default_gc() -> None:
    import hypersack.runtime.loop.run as loop
    if hasattr(loop, "LoopHeap"):
        loop.LoopHeap = _DefaultHeap   # type: ignore[misc,assignment]


def cluster_for(gpus: int, per_gpu: int) -> Cluster:
    nodes = [Node(f"n{i}", 10**6, tuple(GPU(f"g{i}-{j}", "A100", 80.0) for j in range(8)))
             for i in range((gpus + 7) // 8)]
    return Cluster(nodes)


def run_hypersack(tmp: Path, trials: int, reports: int, rate: float, durability: str,
                  measure: int, gpus: int, per_gpu: int, window: float,
                  profile: int = 0, algorithm: str = "random",
                  profile_from: float = 0.0) -> dict[str, Any]:
    space = SearchSpace({"lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True}})
    objective = Objective("loss", "min")
    spec: dict[str, Any] = {"type": "random"}
    if algorithm == "asha":
        spec = {"type": "asha", "min_t": 1, "max_t": max(1, reports), "reduction_factor": 3,
                "mode": "stop"}
    cluster = cluster_for(gpus, per_gpu)
    demand = Demand(100.0 / per_gpu, 1.0, 0)
    controller = Controller(make_algorithm(spec, space, objective, 0), objective,
                            Budget(trials=trials), max_retries=0,
                            options=ControllerOptions(inventory=cluster, demand=demand.job))
    executor = FeedExecutor(cluster, reports, rate, measure)
    executor.warmup = measure // 5
    db = tmp / f"driver-{durability}-{trials}-{reports}-{rate:g}-{gpus * per_gpu}-{time.time_ns()}.db"
    counting = CountingStore(db, durability=durability)
    with counting:
        store = counting
        row = store.create_study("scale", {})
        store.acquire_lease(row)
        executor.store = store
        profiler = cProfile.Profile() if profile else None
        pauses = GcPauses(lambda: executor.warm is not None)
        gc.callbacks.append(pauses)
        c0, w0 = time.process_time(), time.perf_counter()
        if profiler and profile_from > 0:      # from that fraction of the reports on
            executor.profiler, executor.profile_at = profiler, int(profile_from * measure)
        elif profiler:
            profiler.enable()
        if GROUP_COMMIT:
            run_loop(controller, executor, store, row, group_window_s=window)
        else:
            run_loop(controller, executor, store, row)
        if profiler:
            profiler.disable()
        gc.callbacks.remove(pauses)
        end_cpu, end_wall = time.process_time(), executor.done_at or time.perf_counter()
        stored = store._db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        save_s, save_cpu_s, tx_s = store.save_s, store.save_cpu_s, store.tx_s
        if executor.warm is None or executor.acked_warm >= executor.acked:   # too short a run
            executor.warm, executor.acked_warm = (c0, w0, 0.0, 0), 0
        warm_cpu, warm_wall, warm_own, warm_commits = executor.warm
        commits = store.commit_count - warm_commits
    total = executor.acked
    n = total - executor.acked_warm            # measured after the warm-up
    cpu, wall = end_cpu - warm_cpu, end_wall - warm_wall
    lat = sorted(executor.latencies)
    driver_cpu = cpu - (executor.cpu_s - warm_own)
    marks = executor.marks + [(total, end_cpu, executor.cpu_s)]
    tenths = [round(1e6 * ((c1 - c0) - (o1 - o0)) / max(1, n1 - n0), 1)
              for (n0, c0, o0), (n1, c1, o1) in zip(marks, marks[1:]) if n1 > n0]
    out = {"system": "hypersack" if GROUP_COMMIT else "hypersack-before", "algorithm": algorithm, "durability": durability,
           "concurrent": gpus * per_gpu, "trials": trials, "reports": reports,
           "rate": rate, "created": len(controller.trials), "acked": total, "measured": n, "stored": stored,
           "wall_s": round(wall, 3), "reports_per_s": round(n / wall, 1),
           "driver_cpu_us": round(1e6 * driver_cpu / max(1, n), 1),
           "commits": commits, "reports_per_commit": round(n / max(1, commits), 1),
           "ack_p50_ms": round(1e3 * lat[len(lat) // 2], 2) if lat else None,
           "ack_p99_ms": round(1e3 * lat[int(len(lat) * 0.99)], 2) if lat else None,
           "store_batch_us": round(1e6 * save_s / max(1, total), 1),
           "store_cpu_us": round(1e6 * save_cpu_s / max(1, total), 1),
           "commit_us": round(1e6 * tx_s / max(1, total), 1),
           "cpu_us_by_tenth": tenths, "gc_pause_max_ms": round(1e3 * pauses.longest, 1),
           "gc_s": round(pauses.total, 3), "full_collections": pauses.full}
    if stored < total:
        raise RuntimeError(f"acknowledged {n} reports but stored {stored}: {out}")
    if profiler:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(profile)
        out["profile"] = text.getvalue()
    return out


def run_optuna(tmp: Path, trials: int, reports: int, concurrent: int, measure: int) -> dict[str, Any]:
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{tmp / f'optuna-{trials}-{reports}.db'}"
    study = optuna.create_study(storage=url, direction="minimize",
                                sampler=optuna.samplers.RandomSampler(seed=0))
    c0, w0 = time.process_time(), time.perf_counter()
    created = done = 0
    open_trials: list[tuple[Any, int]] = []
    while done < measure and (open_trials or created < trials):
        while len(open_trials) < concurrent and created < trials:
            trial = study.ask()
            trial.suggest_float("lr", 1e-4, 1.0, log=True)
            open_trials.append((trial, 0))
            created += 1
        still = []
        for trial, step in open_trials:
            trial.report(1.0 / (step + 1), step)
            done += 1
            if step + 1 >= reports:
                study.tell(trial, 1.0 / (step + 1))
            else:
                still.append((trial, step + 1))
            if done >= measure:
                break
        open_trials = still
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return {"system": f"optuna {optuna.__version__} (sqlite)", "trials": trials,
            "concurrent": concurrent, "reports": reports,
            "created": created, "acked": done, "wall_s": round(wall, 3),
            "reports_per_s": round(done / wall, 1),
            "driver_cpu_us": round(1e6 * cpu / max(1, done), 1)}


#: (trials, reports per trial, rate (0: unlimited), durability, reports measured, concurrent)
SWEEP = [
    # cost per report against the study's size: the same churn (512 trials at once, each
    # created, placed, run for 5 reports, released) at 1,000 / 10,000 / 100,000 trials
    (1000, 5, 0, "process", 5000, 512), (10000, 5, 0, "process", 50000, 512),
    (100000, 5, 0, "process", 500000, 512),
    # 10,240 trials at once (1,024 devices x 10): throughput, 1 to 1,000 reports per trial
    (10000, 5, 0, "process", 50000, 10240), (10000, 5, 0, "power", 50000, 10240),
    (100000, 1, 0, "process", 100000, 10240), (1000, 100, 0, "process", 100000, 10240),
    (1000, 1000, 0, "process", 100000, 10240), (1000, 100, 0, "power", 100000, 10240),
    # at a given rate: ack latency
    (10000, 5, 10000, "process", 50000, 10240), (10000, 5, 3000, "power", 30000, 10240),
    (10000, 5, 5000, "process", 50000, 10240), (10000, 5, 5000, "power", 50000, 10240),
]


def print_row(r: dict[str, Any]) -> None:
    if not r["system"].startswith("hypersack"):
        print(f"{r['system']:<24} {r['trials']:>7} {r.get('concurrent', '-'):>6} {r['reports']:>5} {'-':>6} {r['acked']:>7} "
              f"{r['reports_per_s']:>9.0f} {r['driver_cpu_us']:>8.0f} {'-':>7} {'-':>6} {'-':>7} {'-':>7}")
        return
    label = r["durability"] + ("" if r["algorithm"] == "random" else f" {r['algorithm']}")
    print(f"{r['system']} {label:<14} {r['trials']:>7} {r['concurrent']:>6} {r['reports']:>5} {r['rate']:>6.0f} "
          f"{r['acked']:>7} {r['reports_per_s']:>9.0f} {r['driver_cpu_us']:>8.1f} {r['commits']:>7} "
          f"{r['reports_per_commit']:>6.1f} {r['ack_p50_ms']:>7.2f} {r['ack_p99_ms']:>7.2f}"
          f"   (store {r['store_batch_us']:.0f} us/report, {r['store_cpu_us']:.0f} us of CPU; "
          f"commits {r['commit_us']:.0f} us/report)")
    print(f"    driver cpu us/report by tenth of the run: {r['cpu_us_by_tenth']}; garbage collector: "
          f"{r['gc_s']} s, longest pause {r['gc_pause_max_ms']} ms, {r['full_collections']} full")


HEADER = (f"{'system':<24} {'trials':>7} {'conc':>6} {'rep/t':>5} {'rate':>6} {'acked':>7} {'reports/s':>9} "
          f"{'cpu us/r':>8} {'commits':>7} {'r/c':>6} {'p50 ms':>7} {'p99 ms':>7}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=10000)
    p.add_argument("--reports", type=int, default=5, help="reports per trial")
    p.add_argument("--rate", type=float, default=0.0, help="reports per second (0: unlimited)")
    p.add_argument("--durability", choices=("power", "process"), default="process")
    p.add_argument("--measure", type=int, default=50000, help="stop after this many acked reports")
    p.add_argument("--gpus", type=int, default=1024)
    p.add_argument("--per-gpu", type=int, default=10, help="trials per device")
    p.add_argument("--window", type=float, default=GROUP_WINDOW_S, help="group window, seconds")
    p.add_argument("--algorithm", choices=("random", "asha"), default="random",
                   help="asha: min_t 1, max_t = --reports, rf 3, stop mode (its state is O(trials))")
    p.add_argument("--gc", choices=("freeze", "default"), default="freeze",
                   help="default: Python's own collector in the loop (before heap.LoopHeap)")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="print the N costliest functions")
    p.add_argument("--profile-from", type=float, default=0.0, metavar="F",
                   help="--profile only from this fraction of the reports on (0.9: the last tenth)")
    p.add_argument("--optuna", action="store_true", help="run Optuna's SQLite storage instead")
    p.add_argument("--concurrent", type=int, default=100, help="open Optuna trials at once")
    p.add_argument("--sweep", action="store_true", help="the RESULTS.md table (+ Optuna)")
    p.add_argument("--skip", type=int, default=0, help="--sweep: skip its first N runs")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    if args.gc == "default":
        use_default_gc()
    print(f"# driver scale, {platform.platform()}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hypersack-scale-") as name:
        tmp = Path(name)
        print(HEADER)
        if args.sweep:
            for trials, reports, rate, durability, measure, concurrent in SWEEP[args.skip:]:
                rows.append(run_hypersack(tmp, trials, reports, rate, durability,
                                          min(measure, trials * reports), concurrent // 8, 8,
                                          args.window))
                print_row(rows[-1])
            for trials, reports in ((300, 10), (3000, 1)):
                rows.append(run_optuna(tmp, trials, reports, args.concurrent, 3000))
                print_row(rows[-1])
        elif args.optuna:
            rows.append(run_optuna(tmp, args.trials, args.reports, args.concurrent, args.measure))
            print_row(rows[-1])
        else:
            rows.append(run_hypersack(tmp, args.trials, args.reports, args.rate, args.durability,
                                      min(args.measure, args.trials * args.reports), args.gpus,
                                      args.per_gpu, args.window, args.profile, args.algorithm,
                                      args.profile_from))
            print_row(rows[-1])
            if args.profile:
                print(rows[-1].pop("profile"))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
