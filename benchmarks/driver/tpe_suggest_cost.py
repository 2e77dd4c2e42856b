"""Cost of a suggestion with n finished trials: HyperSack's incremental Optuna model beside
Optuna's own ask/tell on the same trials, in the same run, alternating A, B; and the longest
stall of a driver loop of a 5,000-trial TPE study whose proposals run off its thread.

    python benchmarks/driver/tpe_suggest_cost.py [--sizes 100,1000,5000] [--samplers tpe,random,cmaes,qmc,gp]
        [--asks 30] [--gp-sizes 100] [--stall-trials 5000] [--stall-suggestions 30]

Both sides start from the same n finished trials (Optuna: ``add_trial``; HyperSack: its state
journal, rebuilt once, as on resume), then time ``asks`` rounds of one suggestion plus one result
(Optuna: ``ask`` + ``tell``; HyperSack: ``suggest`` + ``on_complete``). Both get one untimed
round first (Optuna's caches, HyperSack's rebuild). Prints the 10%-trimmed mean ms per round
(see ``trimmed_mean``) and the ratio; cheap samplers get more rounds (up to 2 s per side, n / 5).

Stall: a driver turn delivers one result and fills 8 slots (``suggest``), with a 1 ms poll
between turns; the proposals run on a one-thread pool as in a study. Prints the longest turn
and the longest ``suggest`` call, beside the same loop computing inline. Needs the [tpe] extra.
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import optuna

from hypersack.core.algorithms.optuna_model import distribution
from hypersack.core.algorithms.optuna_search import OptunaSearch
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = SearchSpace({"x": {"type": "float", "low": -5, "high": 5},
                     "y": {"type": "float", "low": 1e-4, "high": 1, "log": True},
                     "c": [1, 2, 3]})
SAMPLERS = {"tpe": "TPESampler", "random": "RandomSampler", "cmaes": "CmaEsSampler",
            "qmc": "QMCSampler", "gp": "GPSampler"}
OPTIONS = {"CmaEsSampler": {"warn_independent_sampling": False},
           "GPSampler": {"warn_independent_sampling": False}}


def value(config) -> float:
    return (config["x"] - 1) ** 2 + abs(np.log10(config["y"]) + 2) + 0.1 * config["c"]


def history(n: int) -> list[tuple[dict, float]]:
    rng = np.random.default_rng(0)
    return [(c, value(c)) for c in (SPACE.sample(rng) for _ in range(n))]


def optuna_side(sampler: str, trials):
    dists = {name: distribution(optuna, SPACE[name]) for name in SPACE}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        made = getattr(optuna.samplers, sampler)(seed=0, **OPTIONS.get(sampler, {}))
    study = optuna.create_study(sampler=made)
    for config, v in trials:
        study.add_trial(optuna.trial.create_trial(params=config, distributions=dists, value=v))

    def round_() -> None:
        trial = study.ask(dists)
        study.tell(trial, value(trial.params))
    return round_


def hypersack_side(sampler: str, trials):
    alg = OptunaSearch(SPACE, Objective("v", "min"), seed=0, sampler=sampler,
                       options=OPTIONS.get(sampler, {}))
    journal = [{"p": [c[n] for n in SPACE], "s": "C", "v": v} for c, v in trials]
    alg.load_state_dict({"model": {"trials": journal}})
    next_id = [len(trials)]

    def round_() -> None:
        trial_id = next_id[0]
        next_id[0] += 1
        config = alg.suggest(trial_id).config
        alg.on_complete(trial_id, value(config), "complete")
    return round_


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def compare(sampler: str, n: int, asks: int) -> tuple[float, float]:
    trials = history(n)
    a, b = optuna_side(sampler, trials), hypersack_side(sampler, trials)
    a(), b()                                        # untimed: caches, the rebuild
    times_a: list[float] = []
    times_b: list[float] = []
    spent = 0.0
    # Alternate A, B; cheap samplers run more rounds (up to 2 s per side and n / 5 rounds, so
    # that the study grows by a fifth at most).
    most = max(asks, n // 5)
    while len(times_a) < asks or (spent < 2000 and len(times_a) < most):
        times_a.append(timed(a))
        times_b.append(timed(b))
        spent = min(sum(times_a), sum(times_b))
    return trimmed_mean(times_a), trimmed_mean(times_b)


def trimmed_mean(times: list[float], cut: float = 0.1) -> float:
    """The mean without the fastest and slowest ``cut`` of the rounds (scheduler spikes on a
    shared machine; the mean, not the median, since costs are bimodal: CMA-ES tells a whole
    generation every popsize asks)."""
    times = sorted(times)
    k = int(len(times) * cut)
    return statistics.fmean(times[k:len(times) - k])


def stall(n: int, suggestions: int, background: bool, slots: int = 8) -> tuple[float, float]:
    """(longest driver turn, longest suggest call) in ms, over the turns that begin with a
    trial running (with none, there is nothing to acknowledge and the proposal is awaited)."""
    alg = OptunaSearch(SPACE, Objective("v", "min"), seed=0, sampler="TPESampler")
    journal = [{"p": [c[k] for k in SPACE], "s": "C", "v": v} for c, v in history(n)]
    alg.load_state_dict({"model": {"trials": journal}})
    pool = ThreadPoolExecutor(1) if background else None
    if pool is not None:
        alg.use_background(pool)
    running: list[tuple[int, dict]] = []
    made, turn_max, call_max = 0, 0.0, 0.0
    alg.model._ensure_study()                       # the one-off rebuild is not a turn
    while made < suggestions:
        turn = time.perf_counter()
        busy = bool(running)
        if len(running) == slots:                   # one result per turn
            trial_id, config = running.pop(0)
            alg.on_complete(trial_id, value(config), "complete")
        while len(running) < slots and made < suggestions:
            call = time.perf_counter()
            suggestion = alg.suggest(n + made)
            if running:
                call_max = max(call_max, time.perf_counter() - call)
            if suggestion is None:
                break                               # still computing: next turn
            running.append((n + made, suggestion.config))
            made += 1
        if busy:
            turn_max = max(turn_max, time.perf_counter() - turn)
        time.sleep(0.001)                           # the executor's poll
    if pool is not None:
        pool.shutdown()
    return turn_max * 1e3, call_max * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--samplers", default="tpe,random,cmaes,qmc,gp")
    parser.add_argument("--gp-sizes", default="100", help="GP is O(n^3): its own sizes")
    parser.add_argument("--asks", type=int, default=30, help="least timed rounds per side (GP: 5)")
    parser.add_argument("--stall-trials", type=int, default=5000, help="0: skip the stall run")
    parser.add_argument("--stall-suggestions", type=int, default=30)
    args = parser.parse_args()
    print("| sampler | finished trials | Optuna ask+tell (ms) | HyperSack suggest+result (ms) | ratio |")
    print("|---|---:|---:|---:|---:|")
    for name in args.samplers.split(","):
        sizes = args.gp_sizes if name == "gp" else args.sizes
        for n in (int(s) for s in sizes.split(",") if s):
            ms_a, ms_b = compare(SAMPLERS[name], n, 5 if name == "gp" else args.asks)
            print(f"| {SAMPLERS[name]} | {n} | {ms_a:.1f} | {ms_b:.1f} | {ms_b / ms_a:.2f}x |",
                  flush=True)
    if args.stall_trials:
        print(f"\nTPE driver loop, {args.stall_trials} finished trials, "
              f"{args.stall_suggestions} suggestions, 8 slots:")
        print("| proposals | longest turn (ms) | longest suggest call (ms) |")
        print("|---|---:|---:|")
        for background in (True, False):
            turn, call = stall(args.stall_trials, args.stall_suggestions, background)
            label = "off the loop's thread" if background else "inline"
            print(f"| {label} | {turn:.1f} | {call:.1f} |", flush=True)


if __name__ == "__main__":
    main()
