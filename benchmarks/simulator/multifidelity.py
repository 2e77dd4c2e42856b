"""Multi-fidelity algorithms (sha, hyperband, asha, bohb, rasda) on a synthetic learning-curve
objective, driven by a small simulated cluster (no processes, no training): how many steps each
trains against training every config to max_t, how close its best is to the best config it saw,
and what its decisions cost (microseconds per on_result and per suggest/promote call).

    python benchmarks/simulator/multifidelity.py [--quick] [--devices 8] [--max-t 81] [--json PATH]

Curve: loss(config, step) = floor(config) + 1 / step ** (0.5 + y), with floor = (x - 0.3)^2 +
0.15 y (+0.05 for sgd): fast learners plateau higher, so curves cross and a slow starter may end
best. Each step takes (1 + y) / devices simulated
seconds. ``regret``: final loss of the trial the algorithm returns minus the best final loss among
the configs it sampled. Simulated time (``sim_time``) is in units of one step on one device.
"""
from __future__ import annotations

import argparse
import heapq
import json
import time

from hypersack.core.algorithms import Decision, make_algorithm
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace

SPACE = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0},
                     "y": {"type": "float", "low": 0.0, "high": 1.0},
                     "opt": ["sgd", "adam"]})
OBJECTIVE = Objective("loss", "min")


def loss(config, step):
    floor = (config["x"] - 0.3) ** 2 + 0.15 * config["y"] + (0.0 if config["opt"] == "adam" else 0.05)
    rate = 0.5 + config["y"]
    return floor + 1.0 / step**rate


class Sim:
    """Plays the study: promotions before suggestions, PAUSE/GROW/STOP honoured, FIFO launches."""

    def __init__(self, alg, devices, max_t):
        self.alg, self.free, self.max_t = alg, devices, max_t
        self.trials, self.pending, self.heap = {}, [], []
        self.now, self.seq, self.steps, self.busy = 0.0, 0, 0, 0.0
        self.t_result = self.t_suggest = 0.0
        self.n_result = self.n_suggest = 0

    def run(self):
        self.fill()
        while self.heap:
            self.now, _, tid = heapq.heappop(self.heap)
            self.advance(tid)
            self.fill()
        return self

    def fill(self):
        while True:
            t0 = time.perf_counter()
            resumed = self.alg.promote()
            self.t_suggest += time.perf_counter() - t0
            self.n_suggest += 1
            if resumed is None:
                break
            self.pending.append(resumed)
        self.launch()
        while self.free > 0 and not self.pending and not self.alg.exhausted:
            tid = len(self.trials)
            t0 = time.perf_counter()
            s = self.alg.suggest(tid)
            self.t_suggest += time.perf_counter() - t0
            self.n_suggest += 1
            if s is None:
                return
            if s.resume is None:
                self.trials[tid] = {"config": s.config, "step": 0, "state": "pending", "value": None}
                tid_launch = tid
            else:
                tid_launch = s.resume
            self.pending.append(tid_launch)
            self.launch()

    def launch(self):
        while self.pending:
            tid = self.pending[0]
            need = self.alg.resources(tid)
            if need > self.free:
                return
            self.pending.pop(0)
            self.free -= need
            self.trials[tid].update(state="running", devices=need)
            self.schedule(tid)

    def schedule(self, tid):
        trial = self.trials[tid]
        self.seq += 1
        when = self.now + (1.0 + trial["config"]["y"]) / trial["devices"]
        heapq.heappush(self.heap, (when, self.seq, tid))

    def advance(self, tid):
        trial = self.trials[tid]
        trial["step"] += 1
        self.steps += 1
        self.busy += 1.0 + trial["config"]["y"]     # device-time: devices x (1 + y) / devices
        trial["value"] = loss(trial["config"], trial["step"])
        t0 = time.perf_counter()
        decision = self.alg.on_result(tid, trial["step"], {"loss": trial["value"]})
        self.t_result += time.perf_counter() - t0
        self.n_result += 1
        if decision is Decision.CONTINUE and trial["step"] < self.max_t:
            self.schedule(tid)
            return
        self.free += trial["devices"]
        if decision is Decision.PAUSE:
            trial["state"] = "paused"
        elif decision is Decision.GROW:
            self.pending.append(tid)
        else:
            trial["state"] = "complete" if decision is Decision.CONTINUE else "pruned"
            self.alg.on_complete(tid, trial["value"], trial["state"])


