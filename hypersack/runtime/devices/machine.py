"""This machine, set up for one study run: devices, placement inventory, MPS, monitor, job history.

``prepare_machine`` is a context manager: it finds the devices (NVML GPUs, else CPU slots), builds
the placement inventory with the study's oversubscription, starts the MPS daemon when trials share
GPUs, and the NVML state monitor; on exit (normal, Ctrl-C or error) it stops both. The job history
(``ProfileStore``, in the study's SQLite file) gives each trial's demand from earlier profiles and
learns from this run's (Profiler) profiles and out-of-memory failures.

Fused packs (``fuses``: the pack plan's predicate, the one the controller seats by): a trial
that runs in a pack demands the pack's per-member share of its device
(``core.packs.member_demand``: ``compute`` = 100 / ``pack.max_members`` percent, or
``resources.compute`` when the study sets it, ``memory_gb`` = ``resources.memory_gb``, ``cpus``
= ``resources.cpus`` / ``max_members``), so placement puts up to ``max_members`` members on one
device and oversubscription (MPS) still applies across packs.
Profiles of plain trials do not describe members, so the job history is not used for them.
Whether MPS starts is ``core.demand.needs_mps``; the history's demand is
``core.demand.history_demand`` (through ``ProfileStore.demand_for``).

Co-location (issue 30): a trial's ``cpus`` cover its data loader's workers
(``core.demand.with_loader_cpus``); a profile taken beside other trials becomes a co-location
measurement against the model's profile taken alone; ``oversubscription: auto`` sets each GPU
architecture's ratio from those measurements at the start and rescales later demands when the
run's own measurements move it (``core.oversubscription``); ``execution: auto`` runs a model
whose profile fills the GPU alone exclusively (``core.execution``; not on CPU slots of ratio 1,
which nothing shares). Both decisions are logged and noted in the study's file with
their reasons (``ProfileStore.note``). Whether a fusable model runs fused or separate under
``execution: auto`` is measured by ``fusion_probe`` (its choices join ``Machine.execution``).
"""
from __future__ import annotations

import contextlib
import math
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from hypersack.core.allocator import Demand
from hypersack.core.demand import needs_mps, needs_profile, with_history, with_loader_cpus
from hypersack.core.packs import member_demand as core_member_demand, member_job
from hypersack.core.spec import StudySpec
from hypersack.core.trial import (Event, ResultReported, TrialFailed, TrialFinished, TrialProfiled,
                                  TrialRecord, TrialState)
from hypersack.runtime.devices.slots import Slot, default_slots, slots_cluster

__all__ = ["Machine", "prepare_driver", "prepare_machine", "prepare_node"]

log = logging.getLogger(__name__)
#: The states of a trial being placed or running: the ones whose demand is kept per trial.
_PLACED = frozenset({TrialState.PENDING, TrialState.RUNNING})


@dataclass
class Machine:
    slots: list[Slot]
    cluster: Any
    share_env: Callable[[Slot, float | None], dict] | None = None
    device_events: Callable[[], list[Event]] | None = None
    demand: Callable[[TrialRecord], Any] | None = None
    observers: list[Callable[[Event], None]] = field(default_factory=list)
    profile: Callable[[dict], bool] = lambda config: False
    # Utilisation samples (node, gpu, monitor.Sample) since the last call; None: no NVML monitor.
    samples: Callable[[], list[tuple[str, str, Any]]] | None = None
    # oversubscription: auto -> per GPU architecture, the ratio chosen and why (RatioChoice)
    ratios: dict[str, Any] = field(default_factory=dict)
    # execution: auto -> per model (job-history key), the mode chosen and why (ExecutionChoice)
    execution: dict[str, Any] = field(default_factory=dict)

    def decisions(self) -> list[str]:
        """What ``oversubscription: auto`` and ``execution: auto`` chose so far and why, one
        line each (the progress views show them)."""
        return ([f"oversubscription auto: {c.reason}" for _, c in sorted(self.ratios.items())]
                + [f"execution auto: {c.reason}" for _, c in sorted(self.execution.items())])


