"""End to end: pack-aware Hyperband (Pack, Algorithm 2) against plain Hyperband on the digits study.

Both algorithms search the same space with the same seed, hence the same configs (pack-aware
Hyperband samples each bracket's configs from the same stream, in the same order), and both
drive real training of real digits MLPs through a small in-process driver:

- ``plain``: ``hyperband``; every trial trains separately with the ``digits_mlp`` trainable
  (``torch.optim``), one after another (``--procs 1``, in this process) or in a pool of worker
  processes (``--procs 2``: the two cores here).
- ``pack``: ``pack_hyperband``; every pack of a rung is one job trained fused by
  ``hypersack.fusion.run_pack`` with the ``DIGITS_MLP`` fusable task, in one process per job.
  As an ``execution: auto`` executor would, a singleton pack runs as the plain trial
  (``min_pack``, default 3, splits smaller packs: on this CPU a fused step costs about 2.5x a
  plain one at N = 1 and breaks even near N = 3), and a trial's checkpoint is converted between
  the plain (torch.optim) and fused formats when it moves between the two (exact: tested by
  continuing a converted checkpoint). The kNN distance uses batch size and optimizer (what sets
  a fused step's cost: padding, stacks per optimizer kind) with threshold 1.

A job trains its trial(s) from their checkpoints to the rung's milestone; the driver then feeds
every epoch's result to the algorithm (which pauses them at the milestone and promotes the top
1/eta) and launches what the algorithm hands out next. A trial's seed comes from its config, so
the same config starts from the same weights in every run. Worker processes are started and
warmed up (imports, data) before the clock starts; every process uses ``--threads`` torch
threads (default 1).

Reported per run: wall time; best validation accuracy at ``max_t`` epochs and the time at which
that best result was reported (time to the best configuration); the time at which the run first
reached the *common target* (the lower of all runs' best accuracies: equal quality); trials,
trained epochs and jobs. Speed-ups are relative to the first run (plain, 1 process).

    python benchmarks/fusion/pack_hyperband.py --quick
    python benchmarks/fusion/pack_hyperband.py --max-t 27 --procs 1,2 --json out.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from hypersack.core.algorithms import Decision, make_algorithm  # noqa: E402
from hypersack.core.objective import Objective  # noqa: E402
from hypersack.core.space import SearchSpace  # noqa: E402


def study_space(max_t: int, hidden: list[int]) -> SearchSpace:
    """examples/digits.yaml's space, with ``hidden`` categorical (a few fusible widths)."""
    return SearchSpace({
        "lr": {"type": "float", "low": 0.0003, "high": 0.03, "log": True},
        "weight_decay": {"type": "float", "low": 1e-6, "high": 1e-3, "log": True},
        "batch_size": {"type": "categorical", "choices": [16, 32, 64, 128]},
        "hidden": {"type": "categorical", "choices": hidden},
        "optimizer": {"type": "categorical", "choices": ["adam", "adamw", "sgd", "rmsprop"]},
        "epochs": max_t,
    })


def config_seed(config: dict[str, Any]) -> int:
    """A seed derived from the config alone (same weights for the same config in every run)."""
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFF_FFFF


# ---- jobs (run in this process or in a worker process) ------------------------------------------

def _init_worker(threads: int) -> None:
    """Fix torch's threads, then warm up (imports, data, each optimizer kind, fused and alone)
    so that one-off costs a long-lived worker pays once stay out of the timed runs."""
    import torch
    torch.set_num_threads(threads)
    configs = [{"optimizer": kind, "batch_size": 128, "hidden": 8, "epochs": 1}
               for kind in ("adam", "adamw", "sgd", "rmsprop")]
    job = [(i, c, i, None, 1) for i, c in enumerate(configs)]
    run_fused(job)
    for row in job:
        run_separate([row])


def _warm(_: int) -> int:
    return os.getpid()


class _Ctx:
    """The trainable context for one separate trial: stops it at ``until`` epochs."""

    def __init__(self, seed: int, checkpoint: Any, until: int):
        from hypersack.runtime.worker.context import World
        self.seed, self.device, self.max_steps, self.world = seed, "cpu", None, World()
        self.state, self.until, self.reports = checkpoint, until, []

    def restore(self) -> Any:
        return self.state

    def checkpoint(self, state: Any) -> None:
        self.state = state

    def should_stop(self) -> bool:
        return False

    def report(self, step: int, **metrics: float) -> None:
        from hypersack.errors import TrialStopped
        self.reports.append((int(step), dict(metrics), time.monotonic()))
        if step >= self.until:
            raise TrialStopped()