def specs(max_t, samples, devices):
    eta = 3
    return {
        "sha": {"type": "sha", "n": samples, "min_t": 1, "max_t": max_t, "reduction_factor": eta},
        # one Hyperband iteration: the driver below runs an algorithm until it is exhausted
        "hyperband": {"type": "hyperband", "min_t": 1, "max_t": max_t, "reduction_factor": eta,
                      "repeat": 1},
        "bohb": {"type": "bohb", "min_t": 1, "max_t": max_t, "reduction_factor": eta,
                 "repeat": 1},
        "asha (pause)": {"type": "asha", "min_t": 1, "max_t": max_t, "reduction_factor": eta,
                         "num_samples": samples},
        "asha (stop)": {"type": "asha", "min_t": 1, "max_t": max_t, "reduction_factor": eta,
                        "mode": "stop", "num_samples": samples},
        "rasda (sf=rf=2)": {"type": "rasda", "min_t": 1, "max_t": max_t, "sf": 2, "rf": 2,
                            "max_resources": devices, "num_samples": samples},
        "asha (rf=2, stop)": {"type": "asha", "min_t": 1, "max_t": max_t, "reduction_factor": 2,
                              "mode": "stop", "num_samples": samples},
    }


def measure(name, spec, devices, max_t, seed):
    alg = make_algorithm(spec, SPACE, OBJECTIVE, seed=seed)
    start = time.perf_counter()
    sim = Sim(alg, devices, max_t).run()
    wall = time.perf_counter() - start
    done = [t for t in sim.trials.values() if t["state"] == "complete"]
    best = min(done, key=lambda t: t["value"]) if done else None
    best_seen = min(loss(t["config"], max_t) for t in sim.trials.values())
    n = len(sim.trials)
    return {"algorithm": name, "trials": n, "completed": len(done), "steps": sim.steps,
            "steps_vs_full": sim.steps / (n * max_t),
            "regret": None if best is None else loss(best["config"], max_t) - best_seen,
            "sim_time": sim.now, "utilization": sim.busy / (sim.now * devices) if sim.now else 0.0,
            "us_per_result": 1e6 * sim.t_result / max(1, sim.n_result),
            "us_per_suggest": 1e6 * sim.t_suggest / max(1, sim.n_suggest), "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="max_t 27, 40 samples")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--max-t", type=int, default=81)
    parser.add_argument("--samples", type=int, default=143,
                        help="configs for sha/asha/rasda (Hyperband R=81, eta=3 samples 143)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH", default=None)
    args = parser.parse_args()
    max_t, samples = (27, 40) if args.quick else (args.max_t, args.samples)
    rows = [measure(name, spec, args.devices, max_t, args.seed)
            for name, spec in specs(max_t, samples, args.devices).items()]
    header = (f"{'algorithm':18s} {'trials':>6s} {'done':>5s} {'steps':>7s} {'vs full':>7s} "
              f"{'regret':>8s} {'sim_time':>9s} {'util':>5s} {'us/result':>9s} {'us/suggest':>10s}")
    print(f"devices={args.devices} max_t={max_t} seed={args.seed}")
    print(header)
    for r in rows:
        regret = "-" if r["regret"] is None else f"{r['regret']:.4f}"
        print(f"{r['algorithm']:18s} {r['trials']:6d} {r['completed']:5d} {r['steps']:7d} "
              f"{r['steps_vs_full']:7.2f} {regret:>8s} {r['sim_time']:9.1f} "
              f"{r['utilization']:5.2f} {r['us_per_result']:9.1f} {r['us_per_suggest']:10.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"devices": args.devices, "max_t": max_t, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
