"""A mutable cluster load for a long-lived owner (the study's allocator), with a placement index
that survives between calls.

``Cluster`` is immutable, and the greedy policies rebuild their load table and index from it on
every call: O(G) per call, so a study that places one trial at a time on G GPUs pays O(G) per
trial. ``LiveCluster`` keeps both up to date instead:

* ``occupy``/``release`` cost O(devices of the job x jobs on those devices and nodes);
* ``assign(jobs, policy)`` for ``ff``/``ffd``/``wf``/``wfd``/``exclusive`` costs about O(log G)
  per job, using one ``FitTree`` per architecture over (compute left, memory left, node cores
  left), searched branch and bound: worst-fit takes the fitting GPU with the most compute left
  (ties: first in node/GPU order), first-fit the first fitting GPU; ``exclusive`` searches a
  second family of trees over idle GPUs (C and D when idle, else -inf), built on first use. A
  data-parallel job (``gpus`` > 1) takes the policies' own O(G) path.

Contract: ``assign`` returns exactly what ``placement.assign(jobs, self.snapshot(), policy)``
returns (same devices, same order) and leaves the load unchanged: its takes within one call are
journalled and undone. Loads are summed like ``Cluster`` sums them (each GPU's and node's jobs in
the order they were added, from 0), so ``free``/``free_cpus`` equal the snapshot's bit for bit,
and so do the policies' tie-breaks. Property-tested in tests/core/placement/test_placement_live.py.
"""
from __future__ import annotations

from typing import Any, Hashable, Mapping, Sequence

from hypersack.core.placement.cluster import Cluster, PlacementError, Running, as_devices
from hypersack.core.placement.exclusive import _exclusive_choice
from hypersack.core.placement.fit_tree import FitTree, fitting_in_order
from hypersack.core.placement.model import EPS, Job
from hypersack.core.placement.policies import _by_runtime, _demands, _Load, _pick_one_node
from hypersack.errors import ConfigError

__all__ = ["LiveCluster", "INCREMENTAL_POLICIES"]

#: Policies ``LiveCluster.assign`` answers: name -> (worst-fit, decreasing); ``exclusive`` is
#: first-fit over idle GPUs, each compared with its own C and D (no oversubscription).
INCREMENTAL_POLICIES: Mapping[str, tuple[bool, bool]] = {
    "ff": (False, False), "ffd": (False, True), "wf": (True, False), "wfd": (True, True),
    "exclusive": (False, False)}
_NEG = float("-inf")
Journal = list   # of (array, index, old value): tentative writes of one ``assign``, for ``_undo``


class _Keys:
    """The GPU order ``_pick_multi`` sorts by: compute left then number (worst), number (first)."""

    def __init__(self, load: _Load, worst: bool):
        self.load, self.worst = load, worst

    def gpu_key(self, i: int) -> tuple:
        return (-self.load.free_c[i], i) if self.worst else (i,)


