"""Fingerprints of simulated studies: every event the simulated executor returned (its log), every
trial's record, every stored result and device stay, and the timeline's figures, hashed. Two runs
that decide anything differently (a config, a placement, a stop, a time) get different
fingerprints. ``test_sim_fingerprints.py`` compares them with the ones recorded on main before the
simulator's fast paths (issue 41, item 4): the fast paths change no result.

    PYTHONPATH=$PWD python tests/sim/fingerprints.py     # prints every scenario's fingerprint

Floats are written with 12 significant digits: a changed decision moves a figure by far more, and
a libm that rounds an ``exp`` differently in the last bit moves none.
"""
from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "sim").glob("*.yaml"))


def canonical(value: Any) -> str:
    """``value`` as text, floats to 12 significant digits, mappings in key order."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, float):
        return format(value, ".12g")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{canonical(k)}:{canonical(v)}"
                              for k, v in sorted(value.items(), key=lambda kv: repr(kv[0]))) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    if hasattr(value, "value") and hasattr(value, "name"):      # an Enum
        return repr(value.value)
    return canonical(vars(value)) if hasattr(value, "__dict__") else repr(value)


def fingerprint(result: Any) -> str:
    """The sha256 (first 16 hex digits) of a ``SimResult`` run with ``keep_log`` and
    ``keep_results``."""
    store, controller = result.store, result.controller
    trials = [(t, r.config, r.state, r.value, r.value_step, r.last_step, r.attempts, r.retries,
               r.finished_at, r.started_at, r.checkpoint_step, r.error)
              for t, r in sorted(controller.trials.items())]
    stays = [(s.trial_id, s.attempt, s.rank, s.node, s.gpu, s.start, s.end, s.outcome)
             for s in store.load_stays(1)]
    parts = [result.executor.log, trials, store.results, stays,
             [result.makespan_s, result.occupancy, result.utilization, result.busy,
              result.best_value, result.best_trial, result.time_to_best_s, result.trials,
              result.states, result.reports, result.packs, result.largest_pack]]
    return hashlib.sha256(canonical(parts).encode()).hexdigest()[:16]


def _surrogate(algorithm: dict, trials: int, workers: int, max_t: int = 27,
               curves: dict | None = None) -> dict:
    from hypersack.sim.functions import MFHartmann
    f = MFHartmann(6, max_fidelity=max_t)
    return {
        "name": "surrogate", "seed": 0, "policy": "exclusive",
        "cluster": {"nodes": [{"id": "n0", "cpus": workers,
                               "gpus": {"count": workers, "arch": "cpu", "memory_gb": 100}}]},
        "study": {"space": f.space(), "objective": {"metric": "value", "mode": "min"},
                  "algorithm": algorithm, "budget": {"trials": trials}, "max_steps": max_t},
        "workload": {"profiles": [{"arch": "cpu", "step_time_s": 1, "utilization": 100, "cpus": 1}]},
        "perf": {"startup_s": 0, "warmup_s": 0, "checkpoint_s": 0, "restore_s": 0},
        "curves": curves or {"type": "function", "function": "hypersack.sim.functions:MFHartmann",
                             "options": {"dims": 6, "max_fidelity": max_t}},
    }


def _busy(policy: str, mode: str) -> dict:
    """tests/sim/test_fast_paths.py's scenario: three 4-GPU nodes short on cores, a device
    failure and an addition, oversubscribed GPUs."""
    from tests.sim.conftest import BASE
    mini = copy.deepcopy(BASE)
    mini["cluster"] = {"nodes": [{"id": f"n{i}", "cpus": 10, "gpus": {
        "count": 4, "arch": "A100", "memory_gb": 16, "oversubscription": 2.5}} for i in range(3)]}
    mini["study"]["algorithm"] = {"type": "asha", "min_t": 1, "max_t": 4, "reduction_factor": 2,
                                  "mode": mode}
    mini["study"]["budget"] = {"trials": 60}
    mini["policy"] = policy
    mini["events"] = [{"at": 30.0, "fail": {"node": "n1", "gpu": "2"}},
                      {"at": 45.0, "add": {"node": "n0", "gpu": {"id": "9", "arch": "A100",
                                                                 "memory_gb": 16}}}]
    return mini


def _table_file() -> str:
    """A CSV of 40 configs x 9 steps of Hartmann 6, in a folder of this process's own."""
    import csv
    import tempfile

    import numpy as np

    from hypersack.sim.functions import MFHartmann
    path = Path(tempfile.mkdtemp(prefix="hypersack-fingerprint-")) / "table.csv"
    f = MFHartmann(6, max_fidelity=9)
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow([f"x{i}" for i in range(6)] + ["step", "value"])
        for x in np.random.default_rng(0).random((40, 6)):
            for step in range(1, 10):
                out.writerow([*x.tolist(), step, f.value(x, step)])
    return str(path)


ASHA_STOP = {"type": "asha", "min_t": 1, "max_t": 27, "reduction_factor": 3, "mode": "stop"}


def scenarios() -> dict[str, Callable[[], Any]]:
    """name -> a function making the Scenario (built fresh for each run)."""
    from hypersack.sim import load_scenario, scenario_from_dict
    out: dict[str, Callable[[], Any]] = {}
    for path in EXAMPLES:
        out[f"example:{path.stem}"] = lambda path=path: load_scenario(str(path))
    hb = {"type": "hyperband", "min_t": 1, "max_t": 27, "reduction_factor": 3}
    surrogate = {
        "surrogate:asha-stop-64": _surrogate(ASHA_STOP, 1500, 64),
        "surrogate:asha-pause-16": _surrogate({**ASHA_STOP, "mode": "pause"}, 400, 16),
        "surrogate:hyperband-8": _surrogate(hb, 300, 8),
        "surrogate:bohb-8": _surrogate({**hb, "type": "bohb"}, 200, 8),
        "surrogate:random-8": _surrogate({"type": "random"}, 60, 8, max_t=9),
    }
    for name, d in surrogate.items():
        out[name] = lambda d=d: scenario_from_dict(copy.deepcopy(d))
    out["surrogate:table-asha-8"] = lambda: scenario_from_dict(_surrogate(
        {**ASHA_STOP, "max_t": 9}, 200, 8, max_t=9, curves={"type": "table", "file": _table_file()}))
    for policy in ("exclusive", "ff", "ffd", "wf", "wfd", "hay", "ray"):
        for mode in ("stop", "pause"):
            out[f"busy:{policy}-{mode}"] = lambda p=policy, m=mode: scenario_from_dict(_busy(p, m))
    return out


def all_fingerprints() -> dict[str, str]:
    from hypersack.sim import simulate
    return {name: fingerprint(simulate(make(), keep_log=True, keep_results=True))
            for name, make in scenarios().items()}


if __name__ == "__main__":
    import sys
    sys.path.insert(0, str(ROOT))
    for name, value in all_fingerprints().items():
        print(f"    {name!r}: {value!r},")
