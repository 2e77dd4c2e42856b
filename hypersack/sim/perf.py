"""The simulator's performance model: how long a step takes where, and what a trial asks for.

Inputs are a profile table (one row per model, batch size and device architecture, from a
scenario's workload section or the Profiler's job history) and a few cost parameters. Formulas:

Profile of trial ``p`` on architecture ``a``: ``T(p, a)`` seconds per step run alone on one device,
``c(p, a)`` compute demand in percent of one device (the Profiler's average utilisation; HyperSack's
``c_p``), ``d(p, a)`` memory in GB, ``q(p)`` host cores per device.

1. Data-parallel scaling on ``k`` devices (RASDA)::

       T_k = T(p, a) / (k * eff(k)),   eff(k) = 1 / (1 + beta * log2(k))      (k >= 1)

   and ``eff`` is multiplied by ``cross_node_efficiency`` when the ranks span several nodes.
2. Sharing a device ``g`` of compute ``C_g`` (percent) among the set ``J_g`` of trials on it,
   ``S_g = sum(c_j for j in J_g)``, ``n_g = |J_g|``::

       f_gpu(g) = min(1, s_a * C_g / S_g) / (1 + alpha * (n_g - 1))

   ``s_a`` (``saturation``, per architecture) is how much summed utilisation a device absorbs
   before trials slow each other: above 1 because a utilisation sample counts a busy kernel, not
   busy SMs (HyperSack's Figs. 13-14 peak at oversubscription 3 on A100 and 2.5 on H100).
   ``alpha`` (``interference``) is the per-neighbour context-switching and cache penalty.
3. Host cores on node ``n`` with ``Q_n`` cores, ``R_n`` its trials: ``f_cpu(n) = min(1, Q_n / sum(q_j))``.
4. A trial's speed is its slowest rank's: ``rate = min over its devices g of f_gpu(g) * f_cpu(node(g))``,
   re-evaluated whenever a trial starts or ends on a device it uses (or on its node, for CPU).
5. A step is ``W = T_k + checkpoint_s`` seconds of exclusive work; the first step after a launch
   adds ``startup_s`` (data, model set-up), ``restore_s`` when it resumes from a checkpoint, and
   ``warmup_s`` when it is the first trial ever launched on one of its devices (a persistent
   worker's process start and imports). Wall time is the integral: work advances at ``rate``
   per second. A trial preempted by time-sharing holds its devices ``suspend_s`` more seconds
   after its last step (saving its state; Hermes' Fig. 7) before it leaves.
6. Delivered utilisation of ``g`` (reported, not used for timing): ``min(1, sum(c_j * rate_j) / C_g)``.

7. Fused packs (``FusedModel``): a pack of ``k`` members is one process on its device. Each
   member steps at ``rate = f_gpu(g) * f_cpu(node) * speedup(k) / k``, where ``speedup(k)`` is
   the pack's measured throughput (model-steps/s) over one model's trained alone; in formula 2
   the pack counts once (``n_g`` counts processes), with demand
   ``min(100, speedup(k) / k * sum of its members' c_j)``. Members are not padded to the pack's
   largest batch and stacks of different optimizers are not modelled (the figures are of
   uniform packs). See ``FusedModel`` for the measured figures.

Defaults of ``saturation``, ``interference``, ``beta`` and the costs are NOT validated against a
GPU; :meth:`PerfParams.unvalidated` lists every parameter that was not calibrated from
measurements, and the simulator prints that list with its figures.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from hypersack.core.demand import history_demand, memory_floor_after_oom
from hypersack.errors import ConfigError
from hypersack.sim._placement import make_job
from hypersack.validation import (check_integer, check_mapping, check_number, check_positive,
                                  is_finite, is_integer)

__all__ = ["Profile", "ProfileTable", "PerfParams", "PerfModel", "WorkloadKeys", "FusedModel",
           "FUSED_PRESETS"]

ANY = "*"
_DEMAND_MEMO = 64      # answers of PerfModel.demand kept (the latest trials' configs)


class _Measured:
    """A profile row as the job history's measurement (``core.demand.Measured``)."""
    __slots__ = ("gpu_util_percent", "peak_memory_gb", "time_per_iter_s")

    def __init__(self, util: float, memory_gb: float, step_time_s: float):
        self.gpu_util_percent, self.peak_memory_gb, self.time_per_iter_s = util, memory_gb, step_time_s


