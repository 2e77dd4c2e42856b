"""The simulator's only contact with ``hypersack.placement``: building Jobs and Clusters."""
from __future__ import annotations

from typing import Any, Mapping

__all__ = ["make_job", "cluster_from_dict", "policy_names", "check_policy", "policy_label"]


def make_job(perf: Any, record: Any) -> Any:
    """A placement Job for ``record``: per-device demand from the profiles of every architecture
    the scenario's cluster has (``perf.archs``), ``gpus`` = the trial's data-parallel world size
    (its ``resources``, at least the profile's ``gpus``: a model always trained on k devices).
    Memory is ``perf.memory_gb`` (raised after an out-of-memory); a trial that fuses demands a
    pack member's share (``_member_job``)."""
    from hypersack.placement import Job
    fusion = getattr(perf, "fusion", None)
    if fusion is not None and fusion.fuses(record.config, record.info.get("pack_size")):
        return _member_job(perf, fusion, record)
    k = max(1, int(getattr(record, "resources", 1) or 1),
            int(perf.profile(record.config, perf.reference_arch).gpus))
    per_arch: dict[str, dict[str, float]] = {}
    floors = perf.has_memory_floors()
    for arch in perf.archs:
        p = perf.profile(record.config, arch)
        memory = perf.memory_gb(record.config, arch) if floors else p.memory_gb
        per_arch[arch] = {"compute": p.utilization, "memory_gb": memory,
                          "runtime": perf.expected_runtime(record.config, arch) / (k * perf.dp_efficiency(k))}
    ref = per_arch[perf.reference_arch]
    cpus = perf.profile(record.config, perf.reference_arch).cpus
    return Job(record.trial_id, ref["compute"], ref["memory_gb"], cpus=cpus, runtime=ref["runtime"],
               per_arch=per_arch, gpus=k)


def _member_job(perf: Any, fusion: Any, record: Any) -> Any:
    """A pack member's Job: ``core.packs.member_job``, as the local machine's members, of a
    trial asking for a whole device (compute 100), its profile's memory and cores, each
    architecture with its own memory and runtime."""
    from hypersack.core.allocator import Demand
    from hypersack.core.packs import member_job
    config, ref_arch = record.config, perf.reference_arch
    cpus = perf.profile(config, ref_arch).cpus
    per_arch = {arch: {"memory_gb": perf.memory_gb(config, arch),
                       "runtime": perf.expected_runtime(config, arch)} for arch in perf.archs}
    return member_job(record, Demand(100.0, perf.memory_gb(config, ref_arch), cpus),
                      fusion.max_members, per_arch, per_arch[ref_arch]["runtime"])


def cluster_from_dict(d: Mapping[str, Any]) -> Any:
    """``Cluster.from_dict`` with every node and GPU id turned into a string (Launch commands name
    devices by strings)."""
    from hypersack.placement import GPU, Cluster, Node
    cluster = Cluster.from_dict(d)
    nodes = [Node(str(n.id), n.cpus, tuple(GPU(str(g.id), g.arch, g.memory_gb, g.compute, g.oversubscription)
                                           for g in n.gpus)) for n in cluster.nodes]
    return Cluster(nodes)


def policy_names() -> list[str]:
    from hypersack.placement import policy_names as names
    return list(names())


def check_policy(value: Any, field: str) -> Any:
    """A scenario's placement: a policy name or ``{policy: hay, w_frag: .., w_entire: ..}``
    (ConfigError naming ``field`` otherwise); returned as given."""
    from hypersack.placement import parse_placement
    parse_placement(value, field)
    return value


def policy_label(value: Any) -> str:
    """``hay`` for a name, ``hay(w_frag=1,w_entire=2)`` for a mapping with options."""
    from hypersack.placement import parse_placement
    name, options = parse_placement(value)
    if not options:
        return name
    return f"{name}({','.join(f'{k}={v:g}' for k, v in options.items())})"
