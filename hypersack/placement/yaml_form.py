"""Parsing the cluster YAML form (see ``Cluster.from_dict``) with errors naming dotted fields."""
from __future__ import annotations

from typing import Any, Mapping

from hypersack.placement.model import GPU, Node, check_id
from hypersack.errors import ConfigError
from hypersack.validation import (MAX_DEVICES_PER_NODE, MAX_OVERSUBSCRIPTION, check_integer,
                                  check_mapping, check_number)

__all__ = ["cluster_nodes_from_dict"]

_CLUSTER_KEYS = {"nodes", "oversubscription"}
_NODE_KEYS = {"id", "cpus", "gpus"}
_GPU_KEYS = {"id", "arch", "memory_gb", "compute", "oversubscription"}
_TEMPLATE_KEYS = (_GPU_KEYS - {"id"}) | {"count"}


def _check_keys(where: str, given: Any, allowed: set[str]) -> None:
    check_mapping(where, given)
    for key in given:
        if key not in allowed:
            raise ConfigError(f"{where}.{key}", given[key],
                              f"is not a known field (known: {', '.join(sorted(allowed))})")


def _reprefix(exc: ConfigError, where: str) -> ConfigError:
    """Turn ``gpu.memory_gb`` raised by a constructor into ``cluster.nodes[0].gpus[1].memory_gb``."""
    tail = exc.field.split(".", 1)[1] if "." in exc.field else exc.field
    return ConfigError(f"{where}.{tail}", exc.value, exc.problem)


def _ratios(d: Mapping[str, Any], where: str) -> dict[str, float]:
    ratios = d.get("oversubscription") or {}
    check_mapping(f"{where}.oversubscription", ratios,
                  what="a mapping of architecture names to ratios, e.g. {A100: 3}")
    return {str(arch): check_number(f"{where}.oversubscription.{arch}", r, low=0.0, low_open=True,
                                     high=MAX_OVERSUBSCRIPTION)
            for arch, r in ratios.items()}


def _gpu(spec: Mapping[str, Any], gpu_id: Any, ratios: Mapping[str, float], where: str) -> GPU:
    for key in ("arch", "memory_gb"):
        if key not in spec:
            raise ConfigError(f"{where}.{key}", None, "is required")
    arch = spec["arch"]
    ratio = spec.get("oversubscription", ratios.get(arch, 1.0) if isinstance(arch, str) else 1.0)
    check_number(f"{where}.oversubscription", ratio, low=0.0, low_open=True, high=MAX_OVERSUBSCRIPTION)
    try:
        return GPU(gpu_id, arch, spec["memory_gb"], spec.get("compute", 100.0), ratio)
    except ConfigError as exc:
        raise _reprefix(exc, where) from None


def _gpus(spec: Any, ratios: Mapping[str, float], where: str) -> list[GPU]:
    entries = [spec] if isinstance(spec, Mapping) else spec
    if not isinstance(entries, list):
        raise ConfigError(where, spec, "must be a list of GPUs or a template {count, arch, memory_gb}")
    out: list[GPU] = []
    for i, entry in enumerate(entries):
        here = where if isinstance(spec, Mapping) else f"{where}[{i}]"
        if isinstance(entry, Mapping) and "count" in entry:
            _check_keys(here, entry, _TEMPLATE_KEYS)
            count = check_integer(f"{here}.count", entry["count"], low=0, high=MAX_DEVICES_PER_NODE)
            start = len(out)
            out.extend(_gpu(entry, start + k, ratios, here) for k in range(count))
        else:
            _check_keys(here, entry, _GPU_KEYS)
            out.append(_gpu(entry, entry.get("id", len(out)), ratios, here))
    return out


def _node(spec: Any, index: int, ratios: Mapping[str, float], where: str) -> Node:
    _check_keys(where, spec, _NODE_KEYS)
    if "cpus" not in spec:
        raise ConfigError(f"{where}.cpus", None, "is required (CPU cores of the node)")
    node_id = check_id(f"{where}.id", spec.get("id", index))
    gpus = _gpus(spec.get("gpus", []), ratios, f"{where}.gpus")
    try:
        return Node(node_id, spec["cpus"], tuple(gpus))
    except ConfigError as exc:
        if exc.field.startswith("node.gpus["):
            raise ConfigError(f"{where}.{exc.field[len('node.'):]}", exc.value, exc.problem) from None
        raise _reprefix(exc, where) from None


def cluster_nodes_from_dict(d: Any, where: str = "cluster") -> list[Node]:
    """The nodes the cluster YAML form ``d`` describes (``where`` prefixes error fields)."""
    _check_keys(where, d, _CLUSTER_KEYS)
    ratios = _ratios(d, where)
    nodes = d.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise ConfigError(f"{where}.nodes", nodes, "must be a non-empty list of nodes")
    out = [_node(spec, i, ratios, f"{where}.nodes[{i}]") for i, spec in enumerate(nodes)]
    seen: set = set()
    for i, node in enumerate(out):
        if node.id in seen:
            raise ConfigError(f"{where}.nodes[{i}].id", node.id, "must be unique in the cluster")
        seen.add(node.id)
    return out
