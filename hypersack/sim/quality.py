"""Search quality: the regret of the best configuration trained to the top fidelity, at fractions
of a budget of fidelity steps, over seeds (the table of ``hypersack simulate --compare`` on a
function or table scenario, and of ``benchmarks/quality/``).

A run is a :class:`Trace`: its reports in the order they happened, each ``(trial, step, value)``
one fidelity step trained, with the step that is each trial's top fidelity and the true value
there (without noise). At a budget of ``b`` steps the run's answer is the trial with the best
*observed* value among the reports at a top step within its first ``b`` reports; its regret is
``true value - optimum`` (minimising; ``optimum - true value`` maximising), ``inf`` when no trial
reached the top fidelity yet. Every run is cut at the same ``budget`` (default: the fewest steps
any run trained), so algorithms are compared at equal cost. ``optimum``: the best value the
curves know (``CurveModel.best_known``), else the best true value any compared run reached at
the top fidelity (then a regret is relative to the runs compared, and says so).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["FRACTIONS", "Trace", "quality_rows", "trace_of_simulation", "default_budget"]

FRACTIONS = (0.25, 0.5, 1.0)


@dataclass(frozen=True)
class Trace:
    """One run: ``reports`` ``(trial, step, observed value)`` in order; ``top[trial]``: its top
    step; ``truth[trial]``: its true value at the top step (only trials that reached it)."""
    reports: Sequence[tuple[int, int, float]]
    top: Mapping[int, int]
    truth: Mapping[int, float]

    def chosen(self, budgets: Sequence[int], mode: str) -> list[int | None]:
        """Per budget (ascending or not), the trial with the best observed top-step value
        among the first ``budget`` reports (None: none at its top step yet)."""
        order = sorted(range(len(budgets)), key=lambda i: budgets[i])
        out: list[int | None] = [None] * len(budgets)
        best: tuple[float, int] | None = None
        sign = 1.0 if mode == "min" else -1.0
        k = 0
        for i in order:
            while k < min(budgets[i], len(self.reports)):
                trial, step, value = self.reports[k]
                if step >= self.top.get(trial, math.inf) and (best is None or sign * value < best[0]):
                    best = (sign * value, trial)
                k += 1
            out[i] = best[1] if best is not None else None
        return out

    def regrets(self, budgets: Sequence[int], mode: str, optimum: float) -> list[float]:
        sign = 1.0 if mode == "min" else -1.0
        return [math.inf if t is None else sign * (self.truth[t] - optimum)
                for t in self.chosen(budgets, mode)]


def default_budget(traces: Sequence[Trace]) -> int:
    """The fewest fidelity steps any run trained: every run can be cut there."""
    return min((len(t.reports) for t in traces), default=0)


def best_truth(traces: Sequence[Trace], mode: str) -> float | None:
    values = [v for t in traces for v in t.truth.values()]
    if not values:
        return None
    return min(values) if mode == "min" else max(values)


def quality_rows(runs: Mapping[str, Sequence[Trace]], mode: str, *, optimum: float | None = None,
                 budget: int | None = None, fractions: Sequence[float] = FRACTIONS
                 ) -> dict[str, Any]:
    """Regret quartiles per label at ``fractions`` of ``budget`` fidelity steps (module
    docstring): ``{"budget", "fractions", "optimum", "optimum_known", "rows": [{"algorithm",
    "seeds", "regret": [[q1, median, q3] per fraction]}]}``."""
    every = [t for traces in runs.values() for t in traces]
    budget = default_budget(every) if budget is None else int(budget)
    known = optimum is not None
    if optimum is None:
        optimum = best_truth(every, mode)
    budgets = [max(1, int(round(f * budget))) for f in fractions]
    rows = []
    for label, traces in runs.items():
        per_run = np.array([t.regrets(budgets, mode, optimum) for t in traces]
                           if optimum is not None else np.full((len(traces), len(budgets)), math.inf))
        rows.append({"algorithm": label, "seeds": len(traces),
                     "regret": [_quartiles(per_run[:, j]) for j in range(len(budgets))]})
    return {"budget": budget, "fractions": list(fractions), "optimum": optimum,
            "optimum_known": known, "rows": rows}


def _quartiles(values: np.ndarray) -> list[float]:
    """[q1, median, q3] (linear interpolation); ``inf`` (a run with no answer yet) counts as
    the worst, and a quartile that touches it is ``inf``."""
    if values.size == 0:
        return [math.nan] * 3
    missing = np.isinf(values)
    if not missing.any():
        return [float(q) for q in np.percentile(values, (25, 50, 75))]
    ceiling = float(values[~missing].max()) if (~missing).any() else 0.0
    quartiles = np.percentile(np.where(missing, ceiling + 1.0, values), (25, 50, 75))
    return [math.inf if q > ceiling else float(q) for q in quartiles]


def trace_of_simulation(result: Any, curves: Any, steps_for: Any) -> Trace:
    """The trace of a ``SimResult`` run with ``keep_results``: its store's results in order,
    each trial's top step from ``steps_for(config)``, truth from ``curves.mean``."""
    store, controller = result.store, result.controller
    metric = curves.metric
    reports = [(trial, step, float(metrics[metric])) for trial, step, metrics in store.results
               if metric in metrics]
    configs = {tid: rec.config for tid, rec in controller.trials.items()}
    top = {tid: int(steps_for(config) or 1) for tid, config in configs.items()}
    reached = {trial for trial, step, _ in reports if step >= top.get(trial, math.inf)}
    truth = {tid: curves.mean(configs[tid], top[tid]) for tid in reached}
    return Trace(reports, top, truth)
