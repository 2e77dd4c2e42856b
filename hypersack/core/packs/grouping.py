"""Which trials fuse into one pack: the fusibility key and ``pack_opt`` (Pack, Sec. 5.2).

Pure decision code: plain configs (mappings) in, lists of packs out. A *pack* is a list of
indices into the ``configs`` given, run as one fused job (``hypersack.fusion``); a singleton
pack is a trial that runs alone. Every function is deterministic given its ``seed``.

- ``fusibility_key(config, architecture_keys)``: trials fuse only when the config keys that
  change tensor shapes (the task declares them, e.g. ``hidden``) have equal values.
- ``pack_opt``: the paper's kNN heuristic. Repeatedly pick a random centroid among the
  unpacked configs of one fusibility group, then add its nearest neighbours (ties broken by
  index) whose distance is <= ``threshold`` until the memory cap is reached.
- Distance (``distance_matrix``): numeric hyperparameters are index-encoded (a value's position
  among the sorted distinct levels; the paper's "use the index"), categorical ones (strings,
  booleans, anything not a number) contribute 0 when equal and 1 otherwise. ``metric`` is
  ``"euclidean"`` (the paper's text) or ``"manhattan"`` (the paper's worked example: configs
  differing by 4 batch-size levels and the optimizer are at distance 5).
- Baselines from the paper: ``random_packs`` (random groups up to the cap) and
  ``batch_size_packs`` (only equal batch sizes fuse, greedily up to the cap). Both stay within
  one fusibility group, since fused training needs one architecture.
- Memory cap: ``max_members`` (a count, e.g. from ``member_cap`` applied to a measured
  per-member footprint) and/or ``member_memory`` + ``capacity`` (a sum, in any one unit).
"""
from __future__ import annotations

import math
from typing import Any, Hashable, Mapping, Sequence

import numpy as np

from hypersack.errors import ConfigError
from hypersack.validation import (check_choice, check_integer, check_limit, check_number,
                                  check_positive, is_number)

__all__ = ["fusibility_key", "group_by_key", "member_cap", "encode_configs", "distance_matrix",
           "pack_opt", "random_packs", "batch_size_packs", "METRICS"]

METRICS = ("euclidean", "manhattan")
FusibilityKey = tuple[tuple[str, Hashable], ...]


