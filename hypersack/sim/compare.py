"""Comparisons shaped like the papers' results: placement policies against the exclusive baseline
(HyperSack Figs. 10-16), algorithms against each other (RASDA Table 2: ASHA vs RASDA),
time-sharing policies against the first listed (Hermes Fig. 9: FIFO, RR, SLAQ, Hermes), and the
search quality of algorithms over seeds (``sim.quality``: regret at 25/50/100% of a budget of
fidelity steps)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from hypersack.sim.quality import Trace, quality_rows, trace_of_simulation
from hypersack.sim.run import SimResult, simulate
from hypersack.sim.scenario import Scenario

__all__ = ["compare_policies", "compare_algorithms", "compare_time_sharing", "compare_quality",
           "policy_rows", "algorithm_rows", "time_sharing_rows"]

BASELINE = "exclusive"


def compare_policies(scenario: Scenario, policies: Sequence[str]) -> list[SimResult]:
    """One run per policy (the exclusive baseline first, added when missing)."""
    order = [BASELINE] + [p for p in policies if p != BASELINE]
    return [simulate(scenario, p, keep_log=False) for p in order]


def compare_algorithms(scenario: Scenario, algorithms: Mapping[str, Mapping[str, Any]],
                       policy: str | None = None) -> list[tuple[str, SimResult]]:
    """One run per labelled algorithm spec, all with the same placement ``policy``."""
    return [(label, simulate(scenario.with_algorithm(spec), policy, keep_log=False))
            for label, spec in algorithms.items()]


def compare_quality(scenario: Scenario, algorithms: Mapping[str, Mapping[str, Any]],
                    policy: str | None = None) -> tuple[list[tuple[str, SimResult]], dict[str, Any]]:
    """Each labelled algorithm run with ``scenario.compare_seeds`` seeds (the scenario's seed and
    the next ones), all with placement ``policy``: the first seed's results (for
    ``algorithm_rows``) and the regret table of ``sim.quality.quality_rows``, every run cut at
    ``compare.budget_steps`` fidelity steps (default: the fewest any run trained)."""
    first: list[tuple[str, SimResult]] = []
    traces: dict[str, list[Trace]] = {}
    mode = str(scenario.study.objective.part(scenario.curves.metric, "curves.metric").mode)
    max_steps = scenario.study.max_steps
    top = max_steps if isinstance(max_steps, int) else 10 ** 9     # a config key: each curve's end
    for label, spec in algorithms.items():
        variant = scenario.with_algorithm(spec)
        for i in range(scenario.compare_seeds):
            run = variant.with_seed(scenario.seed + i) if i else variant
            result = simulate(run, policy, keep_log=False, keep_results=True)
            traces.setdefault(label, []).append(
                trace_of_simulation(result, run.curves, run.study.steps_for))
            if i == 0:
                first.append((label, _light(result)))
    table = quality_rows(traces, mode, optimum=scenario.curves.best_known(mode, top),
                         budget=scenario.compare_budget_steps)
    return first, table


def _light(result: SimResult) -> SimResult:
    """``result`` without its executor, controller and store (what the tables do not read)."""
    result.executor = result.controller = result.store = None
    return result


def compare_time_sharing(scenario: Scenario, policies: Sequence[str],
                         placement: str | None = None) -> list[tuple[str, SimResult]]:
    """One run per time-sharing policy (``Scenario.with_time_sharing``), all with the same
    placement ``placement``."""
    return [(p, simulate(scenario.with_time_sharing(p), placement, keep_log=False))
            for p in policies]


def time_sharing_rows(results: Sequence[tuple[str, SimResult]],
                      reference: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Makespan, speedup against the first policy, best value, time to best (the table of
    ``algorithm_rows``, labelled by time-sharing policy)."""
    return [{"time_sharing": row.pop("algorithm"), **row}
            for row in algorithm_rows(results, reference)]


def policy_rows(results: Sequence[SimResult], reference: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Makespan, speedup against the exclusive run, occupancy, utilisation, time to best; the
    paper's speedup beside ours where the scenario's ``reference`` gives one."""
    base = next((r for r in results if r.policy == BASELINE), None)
    paper = _mapping(reference, "speedup")
    rows = []
    for r in results:
        rows.append({"policy": r.policy, "makespan_s": r.makespan_s,
                     "speedup": base.makespan_s / r.makespan_s if base and r.makespan_s else None,
                     "paper_speedup": paper.get(r.policy), "occupancy": r.occupancy,
                     "utilization": r.utilization, "time_to_best_s": r.time_to_best_s,
                     "best_value": r.best_value, "trials": r.trials})
    return rows


def algorithm_rows(results: Sequence[tuple[str, SimResult]],
                   reference: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Runtime (makespan), speedup against the first algorithm, best value, time to best."""
    first = results[0][1] if results else None
    paper = _mapping(reference, "runtime_s")
    rows = []
    for label, r in results:
        rows.append({"algorithm": label, "makespan_s": r.makespan_s,
                     "speedup": first.makespan_s / r.makespan_s if first and r.makespan_s else None,
                     "paper_runtime_s": paper.get(label), "best_value": r.best_value,
                     "time_to_best_s": r.time_to_best_s, "utilization": r.utilization,
                     "trials": r.trials, "states": r.states})
    return rows


def _mapping(reference: Mapping[str, Any] | None, key: str) -> dict[str, Any]:
    """``reference[key]`` when it maps labels to figures (a single figure has no label: {})."""
    value = (reference or {}).get(key)
    return dict(value) if isinstance(value, Mapping) else {}