def run_separate(job: list[tuple]) -> dict[int, tuple]:
    """Train one trial ``(trial_id, config, seed, checkpoint, until)`` alone with digits_mlp."""
    from hypersack.errors import TrialStopped
    from hypersack.workloads.digits import train_mlp
    ((trial_id, config, seed, checkpoint, until),) = job
    ctx = _Ctx(seed, checkpoint, until)
    try:
        train_mlp(config, ctx)
    except TrialStopped:
        pass
    return {trial_id: (ctx.reports, ctx.state)}


class _Source:
    """A ``MemberSource`` that stops each member at its milestone and keeps its results."""

    def __init__(self, members: list, until: dict[int, int]):
        self.members, self.until = list(members), until
        self.reports: dict[int, list] = {m.trial_id: [] for m in members}
        self.states: dict[int, Any] = {}

    def next_member(self):
        return self.members.pop(0) if self.members else None

    def checkpoint(self, trial_id: int, state: Any) -> None:
        self.states[trial_id] = state

    def report(self, trial_id: int, step: int, metrics: dict) -> bool:
        self.reports[trial_id].append((int(step), dict(metrics), time.monotonic()))
        return step >= self.until[trial_id]

    def finished(self, trial_id: int) -> None:
        return None

    def failed(self, trial_id: int, error: BaseException) -> None:
        raise error


def run_fused(job: list[tuple]) -> dict[int, tuple]:
    """Train the members ``(trial_id, config, seed, checkpoint, until)`` of one pack fused."""
    from hypersack.fusion import Member, run_pack
    from hypersack.workloads.digits_fused import DIGITS_MLP
    members = [Member(t, c, s, ckpt, int(c["epochs"])) for t, c, s, ckpt, _ in job]
    source = _Source(members, {t: until for t, _, _, _, until in job})
    run_pack(DIGITS_MLP, source, "cpu", max_members=len(job))
    return {t: (source.reports[t], source.states.get(t)) for t, *_ in job}


# Optimizer state each kind keeps in torch.optim as the digits trainable builds it (RMSprop
# without momentum, not centred); the fused state has the same names (hypersack.fusion.optim).
_PLAIN_STATE = {"adam": ("exp_avg", "exp_avg_sq"), "adamw": ("exp_avg", "exp_avg_sq"),
                "sgd": ("momentum_buffer",), "rmsprop": ("square_avg",)}
_FUSED_STATE = {"adam": ("exp_avg", "exp_avg_sq"), "adamw": ("exp_avg", "exp_avg_sq"),
                "sgd": ("momentum_buffer",),
                "rmsprop": ("square_avg", "momentum_buffer", "grad_avg")}


def as_fused(ckpt: Any, config: dict[str, Any]) -> Any:
    """A digits_mlp checkpoint (torch.optim) as a fused-member checkpoint; others unchanged."""
    if ckpt is None or "format" in ckpt:
        return ckpt
    from hypersack.fusion.stack import CHECKPOINT_FORMAT
    model, kind = ckpt["model"], config["optimizer"]
    names = list(model)
    per_param = ckpt["optimizer"]["state"]
    state = {f"{s}/{n}": per_param.get(i, {}).get(s, torch_zeros_like(model[n]))
             for s in _FUSED_STATE[kind] for i, n in enumerate(names)}
    return {"format": CHECKPOINT_FORMAT, "epoch": int(ckpt["epoch"]),
            "iteration": int(ckpt["steps"]), "position": 0, "model": dict(model),
            "optimizer": {"kind": kind, "state": state}}


def as_plain(ckpt: Any, config: dict[str, Any]) -> Any:
    """A fused-member checkpoint as a digits_mlp (torch.optim) checkpoint; others unchanged."""
    if ckpt is None or "format" not in ckpt:
        return ckpt
    import torch
    model, kind, steps = ckpt["model"], ckpt["optimizer"]["kind"], int(ckpt["iteration"])
    fused = ckpt["optimizer"]["state"]
    state = {}
    for i, n in enumerate(model):
        state[i] = {s: fused[f"{s}/{n}"].clone() for s in _PLAIN_STATE[kind]}
        if kind != "sgd":
            state[i]["step"] = torch.tensor(float(steps))
    group = _param_group(config, len(model))
    return {"epoch": int(ckpt["epoch"]), "model": dict(model), "steps": steps, "workers": 1,
            "optimizer": {"state": state, "param_groups": [group]},
            "since": {"epoch": 1, "from_workers": 1}}


def _param_group(config: dict[str, Any], n_params: int) -> dict[str, Any]:
    """The param group torch.optim saves for the digits trainable's optimizer of ``config``."""
    from hypersack.workloads.digits import build_mlp, build_optimizer, parse_settings
    settings = parse_settings(config, None)
    optimizer = build_optimizer(build_mlp(2, 0.0), settings)
    group = optimizer.state_dict()["param_groups"][0]
    return dict(group, params=list(range(n_params)))