@contextlib.contextmanager
def prepare_machine(spec: StudySpec, study_dir: Path, storage_path: Any, *,
                    trainable_name: str, slots: list[Slot] | None = None,
                    nvml: Any = None,
                    fuses: Callable[[dict, int | None], bool] | None = None) -> Iterator[Machine]:
    """Devices and services for one run of ``spec`` (see the module docstring). ``slots``
    (tests) skips detection: the given slots become the inventory. ``storage_path``: the study
    store's file, or the open ``Storage`` itself (the job history then writes through its
    connection, inside the loop's per-turn transaction)."""
    with contextlib.ExitStack() as stack:
        machine = _node(spec, study_dir, slots, nvml, stack)
        _attach_history(machine, spec, storage_path, trainable_name, stack)
        if fuses is not None:
            _fused_demand(machine, spec, fuses)
        yield machine


# ---- devices ---------------------------------------------------------------------------------

def _devices(spec: StudySpec, slots: list[Slot] | None, nvml: Any) -> Machine:
    if slots is None:
        cluster = _gpu_cluster(nvml, spec.ratios)
        if cluster is not None:
            gpu_slots = _gpu_slots(cluster, spec.executor.workers)
            return Machine(gpu_slots, _only(cluster, gpu_slots))
        slots = default_slots(spec.executor.workers)      # nvidia-smi still finds GPUs
        if any(s.gpu is not None for s in slots):
            log.warning("GPUs found without NVML: each is one device of unknown memory, no monitor "
                        "(pip install 'hypersack[gpu]' for memory-aware placement)")
    ratio = _cpu_ratio(spec.ratios, slots)
    return Machine(slots, slots_cluster(slots, oversubscription=ratio))


def _gpu_cluster(nvml: Any, ratios: Any) -> Any | None:
    """This host's GPUs from NVML with the study's ratios (``Oversubscription``), or None (no
    NVML, no GPU)."""
    from hypersack.errors import MissingDependencyError
    from hypersack.runtime.devices.inventory import cluster_from_nvml
    from hypersack.runtime.devices.nvml import NvmlSource, NvmlUnavailable
    try:
        source = NvmlSource(nvml)
        with source:
            cluster = cluster_from_nvml(source, node_id="local", oversubscription=ratios.per_arch)
    except (MissingDependencyError, NvmlUnavailable, OSError):
        return None
    if not any(True for _ in cluster.gpus()):
        return None
    if ratios.single is not None:
        cluster = _with_ratio(cluster, ratios.single)
    return cluster


def _with_ratio(cluster: Any, ratio: float) -> Any:
    from hypersack.placement import Cluster, Node
    return Cluster([Node(n.id, n.cpus, tuple(dataclasses.replace(g, oversubscription=ratio) for g in n.gpus))
                    for n in cluster.nodes])


def _only(cluster: Any, slots: list[Slot]) -> Any:
    """``cluster`` restricted to the GPUs that have a slot."""
    keep = {s.key for s in slots}
    for node, gpu in list(cluster.gpus()):
        if gpu.id not in keep:
            cluster = cluster.without_gpu(node.id, gpu.id)
    return cluster


