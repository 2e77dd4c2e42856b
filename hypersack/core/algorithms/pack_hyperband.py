"""Pack-aware Hyperband (Pack, Liu et al., Algorithm 2): Hyperband whose rungs train in packs.

Each bracket samples its ``n`` configs up front (from the same seeded stream, in the same order,
as :class:`~hypersack.core.algorithms.hyperband.Hyperband` with the same seed: the two search
the same configs), groups them into packs with ``hypersack.core.packs`` and hands them out
pack by pack. When a rung closes, its best ``n_{i+1}`` trials (the top ``1/eta``, as in
Hyperband) are *re-packed* among themselves before they resume into the next rung, and their
promotions come out pack by pack too.

Every Suggestion carries ``info = {"bracket", "rung", "pack", "pack_size", "fuse_key"}``:
``pack`` is an integer unique over the study (a new one for every rung's packing), ``pack_size``
how many trials share it, ``fuse_key`` the values of the fusibility keys (equal within a pack).
An executor fuses the trials of one pack into one process (``hypersack.fusion.run_pack``). A
promotion handed out by ``promote()`` carries no info: ask :meth:`PackHyperband.pack_info`.

Groupings (option ``grouping``): ``"knn"`` (the paper's pack_opt: random centroid, nearest
neighbours within ``threshold``; distance over index-encoded hyperparameters, where a float or
int axis is indexed on ``levels_per_axis`` grid points of its domain and categorical axes count
0/1), ``"random"`` and ``"batch_size"`` (the paper's baselines). A pack never exceeds
``max_pack`` members and never mixes fusibility keys. Packing seeds derive from ``seed`` and
(bracket, rung) only, so the config stream is untouched. Pure and deterministic for a seed.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from hypersack.core.algorithms.base import Suggestion, register_algorithm
from hypersack.core.algorithms.hyperband import hyperband_steps
from hypersack.core.algorithms.sha import (DISCARDED, PAUSED, QUEUED, BracketSearch, SHBracket,
                                           check_horizon, ranked)
from hypersack.core.objective import Objective
from hypersack.core.packs import (METRICS, batch_size_packs, fusibility_key, pack_opt,
                                    random_packs)
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError
from hypersack.validation import INT53, check_choice, check_integer, check_limit

__all__ = ["PackHyperband", "GROUPINGS"]

GROUPINGS = ("knn", "random", "batch_size")

# (bracket index, next rung, survivor trial ids best first) -> packs of those trial ids
Repacker = Callable[[int, int, list[int]], list[list[int]]]


class PackBracket(SHBracket):
    """A synchronous bracket whose promotions are re-packed and queued pack by pack."""

    def __init__(self, index: int, rungs: list[tuple[int, int]], repack: Repacker):
        super().__init__(rungs)
        self.index = index
        self._repack = repack

    def _promote_from(self, i: int) -> None:
        waiting = {t: v for t, v in self.records[i].items() if self.trials[t][1] == PAUSED}
        order = ranked(waiting)
        keep = self.rungs[i + 1][0]
        for trial_id in order[keep:]:
            self.trials[trial_id][1] = DISCARDED
        for pack in self._repack(self.index, i + 1, order[:keep]):
            for trial_id in pack:
                self.trials[trial_id] = [i + 1, QUEUED]
                self.queue.append(trial_id)
        self.dirty.update(order)


def _check_threshold(value: Any) -> float:
    if value is None:
        return math.inf
    return check_limit("algorithm.threshold", value, hint="(null or inf: no limit)")


def _check_keys(name: str, value: Any, space: SearchSpace) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"algorithm.{name}", value, "must be a list of parameter names")
    unknown = [k for k in value if k not in space]
    if unknown:
        raise ConfigError(f"algorithm.{name}", list(value),
                          f"names {unknown}, which the search space {sorted(space)} lacks")
    return tuple(value)


def _check_choice(name: str, value: Any, allowed: Sequence[str]) -> str:
    return str(check_choice(f"algorithm.{name}", value, allowed))


@register_algorithm("pack_hyperband")
class PackHyperband(BracketSearch):
    """Hyperband over packs (see the module docstring).

    Options as :class:`Hyperband` (``min_t``, ``max_t``, ``reduction_factor``, ``repeat``: here
    1 by default, one iteration) plus:
    ``grouping`` ("knn" | "random" | "batch_size"), ``max_pack`` (members per pack, >= 1: the
    memory cap, e.g. ``packs.member_cap`` of a measured footprint), ``threshold`` (largest
    kNN distance a centroid accepts, >= 0; None/inf: no limit), ``fusibility_keys`` (parameters
    that change tensor shapes; only equal values fuse), ``metric`` ("euclidean" | "manhattan"),
    ``levels_per_axis`` (grid points that index a float/int axis, >= 2), ``batch_key`` (the batch
    size parameter for ``grouping="batch_size"``), ``distance_keys`` (the parameters the kNN
    distance uses; default: all but the fusibility keys. Naming only those that change the fused
    step's cost, e.g. batch size and optimizer, packs for speed rather than for likeness),
    ``min_pack`` (>= 1, <= max_pack: a pack with fewer members is split into singleton packs,
    which an executor runs as plain trials; fusing pays only from some measured size on).
    """

    def __init__(self, space: SearchSpace, objective: Objective, seed: int = 0, min_t: int = 1,
                 max_t: int = 81, reduction_factor: int = 3, repeat: int = 1,
                 grouping: str = "knn", max_pack: int = 8, threshold: float | None = None,
                 fusibility_keys: Sequence[str] = (), metric: str = "euclidean",
                 levels_per_axis: int = 5, batch_key: str = "batch_size",
                 distance_keys: Sequence[str] | None = None, min_pack: int = 1):
        min_t, max_t = check_horizon(min_t, max_t)
        eta = check_integer("algorithm.reduction_factor", reduction_factor, low=2, high=INT53)
        repeat = check_integer("algorithm.repeat", repeat, low=1, high=INT53)
        self.grouping = _check_choice("grouping", grouping, GROUPINGS)
        self.max_pack = check_integer("algorithm.max_pack", max_pack, low=1, high=INT53)
        self.min_pack = check_integer("algorithm.min_pack", min_pack, low=1, high=INT53)
        if self.min_pack > self.max_pack:
            raise ConfigError("algorithm.min_pack", min_pack, f"must be <= max_pack ({max_pack})")
        self.threshold = _check_threshold(threshold)
        self.fusibility_keys = _check_keys("fusibility_keys", fusibility_keys, space)
        self.distance_keys = tuple(k for k in space if k not in self.fusibility_keys) \
            if distance_keys is None else _check_keys("distance_keys", distance_keys, space)
        self.metric = _check_choice("metric", metric, METRICS)
        self.levels_per_axis = check_integer("algorithm.levels_per_axis", levels_per_axis, low=2, high=INT53)
        if grouping == "batch_size" and batch_key not in space:
            raise ConfigError("algorithm.batch_key", batch_key,
                              f"must name a parameter of the search space {sorted(space)}")
        self.batch_key = batch_key
        super().__init__(space, objective, seed, hyperband_steps(min_t, max_t, eta),
                         repeat=repeat)
        self._configs: dict[int, dict[str, Any]] = {}     # trial id -> config
        self._plans: dict[int, list[tuple[dict[str, Any], int]]] = {}  # bracket -> rung 0 to hand
        self._packs: dict[int, dict[str, Any]] = {}       # pack id -> bracket, rung, size, key
        self._pack_of: dict[int, int] = {}                # trial id -> its current pack id
        # what changed since ``state_delta`` (see there): new packs, new plans, moved trials
        self._new_packs: list[int] = []
        self._new_plans: dict[int, list[Any]] = {}        # bracket -> [offset, plan]
        self._moved: set[int] = set()

    def _make_bracket(self, index: int, rungs: list[tuple[int, int]]) -> SHBracket:
        return PackBracket(index, rungs, self._repack)

    # ---- packing ------------------------------------------------------------------------------

    def group(self, configs: Sequence[Mapping[str, Any]], bracket: int, rung: int) -> list[list[int]]:
        """Packs of indices into ``configs`` (the grouping of this bracket's rung); a pack
        smaller than ``min_pack`` is split into singletons."""
        packs = self._grouping(configs, bracket, rung)
        return [part for pack in packs
                for part in ([pack] if len(pack) >= self.min_pack else [[i] for i in pack])]

    def _grouping(self, configs: Sequence[Mapping[str, Any]], bracket: int,
                  rung: int) -> list[list[int]]:
        seed = int(np.random.default_rng([self.seed, bracket, rung]).integers(2**63))
        keys = list(self.fusibility_keys)
        if self.grouping == "random":
            return random_packs(configs, architecture_keys=keys, max_members=self.max_pack,
                                seed=seed)
        if self.grouping == "batch_size":
            return batch_size_packs(configs, architecture_keys=keys, max_members=self.max_pack,
                                    batch_key=self.batch_key)
        levels = {k: self.space[k].grid(self.levels_per_axis) for k in self.distance_keys}
        return pack_opt(configs, architecture_keys=keys, max_members=self.max_pack,
                        threshold=self.threshold, seed=seed, keys=list(self.distance_keys),
                        levels=levels,
                        metric=self.metric)

    def _new_pack(self, bracket: int, rung: int, config: Mapping[str, Any], size: int) -> int:
        pack_id = len(self._packs)
        key = {k: v for k, v in fusibility_key(config, self.fusibility_keys)}
        self._packs[pack_id] = {"bracket": bracket, "rung": rung, "size": size, "fuse_key": key}
        self._new_packs.append(pack_id)
        return pack_id

    def _plan_bracket(self, bracket: int) -> None:
        """Sample the bracket's first-rung configs and queue them pack by pack."""
        n = self._brackets[bracket].rungs[0][0]
        configs = [self.space.sample(self._rng) for _ in range(n)]
        plan: list[tuple[dict[str, Any], int]] = []
        for pack in self.group(configs, bracket, 0):
            pack_id = self._new_pack(bracket, 0, configs[pack[0]], len(pack))
            plan.extend((configs[i], pack_id) for i in pack)
        self._plans[bracket] = plan
        self._new_plans[bracket] = [0, [[c, p] for c, p in plan]]

    def _repack(self, bracket: int, rung: int, survivors: list[int]) -> list[list[int]]:
        configs = [self._configs[t] for t in survivors]
        packs = []
        for pack in self.group(configs, bracket, rung):
            members = [survivors[i] for i in pack]
            pack_id = self._new_pack(bracket, rung, configs[pack[0]], len(members))
            self._pack_of.update((t, pack_id) for t in members)
            self._moved.update(members)
            packs.append(members)
        return packs

    # ---- the Algorithm interface -------------------------------------------------------------

    def pack_info(self, trial_id: int) -> dict[str, Any] | None:
        """``{"bracket", "rung", "pack", "pack_size", "fuse_key"}`` of the trial's current pack
        (the one it trains in next, after a promotion), or None for an unknown trial."""
        pack_id = self._pack_of.get(trial_id)
        if pack_id is None:
            return None
        pack = self._packs[pack_id]
        return {"bracket": pack["bracket"], "rung": pack["rung"], "pack": pack_id,
                "pack_size": pack["size"], "fuse_key": dict(pack["fuse_key"])}

    def trial_info(self, trial_id: int) -> dict[str, Any]:
        return self.pack_info(trial_id) or {}

    def suggest(self, trial_id: int) -> Suggestion | None:
        resumed = self.promote()
        if resumed is not None:
            return Suggestion(info=self.pack_info(resumed) or {}, resume=resumed)
        index = self._filling()
        if index is None:
            return None
        if index not in self._plans:
            self._plan_bracket(index)
        config, pack_id = self._plans[index].pop(0)
        self._brackets[index].add(trial_id)
        self._touched.add(index)
        self._home[trial_id] = index
        self._configs[trial_id] = config
        self._pack_of[trial_id] = pack_id
        self._moved.add(trial_id)
        return Suggestion(dict(config), self.pack_info(trial_id) or {})

    def state_delta(self) -> dict[str, Any] | None:
        """The brackets' head and parts (``BracketSearch.state_delta``) plus the packs' parts
        changed since the previous call: ``pk<pack>`` a pack (written once), ``pl<bracket>``
        ``[offset, plan]`` the bracket's first-rung plan as made (written once; the first
        ``created - offset`` entries of it have been handed out), ``pc<trial>`` ``[config,
        pack]`` (written when the trial starts and when a promotion re-packs it)."""
        state = super().state_delta()
        assert state is not None
        parts = state["parts"]
        for pack_id in self._new_packs:
            parts[f"pk{pack_id}"] = self._packs[pack_id]
        for bracket, plan in sorted(self._new_plans.items()):
            parts[f"pl{bracket}"] = plan
        for trial_id in sorted(self._moved):
            parts[f"pc{trial_id}"] = [self._configs[trial_id], self._pack_of[trial_id]]
        self._new_packs, self._new_plans, self._moved = [], {}, set()
        return state

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["pack"] = {
            "configs": {str(t): c for t, c in self._configs.items()},
            "plans": {str(b): [[c, p] for c, p in plan] for b, plan in self._plans.items()},
            "packs": [self._packs[p] for p in range(len(self._packs))],
            "pack_of": {str(t): p for t, p in self._pack_of.items()}}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """From ``state_dict()`` or from a head with every part (``state_delta``'s); every
        part is then due in the next ``state_delta``."""
        super().load_state_dict(state)
        if "parts" in state:
            self._load_pack_parts(state["parts"])
        else:
            saved = state["pack"]
            self._configs = {int(t): dict(c) for t, c in saved["configs"].items()}
            self._plans = {int(b): [(dict(c), int(p)) for c, p in plan]
                           for b, plan in saved["plans"].items()}
            self._packs = {i: _pack_record(p) for i, p in enumerate(saved["packs"])}
            self._pack_of = {int(t): int(p) for t, p in saved["pack_of"].items()}
        self._new_packs = sorted(self._packs)
        self._new_plans = {b: [self._brackets[b].created, [[c, p] for c, p in plan]]
                           for b, plan in self._plans.items()}
        self._moved = set(self._configs)

    def _load_pack_parts(self, parts: Mapping[str, Any]) -> None:
        self._configs, self._plans, self._packs, self._pack_of = {}, {}, {}, {}
        for key, part in parts.items():
            if part is None or key[0] != "p":
                continue
            kind, number = key[:2], int(key[2:])
            if kind == "pk":
                self._packs[number] = _pack_record(part)
            elif kind == "pl":
                offset, plan = int(part[0]), part[1]
                done = self._brackets[number].created - offset
                self._plans[number] = [(dict(c), int(p)) for c, p in plan[done:]]
            elif kind == "pc":
                self._configs[number], self._pack_of[number] = dict(part[0]), int(part[1])
        self._packs = dict(sorted(self._packs.items()))


def _pack_record(saved: Mapping[str, Any]) -> dict[str, Any]:
    return {"bracket": int(saved["bracket"]), "rung": int(saved["rung"]),
            "size": int(saved["size"]), "fuse_key": dict(saved["fuse_key"])}