class LiveCluster:
    """The nodes of ``cluster`` and its running jobs, as a mutable load (see the module doc)."""

    def __init__(self, cluster: Cluster):
        if not isinstance(cluster, Cluster):
            raise ConfigError("cluster", cluster, "must be a Cluster")
        self.nodes = cluster.nodes
        load = self.load = _Load(cluster)
        self._index = {key: i for i, key in enumerate(load.keys)}
        self._node_index = {node.id: n for n, node in enumerate(cluster.nodes)}
        gpus = self._gpus = [gpu for _, gpu in cluster.gpus()]
        self._cap_c = [gpu.capacity for gpu in gpus]
        self._cap_m = [gpu.memory_gb for gpu in gpus]
        self._cpus = [node.cpus for node in cluster.nodes]
        self._used_c = [0.0] * len(gpus)
        self._used_m = [0.0] * len(gpus)
        self._used_q = [0.0] * len(cluster.nodes)
        self._jobs: dict[Hashable, tuple[Job, tuple[int, ...]]] = {}
        self._on_gpu: list[list[Hashable]] = [[] for _ in gpus]
        self._on_node: list[list[Hashable]] = [[] for _ in cluster.nodes]
        self._idle_c = [gpu.compute for gpu in gpus]      # C and D of idle GPUs, else -inf
        self._idle_m = [gpu.memory_gb for gpu in gpus]
        self._position = [0] * len(gpus)                  # GPU number -> position in its trees
        for members in load.by_arch.values():
            for p, i in enumerate(members):
                self._position[i] = p
        self._trees = self._build_trees(load.free_c, load.free_m)     # for ff/ffd/wf/wfd
        self._alone: dict[str, FitTree] | None = None     # for exclusive, built on first use
        self._releases = 0                                # load releases so far
        self._hopeless: dict[tuple, int] = {}             # data-parallel demand -> _releases when it failed
        for run in cluster.running.values():
            self._record(run.job, tuple(self._index[dev] for dev in run.devices))
        self._recount(range(len(gpus)), range(len(cluster.nodes)))
        self._snapshot = cluster

    # ---- reading ------------------------------------------------------------------------------

    @property
    def running(self) -> Mapping[Hashable, Running]:
        """The running jobs, in the order they were added (a fresh dict)."""
        keys = self.load.keys
        return {jid: Running(job, tuple(keys[i] for i in gpus)) for jid, (job, gpus) in self._jobs.items()}

    def free(self, node_id: Hashable, gpu_id: Hashable) -> tuple[float, float]:
        """(compute, memory_gb) left on that GPU, as ``Cluster.free``."""
        i = self._gpu_number((node_id, gpu_id))
        return self.load.free_c[i], self.load.free_m[i]

    def free_cpus(self, node_id: Hashable) -> float:
        """Cores left on the node, as ``Cluster.free_cpus``."""
        n = self._node_index.get(node_id)
        if n is None:
            raise ConfigError("node_id", node_id, "must name a node of the cluster")
        return self.load.free_q[n]

    def snapshot(self) -> Cluster:
        """The equivalent immutable Cluster (built on first use after a change; O(jobs))."""
        if self._snapshot is None:
            self._snapshot = Cluster(self.nodes, self.running)
        return self._snapshot

    def _gpu_number(self, dev: Any) -> int:
        i = self._index.get(dev)
        if i is None:
            raise ConfigError("device", dev, "must name a GPU of the cluster")
        return i

    # ---- changing -----------------------------------------------------------------------------

    def occupy(self, job: Job, devices: Any, strict: bool = True) -> None:
        """Count ``job`` as running on ``devices`` (``Cluster.with_running``'s rules and errors;
        ``strict`` checks Eq. 1-4)."""
        devices = as_devices(devices)
        if job.id in self._jobs:
            raise PlacementError(f"Job {job.id!r} is already running on {self.running[job.id].devices}")
        if len(set(devices)) != len(devices) or len(devices) != job.gpus:
            raise PlacementError(f"Job {job.id!r} needs {job.gpus} distinct GPU(s), got {devices}")
        for dev in devices:
            if dev not in self._index:
                raise PlacementError(f"Job {job.id!r}: the cluster has no GPU {dev!r}")
        gpus = tuple(self._index[dev] for dev in devices)
        if strict and not self._fits(job, gpus):
            from hypersack.core.placement.check import check_fits
            check_fits(self.snapshot(), [(job, devices)])    # raises the canonical message
            raise PlacementError(f"Job {job.id!r} does not fit on {devices}")
        self._record(job, gpus)
        self._add_load(job, gpus)

    def release(self, job_id: Hashable) -> None:
        """Forget the running job ``job_id`` (``Cluster.without``)."""
        found = self._jobs.pop(job_id, None)
        if found is None:
            raise ConfigError("job_id", job_id, "must name a running job")
        self._releases += 1
        gpus = found[1]
        nodes = dict.fromkeys(self.load.node[i] for i in gpus)
        for i in gpus:
            self._on_gpu[i] = [j for j in self._on_gpu[i] if j != job_id]
            if not self._on_gpu[i]:
                self._idle_c[i], self._idle_m[i] = self._gpus[i].compute, self._gpus[i].memory_gb
        for n in nodes:
            self._on_node[n] = [j for j in self._on_node[n] if j != job_id]
        self._recount(gpus, nodes)

    def _record(self, job: Job, gpus: tuple[int, ...]) -> None:
        self._jobs[job.id] = (job, gpus)
        for i in gpus:
            self._on_gpu[i].append(job.id)
            self._on_node[self.load.node[i]].append(job.id)
            self._idle_c[i] = self._idle_m[i] = _NEG

    def _fits(self, job: Job, gpus: tuple[int, ...]) -> bool:
        """Eq. 2-4 for ``job`` on ``gpus``, in ``check_fits``'s arithmetic."""
        load, cores = self.load, {}
        for i in gpus:
            demand = job.demand(load.arch[i])
            if (self._used_c[i] + demand.compute > self._cap_c[i] + EPS
                    or self._used_m[i] + demand.memory_gb > self._cap_m[i] + EPS):
                return False
            cores[load.node[i]] = cores.get(load.node[i], 0.0) + job.cpus
        return all(added <= load.free_q[n] + EPS for n, added in cores.items())

    def _add_load(self, job: Job, gpus: tuple[int, ...]) -> None:
        """Add ``job`` (just recorded, so last on its GPUs and nodes) to the load: the same sums
        as ``_recount`` would make, at O(devices) cost."""
        load, touched = self.load, set(gpus)
        for i in gpus:
            demand, n = job.demand(load.arch[i]), load.node[i]
            self._used_c[i] += demand.compute
            self._used_m[i] += demand.memory_gb
            load.free_c[i] = self._cap_c[i] - self._used_c[i]
            load.free_m[i] = self._cap_m[i] - self._used_m[i]
            self._used_q[n] += job.cpus
            load.free_q[n] = self._cpus[n] - self._used_q[n]
            touched.update(load.node_gpus[n])
        self._refresh(touched)
        self._snapshot = None

    def _used(self, i: int) -> tuple[float, float]:
        """(compute, memory) of GPU ``i``'s jobs, summed in the order they were added."""
        jobs, arch = self._jobs, self.load.arch[i]
        used_c = used_m = 0.0
        for jid in self._on_gpu[i]:
            demand = jobs[jid][0].demand(arch)
            used_c += demand.compute
            used_m += demand.memory_gb
        return used_c, used_m

    def _recount(self, gpus: Any, nodes: Any) -> None:
        """Recompute what is left on ``gpus`` and ``nodes`` from their jobs; refresh the trees."""
        load, jobs = self.load, self._jobs
        for i in gpus:
            used_c, used_m = self._used(i)
            self._used_c[i], self._used_m[i] = used_c, used_m
            load.free_c[i] = self._cap_c[i] - used_c
            load.free_m[i] = self._cap_m[i] - used_m
        touched = set(gpus)
        for n in nodes:
            cores = 0.0
            for jid in self._on_node[n]:
                cores += jobs[jid][0].cpus
            self._used_q[n] = cores
            load.free_q[n] = self._cpus[n] - cores
            touched.update(load.node_gpus[n])
        self._refresh(touched)
        self._snapshot = None

    def _build_trees(self, c: list[float], m: list[float]) -> dict[str, FitTree]:
        load = self.load
        return {arch: FitTree(members, c, m, load.free_q, load.node)
                for arch, members in load.by_arch.items()}

    def _refresh(self, gpus: Any) -> None:
        """Re-index ``gpus`` (GPU numbers) in every tree family after their values changed."""
        families = [self._trees] if self._alone is None else [self._trees, self._alone]
        if len(self._trees) == 1:                 # one architecture: positions are GPU numbers
            for family in families:
                for tree in family.values():
                    tree.refresh(gpus)
            return
        by_arch: dict[str, list[int]] = {}
        for i in gpus:
            by_arch.setdefault(self.load.arch[i], []).append(self._position[i])
        for family in families:
            for arch, positions in by_arch.items():
                family[arch].refresh(positions)

    # ---- placing ------------------------------------------------------------------------------

    def assign(self, jobs: Sequence[Job], policy: str = "wfd") -> dict[Hashable, tuple]:
        """``placement.assign(jobs, self.snapshot(), policy)`` for a policy of
        ``INCREMENTAL_POLICIES``: ``{job_id: ((node_id, gpu_id), ...)}`` in the order of ``jobs``,
        unplaced jobs absent. The load is left as it was."""
        if policy not in INCREMENTAL_POLICIES:
            raise ConfigError("placement", policy, f"must be one of {', '.join(INCREMENTAL_POLICIES)}")
        jobs = self._check_jobs(jobs)
        journal: Journal = []
        try:
            if policy == "exclusive":
                placed = self._exclusive(jobs, journal)
            else:
                worst, decreasing = INCREMENTAL_POLICIES[policy]
                order = _by_runtime(jobs, list(self.load.by_arch)) if decreasing and len(jobs) > 1 else jobs
                placed = self._greedy(order, worst, journal)
        finally:
            self._undo(journal)
        keys = self.load.keys
        return {job.id: tuple(keys[i] for i in placed[job.id]) for job in jobs if job.id in placed}

    def _check_jobs(self, jobs: Any) -> list[Job]:
        """``placement.assign``'s checks of ``jobs``, with its messages."""
        from hypersack.core.placement.api import check_job_list
        return check_job_list(jobs, self._jobs)

    def _greedy(self, jobs: list[Job], worst: bool, journal: Journal) -> dict:
        """The policies' greedy loop (``policies._Greedy``) on the live trees; takes go to
        ``journal``."""
        load, placed = self.load, {}
        demands = _demands(jobs, list(load.by_arch))
        last = len(jobs) - 1
        for p, (job, demand) in enumerate(zip(jobs, demands)):
            q = job.cpus
            if job.gpus == 1:
                chosen = self._pick_single(demand, q, worst)
                chosen = None if chosen is None else (chosen,)
            else:
                chosen = self._pick_multi(job, demand, worst, journal)
            if chosen is None:
                continue
            placed[job.id] = chosen
            if p < last:                          # the last job's take changes no answer
                for i in chosen:
                    c, m = demand[load.arch[i]]
                    self._write(journal, load.free_c, i, load.free_c[i] - c)
                    self._write(journal, load.free_m, i, load.free_m[i] - m)
                    self._write(journal, load.free_q, load.node[i], load.free_q[load.node[i]] - q)
                self._refresh(self._touched(chosen))
        return placed

    def _pick_multi(self, job: Job, demand: dict, worst: bool, journal: Journal) -> tuple | None:
        """``policies._pick_multi``. A data-parallel job that found no k GPUs finds none until
        some load is released (more load never helps), so that answer is kept until then: a
        queued job asked again on every turn costs O(1), not O(nodes)."""
        q, k, load = job.cpus, job.gpus, self.load
        sig = (worst, k, q, tuple(demand.items()))
        if not journal and self._hopeless.get(sig) == self._releases:
            return None
        chosen = (_pick_one_node(load, demand, q, k, _Keys(load, worst).gpu_key, worst)
                  or self._pick_across(demand, q, k, worst))
        if chosen is None and not journal:       # on the recorded load, not a tentative one
            if len(self._hopeless) >= 256:
                self._hopeless.clear()
            self._hopeless[sig] = self._releases
        return None if chosen is None else tuple(chosen)

    def _pick_single(self, demand: dict, q: float, worst: bool, slack: bool = False) -> int | None:
        """The best fitting GPU over the job's architectures (``policies._pick_single``);
        ``slack``: first-fit compares compute as ``load.fits`` does (``free + EPS >= c``)."""
        best, free_c = None, self.load.free_c
        for arch, (c, m) in demand.items():
            tree = self._trees[arch]
            if worst:
                i = tree.worst(c, m, q)
            else:
                i = tree.first_with_slack(c, m, q) if slack else tree.first(c, m, q)
            if i is None:
                continue
            if best is None:
                best = i
            elif worst:
                if free_c[i] > free_c[best] or (free_c[i] == free_c[best] and i < best):
                    best = i
            elif i < best:
                best = i
        return best

    def _pick_across(self, demand: dict, q: float, k: int, worst: bool) -> list[int] | None:
        """``policies._pick_across_nodes`` on the trees: the first k fitting GPUs in key order,
        each node's cores shared by its chosen GPUs."""
        parts = [(self._trees[arch], c, m) for arch, (c, m) in demand.items()]
        node, free_q = self.load.node, self.load.free_q
        cores: dict[int, float] = {}
        chosen = []
        for i in fitting_in_order(parts, q, worst):
            left = cores.get(node[i], free_q[node[i]])
            if left + EPS >= q:
                chosen.append(i)
                cores[node[i]] = left - q
                if len(chosen) == k:
                    return chosen
        return None

    def _exclusive(self, jobs: list[Job], journal: Journal) -> dict:
        """``exclusive.exclusive`` on the live state: the first idle GPU(s) where the job fits
        alone (compute <= C, memory <= D) with the node's cores; takes go to ``journal``."""
        if self._alone is None:
            self._alone = self._build_trees(self._idle_c, self._idle_m)
        load, placed = self.load, {}
        for job in jobs:
            if job.gpus == 1:
                chosen = None
                for arch, tree in self._alone.items():
                    demand = job.demand(arch)
                    i = tree.first_with_slack(demand.compute, demand.memory_gb, job.cpus)
                    if i is not None and (chosen is None or i < chosen[0]):
                        chosen = (i,)
            else:
                chosen = self._exclusive_multi(job)
            if chosen is None:
                continue
            placed[job.id] = chosen
            for i in chosen:
                self._write(journal, self._idle_c, i, _NEG)
                self._write(journal, self._idle_m, i, _NEG)
                self._write(journal, load.free_q, load.node[i], load.free_q[load.node[i]] - job.cpus)
            self._refresh(self._touched(chosen))
        return placed

    def _exclusive_multi(self, job: Job) -> tuple[int, ...] | None:
        """k idle GPUs for a data-parallel job, as ``exclusive`` chooses them (O(G))."""
        load, fitting = self.load, []
        for i, gpu in enumerate(self._gpus):
            demand = job.demand(gpu.arch)
            if (self._idle_c[i] != _NEG and demand.compute <= gpu.compute + EPS
                    and demand.memory_gb <= gpu.memory_gb + EPS):
                fitting.append((load.node[i], None, gpu, i))
        chosen = _exclusive_choice(fitting, list(load.free_q), job)
        return None if chosen is None else tuple(slot[3] for slot in chosen)

    def _touched(self, gpus: Sequence[int]) -> set[int]:
        """``gpus`` and every GPU on their nodes (whose cores changed)."""
        touched = set(gpus)
        for i in gpus:
            touched.update(self.load.node_gpus[self.load.node[i]])
        return touched

    @staticmethod
    def _write(journal: Journal, array: list, index: int, value: float) -> None:
        journal.append((array, index, array[index]))
        array[index] = value

    def _undo(self, journal: Journal) -> None:
        """Restore what ``journal`` overwrote (newest first) and re-index those GPUs."""
        if not journal:
            return
        touched, free_q, node_gpus = set(), self.load.free_q, self.load.node_gpus
        for array, index, old in reversed(journal):
            array[index] = old
            touched.update(node_gpus[index] if array is free_q else (index,))
        self._refresh(touched)