def _gpu_slots(cluster: Any, workers: int | None) -> list[Slot]:
    """One slot per GPU (ids ``gpu<N>``, N the physical index); ``workers`` caps how many."""
    import os
    gpus = [g for _, g in cluster.gpus()]
    if workers is not None:
        gpus = gpus[:workers]
    threads = max(1, (os.cpu_count() or 1) // max(1, len(gpus)))
    out = []
    for i, gpu in enumerate(gpus):
        index = int(str(gpu.id).removeprefix("gpu"))
        out.append(Slot(i, index, {"CUDA_VISIBLE_DEVICES": str(index), "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                                   "OMP_NUM_THREADS": str(threads)}))
    return out


def _cpu_ratio(ratios: Any, slots: list[Slot]) -> float:
    """CPU slots (and GPUs found without NVML, arch "gpu"): the fixed ratio given for them,
    else 1 (``auto`` and ``paper`` too: a trial already uses its slot's threads)."""
    if ratios.mode != "fixed":
        return 1.0
    arch = "cpu" if all(s.gpu is None for s in slots) else "gpu"
    return ratios.single if ratios.single is not None else float(ratios.per_arch.get(arch, 1.0))


def _shares_gpus(spec: StudySpec, machine: Machine) -> bool:
    from hypersack.placement import parse_placement
    policy, _ = parse_placement(spec.placement)
    return needs_mps(policy, [g.oversubscription for _, g in machine.cluster.gpus() if g.arch != "cpu"],
                     any(s.gpu is not None for s in machine.slots))


# ---- services --------------------------------------------------------------------------------

def _start_mps(machine: Machine, study_dir: Path, stack: contextlib.ExitStack) -> None:
    """One MPS daemon for the run; workers get its pipe and their thread percentage. Where MPS
    is missing or refused, trials share GPUs by time slicing (one warning, from MpsDaemon)."""
    from hypersack.runtime.devices.mps import MpsDaemon
    daemon = MpsDaemon(study_dir)
    stack.enter_context(daemon)
    if not getattr(daemon, "active", True):
        return

    def share_env(slot: Slot, share: float | None) -> dict:
        return daemon.env_for(share if share is not None else 100.0) if slot.gpu is not None else {}
    machine.share_env = share_env


def _start_monitor(machine: Machine, nvml: Any, stack: contextlib.ExitStack) -> None:
    from hypersack.runtime.devices.monitor import DeviceMonitor
    from hypersack.runtime.devices.nvml import NvmlSource
    source = NvmlSource(nvml)
    try:
        stack.enter_context(source)
        monitor = DeviceMonitor(source, "local", initial=source.snapshot(), clock=time.time)
        stack.enter_context(monitor.start())
    except Exception as exc:     # monitoring is a help, never a reason not to run
        log.warning("GPU state monitor not started: %s", exc)
        return
    machine.device_events = monitor.drain
    machine.samples = monitor.take_samples


def _attach_history(machine: Machine, spec: StudySpec, storage_path: Any, trainable_name: str,
                    stack: contextlib.ExitStack) -> None:
    """Demand from the job history; profiles and OOM corrections written back to it."""
    from hypersack.runtime.devices.job_history import ProfileStore, profile_key
    store = stack.enter_context(ProfileStore(storage_path))
    _auto_ratios(machine, spec, store)
    model_keys = _model_keys(spec)
    archs = sorted({g.arch for _, g in machine.cluster.gpus()})
    memory = {g.arch: g.memory_gb for _, g in machine.cluster.gpus()}
    r = spec.resources
    default = Demand(r.compute, r.memory_gb, r.cpus)
    cache: dict[str, Any] = {}
    records: dict[int, TrialRecord] = {}

    # trial -> (resources, Job, history key, ratio generation): built once per trial, dropped
    # when the history of its key changes (a profile or an OOM correction of a config with the
    # same model keys and batch size: nothing else changes what the history says of it) or
    # when the trial ends; rebuilt when ``oversubscription: auto`` learns another ratio during
    # the run (the generation changes)
    jobs: dict[int, tuple[int, Any, str, int]] = {}
    keyed: dict[str, set[int]] = {}           # history key -> trials with a Job in ``jobs``
    # trial -> its last Job before the online ratio, until it ends: the live trials, and their
    # demands as profiled (what a co-location measurement sums)
    live: dict[int, Any] = {}
    online = _OnlineRatios(machine, spec, store)
    # (history key, resources, ratio generation, the config's data and cpus) -> (base Job,
    # Job): what a trial's demand is made of, so a config of a key already placed is renamed,
    # not rebuilt (a new trial's demand is asked twice: its room, then its place); dropped with
    # the key's history (``forget``)
    templates: dict[tuple[str, int, int, str, str], tuple[Any, Any]] = {}
    keys: dict[tuple[tuple[type, Any], ...], str] = {}    # fingerprint -> history key
    keyed_by = [*model_keys, "batch_size"]
    # co-located or exclusive (``_execution_auto``) is a choice about sharing devices: none
    # where no device takes more than its compute (CPU slots under auto or paper: ratio 1)
    shares_gpus = any(g.oversubscription > 1 or g.arch != "cpu" for _, g in machine.cluster.gpus())

    def history_key(config: dict) -> str:
        """``_history_key(config, model_keys)``, remembered by the values it reads
        (``_fingerprint``): a trial's key is asked at its room check, its placement and its
        launch (``profile``)."""
        fingerprint = _fingerprint(config, keyed_by)
        if fingerprint is None:
            return _history_key(config, model_keys)
        key = keys.get(fingerprint)
        if key is None:
            if len(keys) > 4096:
                keys.clear()
            key = keys[fingerprint] = _history_key(config, model_keys)
        return key

    def build(record: TrialRecord, key: str) -> tuple[Any, Any]:
        per_arch = _per_arch(store, record.config, archs, trainable_name, model_keys, cache, key)
        base = _with_loaders(with_history(default.job(record), per_arch), record.config)
        job = online.scaled(base)
        if spec.execution == "auto" and shares_gpus:
            job = _execution_auto(machine, key, job, per_arch,
                                  lambda why: _note(store, spec.name, "execution", _label(key), why))
        return base, job

    def demand(record: TrialRecord) -> Any:
        hit = jobs.get(record.trial_id)
        if hit is not None and hit[0] == record.resources and hit[3] == online.generation:
            records[record.trial_id] = record
            return hit[1]
        key = history_key(record.config)
        config = record.config
        tkey = (key, record.resources, online.generation, repr(config.get("data")),
                repr(config.get("cpus")))
        made = templates.get(tkey)
        if made is None:
            if len(templates) > 1024:      # kinds of configs, or ratio generations, galore
                templates.clear()
            base, job = made = build(record, key)
            templates[tkey] = made
        else:
            base, job = made[0].renamed(record.trial_id), made[1].renamed(record.trial_id)
        if record.state not in _PLACED:   # an ended trial, the model of a new one's room
            return job                    # (Allocator.has_room_for): not live again
        records[record.trial_id] = record
        jobs[record.trial_id] = (record.resources, job, key, online.generation)
        keyed.setdefault(key, set()).add(record.trial_id)
        live[record.trial_id] = base
        return job

    def forget(config: dict) -> None:
        key = history_key(config)
        cache.pop(key, None)
        settled.discard(key)
        for tkey in [t for t in templates if t[0] == key]:
            del templates[tkey]
        for trial_id in keyed.pop(key, ()):
            jobs.pop(trial_id, None)

    def observe(event: Event) -> None:
        if type(event) is ResultReported:        # most events: nothing for the history
            return
        record = records.get(event.trial_id) if event.trial_id is not None else None
        if record is None:
            return
        try:
            if isinstance(event, TrialProfiled):
                from hypersack.runtime.devices.profiler import Profile
                profile = Profile.from_dict(event.profile)
                pkey = profile_key(trainable_name, record.config, model_keys, profile.device_arch)
                sharing = _sharing(record, [records[t] for t in live if t in records])
                measured = _record_colocation(store, pkey, profile, [record, *sharing], live)
                if store.put(pkey, profile, corunners=len(sharing)):
                    forget(record.config)
                if measured is not None:
                    online.learn(pkey.arch, measured)
            elif isinstance(event, TrialFailed) and event.oom:
                for arch in archs:
                    store.correct_after_oom(profile_key(trainable_name, record.config, model_keys, arch),
                                            memory[arch])
                forget(record.config)
                live.pop(event.trial_id, None)
            elif isinstance(event, (TrialFinished, TrialFailed)):   # rebuilt if it runs again
                live.pop(event.trial_id, None)
                ended = jobs.pop(event.trial_id, None)
                if ended is not None:
                    keyed.get(ended[2], set()).discard(event.trial_id)
        except Exception as exc:   # the history is an optimisation: never fail the study on it
            log.warning("job history not updated for trial %s: %s", event.trial_id, exc)
    # the least compute a device of each architecture accepts (r x C)
    capacity: dict[str, float] = {}
    for _, gpu in machine.cluster.gpus():
        capacity[gpu.arch] = min(capacity.get(gpu.arch, math.inf), gpu.compute * gpu.oversubscription)
    settled: set[str] = set()      # history keys whose trials are not profiled (``profile``)

    def profile(config: dict) -> bool:
        """Whether a trial of ``config`` is profiled: ``core.demand.needs_profile`` of its
        history key's profiles (always under ``oversubscription: auto``, which learns from
        every co-located run); a key found settled is not asked again until a new profile
        or an OOM correction of it (``forget``)."""
        if online.measured:
            return True
        key = history_key(config)
        if key in settled:
            return False
        try:
            per_arch = _per_arch(store, config, archs, trainable_name, model_keys, cache, key)
            alone = all(store.corunners(profile_key(trainable_name, config, model_keys, arch)) == 0
                        for arch in archs)
        except Exception:          # a config the history cannot key: profiled as before
            return True
        if needs_profile(learning=False, alone_everywhere=alone, per_arch=per_arch,
                         capacity=capacity, archs=archs):
            return True
        settled.add(key)
        return False
    machine.demand, machine.observers, machine.profile = demand, [observe], profile


def _with_loaders(job: Any, config: dict) -> Any:
    """``job`` with cores for the config's loader workers (``core.demand.with_loader_cpus``); a
    config whose ``data`` or ``cpus`` is invalid keeps ``job`` (its trial fails on it)."""
    from hypersack.errors import ConfigError
    try:
        return with_loader_cpus(job, config)
    except ConfigError:
        return job


def _note(store: Any, study: str, kind: str, subject: str, reason: str) -> None:
    """Log a decision and keep its reason in the study's file (for the report)."""
    log.info("%s auto: %s", kind, reason)
    try:
        store.note(study, kind, subject, reason)
    except Exception as exc:      # a note is an explanation: never fail the study on it
        log.warning("decision not stored: %s", exc)


def _execution_auto(machine: Machine, key: str, job: Any,
                    per_arch: Mapping[str, Mapping[str, float]],
                    note: Callable[[str], None] = lambda why: None) -> Any:
    """``execution: auto`` for a trial that does not fuse: ``core.execution.choose_execution``
    from its profile (the busiest architecture's); ``exclusive`` makes its demand each device's
    whole capacity, so it runs alone. The choice is kept in ``machine.execution`` and ``note``d
    when it changes."""
    from hypersack.core.execution import choose_execution, exclusive_demand, group_of
    choice = choose_execution(group_of(_label(key), per_arch,
                                       [g.memory_gb for _, g in machine.cluster.gpus()]))
    if machine.execution.get(key) != choice:
        machine.execution[key] = choice
        note(f"{choice.reason} -> {choice.mode}")
    if choice.mode != "exclusive":
        return job
    capacity = {g.arch: g.compute * g.oversubscription for _, g in machine.cluster.gpus()}
    whole = exclusive_demand(per_arch, capacity)
    return dataclasses.replace(job, compute=max(capacity.values(), default=job.compute),
                               per_arch=whole or None)


def _label(history_key: str) -> str:
    """``model=resnet18_cifar, batch_size=64`` for a history key (its JSON)."""
    import json
    return ", ".join(f"{k}={v}" for k, v in json.loads(history_key).items())


def _sharing(record: TrialRecord, live: list[TrialRecord]) -> list[TrialRecord]:
    """The other running trials of ``live`` (those not ended) on ``record``'s devices now:
    its profile was measured beside them (a profile arrives as its trial ends, so trials that
    came and went while it ran are missed)."""
    mine = set(record.devices)
    if not mine:
        return []
    from hypersack.core.trial import TrialState
    return [r for r in live if r.trial_id != record.trial_id
            and r.state == TrialState.RUNNING and mine & set(r.devices)]


def _record_colocation(store: Any, key: Any, profile: Any, on_device: list[TrialRecord],
                       live: Mapping[int, Any]) -> Any:
    """Append to the job history what sharing did to ``profile``'s trial, and return it: the
    summed demand of the trials on its device (as profiled, before any online ratio) and its
    slowdown against its profile measured alone. None when it ran alone, or its model was never
    profiled alone on this architecture."""
    from hypersack.core.oversubscription import colocation
    if len(on_device) < 2:
        return None
    demands = [live[r.trial_id].demand(key.arch).compute for r in on_device if r.trial_id in live]
    alone = store.alone(key) if len(demands) == len(on_device) else None
    if alone is None:
        return None
    measured = colocation(alone.time_per_iter_s, profile.time_per_iter_s, demands)
    if measured is not None:
        store.record_colocation(key.arch, key.signature, measured)
    return measured


class _OnlineRatios:
    """``oversubscription: auto`` during the run: each new co-location measurement re-runs
    ``core.oversubscription.relearned_ratio`` over the architecture's measurements; when the
    ratio moves (by more than ``ONLINE_STEP``), demands placed from then on are rescaled
    (``core.oversubscription.scaled_compute``: the inventory keeps the ratio the run started
    with) and ``generation`` changes, so cached demands are rebuilt. Other modes: inert."""

    def __init__(self, machine: Machine, spec: StudySpec, store: Any):
        self.machine, self.generation, self.store, self.study = machine, 0, store, spec.name
        self.start = {a: c.ratio for a, c in machine.ratios.items()}
        self.now = dict(self.start)
        self.measured: dict[str, list[Any]] = {}
        if spec.ratios.mode == "auto":
            self.measured = {arch: list(_colocations(store, arch)) for arch in self.start}

    def learn(self, arch: str, measurement: Any) -> None:
        from hypersack.core.oversubscription import relearned_ratio
        if arch not in self.measured:
            return
        self.measured[arch].append(measurement)
        choice = relearned_ratio(arch, self.measured[arch], self.now[arch])
        if choice is None:
            return
        self.now[arch], self.machine.ratios[arch] = choice.ratio, choice
        self.generation += 1
        _note(self.store, self.study, "oversubscription", arch,
              f"{choice.reason} (learned during the run)")

    def scaled(self, job: Any) -> Any:
        """``job`` with its compute on each architecture rescaled to the ratio learned now."""
        from hypersack.core.oversubscription import scaled_compute
        if self.now == self.start:
            return job
        per_arch = {arch: {"compute": scaled_compute(job.demand(arch).compute, self.start[arch],
                                                     self.now[arch]),
                           "memory_gb": job.demand(arch).memory_gb,
                           "runtime": job.demand(arch).runtime} for arch in self.now}
        return dataclasses.replace(job, per_arch={**dict(job.per_arch or {}), **per_arch})


def _colocations(store: Any, arch: str) -> list[Any]:
    try:
        return list(store.colocations(arch))
    except Exception as exc:      # the history is an optimisation: never fail the study on it
        log.warning("co-location history not read for %s: %s", arch, exc)
        return []


def _auto_ratios(machine: Machine, spec: StudySpec, store: Any) -> None:
    """``oversubscription: auto``: each GPU architecture's ratio from the job history's
    co-location measurements (``core.oversubscription.auto_ratio``), set on the inventory and
    kept in ``machine.ratios``; other modes and CPU slots are left as they are."""
    from hypersack.core.oversubscription import auto_ratio
    if spec.ratios.mode != "auto":
        return
    archs = sorted({g.arch for _, g in machine.cluster.gpus() if g.arch != "cpu"})
    if not archs:
        return
    for arch in archs:
        machine.ratios[arch] = auto_ratio(arch, _colocations(store, arch))
        _note(store, spec.name, "oversubscription", arch, machine.ratios[arch].reason)
    machine.cluster = _with_ratios(machine.cluster, {a: c.ratio for a, c in machine.ratios.items()})


def _with_ratios(cluster: Any, ratios: Mapping[str, float]) -> Any:
    from hypersack.placement import Cluster, Node
    return Cluster([Node(n.id, n.cpus, tuple(
        dataclasses.replace(g, oversubscription=ratios.get(g.arch, g.oversubscription))
        for g in n.gpus)) for n in cluster.nodes])


def member_demand(spec: StudySpec) -> Demand:
    """A pack member's demand on its device (``core.packs.member_demand``)."""
    r = spec.resources
    return core_member_demand(Demand(r.compute, r.memory_gb, r.cpus), spec.pack.max_members)


def _fused_demand(machine: Machine, spec: StudySpec,
                  fuses: Callable[[dict, int | None], bool]) -> None:
    """Members get ``core.packs.member_job`` (``member_demand`` as a Job); the other trials (a trial alone in its algorithm pack
    among them) keep the demand they had."""
    r = spec.resources
    declared = Demand(r.compute, r.memory_gb, r.cpus)
    plain = machine.demand

    def demand(record: TrialRecord) -> Any:
        if fuses(record.config, record.info.get("pack_size")):
            return member_job(record, declared, spec.pack.max_members)
        return plain(record) if plain is not None else Demand(
            spec.resources.compute, spec.resources.memory_gb, spec.resources.cpus).job(record)
    machine.demand = demand


def _history_key(config: dict, model_keys: list[str]) -> str:
    """What the job history keys ``config``'s demand by: its model keys and batch size."""
    import json
    return json.dumps({k: config.get(k) for k in model_keys + ["batch_size"]}, sort_keys=True,
                      default=repr)


#: The types whose equal values always have equal JSON (a float but zero: -0.0 == 0.0).
_SCALARS = frozenset({str, int, bool, float, type(None)})


def _fingerprint(config: dict, names: list[str]) -> tuple[tuple[type, Any], ...] | None:
    """The values of ``names`` in ``config`` with their types, when configs of equal
    fingerprints have equal history keys (``_history_key``): every value a scalar of
    ``_SCALARS`` (the type tells 1, 1.0 and True apart), no float zero. Else None."""
    out = []
    for name in names:
        value = config.get(name)
        kind = type(value)
        if kind not in _SCALARS or (kind is float and value == 0.0):
            return None
        out.append((kind, value))
    return tuple(out)


def _per_arch(store: Any, config: dict, archs: list[str], trainable: str, model_keys: list[str],
              cache: dict[str, Any], key: str | None = None) -> dict[str, dict[str, float]]:
    key = _history_key(config, model_keys) if key is None else key
    if key not in cache:
        out: dict[str, dict[str, float]] = {}
        for arch in archs:
            try:
                got = store.demand_for(config, arch, trainable=trainable, model_keys=model_keys)
            except Exception:
                got = None
            if got is not None:
                out[arch] = {"compute": got[0], "memory_gb": got[1], "runtime": got[2]}
        cache[key] = out
    return cache[key]


def _model_keys(spec: StudySpec) -> list[str]:
    """Config keys that shape the model (hence its demand): the space's discrete parameters,
    batch size aside (it is a key of its own)."""
    from hypersack.core.space import Categorical, Constant, Int
    keys = [name for name in spec.space if isinstance(spec.space[name], (Categorical, Constant, Int))
            and name != "batch_size"]
    return sorted(keys)


# ---- the two halves, for executors that span machines (Ray) -----------------------------------

@contextlib.contextmanager
def prepare_node(spec: StudySpec, study_dir: Path, *, slots: list[Slot] | None = None,
                 nvml: Any = None) -> Iterator[Machine]:
    """One node's devices and services (MPS, NVML monitor), without the job history: what a
    node agent of a multi-machine executor runs (the driver keeps the history,
    ``prepare_driver``). Same rules as ``prepare_machine``; the node id in ``cluster`` and in
    device events is "local" (the caller renames it)."""
    with contextlib.ExitStack() as stack:
        yield _node(spec, study_dir, slots, nvml, stack)


def _node(spec: StudySpec, study_dir: Path, slots: list[Slot] | None, nvml: Any,
          stack: contextlib.ExitStack) -> Machine:
    """This machine's devices, with MPS where trials share GPUs and the NVML monitor where
    GPUs were detected (not for given ``slots``); both stop with ``stack``."""
    machine = _devices(spec, slots, nvml)
    if _shares_gpus(spec, machine):
        _start_mps(machine, study_dir, stack)
    if any(s.gpu is not None for s in machine.slots) and slots is None:
        _start_monitor(machine, nvml, stack)
    return machine


@contextlib.contextmanager
def prepare_driver(spec: StudySpec, cluster: Any, storage: Any, *, trainable_name: str,
                   fuses: Callable[[dict, int | None], bool] | None = None) -> Iterator[Machine]:
    """The driver's half for an executor whose devices are elsewhere: ``cluster`` (the
    inventory the executor found) with the job history's demand and observers, and fused
    members' demand, as ``prepare_machine`` gives them (``storage``: the study's store, or
    its path). ``slots`` is empty."""
    with contextlib.ExitStack() as stack:
        machine = Machine([], cluster)
        _attach_history(machine, spec, storage, trainable_name, stack)
        if fuses is not None:
            _fused_demand(machine, spec, fuses)
        yield machine
