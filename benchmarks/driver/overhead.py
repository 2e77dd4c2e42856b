"""Orchestration overhead: how many trivial trials per second the framework itself can run.

Every trial samples ``x`` in [0, 1] and reports ``--reports`` results (trivial math, no sleep), so
the time measured is the framework's own cost: starting workers, handing out trials, moving each
report to the driver and writing it to storage.

- HyperSack: a persistent pool of ``--workers`` spawned worker processes, SQLite storage (WAL,
  synchronous=FULL; every report is durable before the worker continues). Timed from
  ``Study(...)`` to the end of ``study.run()``, worker start-up and shutdown included (the
  driver's ``import`` of the framework is not timed: the Study class is resolved first). A second
  figure, "marginal", leaves the one-off cost of a run out: a study of ``--workers`` trials (one
  per worker) is timed as well, and marginal = (trials - workers) / (wall - wall_small).
- Optuna (if installed): the same objective, RandomSampler, RDB storage on SQLite,
  ``trial.report(value, step)`` per result; ``n_jobs=1`` and ``n_jobs=2`` (threads in the one
  process: Optuna runs no worker processes, so it pays no start-up and no inter-process hop).
- Ray Tune (if installed): a function trainable calling ``tune.report`` per result, fractional
  CPUs per trial, ``--ray-trials`` trials (fewer by default: Ray is slow at this). ``ray.init()``
  is timed apart from ``Tuner.fit()``.

    python benchmarks/driver/overhead.py [--trials 200] [--reports 5] [--workers N] [--ray-trials 32]
                                         [--skip-optuna] [--skip-ray] [--json PATH]
                                         [--durability power|process] [--warm-up]
                                         [--oversubscribe]

Every database and run folder goes to a temporary directory that is deleted afterwards.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import logging
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

# ---- the trainables (module level: HyperSack's workers are spawned) -------------------------


def hypersack_trial(config: dict, ctx: Any, reports: int = 5) -> None:
    x = config["x"]
    for step in range(reports):
        ctx.report(step, score=x * (step + 1) / reports)


def optuna_objective(trial: Any, reports: int = 5) -> float:
    x = trial.suggest_float("x", 0.0, 1.0)
    value = 0.0
    for step in range(reports):
        value = x * (step + 1) / reports
        trial.report(value, step)
    return value


def ray_trial(config: dict) -> None:
    report = _ray_report()
    x, reports = config["x"], config["reports"]
    for step in range(reports):
        report({"score": x * (step + 1) / reports, "step": step})


def _ray_report():
    """``ray.tune.report`` (Ray >= 2.41); ``ray.train.report`` in the Ray 2.x releases before."""
    try:
        from ray.tune import report
    except ImportError:   # pragma: no cover - older Ray
        from ray.train import report
    return report


# ---- the systems ----------------------------------------------------------------------------


def _result(system: str, trials: int, wall_s: float, **extra: Any) -> dict[str, Any]:
    return {"system": system, "trials": trials, "wall_s": round(wall_s, 4),
            "trials_per_s": round(trials / wall_s, 2) if wall_s > 0 else None, **extra}


def _hypersack_once(tmp: Path, name: str, trials: int, reports: int, workers: int | None,
                    durability: str | None = None, executor: str = "local") -> tuple[float, dict]:
    import hypersack

    # ``import hypersack`` is lazy (PEP 562): resolve the Study class, and so import the
    # framework, before the clock starts, as an eager ``import hypersack`` did before e05b4ea.
    # Options are passed only when set, so this harness also runs against older trees.
    Study = hypersack.Study
    options: dict[str, Any] = {"durability": durability} if durability else {}
    if executor != "local":
        options["executor"] = executor
    db = tmp / "hypersack.db"
    t0, c0 = time.perf_counter(), time.process_time()
    study = Study(name=name, space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
                  objective=("score", "max"), n_trials=trials, storage=db,
                  workers=workers, seed=0, **options)
    run = study.run(functools.partial(hypersack_trial, reports=reports), if_exists="replace",
                    progress=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    status = study.status()
    n_results = len(study.results())
    check = {"run_status": run.status, "complete": status["complete"], "failed": status["failed"],
             "results_stored": n_results, "driver_cpu_s": round(cpu, 4)}
    if status["complete"] != trials or n_results != trials * reports:
        raise RuntimeError(f"HyperSack run did not do the expected work: {check}")
    return wall, check


def bench_hypersack(tmp: Path, trials: int, reports: int, workers: int,
                    durability: str | None = None, warm_up: bool = False) -> list[dict[str, Any]]:
    import hypersack
    if warm_up:        # the driver's lazy imports paid before anything is timed
        _hypersack_once(tmp, "overhead-warm-up", workers, reports, workers, durability)

    wall, check = _hypersack_once(tmp, "overhead", trials, reports, workers, durability)
    cpu = check["driver_cpu_s"]
    out = [_result(f"hypersack ({workers} workers)", trials, wall, version=hypersack.__version__,
                   workers=workers, reports_per_s=round(trials * reports / wall, 1),
                   driver_cpu_us_per_report=round(1e6 * cpu / (trials * reports), 1),
                   note="start-up and shutdown of the worker pool included", check=check)]
    if trials > workers:
        small_wall, small = _hypersack_once(tmp, "overhead-fixed", workers, reports, workers, durability)
        if wall > small_wall:
            marginal = (trials - workers) / (wall - small_wall)
            marginal_cpu = (cpu - small["driver_cpu_s"]) / ((trials - workers) * reports)
            out.append({"system": f"hypersack marginal ({workers} workers)", "trials": trials - workers,
                        "wall_s": round(wall - small_wall, 4), "trials_per_s": round(marginal, 2),
                        "driver_cpu_us_per_report": round(1e6 * marginal_cpu, 1),
                        "fixed_cost_s": round(small_wall, 4), "workers": workers,
                        "note": f"fixed cost per run = a {workers}-trial study ({small_wall:.2f} s: "
                                "pool spawn, imports, study creation, shutdown), subtracted"})
    return out


def bench_optuna(tmp: Path, trials: int, reports: int) -> list[dict[str, Any]]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = []
    for n_jobs in (1, 2):
        url = f"sqlite:///{tmp / f'optuna-{n_jobs}.db'}"
        try:
            t0 = time.perf_counter()
            study = optuna.create_study(storage=url, study_name=f"overhead-{n_jobs}", direction="maximize",
                                        sampler=optuna.samplers.RandomSampler(seed=0))
            study.optimize(functools.partial(optuna_objective, reports=reports), n_trials=trials,
                           n_jobs=n_jobs, catch=())
            wall = time.perf_counter() - t0
        except Exception as exc:   # e.g. "database is locked" with threads on SQLite
            out.append({"system": f"optuna n_jobs={n_jobs}", "error": f"{type(exc).__name__}: {exc}"})
            continue
        done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        n_reports = sum(len(t.intermediate_values) for t in done)
        check = {"complete": len(done), "intermediate_values": n_reports}
        if len(done) != trials or n_reports != trials * reports:
            raise RuntimeError(f"Optuna n_jobs={n_jobs} did not do the expected work: {check}")
        out.append(_result(f"optuna n_jobs={n_jobs}", trials, wall, version=optuna.__version__,
                           n_jobs=n_jobs, reports_per_s=round(trials * reports / wall, 1),
                           note="threads in one process, RandomSampler, SQLite RDB storage",
                           check=check))
    return out


def bench_ray(tmp: Path, trials: int, reports: int, cpu_per_trial: float,
              reuse_actors: bool, connected: bool = False) -> list[dict[str, Any]]:
    """Ray Tune; ``connected``: on the cluster ray is connected to (left running), else on a
    local Ray of os.cpu_count() CPUs started (and timed) here."""
    import ray
    from ray import tune
    try:
        from ray.tune import RunConfig
    except ImportError:   # pragma: no cover - older Ray
        from ray.train import RunConfig

    cpus = int(ray.cluster_resources().get("CPU", 1)) if connected else os.cpu_count() or 1
    t0 = time.perf_counter()
    if not connected:
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
    init_s = time.perf_counter() - t0
    try:
        tuner = tune.Tuner(
            tune.with_resources(ray_trial, {"cpu": cpu_per_trial}),
            param_space={"x": tune.uniform(0.0, 1.0), "reports": reports},
            tune_config=tune.TuneConfig(num_samples=trials, metric="score", mode="max",
                                        reuse_actors=reuse_actors),
            run_config=RunConfig(name="overhead", storage_path=str(tmp / "ray-results"), verbose=0))
        t1 = time.perf_counter()
        grid = tuner.fit()
        fit_s = time.perf_counter() - t1
    finally:
        if not connected:
            ray.shutdown()
    errors = grid.num_errors
    iterations = sum(int(r.metrics.get("training_iteration", 0)) for r in grid if r.metrics)
    check = {"results": len(grid), "errors": errors, "reports": iterations}
    if len(grid) != trials or errors or iterations != trials * reports:
        raise RuntimeError(f"Ray Tune did not do the expected work: {check}")
    concurrency = int(cpus / cpu_per_trial)
    common = dict(version=ray.__version__, cpu_per_trial=cpu_per_trial, concurrency=concurrency,
                  reuse_actors=reuse_actors, check=check)
    return [
        _result("ray tune (Tuner.fit)", trials, fit_s, init_s=round(init_s, 3),
                reports_per_s=round(trials * reports / fit_s, 1),
                note=f"{concurrency} concurrent trials, ray.init() not included", **common),
        _result("ray tune (init + fit)", trials, init_s + fit_s, init_s=round(init_s, 3),
                note="ray.init() included", **common),
    ]


def bench_ray_backend(tmp: Path, args: argparse.Namespace, workers: int) -> list[dict[str, Any]]:
    """HyperSack's Ray executor on a local cluster of ``--ray-nodes`` raylets, against the local
    executor (``workers`` processes: as many trial slots as the cluster's CPUs), in alternating
    rounds (local, ray, local, ray, ...), then Ray Tune on the same cluster."""
    import ray

    from hypersack.runtime.executors.ray_cluster import local_cluster
    cpus_per_node = max(1, workers // args.ray_nodes)
    rows: list[dict[str, Any]] = []
    with local_cluster(args.ray_nodes, cpus_per_node):
        for r in range(args.rounds):
            for backend in ("local", "ray"):
                wall, check = _hypersack_once(tmp, f"overhead-{backend}-{r}", args.trials,
                                              args.reports, None if backend == "ray" else
                                              cpus_per_node * args.ray_nodes, executor=backend)
                rows.append(_result(f"hypersack {backend} executor (round {r + 1})", args.trials,
                                    wall, reports_per_s=round(args.trials * args.reports / wall, 1),
                                    note=(f"{args.ray_nodes} Ray nodes x {cpus_per_node} CPU, agents "
                                          "started and ended in the run" if backend == "ray" else
                                          f"{cpus_per_node * args.ray_nodes} workers"), check=check))
        if not args.skip_ray:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rows += bench_ray(tmp, args.ray_trials, args.reports, args.ray_cpu_per_trial,
                                  args.ray_reuse_actors, connected=True)
        rows.append({"system": "ray version", "version": ray.__version__})
    return rows


# ---- the command ----------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    return {"platform": platform.platform(), "machine": platform.machine(),
            "processor": platform.processor() or None, "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "node": platform.node()}


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'system':<34} {'trials':>6} {'wall s':>8} {'trials/s':>9}  notes")
    for r in rows:
        if "trials" not in r and "error" not in r:
            continue
        if "error" in r:
            print(f"{r['system']:<34} {'-':>6} {'-':>8} {'-':>9}  FAILED: {r['error']}")
            continue
        notes = r.get("note", "")
        if "driver_cpu_us_per_report" in r:
            notes = f"driver CPU {r['driver_cpu_us_per_report']:.0f} us/report; " + notes
        if "init_s" in r:
            notes += f" (ray.init {r['init_s']:.2f} s)"
        print(f"{r['system']:<34} {r['trials']:>6} {r['wall_s']:>8.2f} {r['trials_per_s']:>9.1f}  {notes}")


def _other_systems(tmp: Path, args: argparse.Namespace, skipped: dict[str, str]) -> list[dict[str, Any]]:
    """Optuna and Ray Tune on this machine (each skipped with its reason where asked or missing)."""
    rows: list[dict[str, Any]] = []
    if args.skip_optuna:
        skipped["optuna"] = "--skip-optuna"
    else:
        try:
            import optuna  # noqa: F401
        except ImportError:
            skipped["optuna"] = "not installed (pip install optuna)"
        else:
            rows += bench_optuna(tmp, args.trials, args.reports)
    if args.skip_ray:
        skipped["ray"] = "--skip-ray"
        return rows
    try:
        import ray  # noqa: F401
        from ray import tune  # noqa: F401
    except ImportError:
        skipped["ray"] = "not installed (pip install 'ray[tune]')"
        return rows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows += bench_ray(tmp, args.ray_trials, args.reports, args.ray_cpu_per_trial,
                          args.ray_reuse_actors)
    return rows


def _allow_workers(workers: int) -> None:
    """Raise this process's per-core limit on local workers so that ``workers`` fit (the check
    runs in the driver: ``validation.check_workers_fit``)."""
    from hypersack import validation
    cores = max(1, os.cpu_count() or 1)
    validation.MAX_LOCAL_WORKERS_PER_CPU = max(validation.MAX_LOCAL_WORKERS_PER_CPU,
                                               -(-workers // cores))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=200, help="trials for HyperSack and Optuna (200)")
    p.add_argument("--reports", type=int, default=5, help="results reported per trial (5)")
    p.add_argument("--workers", type=int, default=None,
                   help="HyperSack worker processes (default: os.cpu_count())")
    p.add_argument("--ray-trials", type=int, default=32, help="trials for Ray Tune (32)")
    p.add_argument("--ray-cpu-per-trial", type=float, default=0.5,
                   help="fractional CPUs per Ray trial (0.5)")
    p.add_argument("--ray-reuse-actors", action="store_true",
                   help="TuneConfig(reuse_actors=True) (Ray's default is False)")
    p.add_argument("--durability", choices=("power", "process"), default=None,
                   help="HyperSack's store durability (default: the study default, power)")
    p.add_argument("--warm-up", action="store_true",
                   help="run an untimed study first, so that the driver's one-off imports are "
                        "not in the timed runs (driver CPU per report without them)")
    p.add_argument("--oversubscribe", action="store_true",
                   help="allow more --workers than the machine's per-core limit (driver cost "
                        "against the number of worker pipes, e.g. 16 or 64 on 2 cores: the "
                        "workers then share the cores, the driver's CPU per report is the figure)")
    p.add_argument("--skip-optuna", action="store_true")
    p.add_argument("--skip-ray", action="store_true")
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="ray: HyperSack's Ray executor on a local cluster of --ray-nodes raylets "
                        "against its local executor (alternating --rounds), and Ray Tune on "
                        "that cluster")
    p.add_argument("--ray-nodes", type=int, default=2, help="raylets of the --backend ray cluster")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds with --backend ray")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = p.parse_args(argv)
    if args.trials < 1 or args.reports < 1 or args.ray_trials < 1:
        p.error("--trials, --reports and --ray-trials must be >= 1")
    workers = args.workers or os.cpu_count() or 1
    if args.oversubscribe:
        _allow_workers(workers)

    info = machine_info()
    print(f"# orchestration overhead: {args.trials} trials x {args.reports} reports, trivial objective")
    print(f"# {info['platform']}, Python {info['python']}, {info['cpu_count']} CPUs")
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="hypersack-bench-") as tmp_name:
        tmp = Path(tmp_name)
        if args.backend == "ray":
            rows += bench_ray_backend(tmp, args, workers)
        else:
            rows += bench_hypersack(tmp, args.trials, args.reports, workers, args.durability,
                                    args.warm_up)
            rows += _other_systems(tmp, args, skipped)

    print()
    print_table(rows)
    for system, why in skipped.items():
        print(f"skipped {system}: {why}")

    if args.json:
        payload = {"benchmark": "overhead",
                   "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                   "machine": info,
                   "params": {"trials": args.trials, "reports": args.reports, "workers": workers,
                              "ray_trials": args.ray_trials, "ray_cpu_per_trial": args.ray_cpu_per_trial,
                              "ray_reuse_actors": args.ray_reuse_actors},
                   "argv": sys.argv[1:], "results": rows, "skipped": skipped}
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