@dataclass(frozen=True)
class Profile:
    """One trial's cost on one architecture (see the module docstring for units)."""
    step_time_s: float
    utilization: float
    memory_gb: float
    cpus: int = 1
    gpus: int = 1          # devices a trial of this model always takes (data-parallel, e.g. DDP)

    def __post_init__(self) -> None:
        check_positive("profiles.step_time_s", self.step_time_s)
        check_number("profiles.utilization", self.utilization, low=0.0, low_open=True, high=100.0)
        check_number("profiles.memory_gb", self.memory_gb, low=0.0)
        check_number("profiles.cpus", self.cpus, low=0.0)
        check_integer("profiles.gpus", self.gpus, low=1)


@dataclass(frozen=True)
class WorkloadKeys:
    """Which config keys name a trial's model and batch size (or fixed values when not searched)."""
    model_key: str | None = None
    model: str = ANY
    batch_size_key: str | None = None
    batch_size: Any = ANY

    def of(self, config: Mapping[str, Any]) -> tuple[str, Any]:
        model = config.get(self.model_key, self.model) if self.model_key else self.model
        batch = config.get(self.batch_size_key, self.batch_size) if self.batch_size_key else self.batch_size
        return str(model), batch


class ProfileTable:
    """Rows keyed by (model, batch size, arch); ``*`` in a row's model or batch size matches any."""

    def __init__(self, rows: Mapping[tuple[str, Any, str], Profile]):
        self._rows = dict(rows)

    @classmethod
    def from_list(cls, rows: Sequence[Mapping[str, Any]], field_name: str = "workload.profiles") -> "ProfileTable":
        if not isinstance(rows, Sequence) or isinstance(rows, (str, bytes)) or not rows:
            raise ConfigError(field_name, rows, "must be a non-empty list of profile rows")
        table: dict[tuple[str, Any, str], Profile] = {}
        allowed = {"model", "batch_size", "arch", "step_time_s", "utilization", "memory_gb", "cpus", "gpus"}
        for i, row in enumerate(rows):
            where = f"{field_name}[{i}]"
            check_mapping(where, row)
            unknown = sorted(set(row) - allowed)
            if unknown:
                raise ConfigError(f"{where}.{unknown[0]}", row[unknown[0]],
                                  f"is not a known field (known: {', '.join(sorted(allowed))})")
            for required in ("arch", "step_time_s", "utilization"):
                if required not in row:
                    raise ConfigError(f"{where}.{required}", None, "is required")
            try:
                profile = Profile(float(row["step_time_s"]) if is_finite(row["step_time_s"]) else row["step_time_s"],
                                  row["utilization"], row.get("memory_gb", 0.0), row.get("cpus", 1),
                                  row.get("gpus", 1))
            except ConfigError as exc:
                raise ConfigError(f"{where}.{exc.field.split('.')[-1]}", exc.value, exc.problem) from None
            key = (str(row.get("model", ANY)), row.get("batch_size", ANY), str(row["arch"]))
            table[key] = profile
        return cls(table)

    def lookup(self, model: str, batch_size: Any, arch: str) -> Profile | None:
        for key in ((model, batch_size, arch), (model, ANY, arch), (ANY, batch_size, arch), (ANY, ANY, arch)):
            row = self._rows.get(key)
            if row is not None:
                return row
        return None

    def archs(self) -> set[str]:
        return {k[2] for k in self._rows}


