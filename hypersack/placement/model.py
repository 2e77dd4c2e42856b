"""The values placement works on: GPUs, nodes and jobs (HyperSack Sec. III-B).

Units, used everywhere in ``hypersack.placement``:

* compute: percent of one GPU's streaming multiprocessors busy (NVML utilisation), so a GPU's own
  capacity ``C`` is 100 and a job's demand ``c_p`` is typically 10-60. A GPU accepts up to
  ``r x C`` (``oversubscription`` r, Eq. 2); memory is never oversubscribed (Eq. 3).
* memory: GB (10^9 bytes is not assumed anywhere; only ratios matter).
* cpus: CPU cores; a node has ``Q_n``, a job needs ``q_p`` per GPU it occupies (Eq. 4).
* runtime: expected seconds for the whole job on that architecture (only compared, never summed).

Every value validates itself on construction and raises ``ConfigError`` naming the field.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Hashable, Iterable, Mapping

from hypersack.errors import ConfigError, PlacementError
from hypersack.validation import check_integer, check_mapping, check_number, check_positive

__all__ = ["GPU", "Node", "Job", "ArchDemand", "EPS", "Device", "as_devices"]

#: Tolerance of every capacity comparison (compute in percent, memory in GB, cores): sums of
#: floats such as 3 x 33.3333 must fit a capacity of 100 in the policies and the checker alike.
EPS = 1e-9


def check_id(field_name: str, value: Any) -> Hashable:
    """Ids are strings or integers (they appear in YAML, logs and CUDA_VISIBLE_DEVICES)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise ConfigError(field_name, value, "must be a non-empty string or an integer")
    return value


@dataclass(frozen=True)
class GPU:
    """One device. ``compute`` is C (100 = the whole GPU), ``oversubscription`` is r: jobs on this
    GPU may ask for up to ``capacity = r x C`` compute in total, but never more than
    ``memory_gb`` memory."""

    id: Hashable
    arch: str
    memory_gb: float
    compute: float = 100.0
    oversubscription: float = 1.0

    def __post_init__(self) -> None:
        check_id("gpu.id", self.id)
        if not isinstance(self.arch, str) or not self.arch:
            raise ConfigError("gpu.arch", self.arch, "must be a non-empty architecture name")
        object.__setattr__(self, "memory_gb", check_positive("gpu.memory_gb", self.memory_gb))
        object.__setattr__(self, "compute", check_positive("gpu.compute", self.compute))
        object.__setattr__(self, "oversubscription",
                           check_positive("gpu.oversubscription", self.oversubscription))

    @property
    def capacity(self) -> float:
        """r x C: the compute this GPU accepts in total (Eq. 2)."""
        return self.compute * self.oversubscription

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "arch": self.arch, "memory_gb": self.memory_gb,
                "compute": self.compute, "oversubscription": self.oversubscription}


@dataclass(frozen=True)
class Node:
    """A machine with ``cpus`` cores (Q_n) shared by the jobs on its ``gpus`` (stored as a tuple,
    in the order first-fit visits them; GPU ids are unique within the node)."""

    id: Hashable
    cpus: float
    gpus: tuple[GPU, ...] = ()

    def __post_init__(self) -> None:
        check_id("node.id", self.id)
        object.__setattr__(self, "cpus", check_number("node.cpus", self.cpus, low=0.0))
        gpus = tuple(self.gpus)
        seen: set = set()
        for i, gpu in enumerate(gpus):
            if not isinstance(gpu, GPU):
                raise ConfigError(f"node.gpus[{i}]", gpu, "must be a GPU")
            if gpu.id in seen:
                raise ConfigError(f"node.gpus[{i}].id", gpu.id, f"must be unique on node {self.id!r}")
            seen.add(gpu.id)
        object.__setattr__(self, "gpus", gpus)

    def gpu(self, gpu_id: Hashable) -> GPU:
        for gpu in self.gpus:
            if gpu.id == gpu_id:
                return gpu
        raise ConfigError("gpu_id", gpu_id, f"must name a GPU of node {self.id!r} "
                          f"({', '.join(repr(g.id) for g in self.gpus) or 'it has none'})")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "cpus": self.cpus, "gpus": [g.to_dict() for g in self.gpus]}


@dataclass(frozen=True)
class ArchDemand:
    """What a job needs on one GPU of one architecture: compute (percent), memory (GB) and its
    expected runtime there (seconds)."""

    compute: float
    memory_gb: float
    runtime: float


_ARCH_KEYS = ("compute", "memory_gb", "runtime")


