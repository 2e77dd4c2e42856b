"""A mutable cluster load for a long-lived owner (the study's allocator), with a placement index
that survives between calls.

``Cluster`` is immutable, and the greedy policies rebuild their load table and index from it on
every call: O(G) per call, so a study that places one trial at a time on G GPUs pays O(G) per
trial. ``LiveCluster`` keeps both up to date instead:

* ``occupy``/``release`` cost O(devices of the job x jobs on those devices and nodes);
* ``assign(jobs, policy)`` for ``ff``/``ffd``/``wf``/``wfd`` costs about O(log G) per job, using
  one tree per architecture over (compute left, memory left, node cores left), searched
  branch-and-bound: worst-fit takes the fitting GPU with the most compute left (ties: first in
  node/GPU order), first-fit the first fitting GPU. A data-parallel job (``gpus`` > 1) takes the
  policies' own O(G) path.

Contract: ``assign`` returns exactly what ``placement.assign(jobs, self.snapshot(), policy)``
returns (same devices, same order) and leaves the load unchanged. Loads are summed like
``Cluster`` sums them (each GPU's and node's jobs in the order they were added, from 0), so
``free``/``free_cpus`` equal the snapshot's bit for bit, and so do the policies' tie-breaks.
"""
from __future__ import annotations

from typing import Any, Hashable, Mapping, Sequence

from hypersack.core.placement.cluster import Cluster, PlacementError, Running, as_devices
from hypersack.core.placement.model import EPS, Job
from hypersack.core.placement.policies import _by_runtime, _demands, _Load, _pick_multi
from hypersack.errors import ConfigError

__all__ = ["LiveCluster", "INCREMENTAL_POLICIES"]

#: Policies ``LiveCluster.assign`` answers: name -> (worst-fit, decreasing).
INCREMENTAL_POLICIES: Mapping[str, tuple[bool, bool]] = {
    "ff": (False, False), "ffd": (False, True), "wf": (True, False), "wfd": (True, True)}
_NEG = float("-inf")