def torch_zeros_like(tensor: Any) -> Any:
    import torch
    return torch.zeros_like(tensor)


def run_pack_job(job: list[tuple]) -> dict[int, tuple]:
    """A pack as an ``execution: auto`` executor runs it: fused when it has several members, a
    singleton as the plain trial it is; checkpoints are converted between the two formats."""
    if len(job) > 1:
        return run_fused([(t, c, s, as_fused(ckpt, c), u) for t, c, s, ckpt, u in job])
    return run_separate([(t, c, s, as_plain(ckpt, c), u) for t, c, s, ckpt, u in job])


# ---- the driver ---------------------------------------------------------------------------------

@dataclass
class Trial:
    config: dict[str, Any]
    seed: int
    checkpoint: Any = None
    step: int = 0
    results: list = field(default_factory=list)     # (step, metrics, monotonic time)


class MiniStudy:
    """Drives an algorithm to its end; a job is one trial (plain) or one pack (pack-aware)."""

    def __init__(self, algorithm, run_job, procs: int, threads: int, fused: bool):
        self.alg, self.run_job, self.fused = algorithm, run_job, fused
        self.procs, self.threads = procs, threads
        self.trials: dict[int, Trial] = {}
        self.jobs = 0

    def _take(self) -> tuple[int, dict] | None:
        """The next trial to train (promotions come first) and its info, or None.

        Only ``suggest`` is asked: it hands out promotions too, with their bracket, rung (and
        pack), which a bare ``promote()`` would not tell."""
        new_id = len(self.trials)
        suggestion = self.alg.suggest(new_id)
        if suggestion is None:
            return None
        if suggestion.resume is not None:
            return suggestion.resume, dict(suggestion.info)
        config = dict(suggestion.config)
        self.trials[new_id] = Trial(config, config_seed(config))
        return new_id, dict(suggestion.info)

    def _next_job(self) -> list[tuple] | None:
        """One trial, or every member of the next pack, with its milestone (epochs)."""
        first = self._take()
        if first is None:
            return None
        taken = [first]
        while self.fused and len(taken) < first[1]["pack_size"]:
            more = self._take()
            if more is None or more[1]["pack"] != first[1]["pack"]:
                raise RuntimeError(f"pack {first[1]['pack']} was not handed out whole")
            taken.append(more)
        return [self._job_row(t, info) for t, info in taken]

    def _job_row(self, trial_id: int, info: dict) -> tuple:
        until = self.alg.brackets[info["bracket"]][info["rung"]][1]
        trial = self.trials[trial_id]
        return (trial_id, trial.config, trial.seed, trial.checkpoint, until)

    def _finish_job(self, results: dict[int, tuple]) -> None:
        for trial_id, (reports, state) in results.items():
            trial = self.trials[trial_id]
            trial.checkpoint = state
            decision = Decision.CONTINUE
            for step, metrics, when in reports:
                trial.step = step
                trial.results.append((step, metrics, when))
                decision = self.alg.on_result(trial_id, step, metrics)
            max_t = int(trial.config["epochs"])
            if decision is Decision.STOP or (decision is Decision.CONTINUE and trial.step >= max_t):
                self.alg.on_complete(trial_id, reports[-1][1].get("accuracy"), "complete")

    def run(self) -> tuple[float, float]:
        """Run to the end; ``(start, end)`` monotonic times."""
        pool = None
        if self.procs > 1:
            pool = ProcessPoolExecutor(self.procs, mp_context=get_context("spawn"),
                                       initializer=_init_worker, initargs=(self.threads,))
            list(pool.map(_warm, range(self.procs)))
        else:
            _init_worker(self.threads)
        start = time.monotonic()
        try:
            self._loop(pool)
        finally:
            end = time.monotonic()
            if pool is not None:
                pool.shutdown()
        return start, end

    def _loop(self, pool) -> None:
        running = set()
        while True:
            while len(running) < self.procs and not self.alg.exhausted:
                job = self._next_job()
                if job is None:
                    break
                self.jobs += 1
                if pool is None:
                    self._finish_job(self.run_job(job))
                    continue
                running.add(pool.submit(self.run_job, job))
            if not running:
                if self.alg.exhausted:
                    return
                raise RuntimeError("the algorithm hands out nothing and no job runs: stuck")
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                self._finish_job(future.result())


# ---- runs and figures ---------------------------------------------------------------------------

def make_alg(name: str, args, space: SearchSpace):
    spec: dict[str, Any] = {"type": name, "min_t": 1, "max_t": args.max_t,
                            "reduction_factor": args.eta, "repeat": 1}   # one iteration each
    if name == "pack_hyperband":
        spec.update(grouping=args.grouping, max_pack=args.max_pack, threshold=args.threshold,
                    fusibility_keys=["hidden"], distance_keys=args.distance_keys,
                    min_pack=args.min_pack)
    return make_algorithm(spec, space, Objective("accuracy", "max"), args.seed)


