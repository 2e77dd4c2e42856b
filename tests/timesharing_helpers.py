"""Shared by the time-sharing tests: a controller with time-sharing on a small inventory."""
from __future__ import annotations

from hypersack.core.algorithms import Algorithm, Decision, Suggestion
from hypersack.core.allocator import Demand
from hypersack.core.controller import Budget, Controller, ControllerOptions
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.core.trial import ResultReported
from hypersack.placement import GPU, Cluster, Node

OBJ = Objective("loss", "min")
SPACE = SearchSpace({"x": {"type": "float", "low": 0.0, "high": 1.0}})


class Scripted(Algorithm):
    def __init__(self, decisions=None):
        super().__init__(SPACE, OBJ)
        self.decisions = decisions or {}

    def suggest(self, trial_id):
        return Suggestion({"x": float(trial_id)})

    def on_result(self, trial_id, step, metrics):
        return self.decisions.get((trial_id, step), Decision.CONTINUE)


def make(n=1, trials=3, policy="hermes", demand=Demand(), decisions=None, **options):
    cluster = Cluster([Node("n0", 8, [GPU(f"g{i}", "A100", 16.0) for i in range(n)])])
    return Controller(Scripted(decisions), OBJ, Budget(trials=trials), options=ControllerOptions(
        inventory=cluster, demand=demand.job,
        time_sharing={"policy": policy, "quantum_s": 10, **options}))


def report(c, trial_id, step, loss, now, checkpoint=True):
    return c.handle(ResultReported(trial_id, step, {"loss": loss},
                                   f"ck-{trial_id}-{step}" if checkpoint else None), now)


def ts(c, trial_id):
    return c.trials[trial_id].info.get("time_sharing")