# Measured in benchmarks/RESULTS.md, "Fused training throughput (issue 4)":
# `python benchmarks/fusion/fusion_throughput.py --models mlp,cnn`, project CPU VM (2 CPUs, no GPU),
# 2026-11-21, one torch thread, batch 32, Adam. "alone": the loop's model-steps/s at N = 1 (one
# model stepped alone); "fused": a pack of N members' model-steps/s.
#   MLP: alone 1,821; fused N=1: 637, 4: 2,165, 8: 4,202, 16: 6,002, 32: 6,829, 64: 5,390
#   CNN: alone 426;   fused N=1: 285, 8: 445, 16: 453, 32: 453, 64: 483
_MEASURED = {"mlp_cpu": (1821.0, ((1, 637.0), (4, 2165.0), (8, 4202.0), (16, 6002.0),
                                  (32, 6829.0), (64, 5390.0))),
             "cnn_cpu": (426.0, ((1, 285.0), (8, 445.0), (16, 453.0), (32, 453.0), (64, 483.0)))}
#: speedup(k) tables by name: fused model-steps/s over one model's alone, at measured pack sizes.
FUSED_PRESETS: dict[str, tuple[tuple[int, float], ...]] = {
    name: tuple((k, fused / alone) for k, fused in points)
    for name, (alone, points) in _MEASURED.items()}


@dataclass(frozen=True)
class FusedModel:
    """The throughput of a fused pack of ``k`` members, as a function of ``k``.

    ``points``: ``(k, speedup)`` pairs, ``k`` strictly increasing from 1, where ``speedup`` is
    the pack's model-steps/s over one model's trained alone (``FUSED_PRESETS``: "mlp_cpu", the
    default, and "cnn_cpu", from the measured figures above: e.g. MLP 0.35 at k = 1, 3.30 at 16,
    3.75 at 32, 2.96 at 64). Between points ``speedup`` is linear in ``k``; beyond the last it
    stays at the last. The step of a pack of ``k`` takes ``step_time(t1, k) = t1 * k /
    speedup(k)`` for a member whose step takes ``t1`` alone.

    End to end (RESULTS.md, "Fused studies end to end; pack-aware Hyperband", same machine): a
    fused digits-MLP study of 32 trials ran 1.24x faster than separate trials with a uniform
    space (batch 32, Adam) and 0.79x with mixed batch sizes and optimizers; pack-aware Hyperband
    matched plain Hyperband's wall time on CPU (0.95x on one process). These are CPU figures of
    a small MLP: on a GPU a pack fills an idle device, so they are a conservative, UNVALIDATED
    stand-in for a GPU's (the GPU suite measured 2.0x a loop for 32 fused ResNet-18s on an H100,
    one point only).
    """
    points: tuple[tuple[int, float], ...] = FUSED_PRESETS["mlp_cpu"]

    def __post_init__(self) -> None:
        points = self.points
        if not isinstance(points, (list, tuple)) or not points:
            raise ConfigError("perf.fused", points, "must be a preset name or a non-empty list of "
                              "[members, speedup] pairs")
        last = 0
        for i, pair in enumerate(points):
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise ConfigError(f"perf.fused[{i}]", pair, "must be a [members, speedup] pair")
            k, speedup = pair
            if not is_integer(k) or k <= last or (i == 0 and k != 1):
                raise ConfigError(f"perf.fused[{i}]", pair,
                                  "must start at 1 member and increase strictly")
            if not is_finite(speedup) or speedup <= 0:
                raise ConfigError(f"perf.fused[{i}]", pair, "must have a speedup > 0")
            last = k
        object.__setattr__(self, "points", tuple((int(k), float(v)) for k, v in points))

    @classmethod
    def of(cls, value: Any) -> "FusedModel":
        """From a preset name (``FUSED_PRESETS``) or a list of ``[members, speedup]`` pairs."""
        if isinstance(value, str):
            if value not in FUSED_PRESETS:
                raise ConfigError("perf.fused", value, f"must be one of {sorted(FUSED_PRESETS)} "
                                  "or a list of [members, speedup] pairs")
            return cls(FUSED_PRESETS[value])
        return cls(tuple(tuple(p) if isinstance(p, list) else p for p in value)
                   if isinstance(value, (list, tuple)) else value)

    def speedup(self, k: int) -> float:
        """The pack's throughput over one model alone, at ``k`` >= 1 members."""
        points = self.points
        if k >= points[-1][0]:
            return points[-1][1]
        for (k0, s0), (k1, s1) in zip(points, points[1:]):
            if k <= k1:
                return s0 + (s1 - s0) * (k - k0) / (k1 - k0)
        return points[0][1]       # k < 1: not a pack; the smallest one's figure

    def step_time(self, t1: float, k: int) -> float:
        """Seconds of one pack step of ``k`` members, for members whose step takes ``t1`` alone."""
        return t1 * k / self.speedup(k)


