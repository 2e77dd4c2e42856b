"""Two per-event costs of the driver, measured in isolation (driver CPU, ``time.process_time``):

* **a trial's end**: ``Controller.handle(TrialFinished)`` with 10,240 trials running on 1,024
  GPUs (``driver_scale``'s cluster: 128 nodes of 8 GPUs, 10 trials per GPU, WFD), every trial
  ended one after the other: the stay closed, the trial released from placement's live index,
  the algorithm told. ``--cpus``: cores per trial (0: driver_scale's demand; 1: the default
  ``Demand``, so every release changes its node's cores);
* **ASHA's state per commit**: at 10,000 trials, what ``Controller.state_dict(now)`` (the state
  the loop hands to each commit) and its JSON cost when 40 reports arrived since the previous
  commit (one per trial, at a milestone).

Runs against any checkout (``PYTHONPATH=<checkout>``): code without ``Algorithm.state_delta``
stores ASHA's state whole.

    python benchmarks/driver/driver_parts.py
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from driver_scale import cluster_for  # noqa: E402
from hypersack.core.algorithms import make_algorithm  # noqa: E402
from hypersack.core.allocator import Demand  # noqa: E402
from hypersack.core.controller import Budget, Controller, ControllerOptions  # noqa: E402
from hypersack.core.objective import Objective  # noqa: E402
from hypersack.core.space import SearchSpace  # noqa: E402
from hypersack.core.trial import ResultReported, TrialFinished, TrialStarted  # noqa: E402

SPACE = SearchSpace({"lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True}})
OBJ = Objective("loss", "min")


def trial_end_us(cpus: float, gpus: int = 1024, per_gpu: int = 10) -> float:
    """Driver CPU per ``handle(TrialFinished)``, microseconds (random search)."""
    options = ControllerOptions(inventory=cluster_for(gpus, per_gpu),
                                demand=Demand(100.0 / per_gpu, 1.0, cpus).job)
    controller = Controller(make_algorithm({"type": "random"}, SPACE, OBJ, 0), OBJ,
                            Budget(trials=gpus * per_gpu), max_retries=0, options=options)
    launches = controller.launches(0.0)
    for launch in launches:
        controller.handle(TrialStarted(launch.trial_id, "x"), 0.0)
        controller.handle(ResultReported(launch.trial_id, 0, {"loss": 0.5}), 0.0)
    controller.take_changes()
    controller.take_results()
    controller.take_stays()
    gc.collect()
    c0 = time.process_time()
    for launch in launches:
        controller.handle(TrialFinished(launch.trial_id), 1.0)
    return 1e6 * (time.process_time() - c0) / len(launches)


def asha_state_ms(trials: int = 10000, changed: int = 40, commits: int = 50) -> tuple[float, int]:
    """CPU per commit of ASHA's state (ms) and the JSON bytes of the last one."""
    alg = make_algorithm({"type": "asha", "min_t": 1, "max_t": 5, "reduction_factor": 3,
                          "mode": "pause"}, SPACE, OBJ, 0)
    controller = Controller(alg, OBJ, Budget(trials=trials))
    for t in range(trials):
        alg.suggest(t)
        alg.on_result(t, 1, {"loss": -t})            # later trials better: every one goes on
    controller.state_dict(0.0)                        # the first commit writes everything
    spent, size = 0.0, 0
    for k in range(commits):
        for t in range(trials - changed * (k + 1), trials - changed * k):
            alg.on_result(t, 3, {"loss": -t})         # the next milestone
        c0 = time.process_time()
        state = controller.state_dict(0.0)
        algorithm = state["algorithm"]
        parts = algorithm.pop("parts", None)
        text = json.dumps(state) + "".join(json.dumps(v) for v in (parts or {}).values())
        spent += time.process_time() - c0
        size = len(text)
    return 1e3 * spent / commits, size


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--label", default="")
    args = p.parse_args(argv)
    for cpus in (0, 1):
        print(f"{args.label} trial end, cpus {cpus}: {trial_end_us(cpus):.1f} us of driver CPU per trial")
    ms, size = asha_state_ms()
    print(f"{args.label} ASHA state per commit, 10,000 trials, 40 changed: {ms:.2f} ms of CPU, "
          f"{size} bytes of JSON")
    return 0


if __name__ == "__main__":
    sys.exit(main())
