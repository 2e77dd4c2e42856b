"""The exact reference policy: the GAP as an integer program solved by OR-Tools CP-SAT.

As in the paper (Sec. III-B, V-B): binary X(p, g) per job and GPU, Eq. 1-4 as constraints, and
the objective Eq. 5: maximise the compute placed, summed over GPUs (a job counts with its demand on
each GPU it holds, on that GPU's architecture). A data-parallel job (``gpus`` = k) gets k GPUs or
none. The heuristic ``wfd`` solution is given to the solver as a hint, so even a run cut short by
``time_limit`` starts from a solution at least that good.

CP-SAT needs integers: compute, memory and cores are scaled by ``scale`` (default 1000, i.e. to
0.001 percent, MB and milli-cores); demands are rounded up and capacities down, so a solution is
always feasible in the real numbers (a capacity filled to within 1/scale may be judged full).
The model has a variable per (job, GPU) pair where the job fits the GPU alone: keep it to
instances of a few thousand pairs to a few hundred thousand (the paper's SP3/SP4 are 384 and
6,144); it is a reference, not a scheduler. Optional: ``pip install 'hypersack[mip]'``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Hashable, Sequence

from hypersack.placement.cluster import Cluster
from hypersack.placement.model import Job
from hypersack.placement.load import Load, demands as job_demands
from hypersack.placement.policies import worst_fit_decreasing
from hypersack.errors import MissingDependencyError
from hypersack.validation import check_integer, check_positive

__all__ = ["MipResult", "solve_mip", "mip"]


@dataclass(frozen=True)
class MipResult:
    """``assignment`` (job id -> devices); ``optimal`` when CP-SAT proved it; ``objective`` and
    ``bound``: placed compute and the solver's upper bound on it (percent); ``wall_s``: the
    solver's own wall time in seconds."""

    assignment: dict[Hashable, tuple]
    optimal: bool
    objective: float
    bound: float
    wall_s: float
    status: str


def _cp_model() -> Any:
    try:
        from ortools.sat.python import cp_model
    except ImportError:
        raise MissingDependencyError("the mip placement policy", "ortools", "mip") from None
    return cp_model


def _check_options(time_limit: Any, workers: Any, scale: Any) -> None:
    check_positive("placement.time_limit", time_limit)
    check_integer("placement.workers", workers, low=1)
    check_integer("placement.scale", scale, low=1)


class _Model:
    """The CP-SAT model of one GAP instance."""

    def __init__(self, cp_model: Any, jobs: Sequence[Job], cluster: Cluster, scale: int):
        self.jobs, self.load = list(jobs), Load(cluster)
        self.model = cp_model.CpModel()
        load, s = self.load, scale
        self.down = lambda v: max(0, math.floor(v * s + 1e-6))
        self.up = lambda v: math.ceil(v * s - 1e-6)
        demands = job_demands(self.jobs, list(load.by_arch))
        self.x: dict[tuple[int, int], Any] = {}
        self.gain: dict[tuple[int, int], int] = {}
        gpu_c: list[list[Any]] = [[] for _ in load.keys]
        gpu_m: list[list[Any]] = [[] for _ in load.keys]
        node_q: list[list[Any]] = [[] for _ in load.free_q]
        for p, (job, demand) in enumerate(zip(self.jobs, demands)):
            q = self.up(job.cpus)
            row = []
            for i in range(len(load.keys)):
                c, m = (self.up(v) for v in demand[load.arch[i]])
                if c > self.down(load.free_c[i]) or m > self.down(load.free_m[i]) \
                        or q > self.down(load.free_q[load.node[i]]):
                    continue
                var = self.model.NewBoolVar(f"x{p}_{i}")
                self.x[(p, i)], self.gain[(p, i)] = var, c
                row.append(var)
                gpu_c[i].append((c, var))
                gpu_m[i].append((m, var))
                node_q[load.node[i]].append((q, var))
            self._one_place(row, job)
        for i in range(len(load.keys)):
            self._capacity(gpu_c[i], load.free_c[i])
            self._capacity(gpu_m[i], load.free_m[i])
        for n, terms in enumerate(node_q):
            self._capacity(terms, load.free_q[n])
        self.model.Maximize(sum(self.gain[k] * v for k, v in self.x.items()))

    def _one_place(self, row: list, job: Job) -> None:
        """Eq. 1: at most one GPU; a data-parallel job gets exactly ``gpus`` of them, or none."""
        if job.gpus == 1:
            if len(row) > 1:
                self.model.Add(sum(row) <= 1)
            return
        if len(row) < job.gpus:
            for var in row:
                self.model.Add(var == 0)
            return
        placed = self.model.NewBoolVar(f"y{job.id}")
        self.model.Add(sum(row) == job.gpus * placed)

    def _capacity(self, terms: list, capacity: float) -> None:
        if terms and sum(w for w, _ in terms) > self.down(capacity):
            self.model.Add(sum(w * v for w, v in terms) <= self.down(capacity))

    def hint(self, assignment: dict) -> None:
        chosen = {(job_id, dev) for job_id, devs in assignment.items() for dev in devs}
        for (p, i), var in self.x.items():
            self.model.AddHint(var, (self.jobs[p].id, self.load.keys[i]) in chosen)

    def assignment(self, solver: Any) -> dict[Hashable, tuple]:
        out: dict[Hashable, list] = {}
        for (p, i), var in self.x.items():
            if solver.BooleanValue(var):
                out.setdefault(self.jobs[p].id, []).append(self.load.keys[i])
        return {jid: tuple(devs) for jid, devs in out.items()}


def solve_mip(jobs: Sequence[Job], cluster: Cluster, time_limit: float = 60.0, workers: int = 8,
              hint: bool = True, scale: int = 1000, seed: int = 0) -> MipResult:
    """Solve the GAP with CP-SAT within ``time_limit`` seconds using ``workers`` threads.

    Deterministic with ``workers=1`` when the solver finishes before the time limit; with several
    workers or a binding time limit the solution may differ between runs (never its feasibility).
    """
    cp_model = _cp_model()
    _check_options(time_limit, workers, scale)
    model = _Model(cp_model, jobs, cluster, scale)
    if hint:
        model.hint(worst_fit_decreasing(jobs, cluster))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit)
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    status = solver.Solve(model.model)
    name = solver.StatusName(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return MipResult({}, False, 0.0, float("nan"), solver.WallTime(), name)
    return MipResult(model.assignment(solver), status == cp_model.OPTIMAL,
                     solver.ObjectiveValue() / scale, solver.BestObjectiveBound() / scale,
                     solver.WallTime(), name)


def mip(jobs: Sequence[Job], cluster: Cluster, time_limit: float = 60.0, workers: int = 8,
        hint: bool = True, scale: int = 1000, seed: int = 0) -> dict[Hashable, tuple]:
    """The ``mip`` policy: ``solve_mip``'s assignment (best found within ``time_limit`` s)."""
    return solve_mip(jobs, cluster, time_limit, workers, hint, scale, seed).assignment