def one_run(fused: bool, procs: int, args, space: SearchSpace) -> dict[str, Any]:
    alg = make_alg("pack_hyperband" if fused else "hyperband", args, space)
    study = MiniStudy(alg, run_pack_job if fused else run_separate, procs, args.threads, fused)
    start, end = study.run()
    finals = [(r[1]["accuracy"], r[2] - start, t) for t, trial in study.trials.items()
              for r in trial.results if r[0] == args.max_t]
    best_acc = max(a for a, _, _ in finals)
    best_time = min(when for a, when, _ in finals if a == best_acc)
    best_trial = min((when, t) for a, when, t in finals if a == best_acc)[1]
    return {"algorithm": "pack_hyperband" if fused else "hyperband", "procs": procs,
            "threads": args.threads, "wall_s": end - start, "best_accuracy": best_acc,
            "time_to_best_s": best_time, "best_config": study.trials[best_trial].config,
            "finals": [(a, when) for a, when, _ in finals], "trials": len(study.trials),
            "epochs": sum(len(t.results) for t in study.trials.values()), "jobs": study.jobs}


def time_to(finals: list[tuple[float, float]], target: float) -> float:
    return min(when for a, when in finals if a >= target)


def print_table(runs: list[dict[str, Any]]) -> None:
    target = min(r["best_accuracy"] for r in runs)
    base = runs[0]
    for r in runs:
        r["time_to_target_s"] = time_to(r["finals"], target)
    print(f"common target (equal quality): accuracy >= {target:.4f}")
    head = (f"{'algorithm':<15} {'procs':>5} {'thr':>3} {'trials':>6} {'epochs':>6} {'jobs':>5} "
            f"{'wall s':>8} {'best acc':>8} {'t_best s':>8} {'t_target s':>10} "
            f"{'x wall':>6} {'x target':>8}")
    print(head)
    print("-" * len(head))
    for r in runs:
        print(f"{r['algorithm']:<15} {r['procs']:>5} {r['threads']:>3} {r['trials']:>6} "
              f"{r['epochs']:>6} {r['jobs']:>5} {r['wall_s']:>8.2f} {r['best_accuracy']:>8.4f} "
              f"{r['time_to_best_s']:>8.2f} {r['time_to_target_s']:>10.2f} "
              f"{base['wall_s'] / r['wall_s']:>6.2f} "
              f"{base['time_to_target_s'] / r['time_to_target_s']:>8.2f}")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="max_t 9, one process per mode")
    p.add_argument("--max-t", type=int, default=27, help="epochs of the longest rung (R)")
    p.add_argument("--eta", type=int, default=3)
    p.add_argument("--procs", default="1,2", help="process counts to run each algorithm with")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--grouping", default="knn", choices=["knn", "random", "batch_size"])
    p.add_argument("--max-pack", type=int, default=16, help="members per pack (memory cap)")
    p.add_argument("--min-pack", type=int, default=3,
                   help="smaller packs run as separate trials (fusing pays from about 3 on CPU)")
    p.add_argument("--threshold", type=float, default=1.0,
                   help="kNN distance threshold (inf: no limit)")
    p.add_argument("--distance-keys", default="batch_size,optimizer",
                   help="hyperparameters the kNN distance uses ('all': every one but hidden)")
    p.add_argument("--hidden", default="64,128", help="hidden widths (the fusibility key)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pack-only", action="store_true", help="skip plain Hyperband")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = p.parse_args(argv)
    if args.quick:
        args.max_t, args.procs = 9, "1"
    args.procs = [int(x) for x in args.procs.split(",")]
    args.hidden = [int(x) for x in args.hidden.split(",")]
    args.distance_keys = None if args.distance_keys == "all" else args.distance_keys.split(",")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    space = study_space(args.max_t, args.hidden)
    runs = [one_run(fused, procs, args, space) for fused in (False, True) for procs in args.procs
            if fused or not args.pack_only]
    print(f"digits MLP, Hyperband R={args.max_t} eta={args.eta}, seed {args.seed}, "
          f"pack grouping {args.grouping} (pack size {args.min_pack}..{args.max_pack}, threshold {args.threshold}, "
          f"distance over {args.distance_keys or 'all'}), "
          f"torch threads per process {args.threads}, {os.cpu_count()} CPUs")
    print_table(runs)
    if args.json:
        out = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
               "platform": platform.platform(), "cpus": os.cpu_count(),
               "date": time.strftime("%Y-%m-%d %H:%M:%S"),
               "runs": [{k: v for k, v in r.items() if k != "finals"} for r in runs]}
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
