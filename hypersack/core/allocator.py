"""The study's view of its devices: which trial runs where, and where pending trials go next.

Pure: the controller owns one Allocator. It keeps the inventory (from the executor, then changed by
DeviceAdded / DeviceLost events) with the load of every running trial, and asks a placement policy
(``hypersack.placement``) where waiting trials fit. A trial's demand comes from ``demand``:
a function of the trial's record (profiles, user-declared resources) returning a placement Job.

``policy`` is a name or the study YAML's mapping ``{policy: hay, w_frag: 1, w_entire: 2}``
(``placement.parse_placement``); ``self.policy`` is the name, ``self.options`` the rest.

Speed: for the policies of ``live.POLICIES`` (ff, ffd, wf, wfd, exclusive, hay, ray) the load is a
``LiveCluster``, the policies' one implementation: occupying and releasing a trial cost O(its
devices) and placing one about O(log G) (O(G) for hay and ray). Checks are made at the boundary,
once: the policy's options when the allocator is built, each demand when its Job is built (a
``Demand`` builds one Job per device count and renames it per trial); the jobs a demand function
returns are trusted on the hot path (a Job checked itself when it was made; ids are trial ids,
unique), and a built-in policy's answer is occupied without re-checking Eq. 1-4 (the policies are
property-tested against the checker), by its GPU numbers (``LiveCluster.occupy_numbers``); a
single job is one search of the live trees (``LiveCluster.assign_one``). Other policies (wfd-ls, mip, user
policies) get an immutable ``Cluster``, updated copy-on-write, and run as they are.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from hypersack.core.trial import TrialRecord

__all__ = ["Allocator", "Demand", "default_demand"]

Devices = tuple[tuple[str, str], ...]
_NEW_TRIAL = "new trial"     # the id of the Job that ``has_room_for`` asks about (never a trial's)


@dataclass(frozen=True)
class Demand:
    """What one trial needs per device when no profile says otherwise: ``compute`` in percent of
    one device, ``memory_gb`` per device, ``cpus`` per device (host cores)."""
    compute: float = 100.0
    memory_gb: float = 0.0
    cpus: float = 1

    def job(self, record: TrialRecord) -> Any:
        """This demand as ``record``'s placement Job (checked once per device count, then
        renamed: no per-call validation)."""
        gpus = max(1, int(record.resources))
        template = _TEMPLATES.get((self, gpus))
        if template is None:
            from hypersack.placement import Job
            template = Job(0, self.compute, self.memory_gb, cpus=self.cpus, gpus=gpus)
            if len(_TEMPLATES) > 1024:
                _TEMPLATES.clear()
            _TEMPLATES[(self, gpus)] = template
        return template.renamed(record.trial_id)


_TEMPLATES: dict[tuple[Demand, int], Any] = {}


_DEFAULT = Demand()
_DEFAULT_JOBS: dict[Any, Any] = {}      # a record's ``resources`` -> the default's template Job


def default_demand(record: TrialRecord) -> Any:
    """``Demand().job(record)``, its template looked up by the record's device count alone (no
    ``Demand`` built and hashed per call: the controller asks several times per launch)."""
    template = _DEFAULT_JOBS.get(record.resources)
    if template is None:
        template = _DEFAULT_JOBS[record.resources] = _DEFAULT.job(record)._origin
    return template.renamed(record.trial_id)


class Allocator:
    def __init__(self, cluster: Any, policy: str | Mapping[str, Any] = "wfd",
                 demand: Callable[[TrialRecord], Any] = default_demand):
        from hypersack.placement import parse_placement
        self.policy, self.options = parse_placement(policy)
        from hypersack.placement.live import POLICIES, check_options
        self._checked = check_options(self.policy, self.options) if self.policy in POLICIES else None
        self.inventory = cluster          # devices without load
        self.demand = demand
        self._running: dict[int, tuple[Any, Devices]] = {}
        self._version = 0            # bumped whenever the load or the inventory changes
        # the last answer of has_room_for: (version, demand asked, resources, the Job placed
        # (named _NEW_TRIAL), its devices or None for a "no", their GPU numbers in the live
        # load or None)
        self._room: tuple[int, Any, int, Any, Devices | None, tuple[int, ...] | None] | None = None
        self._asked_memo: tuple[Any, int, Any] | None = None   # (Job asked about, gpus, renamed)
        self._set_load(cluster)

    def _set_load(self, cluster: Any) -> None:
        """Hold ``cluster`` (devices with the running trials' load) in the form the policy uses."""
        from hypersack.placement.live import POLICIES, LiveCluster
        self._live = LiveCluster(cluster) if self.policy in POLICIES else None
        self._version += 1
        self._cluster: Any = None if self._live is not None else cluster
        self._devices = sum(1 for _ in self.inventory.gpus())

    @property
    def cluster(self) -> Any:
        """The devices with the running trials' load, as an immutable placement Cluster."""
        return self._live.snapshot() if self._live is not None else self._cluster

    def _assign(self, jobs: list[Any]) -> dict[Any, Any]:
        live = self._live
        if live is not None:
            if len(jobs) == 1:                  # a room check, or one trial: one tree search
                job = jobs[0]
                found = live.assign_one(job, self.policy, self._checked or {})
                return {} if found is None else {job.id: live.keys_of(found)}
            return live.assign_checked(jobs, self.policy, self._checked or {})
        from hypersack.placement import assign
        return assign(jobs, self._cluster, self.policy, **self.options)

    # ---- placing ----------------------------------------------------------------------------

    def place(self, records: Sequence[TrialRecord]) -> dict[int, Devices]:
        """Devices for as many of ``records`` as fit now, per the policy; the rest are absent.
        Placed trials are counted as running from here on."""
        if not records:
            return {}
        if len(records) == 1:
            spot = self._spot_found(records[0])
            if spot is not None:
                return spot
        jobs = {r.trial_id: self.demand(r) for r in records}
        chosen = self._assign(list(jobs.values()))
        placed: dict[int, Devices] = {}
        live = self._live
        for record in records:            # in the caller's order
            devices = chosen.get(record.trial_id)
            if devices:
                devices = tuple((n, g) for n, g in devices)
                if live is None:
                    self._occupy(record.trial_id, jobs[record.trial_id], devices)
                else:                     # the policy's own answer: occupied as trusted
                    self._version += 1
                    live.occupy_numbers(jobs[record.trial_id], live.numbers_of(devices))
                    self._running[record.trial_id] = (jobs[record.trial_id], devices)
                placed[record.trial_id] = devices
        return placed

    def has_room_for(self, like: TrialRecord, resources: int) -> bool:
        """Whether a new trial would fit now: one with ``like``'s config (a real trial, e.g. the
        latest) on ``resources`` devices. Nothing is placed and no trial is made up: the
        demand of ``like`` is asked, then given the new trial's device count (a demand's
        ``gpus`` is its record's ``resources``, or a floor of its own above them, which is
        kept). The answer is remembered until something is placed, released or changed in the
        inventory: asked again with the same demand (the same Job) it is given at once (the
        loop asks every turn while every device is busy), and a "yes" of a built-in policy
        places the next single trial whose Job is the one asked about, under its own id, where
        the policy put that one (``place``): one placement run per new trial, not two."""
        job = self.demand(like)
        memo = self._room
        if (memo is not None and memo[0] == self._version and memo[2] == resources
                and _same_job(memo[1], job)):
            return memo[4] is not None
        asked = self._asked(job, like, resources)
        spot = self._assign([asked]).get(_NEW_TRIAL)
        devices = tuple((n, g) for n, g in spot) if spot else None
        live = self._live
        numbers = None if devices is None or live is None else live.numbers_of(devices)
        self._room = (self._version, job, resources, asked, devices, numbers)
        return devices is not None

    def _asked(self, job: Any, like: TrialRecord, resources: int) -> Any:
        """The Job a new trial like ``like`` on ``resources`` devices would have, named
        ``_NEW_TRIAL`` (the last one made is reused while the demand's Job and the device count
        are the same: a demand's Jobs are renamed copies of few templates)."""
        gpus = max(1, int(resources))
        if job.gpus > like.resources:          # the demand's own floor (a model on k devices)
            gpus = max(gpus, job.gpus)
        template = job.__dict__.get("_origin", job)
        memo = self._asked_memo
        if memo is not None and memo[0] is template and memo[1] == gpus:
            return memo[2]
        if gpus != job.gpus:
            job = dataclasses.replace(job, gpus=gpus)
        asked = job.renamed(_NEW_TRIAL)
        self._asked_memo = (template, gpus, asked)
        return asked

    def _spot_found(self, record: TrialRecord) -> dict[int, Devices] | None:
        """``record`` placed where the last "yes" of ``has_room_for`` found room, when that
        answer is ``place``'s own: a built-in policy (its answer for one Job depends on the
        load and the Job's demand, never on its id), nothing placed, released or changed
        since, and ``record``'s Job equal to the one asked about but for its id. Else None."""
        memo = self._room
        if memo is None or memo[4] is None or memo[0] != self._version or self._live is None:
            return None
        job = self.demand(record)
        if not _same_demand(job, memo[3]):
            return None
        devices, numbers, live = memo[4], memo[5], self._live
        if numbers is None or live is None:
            self._occupy(record.trial_id, job, devices, strict=False)
        else:                        # where the policy put this very demand: trusted
            self._version += 1
            live.occupy_numbers(job, numbers)
            self._running[record.trial_id] = (job, devices)
        return {record.trial_id: devices}

    def fits(self, job: Any) -> bool:
        """Whether ``job`` (a placement Job whose id is no running trial's) fits now, per the
        policy; nothing is placed."""
        return bool(self._assign([job]))

    def occupy(self, record: TrialRecord, devices: Sequence[Sequence[str]]) -> None:
        """Count ``record`` as running on ``devices`` (a restored or externally placed trial)."""
        self._occupy(record.trial_id, self.demand(record), tuple((n, g) for n, g in devices),
                     strict=False)

    def _occupy(self, trial_id: int, job: Any, devices: Devices, strict: bool = True) -> None:
        self._version += 1
        if self._live is not None:
            self._live.occupy(job, devices, strict=strict)
        else:
            self._cluster = self._cluster.with_running(job, devices, strict=strict)
        self._running[trial_id] = (job, devices)

    def release(self, trial_id: int) -> None:
        if self._running.pop(trial_id, None) is not None:
            self._version += 1
            if self._live is not None:
                self._live.release(trial_id)
            else:
                self._cluster = self._cluster.without(trial_id)

    def unplaceable(self, record: TrialRecord) -> str | None:
        """Why ``record`` can never run on this inventory (even with every device idle), or None."""
        from hypersack.placement import assign
        job = self.demand(record)
        if assign([job], self.inventory, self.policy, **self.options):
            return None
        return (f"it needs {job.gpus} device(s) with {job.compute:g}% compute, "
                f"{job.memory_gb:g} GB memory and {job.cpus} CPU core(s) each, more than any "
                f"device here offers ({_describe(self.inventory)})")

    # ---- elasticity -------------------------------------------------------------------------

    def add_device(self, node_id: str, gpu: Any, node_cpus: float | None = None) -> None:
        """Add ``gpu`` to node ``node_id``; a node not in the inventory joins it with
        ``node_cpus`` cores (ConfigError from the cluster when that is not given)."""
        cluster = self.cluster
        if node_cpus is not None and all(n.id != node_id for n in self.inventory.nodes):
            from hypersack.placement import Node
            self.inventory = self.inventory.with_node(Node(node_id, node_cpus))
            cluster = cluster.with_node(Node(node_id, node_cpus))
        cluster = cluster.with_gpu(node_id, gpu)
        self.inventory = self.inventory.with_gpu(node_id, gpu)
        self._set_load(cluster)

    def lose_device(self, node_id: str, gpu_id: str) -> list[int]:
        """Remove a device; returns the trials that were running on it (they are released)."""
        hit = [t for t, (_, devices) in self._running.items() if (node_id, gpu_id) in devices]
        for trial_id in hit:
            self.release(trial_id)
        cluster = self.cluster.without_gpu(node_id, gpu_id)
        self.inventory = self.inventory.without_gpu(node_id, gpu_id)
        self._set_load(cluster)
        return hit

    def device_count(self) -> int:
        """Devices in the inventory (counted when it changes: O(1))."""
        return self._devices

    def running(self) -> Mapping[int, Devices]:
        return {t: d for t, (_, d) in self._running.items()}


_NO_DICT: dict[str, Any] = {}


def _same_job(a: Any, b: Any) -> bool:
    """``a == b`` for placement Jobs, at once for two renamed copies (``Job.renamed``) of one
    Job under one id: a Job never changes, and a copy differs from its origin in the id only."""
    if a is b:
        return True
    origin = getattr(a, "__dict__", _NO_DICT).get("_origin")
    if origin is not None and origin is getattr(b, "__dict__", _NO_DICT).get("_origin") \
            and a.id == b.id:
        return True
    return bool(a == b)


def _same_demand(a: Any, b: Any) -> bool:
    """Whether Jobs ``a`` and ``b`` ask for the same thing (every field but the id)."""
    return bool(a.gpus == b.gpus and a.compute == b.compute and a.memory_gb == b.memory_gb
                and a.cpus == b.cpus and a.runtime == b.runtime and a.per_arch == b.per_arch)


def _describe(cluster: Any) -> str:
    parts = [f"{node.id}/{gpu.id}: {gpu.arch}, {gpu.compute * gpu.oversubscription:g}% compute, "
             f"{gpu.memory_gb:g} GB" for node, gpu in cluster.gpus()]
    if not parts:
        return "no devices"
    return "; ".join(parts[:4]) + (f"; and {len(parts) - 4} more" if len(parts) > 4 else "")
