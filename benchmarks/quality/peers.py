"""The peers of ``mf_quality.py``, each run sequentially (one worker) in process on a test function
of ``hypersack/sim/functions.py``, cut at ``budget`` fidelity steps (one step = one report).

* Optuna: ``TPESampler(seed)`` with ``SuccessiveHalvingPruner(min_resource=1,
  reduction_factor=3)`` or ``HyperbandPruner(min_resource=1, max_resource=top, reduction_factor=3)``;
  a trial reports every step and stops when pruned (ask/tell, as Optuna's docs do it).
* Syne Tune: ``ASHA`` and ``BOHB`` of ``syne_tune.optimizer.baselines`` (grace period 1, reduction
  factor 3, ``max_t`` the top fidelity), driven as ``syne_tune.Tuner`` drives a scheduler:
  ``suggest`` -> ``on_trial_add`` -> ``on_trial_result`` per step -> ``on_trial_remove`` on STOP
  (its ASHA stops trials, it never pauses them). Syne Tune runs in its own virtual environment
  (its pins differ from the project's): ``mf_quality.py`` calls this file as a script with that
  environment's Python, ``python peers.py synetune --out FILE ...``, and reads the JSON back.

A run's answer: ``{"reports": [[trial, step, value], ...], "configs": {trial: config}}`` for the
trials that reached the top fidelity. This file imports only numpy, the peer, and the functions
module by its path (so it runs where ``hypersack`` is not installed).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, Callable

FUNCTIONS_FILE = Path(__file__).resolve().parents[2] / "hypersack" / "sim" / "functions.py"


def load_functions() -> Any:
    spec = importlib.util.spec_from_file_location("_hypersack_functions", FUNCTIONS_FILE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class Recorder:
    """Counts fidelity steps and keeps the reports of one run."""

    def __init__(self, f: Any, budget: int):
        self.f, self.budget = f, budget
        self.reports: list[list[Any]] = []
        self.configs: dict[int, dict[str, float]] = {}

    @property
    def spent(self) -> bool:
        return len(self.reports) >= self.budget

    def step(self, trial: int, config: dict[str, float], step: int) -> float:
        value = float(self.f(config, step))
        self.reports.append([trial, step, value])
        if step >= self.f.max_fidelity:
            self.configs[trial] = dict(config)
        return value

    def answer(self) -> dict[str, Any]:
        return {"reports": self.reports, "configs": {str(k): v for k, v in self.configs.items()}}


# ---- Optuna ---------------------------------------------------------------------------------

def optuna_run(f: Any, pruner_name: str, seed: int, budget: int) -> dict[str, Any]:
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    top = f.max_fidelity
    pruner = (optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
              if pruner_name == "sha" else
              optuna.pruners.HyperbandPruner(min_resource=1, max_resource=top, reduction_factor=3))
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed),
                                pruner=pruner)
    distributions = {k: optuna.distributions.FloatDistribution(v["low"], v["high"])
                     for k, v in f.space().items()}
    rec = Recorder(f, budget)
    while not rec.spent:
        trial = study.ask(distributions)
        config = dict(trial.params)
        state, value = None, None
        for step in range(1, top + 1):
            value = rec.step(trial.number, config, step)
            trial.report(value, step)
            if rec.spent and step < top:
                state = optuna.trial.TrialState.PRUNED     # cut by the budget: no more steps
                break
            if step < top and trial.should_prune():
                state = optuna.trial.TrialState.PRUNED
                break
        if state is None:
            study.tell(trial, value)
        else:
            study.tell(trial, state=state)
    return rec.answer()


# ---- Syne Tune -----------------------------------------------------------------------------

def synetune_run(f: Any, name: str, seed: int, budget: int) -> dict[str, Any]:
    import datetime
    import logging
    import warnings

    import numpy as np
    from syne_tune.backend.trial_status import Trial
    from syne_tune.config_space import uniform
    from syne_tune.optimizer.baselines import ASHA, BOHB
    from syne_tune.optimizer.scheduler import SchedulerDecision
    logging.getLogger("syne_tune").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=FutureWarning)
    np.random.seed(seed)                 # ASHA's bracket choice draws from numpy's global RNG
    space = {k: uniform(v["low"], v["high"]) for k, v in f.space().items()}
    top = f.max_fidelity
    cls = {"asha": ASHA, "bohb": BOHB}[name]
    scheduler = cls(space, metric="value", time_attr="epoch", max_t=top, do_minimize=True,
                    random_seed=seed, grace_period=1, reduction_factor=3)
    rec = Recorder(f, budget)
    trial_id = 0
    while not rec.spent:
        suggestion = scheduler.suggest()
        if suggestion is None:
            break
        config = {k: float(suggestion.config[k]) for k in space}
        trial = Trial(trial_id=trial_id, config=dict(suggestion.config),
                      creation_time=datetime.datetime.now())
        scheduler.on_trial_add(trial=trial)
        for step in range(1, top + 1):
            value = rec.step(trial_id, config, step)
            decision = scheduler.on_trial_result(trial=trial, result={"value": value, "epoch": step})
            if decision == SchedulerDecision.STOP or rec.spent:
                scheduler.on_trial_remove(trial=trial)
                break
        trial_id += 1
    return rec.answer()


RUNNERS: dict[str, tuple[str, Callable[..., dict[str, Any]], str]] = {
    "optuna-tpe-sha": ("optuna", optuna_run, "sha"),
    "optuna-tpe-hyperband": ("optuna", optuna_run, "hyperband"),
    "synetune-asha": ("synetune", synetune_run, "asha"),
    "synetune-bohb": ("synetune", synetune_run, "bohb"),
}


def run_peer(arm: str, f: Any, seed: int, budget: int) -> dict[str, Any]:
    _, runner, option = RUNNERS[arm]
    return runner(f, option, seed, budget)


def main(argv: list[str] | None = None) -> int:
    """``python peers.py synetune --functions a,b --seeds 0,1 --budget N --out FILE``: every
    Syne Tune arm on each function and seed, as JSON ``{arm: {function: [run per seed]}}``."""
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("peer", choices=["synetune", "optuna"])
    p.add_argument("--functions", required=True)
    p.add_argument("--seeds", required=True)
    p.add_argument("--budget", type=int, required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    functions = load_functions().FUNCTIONS
    seeds = [int(s) for s in args.seeds.split(",")]
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for arm, (peer, _, _) in RUNNERS.items():
        if peer != args.peer:
            continue
        for name in args.functions.split(","):
            out.setdefault(arm, {})[name] = [run_peer(arm, functions[name], s, args.budget) for s in seeds]
    Path(args.out).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
