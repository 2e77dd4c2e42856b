"""Run a scenario: the real controller and study loop against the simulated executor and clock.

``simulate(scenario, policy=...)`` builds exactly what ``hypersack run`` builds (the algorithm by
name, the Controller from the study's spec, max_retries included, and the one assembly,
``runtime.loop.assemble``), except that the executor is a :class:`SimExecutor`, the clock is its
:class:`SimClock`, the store is in memory and the placement policy may be the one under test.
Nothing in the loop or the controller knows.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from hypersack.core.algorithms import make_algorithm
from hypersack.core.controller import Controller
from hypersack.core.trial import TrialFailed, TrialState
from hypersack.runtime.loop.assemble import Services, assemble
from hypersack.sim._placement import policy_label
from hypersack.sim.executor import SimExecutor
from hypersack.sim.packs import SimPackPolicy
from hypersack.sim.scenario import Scenario
from hypersack.runtime.storage.memory import MemoryStore, SimStudyRow

__all__ = ["SimResult", "simulate"]


@dataclass
class SimResult:
    """Figures of one simulated study. Times are simulated seconds unless named ``wall``."""
    scenario: str
    policy: str
    algorithm: str
    makespan_s: float
    occupancy: float              # mean allocated compute / C over devices and time, in [0, 1]
    utilization: float            # mean delivered compute / C, in [0, 1]
    busy: float                   # mean fraction of time a device holds >= 1 trial
    time_to_best_s: float | None  # when the best trial (controller.best()) finished
    best_value: float | None
    best_trial: int | None
    trials: int
    states: dict[str, int]
    reports: int
    events: int
    device_failures: int
    wall_s: float
    unvalidated: list[str]
    packs: int = 0                # fused packs started (0: trials ran separately)
    largest_pack: int = 0         # most members a pack held at once
    executor: SimExecutor | None = field(repr=False, default=None)
    controller: Controller | None = field(repr=False, default=None)
    store: MemoryStore | None = field(repr=False, default=None)   # its trials, results, stays
    space: dict[str, Any] = field(repr=False, default_factory=dict)   # the study's, as in its spec

    @property
    def sim_per_wall(self) -> float:
        return self.makespan_s / self.wall_s if self.wall_s > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in (
            "scenario", "policy", "algorithm", "makespan_s", "occupancy", "utilization", "busy",
            "time_to_best_s", "best_value", "best_trial", "trials", "states", "reports", "events",
            "device_failures", "wall_s", "unvalidated", "packs", "largest_pack")} | {
                "sim_per_wall": self.sim_per_wall}


def simulate(scenario: Scenario, policy: Any = None, *, keep_log: bool = True,
             keep_results: bool = False) -> SimResult:
    """Run ``scenario`` once with placement ``policy`` (a name or ``{policy: hay, w_frag: ..}``;
    default: the scenario's). ``keep_results``: the store keeps every reported result (for a
    report's learning curves)."""
    policy = policy or scenario.policy
    spec = scenario.study
    scenario.perf.forget_ooms()
    executor = SimExecutor(scenario.cluster, scenario.perf, scenario.curves,
                           steps_for=spec.steps_for, changes=scenario.changes, keep_log=keep_log,
                           trial_timeout_s=spec.executor.trial_timeout_s)
    algorithm = make_algorithm(dict(spec.algorithm), spec.space, spec.objective, seed=spec.seed)
    store = MemoryStore(keep_results=keep_results)
    row = SimStudyRow(1, scenario.name)
    packs = (SimPackPolicy(scenario.perf.fusion, scenario.perf, executor.gpu)
             if scenario.perf.fusion is not None else None)
    services = Services(scenario.perf.demand)
    assembly = assemble(spec, algorithm, executor, store, row, services=services, packs=packs,
                        placement=policy, clock=executor.clock)
    controller = assembly.controller
    services.observers.append(_oom_history(controller, scenario.perf, executor))
    started = time.perf_counter()
    assembly.run()
    wall = time.perf_counter() - started
    return _result(scenario, policy, executor, controller, store, wall)


def _oom_history(controller: Controller, perf: Any, executor: SimExecutor) -> Any:
    """The simulated job history, as the local machine's (``runtime/devices/machine.py``): a trial that
    ran out of memory gets its model's memory floor raised to each architecture's device memory
    (``PerfModel.note_oom``), so the controller's retry is placed alone."""
    memory = {gpu.arch: gpu.memory_gb for _, gpu in executor.inventory().gpus()}

    def observe(event: Any) -> None:
        if isinstance(event, TrialFailed) and event.oom:
            record = controller.trials.get(event.trial_id)
            if record is not None:
                perf.note_oom(record.config, memory)
    return observe


def _result(scenario: Scenario, policy: Any, executor: SimExecutor, controller: Controller,
            store: MemoryStore, wall: float) -> SimResult:
    makespan = _makespan(executor)
    stats = executor.timeline.summary(makespan)
    best = controller.best()
    states = {s.value: 0 for s in TrialState}
    for record in controller.trials.values():
        states[record.state.value] += 1
    fused = scenario.perf.fusion is not None
    unvalidated = [f"perf.{p}" for p in scenario.perf.params.unvalidated(fused)]
    if not scenario.profiles_validated:
        unvalidated.insert(0, "workload.profiles")
    return SimResult(
        scenario=scenario.name, policy=policy_label(policy), algorithm=str(scenario.study.algorithm.get("type")),
        makespan_s=makespan, occupancy=stats["occupancy"], utilization=stats["utilization"],
        busy=stats["busy"], time_to_best_s=best.finished_at if best else None,
        best_value=best.value if best else None, best_trial=best.trial_id if best else None,
        trials=len(controller.trials), states=states, reports=store.result_count,
        events=len(executor.log) if executor.log is not None else -1,
        device_failures=sum(1 for c in scenario.changes if c.gpu is None and c.at <= makespan),
        wall_s=wall, unvalidated=unvalidated,
        packs=executor.packs.started if executor.packs is not None else 0,
        largest_pack=executor.packs.largest if executor.packs is not None else 0,
        executor=executor, controller=controller, store=store,
        space=scenario.study.space.to_dict())


def _makespan(executor: SimExecutor) -> float:
    """When the last trial left its device (the clock may stand later, at a device change)."""
    ends = [iv.end for iv in executor.timeline.intervals if iv.end is not None]
    return max(ends) if ends else 0.0
