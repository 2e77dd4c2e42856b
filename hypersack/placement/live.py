"""The one implementation of every built-in greedy policy: a mutable cluster load with a
placement index that survives between calls (HyperSack Sec. IV-B, Algorithms 1 and 2; Hay; Ray).

``LiveCluster`` holds the nodes of a ``Cluster`` and its running jobs as a mutable ``Load``:

* ``occupy``/``release`` cost O(devices of the job x log G) (plus the GPUs of its nodes when a
  release lifts their cores above what the trees hold): each GPU's and node's load is kept as an
  exact sum (``placement.exact``), so a release subtracts the job and recounts nothing; ``occupy``
  with ``strict`` checks Eq. 1-4 with ``check.check_fits``, the one checker. The trees hold each
  node's cores as an upper bound (``_index_q``), lowered to the truth only for a node whose cores
  turned a search away (``settle``): no answer depends on it, and a study that fills one node of
  many devices no longer re-indexes all of them at each launch and end;
* ``assign(jobs, policy, **options)`` places jobs on what is left and leaves the load as it was
  (its tentative takes are journalled and undone). ``placement.assign`` on a ``Cluster`` is
  ``LiveCluster(cluster).assign(...)``; the study's allocator keeps one LiveCluster alive and
  asks it of one job at a time through ``assign_one`` (the same answer as GPU numbers: one
  search of the trees, no journal), then occupies that answer with ``occupy_numbers`` (only the
  job's id is checked: the policy chose distinct live GPUs for that very demand).

Policies (``POLICIES``):

* ``ff``/``ffd``: first-fit (decreasing): each job, in the given order (longest expected runtime
  first), to the first GPU in node/GPU order where it fits;
* ``wf``/``wfd``: worst-fit (decreasing): to the fitting GPU with the most compute left (ties: the
  earlier GPU; the paper's Algorithm 2 as printed keeps the later of equal GPUs, ``>=``);
* ``exclusive``: one job per idle GPU, first-fit, without oversubscription (compute <= C);
* ``hay`` and ``ray``: see ``hay`` and ``ray_default`` (O(G) per job, no index).

For ff/ffd/wf/wfd/exclusive a job costs about O(log G): one ``FitTree`` per architecture over
(compute left, memory left, node cores left), searched branch and bound; ``exclusive`` searches a
second family over idle GPUs (C and D when idle, else -inf), built on first use. A data-parallel
job (``gpus`` = k > 1) takes k GPUs of one node when a node has them (the first such node for
first-fit, the one whose k best GPUs have the most compute left for worst-fit), else the first k
fitting GPUs across nodes in the policy's order, each node's cores shared by its chosen GPUs.
Loads are summed like ``Cluster`` sums them (exactly, rounded once: a function of which jobs run,
not of the order they came and went in), so ``free``/``free_cpus`` equal the snapshot's bit for
bit, and the index after any occupy/release sequence, once ``settle``d, equals one built from
scratch (before, it differs only in cores that are higher, never lower). The policies are
tested against a literal O(jobs x GPUs) reading of Algorithms 1-2 in
tests/placement/reference.py.
"""
from __future__ import annotations

from typing import Any, Hashable, Mapping, Sequence

from hypersack.placement.check import check_fits, check_job_list
from hypersack.placement.exact import rounded, units
from hypersack.placement.cluster import Cluster, PlacementError, Running, as_devices
from hypersack.placement.fit_tree import FitTree, fitting_in_order
from hypersack.placement.hay import hay
from hypersack.placement.load import Load, by_runtime, demands, pick_k_in_order, pick_one_node
from hypersack.placement.model import EPS, GPU, Job, Node
from hypersack.placement.ray_default import ray_default
from hypersack.errors import ConfigError

__all__ = ["LiveCluster", "POLICIES", "INCREMENTAL_POLICIES", "check_options"]

#: The greedy index policies: name -> (worst-fit, decreasing); ``exclusive`` is first-fit over
#: idle GPUs, each compared with its own C and D (no oversubscription).
_GREEDY: Mapping[str, tuple[bool, bool]] = {
    "ff": (False, False), "ffd": (False, True), "wf": (True, False), "wfd": (True, True),
    "exclusive": (False, False)}
#: Every policy ``LiveCluster.assign`` answers, with the options each takes.
POLICIES: Mapping[str, tuple[str, ...]] = {**{name: () for name in _GREEDY},
                                           "hay": ("w_frag", "w_entire"), "ray": ()}