def _hashable(value: Any) -> Hashable:
    """Lists and mappings become tuples so that a key can hold any YAML value."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _hashable(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    scalar: Hashable = value
    return scalar


def fusibility_key(config: Mapping[str, Any], architecture_keys: Sequence[str]) -> FusibilityKey:
    """The values of the shape-changing keys; equal keys mean the trials can fuse.

    A key missing from ``config`` is recorded as None (the task's default applies to all alike).
    """
    return tuple((key, _hashable(config.get(key))) for key in sorted(architecture_keys))


def group_by_key(configs: Sequence[Mapping[str, Any]],
                 architecture_keys: Sequence[str]) -> list[list[int]]:
    """Indices of ``configs`` grouped by fusibility key, groups in order of first appearance."""
    groups: dict[FusibilityKey, list[int]] = {}
    for i, config in enumerate(configs):
        groups.setdefault(fusibility_key(config, architecture_keys), []).append(i)
    return list(groups.values())


def member_cap(capacity_bytes: float, per_member_bytes: float, base_bytes: float = 0.0) -> int:
    """Members that fit a device: ``floor((capacity - base) / per_member)``, at least 1.

    ``per_member_bytes`` is the measured growth of peak memory per added member
    (``hypersack.fusion.measure_member_memory``); ``base_bytes`` the pack's fixed part
    (data set, framework context). A member that does not fit even alone still gets a pack of 1:
    whether it fits the device at all is the placement policy's question, not packing's.
    """
    check_number("packing.capacity_bytes", capacity_bytes, low=0.0)
    check_positive("packing.per_member_bytes", per_member_bytes)
    check_number("packing.base_bytes", base_bytes, low=0.0)
    return max(1, int((capacity_bytes - base_bytes) // per_member_bytes))


# ---- distance ----------------------------------------------------------------------------------


def _default_keys(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    return sorted({str(k) for config in configs for k in config})


def _column(configs: Sequence[Mapping[str, Any]], key: str,
            levels: Sequence[Any] | None) -> tuple[np.ndarray, bool]:
    """``(values, numeric)``: level indices for a numeric key, else category codes."""
    values = [config.get(key) for config in configs]
    if all(is_number(v) for v in values) and (levels is None or all(is_number(v) for v in levels)):
        grid = np.unique(np.asarray(levels if levels is not None else values, dtype=float))
        x = np.asarray(values, dtype=float)
        pos = np.clip(np.searchsorted(grid, x), 0, len(grid) - 1)
        lower = np.clip(pos - 1, 0, len(grid) - 1)
        nearer_lower = np.abs(grid[lower] - x) < np.abs(grid[pos] - x)
        return np.where(nearer_lower, lower, pos).astype(float), True
    codes: dict[Hashable, int] = {}
    return np.asarray([codes.setdefault(_hashable(v), len(codes)) for v in values], float), False


def encode_configs(configs: Sequence[Mapping[str, Any]], keys: Sequence[str] | None = None,
                   levels: Mapping[str, Sequence[Any]] | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, numeric)``: codes[i, j] encodes key j of config i; numeric[j] says how.

    Numeric keys are level indices (``levels[key]`` when given, e.g. a grid, else the sorted
    distinct values present; a value between levels takes the nearest). Other keys are category
    codes compared only for equality.
    """
    keys = list(keys) if keys is not None else _default_keys(configs)
    levels = levels or {}
    columns = [_column(configs, key, levels.get(key)) for key in keys]
    codes = np.stack([c for c, _ in columns], axis=1) if columns else np.zeros((len(configs), 0))
    return codes, np.asarray([numeric for _, numeric in columns], dtype=bool)


def distance_matrix(configs: Sequence[Mapping[str, Any]], keys: Sequence[str] | None = None,
                    levels: Mapping[str, Sequence[Any]] | None = None,
                    metric: str = "euclidean") -> np.ndarray:
    """Pairwise distances ``[n, n]`` between configs (see the module docstring)."""
    check_choice("packing.metric", metric, METRICS)
    codes, numeric = encode_configs(configs, keys, levels)
    diff = np.abs(codes[:, None, :] - codes[None, :, :])
    diff[:, :, ~numeric] = (diff[:, :, ~numeric] > 0).astype(float)
    out: np.ndarray = diff.sum(axis=2) if metric == "manhattan" else np.sqrt((diff ** 2).sum(axis=2))
    return out


# ---- caps --------------------------------------------------------------------------------------

class _Cap:
    """The memory cap of one pack: a member count and/or a summed memory."""

    def __init__(self, n: int, max_members: int | None, member_memory: Sequence[float] | None,
                 capacity: float | None):
        if max_members is not None:
            check_integer("packing.max_members", max_members, low=1)
        if (member_memory is None) != (capacity is None):
            raise ConfigError("packing.capacity", capacity,
                              "must be given together with member_memory (both or neither)")
        if member_memory is not None:
            if len(member_memory) != n:
                raise ConfigError("packing.member_memory", list(member_memory),
                                  f"must hold one number per config ({n})")
            for i, memory in enumerate(member_memory):
                check_number(f"packing.member_memory[{i}]", memory, low=0.0)
            check_positive("packing.capacity", capacity)
        self.max_members = max_members
        self.memory = member_memory
        self.capacity = capacity

    def fits(self, pack: list[int], candidate: int) -> bool:
        if self.max_members is not None and len(pack) + 1 > self.max_members:
            return False
        if self.memory is None or self.capacity is None:    # capacity is set whenever memory is
            return True
        used = sum(self.memory[i] for i in pack)
        return used + self.memory[candidate] <= self.capacity


def _fill(order: Sequence[int], cap: _Cap) -> list[list[int]]:
    """Greedy packs over ``order``: a member joins the open pack while it fits, else opens one."""
    packs: list[list[int]] = []
    for i in order:
        if packs and cap.fits(packs[-1], i):
            packs[-1].append(i)
        else:
            packs.append([i])
    return packs


def _check_threshold(threshold: float) -> None:
    check_limit("packing.threshold", threshold)


# ---- pack_opt and baselines --------------------------------------------------------------------

def _knn_group(members: list[int], dist: np.ndarray, threshold: float, cap: _Cap,
               rng: np.random.Generator) -> list[list[int]]:
    """The kNN heuristic over one fusibility group."""
    remaining = list(members)
    packs = []
    while remaining:
        centroid = remaining[int(rng.integers(len(remaining)))]
        pack = [centroid]
        neighbours = sorted((j for j in remaining if j != centroid),
                            key=lambda j: (dist[centroid, j], j))
        for j in neighbours:
            if dist[centroid, j] > threshold:
                break
            if cap.fits(pack, j):
                pack.append(j)
        packs.append(sorted(pack))
        taken = set(pack)
        remaining = [j for j in remaining if j not in taken]
    return packs


def pack_opt(configs: Sequence[Mapping[str, Any]], *, architecture_keys: Sequence[str] = (),
             max_members: int | None = None, threshold: float = math.inf, seed: int = 0,
             keys: Sequence[str] | None = None, levels: Mapping[str, Sequence[Any]] | None = None,
             metric: str = "euclidean", member_memory: Sequence[float] | None = None,
             capacity: float | None = None) -> list[list[int]]:
    """Group ``configs`` into packs with the paper's kNN heuristic.

    ``keys``: the hyperparameters the distance uses (default: every key present, minus the
    architecture keys, which are equal within a group anyway). ``threshold`` (>= 0): the most
    distant config a centroid accepts; 0 packs only identical encodings, ``inf`` packs by
    nearness alone. Returns packs of sorted indices; every index appears exactly once.
    """
    _check_threshold(threshold)
    cap = _Cap(len(configs), max_members, member_memory, capacity)
    if keys is None:
        keys = [k for k in _default_keys(configs) if k not in set(architecture_keys)]
    dist = distance_matrix(configs, keys, levels, metric)
    rng = np.random.default_rng(seed)
    packs: list[list[int]] = []
    for group in group_by_key(configs, architecture_keys):
        packs.extend(_knn_group(group, dist, threshold, cap, rng))
    return packs


def random_packs(configs: Sequence[Mapping[str, Any]], *, architecture_keys: Sequence[str] = (),
                 max_members: int | None = None, seed: int = 0,
                 member_memory: Sequence[float] | None = None,
                 capacity: float | None = None) -> list[list[int]]:
    """The paper's Random Pack baseline: shuffle each fusibility group, fill packs greedily."""
    cap = _Cap(len(configs), max_members, member_memory, capacity)
    rng = np.random.default_rng(seed)
    packs: list[list[int]] = []
    for group in group_by_key(configs, architecture_keys):
        order = [group[int(k)] for k in rng.permutation(len(group))]
        packs.extend(sorted(p) for p in _fill(order, cap))
    return packs


def batch_size_packs(configs: Sequence[Mapping[str, Any]], *,
                     architecture_keys: Sequence[str] = (), max_members: int | None = None,
                     batch_key: str = "batch_size",
                     member_memory: Sequence[float] | None = None,
                     capacity: float | None = None) -> list[list[int]]:
    """The paper's Batch-size Pack baseline: only equal batch sizes fuse, greedily up to the cap."""
    cap = _Cap(len(configs), max_members, member_memory, capacity)
    keys = tuple(architecture_keys) + (batch_key,)
    packs: list[list[int]] = []
    for group in group_by_key(configs, keys):
        packs.extend(_fill(group, cap))
    return packs
