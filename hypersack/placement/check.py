"""The one place the GAP constraints (HyperSack Eq. 1-4) are checked, and the occupancy metric.

Eq. 1: a job is on at most one place; here: exactly ``job.gpus`` distinct existing GPUs, or absent.
Eq. 2: per GPU, the compute of its jobs (running + new) <= r x C.
Eq. 3: per GPU, their memory <= D.
Eq. 4: per node, the cores of its jobs (``cpus`` per GPU held) <= Q_n.
Only GPUs and nodes that receive a new job are checked: a load recorded as a fact may already
exceed a capacity elsewhere, and that is not the new placement's fault.
"""
from __future__ import annotations

from collections import defaultdict
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Hashable, Iterable, Mapping, Protocol, Sequence

from hypersack.placement.model import EPS, GPU, Job, Node, as_devices
from hypersack.errors import ConfigError, PlacementError

if TYPE_CHECKING:
    from hypersack.placement.cluster import Cluster

__all__ = ["check_placement", "check_fits", "check_job_list", "occupancy", "placed_compute", "PlacementError"]


def _pairs(jobs: Sequence[Job], cluster: Cluster,
           assignment: Mapping[Hashable, Any]) -> list[tuple[Job, tuple]]:
    by_id: dict[Hashable, Job] = {}
    for job in jobs:
        if job.id in by_id:
            raise PlacementError(f"Job id {job.id!r} appears twice among the jobs")
        by_id[job.id] = job
    pairs = []
    for jid, devices in assignment.items():
        found = by_id.get(jid)
        if found is None:
            raise PlacementError(f"The assignment names job {jid!r}, which is not among the jobs")
        job = found
        if jid in cluster.running:
            raise PlacementError(f"Eq. 1: job {jid!r} is already running on {cluster.running[jid].devices}")
        pairs.append((job, as_devices(devices)))
    return pairs


class ClusterView(Protocol):
    """What the checker reads of a cluster: ``Cluster`` and the live index both provide it."""

    def gpu(self, node_id: Hashable, gpu_id: Hashable) -> GPU: ...

    def used(self, node_id: Hashable, gpu_id: Hashable) -> tuple[float, float]: ...

    def free_cpus(self, node_id: Hashable) -> float: ...

    def node(self, node_id: Hashable) -> Node: ...


def check_fits(cluster: ClusterView, pairs: Iterable[tuple[Job, tuple]]) -> None:
    """Raise PlacementError unless every (job, devices) fits on top of the cluster's load."""
    compute: dict[tuple, float] = defaultdict(float)
    memory: dict[tuple, float] = defaultdict(float)
    cores: dict[Hashable, float] = defaultdict(float)
    for job, devices in pairs:
        if len(devices) != job.gpus or len(set(devices)) != len(devices):
            raise PlacementError(f"Eq. 1: job {job.id!r} needs {job.gpus} distinct GPU(s), "
                                 f"got {list(devices)}")
        for node_id, gpu_id in devices:
            try:
                gpu = cluster.gpu(node_id, gpu_id)
            except ConfigError:
                raise PlacementError(f"Job {job.id!r}: the cluster has no GPU {(node_id, gpu_id)!r}") from None
            demand = job.demand(gpu.arch)
            compute[(node_id, gpu_id)] += demand.compute
            memory[(node_id, gpu_id)] += demand.memory_gb
            cores[node_id] += job.cpus
    for (node_id, gpu_id), added in compute.items():
        gpu = cluster.gpu(node_id, gpu_id)
        used_c, used_m = cluster.used(node_id, gpu_id)
        if used_c + added > gpu.capacity + EPS:
            raise PlacementError(
                f"Eq. 2: GPU {(node_id, gpu_id)!r} would carry compute {used_c + added:g} "
                f"(running {used_c:g} + new {added:g}) > r x C = {gpu.oversubscription:g} x "
                f"{gpu.compute:g} = {gpu.capacity:g}")
        new_m = memory[(node_id, gpu_id)]
        if used_m + new_m > gpu.memory_gb + EPS:
            raise PlacementError(
                f"Eq. 3: GPU {(node_id, gpu_id)!r} would hold {used_m + new_m:g} GB "
                f"(running {used_m:g} + new {new_m:g}) > D = {gpu.memory_gb:g} GB")
    for node_id, added in cores.items():
        left = cluster.free_cpus(node_id)
        if added > left + EPS:
            total = cluster.node(node_id).cpus
            raise PlacementError(
                f"Eq. 4: node {node_id!r} would need {total - left + added:g} CPU cores "
                f"(running {total - left:g} + new {added:g}) > Q = {total:g}")


def check_placement(jobs: Sequence[Job], cluster: Cluster, assignment: Mapping[Hashable, Any]) -> None:
    """Raise PlacementError (a HyperSackError) describing the first violated constraint.

    ``assignment`` maps a job id to ``(node_id, gpu_id)`` (``place``'s form) or to a tuple of
    such pairs (``assign``'s form). Jobs absent from it are unplaced, which is always allowed.
    """
    check_fits(cluster, _pairs(jobs, cluster, assignment))


def placed_compute(jobs: Sequence[Job], cluster: Cluster, assignment: Mapping[Hashable, Any]) -> float:
    """Eq. 5's objective: the compute (percent, summed over the GPUs used, each on its own
    architecture's demand) that ``assignment`` adds to the cluster."""
    by_id = {job.id: job for job in jobs}
    total = 0.0
    for jid, devices in assignment.items():
        for node_id, gpu_id in as_devices(devices):
            total += by_id[jid].demand(cluster.gpu(node_id, gpu_id).arch).compute
    return total


def occupancy(cluster: Cluster) -> float:
    """The paper's "occupancy" (Table III): compute of the running jobs over the total capacity
    sum(r x C) of the cluster's GPUs, in [0, 1] (above 1 only for a load recorded non-strictly).
    0 for a cluster without GPUs."""
    capacity = sum(gpu.capacity for _, gpu in cluster.gpus())
    if capacity <= 0:
        return 0.0
    used = sum(cluster.used(node.id, gpu.id)[0] for node, gpu in cluster.gpus())
    return used / capacity


def check_job_list(jobs: Any, running: Any) -> list[Job]:
    """``jobs`` as a list, each a Job with an id unique among them and not in ``running``.

    Whole-list checks (the types present, the set of ids); a list that fails one is walked job
    by job only to name the first offender in the error."""
    if isinstance(jobs, (str, bytes, Mapping)) or not hasattr(jobs, "__iter__"):
        raise ConfigError("jobs", jobs, "must be a sequence of Job")
    jobs = list(jobs)
    if not all(issubclass(kind, Job) for kind in set(map(type, jobs))):
        i, job = next((i, job) for i, job in enumerate(jobs) if not isinstance(job, Job))
        raise ConfigError(f"jobs[{i}]", job, "must be a Job")
    ids = list(map(attrgetter("id"), jobs))
    if len(set(ids)) != len(ids) or (running and not running.keys().isdisjoint(ids)):
        _name_bad_id(ids, running)
    return jobs


def _name_bad_id(ids: list, running: Any) -> None:
    """Raise ConfigError for the first id in ``ids`` repeated or already in ``running``."""
    seen: set = set()
    for i, jid in enumerate(ids):
        if jid in seen:
            raise ConfigError(f"jobs[{i}].id", jid, "must be unique among the jobs")
        if jid in running:
            raise ConfigError(f"jobs[{i}].id", jid, "is already running in the cluster")
        seen.add(jid)