class _FitTree:
    """Over the GPUs of one architecture, in first-fit order (``members``: GPU numbers): per
    subtree the max compute left, max memory left and max cores left on the GPU's node.
    ``refresh`` re-reads positions from the load; ``worst``/``first`` answer one job."""

    def __init__(self, members: list[int], load: _Load):
        size = 1
        while size < max(1, len(members)):
            size *= 2
        self.members, self.load, self.size = members, load, size
        self.c, self.m, self.q = [_NEG] * (2 * size), [_NEG] * (2 * size), [_NEG] * (2 * size)
        self.lo = list(range(-size, size))           # first leaf position under each subtree
        for k in range(size - 1, 0, -1):
            self.lo[k] = self.lo[2 * k]
        for p, i in enumerate(members):
            k = p + size
            self.c[k], self.m[k], self.q[k] = load.free_c[i], load.free_m[i], load.free_q[load.node[i]]
        for k in range(size - 1, 0, -1):
            self._pull(k)

    def _pull(self, k: int) -> None:
        c, m, q = self.c, self.m, self.q
        a, b = 2 * k, 2 * k + 1
        c[k] = c[a] if c[a] >= c[b] else c[b]
        m[k] = m[a] if m[a] >= m[b] else m[b]
        q[k] = q[a] if q[a] >= q[b] else q[b]

    def refresh(self, positions: Sequence[int]) -> None:
        """Re-read the load of the GPUs at ``positions`` and fix the maxima above them."""
        load, size = self.load, self.size
        parents = set()
        for p in positions:
            i, k = self.members[p], p + size
            self.c[k], self.m[k], self.q[k] = load.free_c[i], load.free_m[i], load.free_q[load.node[i]]
            parents.add(k >> 1)
        while parents and 0 not in parents:
            for k in parents:
                self._pull(k)
            parents = {k >> 1 for k in parents if k > 1}

    def worst(self, c: float, m: float, q: float) -> int | None:
        """The fitting GPU with the most compute left (ties: the first), or None."""
        tc, tm, tq, lo, size = self.c, self.m, self.q, self.lo, self.size
        best_v, best_p = _NEG, None
        stack = [1]
        while stack:
            k = stack.pop()
            v = tc[k]
            if v + EPS < c or tm[k] + EPS < m or tq[k] + EPS < q:
                continue
            if best_p is not None and (v < best_v or (v == best_v and lo[k] > best_p)):
                continue
            if k >= size:
                best_v, best_p = v, k - size
                continue
            a, b = 2 * k, 2 * k + 1
            if tc[b] > tc[a]:
                stack += (a, b)                   # the richer child is searched first
            else:
                stack += (b, a)
        return None if best_p is None else self.members[best_p]

    def first(self, c: float, m: float, q: float) -> int | None:
        """The first fitting GPU in node/GPU order, or None."""
        tc, tm, tq, size = self.c, self.m, self.q, self.size
        x = c - EPS
        stack = [1]
        while stack:
            k = stack.pop()
            if tc[k] < x or tm[k] + EPS < m or tq[k] + EPS < q:
                continue
            if k >= size:
                return self.members[k - size]
            stack += (2 * k + 1, 2 * k)
        return None


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
        gpus = [gpu for _, gpu in cluster.gpus()]
        self._cap_c = [gpu.capacity for gpu in gpus]
        self._cap_m = [gpu.memory_gb for gpu in gpus]
        self._cpus = [node.cpus for node in cluster.nodes]
        self._used_c = [0.0] * len(gpus)
        self._used_m = [0.0] * len(gpus)
        self._jobs: dict[Hashable, tuple[Job, tuple[int, ...]]] = {}
        self._on_gpu: list[list[Hashable]] = [[] for _ in gpus]
        self._on_node: list[list[Hashable]] = [[] for _ in cluster.nodes]
        self._trees = {arch: _FitTree(members, load) for arch, members in load.by_arch.items()}
        self._where = {}                                  # GPU number -> (tree, position)
        for arch, members in load.by_arch.items():
            for p, i in enumerate(members):
                self._where[i] = (self._trees[arch], p)
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
        self._recount(gpus, dict.fromkeys(self.load.node[i] for i in gpus))

    def release(self, job_id: Hashable) -> None:
        """Forget the running job ``job_id`` (``Cluster.without``)."""
        found = self._jobs.pop(job_id, None)
        if found is None:
            raise ConfigError("job_id", job_id, "must name a running job")
        gpus = found[1]
        nodes = dict.fromkeys(self.load.node[i] for i in gpus)
        for i in gpus:
            self._on_gpu[i] = [j for j in self._on_gpu[i] if j != job_id]
        for n in nodes:
            self._on_node[n] = [j for j in self._on_node[n] if j != job_id]
        self._recount(gpus, nodes)

    def _record(self, job: Job, gpus: tuple[int, ...]) -> None:
        self._jobs[job.id] = (job, gpus)
        for i in gpus:
            self._on_gpu[i].append(job.id)
            self._on_node[self.load.node[i]].append(job.id)

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
            used_c, used_m = self._used_c[i], self._used_m[i] = self._used(i)
            load.free_c[i] = self._cap_c[i] - used_c
            load.free_m[i] = self._cap_m[i] - used_m
        touched = set(gpus)
        for n in nodes:
            cores = 0.0
            for jid in self._on_node[n]:
                cores += jobs[jid][0].cpus
            load.free_q[n] = self._cpus[n] - cores
            touched.update(load.node_gpus[n])
        self._refresh(touched)
        self._snapshot = None

    def _refresh(self, gpus: Any) -> None:
        by_tree: dict[int, tuple[_FitTree, list[int]]] = {}
        for i in gpus:
            tree, p = self._where[i]
            by_tree.setdefault(id(tree), (tree, []))[1].append(p)
        for tree, positions in by_tree.values():
            tree.refresh(positions)

    # ---- placing ------------------------------------------------------------------------------

    def assign(self, jobs: Sequence[Job], policy: str = "wfd") -> dict[Hashable, tuple]:
        """``placement.assign(jobs, self.snapshot(), policy)`` for a policy of
        ``INCREMENTAL_POLICIES``: ``{job_id: ((node_id, gpu_id), ...)}`` in the order of ``jobs``,
        unplaced jobs absent. The load is left as it was."""
        if policy not in INCREMENTAL_POLICIES:
            raise ConfigError("placement", policy, f"must be one of {', '.join(INCREMENTAL_POLICIES)}")
        jobs = self._check_jobs(jobs)
        worst, decreasing = INCREMENTAL_POLICIES[policy]
        archs = list(self.load.by_arch)
        order = _by_runtime(jobs, archs) if decreasing else jobs
        saved: dict[int, tuple[float, float]] = {}
        saved_q: dict[int, float] = {}
        try:
            placed = self._greedy(order, _demands(order, archs), worst, saved, saved_q)
        finally:
            self._undo(saved, saved_q)
        keys = self.load.keys
        return {job.id: tuple(keys[i] for i in placed[job.id]) for job in jobs if job.id in placed}

    def _check_jobs(self, jobs: Any) -> list[Job]:
        """``placement.assign``'s checks of ``jobs``, with its messages."""
        if isinstance(jobs, (str, bytes, Mapping)) or not hasattr(jobs, "__iter__"):
            raise ConfigError("jobs", jobs, "must be a sequence of Job")
        jobs = list(jobs)
        seen: set = set()
        for i, job in enumerate(jobs):
            if not isinstance(job, Job):
                raise ConfigError(f"jobs[{i}]", job, "must be a Job")
            if job.id in seen:
                raise ConfigError(f"jobs[{i}].id", job.id, "must be unique among the jobs")
            if job.id in self._jobs:
                raise ConfigError(f"jobs[{i}].id", job.id, "is already running in the cluster")
            seen.add(job.id)
        return jobs

    def _greedy(self, jobs: list[Job], demands: list[dict], worst: bool,
                saved: dict[int, tuple[float, float]], saved_q: dict[int, float]) -> dict:
        """The policies' greedy loop (``policies._Greedy``) on the live index. Takes are
        tentative: the values they overwrite go to ``saved``/``saved_q`` for ``_undo``."""
        load, trees, placed = self.load, self._trees, {}
        last = len(jobs) - 1
        for p, (job, demand) in enumerate(zip(jobs, demands)):
            q = job.cpus
            if job.gpus == 1:
                chosen = self._pick_single(trees, demand, q, worst)
                chosen = None if chosen is None else (chosen,)
            else:
                chosen = _pick_multi(load, demand, q, job.gpus, _Keys(load, worst), worst)
                chosen = None if chosen is None else tuple(chosen)
            if chosen is None:
                continue
            placed[job.id] = chosen
            if p < last:                          # the last job's take changes no answer
                self._take(chosen, demand, q, saved, saved_q)
        return placed

    @staticmethod
    def _pick_single(trees: dict, demand: dict, q: float, worst: bool) -> int | None:
        """The best fitting GPU over the job's architectures (``policies._pick_single``)."""
        best = None
        for arch, (c, m) in demand.items():
            tree = trees[arch]
            i = tree.worst(c, m, q) if worst else tree.first(c, m, q)
            if i is None or best is None:
                best = i if best is None else best
                continue
            if worst:
                fc = tree.load.free_c
                if fc[i] > fc[best] or (fc[i] == fc[best] and i < best):
                    best = i
            elif i < best:
                best = i
        return best

    def _take(self, gpus: tuple[int, ...], demand: dict, q: float,
              saved: dict[int, tuple[float, float]], saved_q: dict[int, float]) -> None:
        load = self.load
        touched = set(gpus)
        for i in gpus:
            n = load.node[i]
            saved.setdefault(i, (load.free_c[i], load.free_m[i]))
            saved_q.setdefault(n, load.free_q[n])
            load.take(i, *demand[load.arch[i]], q)
            touched.update(load.node_gpus[n])
        self._refresh(touched)

    def _undo(self, saved: dict[int, tuple[float, float]], saved_q: dict[int, float]) -> None:
        load = self.load
        touched = set(saved)
        for i, (free_c, free_m) in saved.items():
            load.free_c[i], load.free_m[i] = free_c, free_m
        for n, free_q in saved_q.items():
            load.free_q[n] = free_q
            touched.update(load.node_gpus[n])
        if touched:
            self._refresh(touched)
