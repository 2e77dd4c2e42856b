"""The cluster and its current load: which jobs run where, and what is left (Sec. III-B).

A ``Cluster`` is immutable: ``with_running``/``without``/``with_gpu``/``without_gpu`` return a new
one, so a policy can never change the state it was given and the controller keeps one value per
decision. ``from_dict``/``to_dict`` are the cluster YAML form (see ``from_dict``).

Cost: ``with_running``/``without`` copy the load tables shallowly (C-speed dict copies, no
re-adding of the running jobs) and change only the job's GPUs and nodes. A GPU's load is the
exact sum of its jobs' demands, rounded once (``placement.exact``): it depends on which jobs run,
not on the order they came and went in, so a derived cluster equals one built from scratch bit for
bit.
For a long-lived, mutable load with an O(log G) placement index see ``placement.live``.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Hashable, Iterator, Mapping, NamedTuple, Sequence

from hypersack.placement.check import check_fits, check_placement
from hypersack.placement.exact import rounded, units
from hypersack.placement.model import GPU, Device, Job, Node, as_devices
from hypersack.errors import ConfigError, PlacementError

__all__ = ["Cluster", "Running", "Device", "PlacementError", "as_devices"]


class Running(NamedTuple):
    """A job placed on a cluster and the devices it holds (``Cluster.running``)."""
    job: Job
    devices: tuple[Device, ...]


class Cluster:
    """Nodes (in first-fit order) plus the running jobs. ``free`` and ``free_cpus`` are what is
    left for new jobs; they may be negative when the recorded load exceeds a capacity (a load
    recorded with ``strict=False``, or a GPU replaced by a smaller one)."""

    __slots__ = ("nodes", "_running", "_gpus", "_used", "_cpus_used", "_on_gpu", "_exact",
                 "_exact_cpus")

    def __init__(self, nodes: Sequence[Node], running: Mapping[Hashable, Running] | None = None):
        nodes = tuple(nodes)
        gpus: dict[Device, tuple[Node, GPU]] = {}
        seen: set = set()
        for i, node in enumerate(nodes):
            if not isinstance(node, Node):
                raise ConfigError(f"nodes[{i}]", node, "must be a Node")
            if node.id in seen:
                raise ConfigError(f"nodes[{i}].id", node.id, "must be unique in the cluster")
            seen.add(node.id)
            for gpu in node.gpus:
                gpus[(node.id, gpu.id)] = (node, gpu)
        self.nodes: tuple[Node, ...] = nodes
        self._gpus = gpus
        self._running: dict[Hashable, Running] = {}
        self._used: dict[Device, tuple[float, float]] = dict.fromkeys(gpus, (0.0, 0.0))
        self._cpus_used: dict[Hashable, float] = {node.id: 0.0 for node in nodes}
        self._exact: dict[Device, tuple[int, int]] = dict.fromkeys(gpus, (0, 0))   # of _used
        self._exact_cpus: dict[Hashable, int] = dict.fromkeys(self._cpus_used, 0)
        self._on_gpu: dict[Device, tuple] = dict.fromkeys(gpus, ())
        for run in (running or {}).values():
            self._add(run.job, run.devices, strict=False)

    # ---- reading --------------------------------------------------------------------------

    def gpus(self) -> Iterator[tuple[Node, GPU]]:
        """Every (node, gpu) in first-fit order: node order, then GPU order within the node."""
        for node in self.nodes:
            for gpu in node.gpus:
                yield node, gpu

    def node(self, node_id: Hashable) -> Node:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise ConfigError("node_id", node_id, f"must name a node of the cluster "
                          f"({', '.join(repr(n.id) for n in self.nodes) or 'it has none'})")

    def gpu(self, node_id: Hashable, gpu_id: Hashable) -> GPU:
        found = self._gpus.get((node_id, gpu_id))
        return found[1] if found is not None else self.node(node_id).gpu(gpu_id)

    @property
    def running(self) -> Mapping[Hashable, Running]:
        return MappingProxyType(self._running)

    @property
    def architectures(self) -> tuple[str, ...]:
        """The distinct architectures, in first-fit order of their first GPU."""
        return tuple(dict.fromkeys(gpu.arch for _, gpu in self.gpus()))

    def free(self, node_id: Hashable, gpu_id: Hashable) -> tuple[float, float]:
        """(compute, memory_gb) left on that GPU: r x C and D minus what its jobs use."""
        gpu = self.gpu(node_id, gpu_id)
        used_c, used_m = self._used[(node_id, gpu_id)]
        return gpu.capacity - used_c, gpu.memory_gb - used_m

    def used(self, node_id: Hashable, gpu_id: Hashable) -> tuple[float, float]:
        """(compute, memory_gb) the running jobs use on that GPU."""
        self.gpu(node_id, gpu_id)
        used_c, used_m = self._used[(node_id, gpu_id)]
        return used_c, used_m

    def free_cpus(self, node_id: Hashable) -> float:
        """Cores left on the node: Q_n minus q_p for every GPU a running job holds there."""
        return self.node(node_id).cpus - self._cpus_used[node_id]

    def jobs_on(self, node_id: Hashable, gpu_id: Hashable) -> list[Hashable]:
        """Ids of the running jobs holding that GPU, in the order they were added."""
        return list(self._on_gpu.get((node_id, gpu_id), ()))

    def __repr__(self) -> str:
        return (f"Cluster({len(self.nodes)} nodes, {len(self._gpus)} GPUs, "
                f"{len(self._running)} running)")

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Cluster) and self.nodes == other.nodes
                and self._running == other._running)

    __hash__ = None  # type: ignore[assignment]

    # ---- changing (each returns a new cluster) ---------------------------------------------

    def _copy(self, nodes: Sequence[Node] | None = None) -> "Cluster":
        return Cluster(self.nodes if nodes is None else nodes, self._running)

    def _derive(self) -> "Cluster":
        """A copy sharing the nodes and GPU table, with its own (shallow) load tables."""
        out = object.__new__(Cluster)
        out.nodes, out._gpus = self.nodes, self._gpus
        out._running = dict(self._running)
        out._used = dict(self._used)
        out._cpus_used = dict(self._cpus_used)
        out._exact = dict(self._exact)
        out._exact_cpus = dict(self._exact_cpus)
        out._on_gpu = dict(self._on_gpu)
        return out

    def _count(self, job: Job, devices: tuple[Device, ...], sign: int) -> None:
        """Add (``sign`` 1) or remove (-1) ``job``'s load on ``devices`` and their nodes."""
        exact, exact_cpus, gpus = self._exact, self._exact_cpus, self._gpus
        cores = sign * units(job.cpus)
        for dev in devices:
            node, gpu = gpus[dev]
            demand = job.demand(gpu.arch)
            c, m = exact[dev]
            c += sign * units(demand.compute)
            m += sign * units(demand.memory_gb)
            exact[dev] = (c, m)
            self._used[dev] = (rounded(c), rounded(m))
            exact_cpus[node.id] += cores
            self._cpus_used[node.id] = rounded(exact_cpus[node.id])

    def _add(self, job: Job, devices: Any, strict: bool) -> None:
        devices = as_devices(devices)
        if job.id in self._running:
            raise PlacementError(f"Job {job.id!r} is already running on {self._running[job.id].devices}")
        if len(set(devices)) != len(devices) or len(devices) != job.gpus:
            raise PlacementError(f"Job {job.id!r} needs {job.gpus} distinct GPU(s), got {devices}")
        for dev in devices:
            if dev not in self._gpus:
                raise PlacementError(f"Job {job.id!r}: the cluster has no GPU {dev!r}")
        if strict:
            check_fits(self, [(job, devices)])
        on_gpu = self._on_gpu
        for dev in devices:
            on_gpu[dev] += (job.id,)
        self._count(job, devices, 1)
        self._running[job.id] = Running(job, devices)

    def with_running(self, job: Job, devices: Any, strict: bool = True) -> "Cluster":
        """A new cluster where ``job`` occupies ``devices`` (``(node_id, gpu_id)`` or a sequence
        of ``job.gpus`` of them). ``strict`` raises PlacementError when it does not fit (Eq. 1-4);
        pass ``strict=False`` to record a load that is a fact (e.g. a job started before)."""
        out = self._derive()
        out._add(job, devices, strict)
        return out

    def with_jobs(self, jobs: Sequence[Job], assignment: Mapping[Hashable, Any],
                  strict: bool = True) -> "Cluster":
        """A new cluster with every assigned job of ``jobs`` running where ``assignment`` says."""
        by_id = {job.id: job for job in jobs}
        out = self._derive()
        if strict:
            check_placement(jobs, self, assignment)
        for jid, devices in assignment.items():
            if jid not in by_id:
                raise PlacementError(f"The assignment names job {jid!r}, which is not among the jobs")
            out._add(by_id[jid], devices, strict=False)
        return out

    def without(self, job_id: Hashable) -> "Cluster":
        """A new cluster without the running job ``job_id`` (it finished, failed or was paused)."""
        if job_id not in self._running:
            raise ConfigError("job_id", job_id, "must name a running job")
        out = self._derive()
        job, devices = out._running.pop(job_id)
        for dev in devices:
            out._on_gpu[dev] = tuple(j for j in out._on_gpu[dev] if j != job_id)
        out._count(job, devices, -1)
        return out

    def with_gpu(self, node_id: Hashable, gpu: GPU) -> "Cluster":
        """A new cluster where node ``node_id`` also has ``gpu`` (appended: last in first-fit)."""
        node = self.node(node_id)
        nodes = [Node(n.id, n.cpus, n.gpus + (gpu,)) if n is node else n for n in self.nodes]
        return self._copy(nodes)

    def without_gpu(self, node_id: Hashable, gpu_id: Hashable) -> "Cluster":
        """A new cluster without that GPU (it failed or left). Jobs holding it are dropped from the
        load: find them first with ``jobs_on`` to reschedule them."""
        node = self.node(node_id)
        node.gpu(gpu_id)
        nodes = [Node(n.id, n.cpus, tuple(g for g in n.gpus if g.id != gpu_id)) if n is node else n
                 for n in self.nodes]
        lost = (node_id, gpu_id)
        running = {jid: run for jid, run in self._running.items() if lost not in run.devices}
        return Cluster(nodes, running)

    def with_node(self, node: Node) -> "Cluster":
        """A new cluster with ``node`` appended."""
        return self._copy(self.nodes + (node,))

    def without_node(self, node_id: Hashable) -> "Cluster":
        """A new cluster without the node; jobs holding any of its GPUs are dropped from the load."""
        self.node(node_id)
        running = {jid: run for jid, run in self._running.items()
                   if all(dev[0] != node_id for dev in run.devices)}
        return Cluster([n for n in self.nodes if n.id != node_id], running)

    # ---- the YAML form ----------------------------------------------------------------------

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Cluster":
        """Build from the cluster YAML form::

            oversubscription: {A100: 3, H100: 2.5}     # optional per-architecture r defaults
            nodes:
              - id: a0
                cpus: 88
                gpus: {count: 4, arch: A100, memory_gb: 80}      # a template: ids 0..count-1
              - id: h0
                cpus: 96
                gpus: [{id: 0, arch: H100, memory_gb: 80, compute: 100, oversubscription: 2}]

        A ``gpus`` list may mix explicit GPUs (``id`` defaults to the position) and templates with
        a ``count``. A GPU without ``oversubscription`` takes its architecture's default, else 1.
        Bad input raises ConfigError naming the dotted field, e.g. ``nodes[1].gpus[0].memory_gb``.
        """
        from hypersack.placement.yaml_form import cluster_nodes_from_dict
        return cls(cluster_nodes_from_dict(d))

    def to_dict(self) -> dict[str, Any]:
        """The YAML form with every GPU explicit (the load is not part of it)."""
        return {"nodes": [node.to_dict() for node in self.nodes]}

