"""The ``auto`` policy: ``fill`` where its search is affordable, ``lagrange`` where it is not.

Rule, per call: ``fill`` when (jobs to place) x (GPUs of the cluster) <= ``pairs`` (default
``AUTO_PAIRS`` = 100,000, e.g. 384 jobs x 16 GPUs or 1,000 jobs x 100 GPUs), else ``lagrange``.
``fill`` is the better policy on tight instances (several resources binding; at least 0.99 of
CP-SAT's 20 s solution on all 140 stored instances, see benchmarks/RESULTS.md) and, compiled
(``pip install hypersack[fast]``), costs about 3x WFD at 384 jobs x 16 GPUs and 1.5-2.5x at 1,000 x
100; its arrays grow with jobs x GPUs (a GPU's job list is as long as the call's jobs), so above
``pairs`` ``lagrange`` (prices, then one greedy pass) runs: about WFD's time at 10,000 jobs x
1,024 GPUs, about 10% more compute than ``wfd-ls`` on tight instances of that size
(benchmarks/RESULTS.md, "lagrange"). A study or the simulator places a few jobs per call, so
there ``auto`` is ``fill``.
"""
from __future__ import annotations

from typing import Any, Hashable, Sequence

from hypersack.placement.cluster import Cluster
from hypersack.placement.fill import fill
from hypersack.placement.lagrange import lagrange
from hypersack.placement.model import Job
from hypersack.validation import check_integer

__all__ = ["auto", "AUTO_PAIRS", "auto_choice"]

AUTO_PAIRS = 100_000


def auto_choice(jobs: Sequence[Job], cluster: Cluster, pairs: Any = AUTO_PAIRS) -> str:
    """The policy ``auto`` runs for this call: "fill" or "lagrange" (module doc)."""
    check_integer("placement.pairs", pairs, low=0)
    gpus = sum(len(node.gpus) for node in cluster.nodes)
    return "fill" if len(jobs) * gpus <= pairs else "lagrange"


def auto(jobs: Sequence[Job], cluster: Cluster, pairs: int = AUTO_PAIRS) -> dict[Hashable, tuple]:
    """The ``auto`` policy (module doc); ``pairs``: the largest jobs x GPUs given to ``fill``."""
    if auto_choice(jobs, cluster, pairs) == "fill":
        return fill(jobs, cluster)
    return lagrange(jobs, cluster)