@dataclass(frozen=True)
class Job:
    """A unit to place: one trial, one fused pack of trials, or one data-parallel trial.

    ``compute``/``memory_gb``/``runtime`` are the demand on one GPU of any architecture not named in
    ``per_arch``; ``per_arch`` maps an architecture to its own ``{compute, memory_gb, runtime}``
    (missing keys fall back to the top-level values). ``gpus`` > 1 asks for that many distinct GPUs,
    each carrying the per-GPU demand; ``cpus`` are cores per GPU occupied.

    A Job may carry derived numbers in its ``__dict__`` (``load.demand_table``'s rows, under
    ``_demand_row_...``): never part of its fields, equality, hash or ``to_dict``; valid because a
    Job never changes (``renamed`` copies them: they do not hold the id). A renamed copy also
    keeps its *origin* (the Job first renamed, under ``_origin``), on which ``demand_table``
    stores the rows it computes for the copy too: a study renames one template Job per trial on
    every placement call, and copies made after the first call start with the rows.
    """

    id: Hashable
    compute: float
    memory_gb: float
    cpus: float = 1
    runtime: float = 1.0
    per_arch: Mapping[str, Any] | None = field(default=None, hash=False)   # ArchDemand values once built
    gpus: int = 1

    def __post_init__(self) -> None:
        check_id("job.id", self.id)
        for name in ("compute", "memory_gb", "cpus", "runtime"):
            object.__setattr__(self, name, check_number(f"job.{name}", getattr(self, name), low=0.0))
        check_integer("job.gpus", self.gpus, low=1)
        object.__setattr__(self, "per_arch", self._normalise_per_arch(self.per_arch))

    def _normalise_per_arch(self, per_arch: Any) -> Mapping[str, ArchDemand]:
        if per_arch is None:
            return MappingProxyType({})
        check_mapping("job.per_arch", per_arch, what="a mapping of architecture names to demands")
        out = {}
        for arch, demand in per_arch.items():
            if not isinstance(arch, str) or not arch:
                raise ConfigError("job.per_arch", arch, "must have architecture names as keys")
            if isinstance(demand, ArchDemand):
                demand = {k: getattr(demand, k) for k in _ARCH_KEYS}
            check_mapping(f"job.per_arch.{arch}", demand,
                          what="a mapping with compute, memory_gb and/or runtime")
            for key in demand:
                if key not in _ARCH_KEYS:
                    raise ConfigError(f"job.per_arch.{arch}.{key}", demand[key],
                                      f"is not a known field (known: {', '.join(_ARCH_KEYS)})")
            out[arch] = ArchDemand(*(check_number(f"job.per_arch.{arch}.{k}",
                                                  demand.get(k, getattr(self, k)), low=0.0)
                                     for k in _ARCH_KEYS))
        return MappingProxyType(out)

    def renamed(self, job_id: Hashable) -> "Job":
        """This job under id ``job_id``: only the id is checked (the rest was on construction),
        so it is much cheaper than building an equal Job anew."""
        out = object.__new__(Job)
        found = out.__dict__
        found.update(self.__dict__)
        object.__setattr__(out, "id", check_id("job.id", job_id))
        if "_origin" not in found:
            found["_origin"] = self
        return out

    def demand(self, arch: str) -> ArchDemand:
        """The per-GPU demand on ``arch`` (the top-level values when ``arch`` is not in per_arch)."""
        found = self.per_arch.get(arch) if self.per_arch else None
        return found if found is not None else ArchDemand(self.compute, self.memory_gb, self.runtime)

    def expected_runtime(self, archs: Iterable[str] = ()) -> float:
        """The longest expected runtime over ``archs`` (the top-level runtime when empty): the key
        the decreasing policies sort by."""
        return max((self.demand(a).runtime for a in archs), default=self.runtime)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "compute": self.compute, "memory_gb": self.memory_gb,
                             "cpus": self.cpus, "runtime": self.runtime, "gpus": self.gpus}
        if self.per_arch:
            d["per_arch"] = {a: {k: getattr(v, k) for k in _ARCH_KEYS} for a, v in self.per_arch.items()}
        return d


Device = tuple  # (node_id, gpu_id)


def as_devices(value: Any) -> tuple[Device, ...]:
    """``(node_id, gpu_id)`` or a sequence of them, as a tuple of ``(node_id, gpu_id)`` pairs."""
    if isinstance(value, tuple) and len(value) == 2 and not isinstance(value[0], (tuple, list)):
        return (value,)
    if not isinstance(value, (tuple, list)):
        raise PlacementError(f"Devices {value!r} must be (node_id, gpu_id) or a sequence of them")
    out = []
    for dev in value:
        if not isinstance(dev, (tuple, list)) or len(dev) != 2:
            raise PlacementError(f"Device {dev!r} must be a (node_id, gpu_id) pair")
        out.append(tuple(dev))
    return tuple(out)
