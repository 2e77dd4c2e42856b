"""The built-in policies as functions ``policy(jobs, cluster, **options) -> {job_id: devices}``:
each is ``LiveCluster(cluster).assign(jobs, name, **options)``, the one implementation, without
re-checking the jobs (``placement.assign`` checks them before calling a policy; see
``live`` for what each policy does, ``hay`` and ``ray_default`` for those two).

* ``ff``, ``ffd``, ``wf``, ``wfd``: HyperSack's Algorithms 1 and 2 (decreasing: longest expected
  runtime first);
* ``exclusive``: the baseline, one job per idle GPU without oversubscription;
* ``hay``: Hay's node score and GPU state machine (options ``w_frag``, ``w_entire``);
* ``ray``: Ray's default scheduler as a baseline (pack a node up to 50%, then spread; the node
  judged by its total free GPU, then the first GPU by index that fits).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from hypersack.placement.cluster import Cluster
from hypersack.placement.live import POLICIES, LiveCluster, check_options
from hypersack.placement.model import Job

__all__ = ["BUILTIN", "Assignment", "first_fit", "first_fit_decreasing", "worst_fit",
           "worst_fit_decreasing", "exclusive", "hay", "ray"]

Assignment = dict  # job id -> tuple of (node_id, gpu_id)


def _by_name(name: str) -> Callable[..., Assignment]:
    def policy(jobs: Sequence[Job], cluster: Cluster, **options: Any) -> Assignment:
        return LiveCluster(cluster).assign_checked(list(jobs), name, check_options(name, options), keep=False)
    policy.__name__ = policy.__qualname__ = name.replace("-", "_")
    policy.__doc__ = f"The ``{name}`` policy: ``LiveCluster(cluster).assign(jobs, {name!r}, **options)``."
    return policy


BUILTIN: dict[str, Callable[..., Assignment]] = {name: _by_name(name) for name in POLICIES}
first_fit, first_fit_decreasing = BUILTIN["ff"], BUILTIN["ffd"]
worst_fit, worst_fit_decreasing = BUILTIN["wf"], BUILTIN["wfd"]
exclusive, hay, ray = BUILTIN["exclusive"], BUILTIN["hay"], BUILTIN["ray"]