@dataclass(frozen=True)
class PerfParams:
    """Cost parameters. ``saturation`` maps arch -> s_a (default ``default_saturation``).
    ``calibrated`` names the parameters that were fitted to measurements (the rest are labelled
    unvalidated in every report)."""
    interference: float = 0.04
    saturation: Mapping[str, float] = field(default_factory=dict)
    default_saturation: float = 1.0
    dp_beta: float = 0.06
    cross_node_efficiency: float = 0.9
    startup_s: float = 10.0
    warmup_s: float = 0.0
    restore_s: float = 2.0
    checkpoint_s: float = 0.5
    calibrated: tuple[str, ...] = ()
    fused: Any = "mlp_cpu"         # a FUSED_PRESETS name or [[members, speedup], ...]
    suspend_s: float = 0.0      # a preempted trial holds its devices this long to save its state
    fused_model: FusedModel = field(init=False, repr=False, compare=False)

    _FIELDS = {"interference", "saturation", "default_saturation", "dp_beta",
               "cross_node_efficiency", "startup_s", "warmup_s", "restore_s", "checkpoint_s",
               "calibrated", "fused", "suspend_s"}

    def __post_init__(self) -> None:
        for name in ("interference", "dp_beta", "startup_s", "warmup_s", "restore_s", "checkpoint_s",
                     "suspend_s"):
            check_number(f"perf.{name}", getattr(self, name), low=0.0)
        check_number("perf.cross_node_efficiency", self.cross_node_efficiency, low=0.0,
                     low_open=True, high=1.0)
        check_positive("perf.default_saturation", self.default_saturation)
        check_mapping("perf.saturation", self.saturation,
                      what="a mapping of architecture names to numbers > 0")
        for arch, value in self.saturation.items():
            check_positive(f"perf.saturation.{arch}", value)
        object.__setattr__(self, "fused_model", FusedModel.of(self.fused))
        unknown = sorted(set(self.calibrated) - (self._FIELDS - {"calibrated"}))
        if unknown:
            raise ConfigError("perf.calibrated", list(self.calibrated), f"names unknown parameters {unknown}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "PerfParams":
        d = dict(check_mapping("perf", d or {}))
        unknown = sorted(set(d) - cls._FIELDS)
        if unknown:
            raise ConfigError(f"perf.{unknown[0]}", d[unknown[0]],
                              f"is not a known field (known: {', '.join(sorted(cls._FIELDS))})")
        if "calibrated" in d:
            d["calibrated"] = tuple(d["calibrated"] or ())
        return cls(**d)

    def saturation_of(self, arch: str) -> float:
        return float(self.saturation.get(arch, self.default_saturation))

    def unvalidated(self, fused: bool = False) -> list[str]:
        """Parameters in use that were not calibrated from measurements (``fused``: whether
        the run fuses, so the fused model is in use)."""
        names = ["interference", "saturation", "dp_beta", "cross_node_efficiency", "startup_s",
                 "warmup_s", "restore_s", "checkpoint_s", "suspend_s"] + (["fused"] if fused else [])
        optional = {"warmup_s": self.warmup_s, "suspend_s": self.suspend_s}
        return [n for n in names if n not in self.calibrated and optional.get(n, 1)]


class PerfModel:
    """Profiles plus costs: step work, sharing slowdowns, and the controller's demand model."""

    def __init__(self, table: ProfileTable, keys: WorkloadKeys, params: PerfParams,
                 archs: Sequence[str], steps_for: Any = None, fusion: Any = None):
        """``archs``: the cluster's architectures (the first is the reference of a Job's
        top-level demand); ``steps_for(config)``: planned steps of a trial; ``fusion``: the
        study's fusion plan (``sim.packs.SimFusion``), None when trials run separately."""
        self.fusion = fusion
        self._floors: dict[tuple, float] = {}    # (model, batch, arch) -> GiB, after an OOM
        self.table = table
        self.keys = keys
        self.params = params
        self.archs = list(archs)
        self.reference_arch = self.archs[0]
        self._steps_for = steps_for
        self._cache: dict[tuple, Profile] = {}
        self._demands: dict[tuple, Any] = {}     # (config items, resources) -> Job, oldest first
        # the last trial's answer: (trial id, its config object, resources, Job), or None
        self._last: tuple[int, Any, Any, Any] | None = None

    # ---- profiles ------------------------------------------------------------------------

    def profile(self, config: Mapping[str, Any], arch: str) -> Profile:
        model, batch = self.keys.of(config)
        key = (model, batch, arch)
        hit = self._cache.get(key)
        if hit is None:
            hit = self.table.lookup(model, batch, arch)
            if hit is None:
                raise ConfigError("workload.profiles", [model, batch, arch],
                                  "has no row for this (model, batch_size, arch)")
            self._cache[key] = hit
        return hit

    def memory_gb(self, config: Mapping[str, Any], arch: str) -> float:
        """A trial's memory demand on ``arch``: its profile's, raised to the floor an
        out-of-memory left (``core.demand.history_demand``, as the job history does locally)."""
        profile = self.profile(config, arch)
        if not self._floors:
            return profile.memory_gb
        model, batch = self.keys.of(config)
        floor = self._floors.get((model, batch, arch))
        if floor is None:
            return profile.memory_gb
        measured = _Measured(profile.utilization, profile.memory_gb, profile.step_time_s)
        demand = history_demand(measured, floor, arch, context_gb=0.0)
        return demand[1] if demand is not None else profile.memory_gb

    def has_memory_floors(self) -> bool:
        """Whether any trial ran out of memory (so ``memory_gb`` may differ from the profile)."""
        return bool(self._floors)

    def note_oom(self, config: Mapping[str, Any], device_memory_gb: Mapping[str, float]) -> None:
        """A trial of ``config`` ran out of memory co-located: on every architecture its model's
        memory floor becomes that architecture's device memory
        (``core.demand.memory_floor_after_oom``), so its retry is placed alone."""
        model, batch = self.keys.of(config)
        for arch, memory in device_memory_gb.items():
            key = (model, batch, arch)
            self._floors[key] = memory_floor_after_oom(self._floors.get(key), memory)
        self._demands.clear()
        self._last = None

    def forget_ooms(self) -> None:
        """Drop the memory floors (a new simulated study starts with an empty job history)."""
        self._floors.clear()
        self._demands.clear()
        self._last = None

    # ---- timing --------------------------------------------------------------------------

    def dp_efficiency(self, k: int, nodes: int = 1) -> float:
        """eff(k) of formula 1: 1 for k == 1."""
        eff = 1.0 / (1.0 + self.params.dp_beta * math.log2(k)) if k > 1 else 1.0
        return eff * (self.params.cross_node_efficiency if nodes > 1 else 1.0)

    def step_work(self, config: Mapping[str, Any], archs: Sequence[str], nodes: int = 1) -> float:
        """W of formula 5 without start-up: exclusive seconds of one step on ``archs`` (one per rank)."""
        k = len(archs)
        t1 = max(self.profile(config, a).step_time_s for a in archs)   # the slowest rank sets the pace
        return t1 / (k * self.dp_efficiency(k, nodes)) + self.params.checkpoint_s

    def launch_work(self, resumed: bool, cold: bool = False) -> float:
        """Start-up work of a launch: ``startup_s`` (+ ``restore_s`` from a checkpoint, +
        ``warmup_s`` on a device that never ran a trial)."""
        return (self.params.startup_s + (self.params.restore_s if resumed else 0.0)
                + (self.params.warmup_s if cold else 0.0))

    def gpu_factor(self, arch: str, capacity: float, demands: Sequence[float]) -> float:
        """f_gpu of formula 2 for a device of ``arch`` with ``capacity`` percent compute."""
        n = len(demands)
        if n == 0:
            return 1.0
        total = sum(demands)
        share = min(1.0, self.params.saturation_of(arch) * capacity / total) if total > 0 else 1.0
        return share / (1.0 + self.params.interference * (n - 1))

    @staticmethod
    def cpu_factor(cores: float, demand: float) -> float:
        """f_cpu of formula 3; a node declaring 0 cores has no CPU model (factor 1)."""
        return 1.0 if cores <= 0 or demand <= cores else cores / demand

    # ---- the controller's demand model ---------------------------------------------------

    def expected_runtime(self, config: Mapping[str, Any], arch: str) -> float:
        steps = self._steps_for(config) if self._steps_for else None
        return self.profile(config, arch).step_time_s * (steps or 1)

    def demand(self, record: Any) -> Any:
        """``demand(trial_record) -> Job`` for the controller: the profile on the reference
        architecture, with every architecture's figures in ``per_arch``. A function of the
        record's config and resources only: the last few answers are kept (the controller asks
        the same question of the latest trial on every turn). Without fusion the answer is a
        function of what ``make_job`` reads of the config, (model, batch size) and
        ``steps_for(config)``, so trials of different configs with those alike share it. The
        last trial asked about is answered again without reading its config (a trial is asked
        about when it is placed, then as the latest trial for the next one's room; a config is
        never changed in place)."""
        last = self._last
        if (last is not None and last[0] == record.trial_id and last[1] is record.config
                and last[2] == getattr(record, "resources", 1)):
            return last[3]
        job = self._demand(record)
        self._last = (record.trial_id, record.config, getattr(record, "resources", 1), job)
        return job

    def _demand(self, record: Any) -> Any:
        """``demand`` without the last trial's memo."""
        try:
            key = self._demand_key(record)
            hit = self._demands.get(key)
        except TypeError:                      # an unhashable config value: no memo
            return make_job(self, record)
        if hit is None:
            hit = make_job(self, record)
            if len(self._demands) >= _DEMAND_MEMO:
                self._demands.pop(next(iter(self._demands)))
            self._demands[key] = hit
        return hit if hit.id == record.trial_id else hit.renamed(record.trial_id)

    def _demand_key(self, record: Any) -> tuple:
        """What ``make_job`` reads of ``record`` (TypeError when some of it is unhashable):
        without fusion, the profile's (model, batch size), the planned steps and the resources;
        with fusion (whether a config fuses is the plan's to say), every config item."""
        resources = getattr(record, "resources", 1)
        config = record.config
        if self.fusion is None:
            model, batch = self.keys.of(config)
            steps = self._steps_for(config) if self._steps_for else None
            hash(batch)
            return ("plain", model, batch, type(batch), steps, resources)   # 1, 1.0, True apart
        items = sorted(config.items())     # keys differ: values are never compared
        return (tuple(items), tuple([type(v) for _, v in items]), resources)