INCREMENTAL_POLICIES = POLICIES            # the name the allocator knew them by
_NEG = float("-inf")
Journal = list   # of (array, index, old value): tentative writes of one ``assign``, for ``_undo``


def check_options(policy: str, options: Mapping[str, Any]) -> dict[str, float]:
    """``options`` of ``policy`` checked (known names, numbers >= 0), as floats."""
    from hypersack.validation import check_number
    known = POLICIES[policy]
    out = {}
    for name, value in options.items():
        if name not in known:
            raise ConfigError(f"placement.{name}", value, f"is not an option of policy {policy!r}"
                              f" (options: {', '.join(known) or 'none'})")
        out[name] = check_number(f"placement.{name}", value, low=0.0)
    return out


class LiveCluster:
    """The nodes of ``cluster`` and its running jobs, as a mutable load (see the module doc)."""

    def __init__(self, cluster: Cluster):
        if not isinstance(cluster, Cluster):
            raise ConfigError("cluster", cluster, "must be a Cluster")
        self.nodes = cluster.nodes
        load = self.load = Load(cluster)
        self._index = {key: i for i, key in enumerate(load.keys)}
        self._node_index = {node.id: n for n, node in enumerate(cluster.nodes)}
        gpus = self._gpus = [gpu for _, gpu in cluster.gpus()]
        self._cap_c = [gpu.capacity for gpu in gpus]
        self._cap_m = [gpu.memory_gb for gpu in gpus]
        self._cpus = [node.cpus for node in cluster.nodes]
        self._used_c = [0.0] * len(gpus)
        self._used_m = [0.0] * len(gpus)
        self._used_q = [0.0] * len(cluster.nodes)
        self._exact_c = [0] * len(gpus)                   # the same loads, exact (see ``exact``)
        self._exact_m = [0] * len(gpus)
        self._exact_q = [0] * len(cluster.nodes)
        self._count = [0] * len(gpus)                     # jobs on each GPU
        self._idle_n = len(gpus)                          # GPUs that hold no job
        #: job id -> (job, GPU numbers, exact (compute, memory) per GPU, exact cores per GPU)
        self._jobs: dict[Hashable, tuple[Job, tuple[int, ...], tuple[tuple[int, int], ...], int]] = {}
        self._idle_c = [gpu.compute for gpu in gpus]      # C and D of idle GPUs, else -inf
        self._idle_m = [gpu.memory_gb for gpu in gpus]
        self._position = [0] * len(gpus)                  # GPU number -> position in its trees
        for members in load.by_arch.values():
            for p, i in enumerate(members):
                self._position[i] = p
        self._trees: dict[str, FitTree] = {}
        self._alone: dict[str, FitTree] | None = None     # for exclusive, built on first use
        self._releases = 0                                # load releases so far
        self._hopeless: dict[tuple, int] = {}             # data-parallel demand -> _releases when it failed
        for run in cluster.running.values():
            self._add(run.job, tuple(self._index[dev] for dev in run.devices), index=False)
        #: each node's cores as the trees hold them: at least ``load.free_q`` (see ``settle``)
        self._index_q = list(load.free_q)
        self._missed: list[int] = []                      # nodes the trees' leaf checks turned away
        self._trees = self._build_trees(load.free_c, load.free_m)     # for ff/ffd/wf/wfd
        self._snapshot: Cluster | None = cluster

    # ---- reading ------------------------------------------------------------------------------

    @property
    def running(self) -> Mapping[Hashable, Running]:
        """The running jobs, in the order they were added (a fresh dict)."""
        keys = self.load.keys
        return {jid: Running(job, tuple(keys[i] for i in gpus)) for jid, (job, gpus, _, _) in self._jobs.items()}

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

    def node(self, node_id: Hashable) -> Node:
        """The node ``node_id`` (ConfigError when there is none), as ``Cluster.node``."""
        n = self._node_index.get(node_id)
        if n is None:
            raise ConfigError("node_id", node_id, "must name a node of the cluster")
        return self.nodes[n]

    def gpu(self, node_id: Hashable, gpu_id: Hashable) -> GPU:
        """The GPU at (node_id, gpu_id), as ``Cluster.gpu``."""
        return self._gpus[self._gpu_number((node_id, gpu_id))]

    def used(self, node_id: Hashable, gpu_id: Hashable) -> tuple[float, float]:
        """(compute, memory_gb) the running jobs use on that GPU, as ``Cluster.used``."""
        i = self._gpu_number((node_id, gpu_id))
        return self._used_c[i], self._used_m[i]

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
        if strict:
            check_fits(self, [(job, devices)])       # Eq. 1-4, the one checker
        self._add(job, gpus)

    def occupy_numbers(self, job: Job, gpus: tuple[int, ...]) -> None:
        """``occupy(job, devices, strict=False)`` on GPU numbers a policy of this LiveCluster
        chose for ``job``'s demand (``assign_one``): distinct, live and ``job.gpus`` of them, so
        only the job's id is checked."""
        if job.id in self._jobs:
            raise PlacementError(f"Job {job.id!r} is already running on {self.running[job.id].devices}")
        self._add(job, gpus)

    def release(self, job_id: Hashable) -> None:
        """Forget the running job ``job_id`` (``Cluster.without``): O(its GPUs x log G), the GPUs
        of its nodes re-indexed only when their cores changed."""
        found = self._jobs.pop(job_id, None)
        if found is None:
            raise ConfigError("job_id", job_id, "must name a running job")
        self._releases += 1
        _, gpus, parts, cores = found
        self._change(gpus, parts, -cores, -1, True)

    def _add(self, job: Job, gpus: tuple[int, ...], index: bool = True) -> None:
        """Count ``job`` on ``gpus`` (GPU numbers); ``index``: re-index what changed."""
        if not job.per_arch:                      # every architecture: the top-level demand
            parts = [(units(job.compute), units(job.memory_gb))] * len(gpus)
        else:
            arch = self.load.arch
            parts = []
            for i in gpus:
                demand = job.demand(arch[i])
                parts.append((units(demand.compute), units(demand.memory_gb)))
        cores = units(job.cpus)
        self._jobs[job.id] = (job, gpus, tuple(parts), cores)
        self._change(gpus, parts, cores, 1, index)

    def _change(self, gpus: tuple[int, ...], parts: Sequence[tuple[int, int]], cores: int,
                sign: int, index: bool) -> None:
        """Add (``sign`` 1) or remove (-1) a job's exact demand ``parts`` on ``gpus`` and
        ``cores`` (signed) per GPU on their nodes; read the sums as floats (``exact.rounded``)
        and re-index ``gpus``, and every GPU of a node whose cores left changed."""
        if len(gpus) == 1:
            self._change_one(gpus[0], parts[0], cores, sign, index)
            return
        load = self.load
        free_c, free_m, free_q, node = load.free_c, load.free_m, load.free_q, load.node
        exact_c, exact_m, exact_q, count = self._exact_c, self._exact_m, self._exact_q, self._count
        used_cs, used_ms, idle_c, idle_m = self._used_c, self._used_m, self._idle_c, self._idle_m
        nodes: list[int] = []
        for i, (c, m) in zip(gpus, parts):
            if sign > 0:
                e_c, e_m = exact_c[i] + c, exact_m[i] + m
            else:
                e_c, e_m = exact_c[i] - c, exact_m[i] - m
            exact_c[i], exact_m[i] = e_c, e_m
            used_c, used_m = rounded(e_c), rounded(e_m)
            used_cs[i], used_ms[i] = used_c, used_m
            free_c[i] = self._cap_c[i] - used_c
            free_m[i] = self._cap_m[i] - used_m
            was = count[i]
            count[i] = jobs = was + sign
            if not was:
                self._idle_n -= 1
            if jobs:
                idle_c[i] = idle_m[i] = _NEG
            else:
                self._idle_n += 1
                idle_c[i], idle_m[i] = self._gpus[i].compute, self._gpus[i].memory_gb
            n = node[i]
            exact_q[n] += cores
            if n not in nodes:
                nodes.append(n)
        touched = list(gpus)
        for n in nodes:
            used_q = rounded(exact_q[n])
            self._used_q[n] = used_q
            left = self._cpus[n] - used_q
            free_q[n] = left
            if index and left > self._index_q[n]:     # above what the trees hold: raise them
                self._index_q[n] = left
                touched.extend(load.node_gpus[n])
        self._snapshot = None
        if index:
            self._refresh(touched if len(touched) == len(gpus) else set(touched), grown=sign < 0)

    def _change_one(self, i: int, part: tuple[int, int], cores: int, sign: int,
                    index: bool) -> None:
        """``_change`` of a job on the one GPU ``i`` (the same steps, without the loops)."""
        load = self.load
        c, m = part
        if sign > 0:
            e_c, e_m = self._exact_c[i] + c, self._exact_m[i] + m
        else:
            e_c, e_m = self._exact_c[i] - c, self._exact_m[i] - m
        self._exact_c[i], self._exact_m[i] = e_c, e_m
        used_c, used_m = rounded(e_c), rounded(e_m)
        self._used_c[i], self._used_m[i] = used_c, used_m
        load.free_c[i] = self._cap_c[i] - used_c
        load.free_m[i] = self._cap_m[i] - used_m
        count = self._count
        was = count[i]
        count[i] = jobs = was + sign
        if not was:
            self._idle_n -= 1
        if jobs:
            self._idle_c[i] = self._idle_m[i] = _NEG
        else:
            self._idle_n += 1
            self._idle_c[i], self._idle_m[i] = self._gpus[i].compute, self._gpus[i].memory_gb
        n = load.node[i]
        e_q = self._exact_q[n] = self._exact_q[n] + cores
        used_q = rounded(e_q)
        self._used_q[n] = used_q
        left = load.free_q[n] = self._cpus[n] - used_q
        self._snapshot = None
        if not index:
            return
        if left > self._index_q[n]:               # above what the trees hold: raise them
            self._index_q[n] = left
            touched = [i, *load.node_gpus[n]]
            self._refresh(touched if len(touched) == 1 else set(touched), grown=sign < 0)
        else:
            self._refresh((i,), grown=sign < 0)

    def _build_trees(self, c: list[float], m: list[float]) -> dict[str, FitTree]:
        load = self.load
        return {arch: FitTree(members, c, m, self._index_q, load.node, check_q=load.free_q,
                              missed=self._missed)
                for arch, members in load.by_arch.items()}

    def settle(self, nodes: Any = None) -> None:
        """Bring the cores the trees hold for ``nodes`` (node numbers; default: every node) down
        to the true ones (``load.free_q``). Occupying a job leaves its node's cores stale-high in
        the trees (an upper bound: no answer changes, a search may only visit more leaves), so a
        launch re-indexes its own GPUs, not all of its node's; a search that a node's true cores
        turned away settles that node after its ``assign``. Settled, the index equals one built
        from scratch."""
        index_q, free_q, node_gpus = self._index_q, self.load.free_q, self.load.node_gpus
        for n in range(len(free_q)) if nodes is None else sorted(set(nodes)):
            if index_q[n] != free_q[n]:
                index_q[n] = free_q[n]
                self._refresh(node_gpus[n])

    def _refresh(self, gpus: Any, grown: bool = False) -> None:
        """Re-index ``gpus`` (GPU numbers) in every tree family after their values changed;
        ``grown``: they only went up (a release: ``FitTree.grow``)."""
        families = [self._trees] if self._alone is None else [self._trees, self._alone]
        if len(self._trees) == 1:                 # one architecture: positions are GPU numbers
            for family in families:
                for tree in family.values():
                    tree.grow(gpus) if grown else tree.refresh(gpus)
            return
        by_arch: dict[str, list[int]] = {}
        for i in gpus:
            by_arch.setdefault(self.load.arch[i], []).append(self._position[i])
        for family in families:
            for arch, positions in by_arch.items():
                tree = family[arch]
                tree.grow(positions) if grown else tree.refresh(positions)

    # ---- placing ------------------------------------------------------------------------------

    def assign(self, jobs: Sequence[Job], policy: str = "wfd", **options: Any) -> dict[Hashable, tuple]:
        """Where ``policy`` (a name of ``POLICIES``, with its ``options``) puts ``jobs`` on what is
        left: ``{job_id: ((node_id, gpu_id), ...)}`` in the order of ``jobs``, unplaced jobs
        absent. The load is left as it was."""
        if policy not in POLICIES:
            raise ConfigError("placement", policy, f"must be one of {', '.join(POLICIES)}")
        return self.assign_checked(self._check_jobs(jobs), policy, check_options(policy, options))

    def assign_one(self, job: Job, policy: str, options: dict) -> tuple[int, ...] | None:
        """``assign_checked([job], policy, options, numbers=True).get(job.id)``: where ``policy``
        puts the one checked ``job`` now, as GPU numbers, or None; the load is left as it was.
        A single-GPU job of a greedy policy (ff, ffd, wf, wfd, exclusive) is one search of the
        trees (one job takes nothing tentatively: no journal), the rest go through
        ``assign_checked``."""
        greedy = _GREEDY.get(policy)
        if greedy is None or job.gpus != 1:
            return self.assign_checked([job], policy, options, numbers=True).get(job.id)
        per_arch = job.per_arch
        own = (job.compute, job.memory_gb)
        demand = ({a: own for a in self.load.by_arch} if not per_arch else demands((job,), list(self.load.by_arch))[0])
        if policy == "exclusive":
            found = self._alone_first(demand, job.cpus) if self._idle_n else None
        else:
            found = self._pick_single(demand, job.cpus, greedy[0])
        if self._missed:
            missed = list(self._missed)
            self._missed.clear()
            self.settle(missed)
        return None if found is None else (found,)

    def keys_of(self, gpus: tuple[int, ...]) -> tuple[tuple, ...]:
        """``(node_id, gpu_id)`` of each of the GPU numbers ``gpus``."""
        keys = self.load.keys
        return tuple([keys[i] for i in gpus])

    def numbers_of(self, devices: Sequence[tuple]) -> tuple[int, ...]:
        """The GPU numbers of ``devices`` (``(node_id, gpu_id)`` pairs of this cluster)."""
        index = self._index
        return tuple([index[dev] for dev in devices])

    def assign_checked(self, jobs: list[Job], policy: str, options: dict,
                       keep: bool = True, numbers: bool = False) -> dict[Hashable, tuple]:
        """``assign`` for jobs and options already checked (``placement.assign`` checks them).
        ``keep=False``: this LiveCluster is thrown away after the call, so its load is not
        restored (no journal is kept) and must not be used again. ``numbers``: the devices as
        GPU numbers (positions in ``load.keys``), for a caller that indexes them anyway."""
        journal: Journal = [] if keep else _NoJournal()
        try:
            placed = self._run(policy, jobs, journal, options)
        finally:
            self._undo(journal)
            if self._missed:
                missed = list(self._missed)
                self._missed.clear()
                if keep:
                    self.settle(missed)
        if numbers:
            return {job.id: tuple(placed[job.id]) for job in jobs if job.id in placed}
        keys = self.load.keys
        return {job.id: tuple(keys[i] for i in placed[job.id]) for job in jobs if job.id in placed}

    def _run(self, policy: str, jobs: list[Job], journal: Journal, options: dict) -> dict:
        if policy == "exclusive":
            return self._exclusive(jobs, journal)
        if policy == "hay":
            return hay(self, jobs, journal, **options)
        if policy == "ray":
            return ray_default(self, jobs, journal)
        worst, decreasing = _GREEDY[policy]
        order = by_runtime(jobs, list(self.load.by_arch)) if decreasing and len(jobs) > 1 else jobs
        return self._greedy(order, worst, journal)

    def _check_jobs(self, jobs: Any) -> list[Job]:
        """``placement.assign``'s checks of ``jobs``, with its messages."""
        return check_job_list(jobs, self._jobs)

    def _greedy(self, jobs: list[Job], worst: bool, journal: Journal) -> dict:
        """Algorithm 1 (first-fit) or 2 (worst-fit) on the live trees; takes go to ``journal``.
        With several jobs, GPUs that can take none of them any more leave the trees (``_bury``)."""
        load, placed = self.load, {}
        last = len(jobs) - 1
        asks = demands(jobs, list(load.by_arch))
        floor = _Floor(jobs, asks) if len(jobs) > 1 else None
        if floor is not None:
            self._bury(floor, range(len(load.keys)), journal)
        for p, (job, demand) in enumerate(zip(jobs, asks)):
            q = job.cpus
            if job.gpus == 1:
                single = self._pick_single(demand, q, worst)
                chosen = None if single is None else (single,)
            else:
                chosen = self._pick_multi(job, demand, worst, journal)
            if chosen is None:
                continue
            placed[job.id] = chosen
            if p < last:                          # the last job's take changes no answer
                self.take(journal, chosen, demand, q, refresh=floor is None)
                if floor is not None:
                    self._refresh(chosen)
                    self._bury(floor, chosen, journal)
        return placed

    def _bury(self, floor: "_Floor", gpus: Any, journal: Journal, refresh: bool = True) -> None:
        """Hide from the trees, for the rest of this call, the GPUs of ``gpus`` that cannot take
        even the smallest demand of the call (``floor``): compute left set to -inf, journalled.
        No answer changes (no job of the call fits them); searches skip them."""
        load = self.load
        free_c, free_m, free_q, arch, node = load.free_c, load.free_m, load.free_q, load.arch, load.node
        buried = []
        for i in gpus:
            if free_c[i] != _NEG and floor.dead(free_c[i], free_m[i], free_q[node[i]], arch[i]):
                self._write(journal, free_c, i, _NEG)
                buried.append(i)
        for n in {node[i] for i in buried if free_q[node[i]] + EPS < floor.q}:
            for i in load.node_gpus[n]:               # the node has too few cores: all its GPUs
                if free_c[i] != _NEG:
                    self._write(journal, free_c, i, _NEG)
                    buried.append(i)
        if buried and refresh:
            self._refresh(buried)

    def take(self, journal: Journal, gpus: Sequence[int], demand: dict, q: float,
             refresh: bool = True) -> None:
        """Tentatively count a job of per-GPU ``demand`` and ``q`` cores per GPU on ``gpus``,
        journalled; ``refresh`` re-indexes ``gpus`` in the trees (policies that scan the arrays
        skip it). The other GPUs of their nodes keep stale-high cores in the trees: within one
        call cores only go down, and the trees check a leaf's cores in the array."""
        load = self.load
        if type(journal) is _NoJournal:           # nothing to undo: write the arrays directly
            free_c, free_m, free_q, idle_c, idle_m = (load.free_c, load.free_m, load.free_q,
                                                      self._idle_c, self._idle_m)
            for i in gpus:
                c, m = demand[load.arch[i]]
                free_c[i] -= c
                free_m[i] -= m
                free_q[load.node[i]] -= q
                idle_c[i] = idle_m[i] = _NEG
            if refresh:
                self._refresh(gpus)
            return
        for i in gpus:
            c, m = demand[load.arch[i]]
            n = load.node[i]
            self._write(journal, load.free_c, i, load.free_c[i] - c)
            self._write(journal, load.free_m, i, load.free_m[i] - m)
            self._write(journal, load.free_q, n, load.free_q[n] - q)
            if self._idle_c[i] != _NEG:
                self._write(journal, self._idle_c, i, _NEG)
                self._write(journal, self._idle_m, i, _NEG)
        if refresh:
            self._refresh(gpus)

    def idle(self, i: int) -> bool:
        """Whether GPU ``i`` holds no job (recorded, or taken earlier in this ``assign``)."""
        return self._idle_c[i] != _NEG

    def capacity(self, i: int) -> float:
        """r x C of GPU ``i``."""
        return self._cap_c[i]

    def whole(self, i: int) -> float:
        """C of GPU ``i``: what a job asking for the whole GPU asks for."""
        return self._gpus[i].compute

    def _pick_multi(self, job: Job, demand: dict, worst: bool, journal: Journal) -> tuple | None:
        """k GPUs for a data-parallel job: one node if one has them, else across nodes. A job
        that found no k GPUs finds none until some load is released (more load never helps), so
        that answer is kept until then: a queued job asked again on every turn costs O(1)."""
        q, k, load = job.cpus, job.gpus, self.load
        sig = (worst, k, q, tuple(demand.items()))
        if not journal and self._hopeless.get(sig) == self._releases:
            return None
        free_c = load.free_c
        key = (lambda i: (-free_c[i], i)) if worst else (lambda i: i)
        parts = [(self._trees[a], c, m) for a, (c, m) in demand.items()]
        chosen = (pick_one_node(load, demand, q, k, key, worst)
                  or pick_k_in_order(fitting_in_order(parts, q, worst), load.node, load.free_q, q, k))
        if chosen is None and not journal:       # on the recorded load, not a tentative one
            if len(self._hopeless) >= 256:
                self._hopeless.clear()
            self._hopeless[sig] = self._releases
        return None if chosen is None else tuple(chosen)

    def _pick_single(self, demand: dict, q: float, worst: bool) -> int | None:
        """The best fitting GPU over the job's architectures: the most compute left, ties the
        lower number (worst-fit), or the lowest number (first-fit)."""
        best, free_c = None, self.load.free_c
        for arch, (c, m) in demand.items():
            tree = self._trees[arch]
            i = tree.worst(c, m, q) if worst else tree.first(c, m, q)
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

    def _exclusive(self, jobs: list[Job], journal: Journal) -> dict:
        """The baseline: each job, in the given order, on the first idle GPU(s) where it fits
        alone (compute <= C, memory <= D) with the node's cores; takes go to ``journal``."""
        if self._alone is None:
            self._alone = self._build_trees(self._idle_c, self._idle_m)
        load, placed = self.load, {}
        idle = self._idle_n
        archs = list(load.by_arch)
        last = len(jobs) - 1
        for p, job in enumerate(jobs):
            if idle == 0:
                break
            demand = demands((job,), archs)[0]
            chosen: tuple[int, ...] | None
            if job.gpus == 1:
                i = self._alone_first(demand, job.cpus)
                chosen = None if i is None else (i,)
            else:
                chosen = self._exclusive_multi(job)
            if chosen is None:
                continue
            placed[job.id] = chosen
            idle -= len(chosen)
            if p == last:                 # the last job's take changes no answer
                break
            for i in chosen:
                self._write(journal, self._idle_c, i, _NEG)
                self._write(journal, self._idle_m, i, _NEG)
                self._write(journal, load.free_q, load.node[i], load.free_q[load.node[i]] - job.cpus)
            self._refresh(chosen)             # stale-high cores elsewhere on the node: fine
        return placed

    def _alone_first(self, demand: dict, q: float) -> int | None:
        """The first idle GPU where a single-GPU job of per-GPU ``demand`` and ``q`` cores fits
        alone, over the job's architectures (the lowest GPU number), or None."""
        if self._alone is None:
            self._alone = self._build_trees(self._idle_c, self._idle_m)
        chosen = None
        for arch, tree in self._alone.items():
            c, m = demand[arch]
            i = tree.first(c, m, q)
            if i is not None and (chosen is None or i < chosen):
                chosen = i
        return chosen

    def _exclusive_multi(self, job: Job) -> tuple[int, ...] | None:
        """k idle GPUs where the job fits alone: the first node with k of them and the cores,
        else the first k across nodes (O(G))."""
        load, k, q = self.load, job.gpus, job.cpus
        fitting = [i for i, gpu in enumerate(self._gpus) if self._idle_c[i] != _NEG
                   and job.demand(gpu.arch).compute <= gpu.compute + EPS
                   and job.demand(gpu.arch).memory_gb <= gpu.memory_gb + EPS]
        by_node: dict[int, list[int]] = {}
        for i in fitting:
            by_node.setdefault(load.node[i], []).append(i)
        for n, gpus in by_node.items():
            if len(gpus) >= k and load.free_q[n] + EPS >= k * q:
                return tuple(gpus[:k])
        chosen = pick_k_in_order(fitting, load.node, load.free_q, q, k)
        return None if chosen is None else tuple(chosen)

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
        """Restore what ``journal`` overwrote (newest first) and re-index those GPUs. A node's
        cores are not in the trees (they hold ``_index_q``, which a call never writes): only the
        GPUs whose own entries were written are re-indexed."""
        if not journal:
            return
        touched: set[int] = set()
        free_q = self.load.free_q
        for array, index, old in reversed(journal):
            array[index] = old
            if array is not free_q:
                touched.add(index)
        self._refresh(touched)


class _NoJournal(list):
    """A journal that keeps nothing (for a LiveCluster used once and dropped)."""

    def append(self, entry: Any) -> None:
        pass


class _Floor:
    """The smallest demand of one call's jobs, per architecture: a GPU with less compute or
    memory left than every job asks on its architecture, or whose node has fewer cores left than
    every job asks, can take none of them."""

    def __init__(self, jobs: Sequence[Job], asks: Sequence[dict]):
        archs = asks[0].keys() if asks else ()
        self.c = {a: min(d[a][0] for d in asks) for a in archs}
        self.m = {a: min(d[a][1] for d in asks) for a in archs}
        self.q = min(job.cpus for job in jobs)

    def dead(self, c: float, m: float, q: float, arch: str) -> bool:
        return c + EPS < self.c[arch] or m + EPS < self.m[arch] or q + EPS < self.q
