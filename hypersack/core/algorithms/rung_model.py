"""The model of a multi-fidelity algorithm for any sampler, fitted on the results trials record
at rungs, in one of two ways (``fit``):

* ``"largest"`` (BOHB, Falkner et al., ICML 2018): one incremental Optuna model per rung, the
  proposal from the largest rung with ``min_points`` results.
* ``"all"`` (what Optuna's TPE does beside a pruner): ONE model fed every result, a result at the
  top fidelity as a COMPLETE trial and one at a lower rung as a PRUNED trial stopped there, so
  that TPE ranks the top results first, then the others by how far they went and their value
  (``optuna.samplers.TPESampler``'s split of pruned trials); it proposes once it holds
  ``min_points`` results. A trial that climbs adds one result per rung (each a point at that
  fidelity, as BOHB's per-rung models hold it too).

A rung is identified by its steps (shared across brackets). ``observe`` feeds the result a trial
recorded at a rung (value signed: larger is better) as it arrives; ``observe_top`` the result
of a trial that trained to the top fidelity (once per trial). ``propose`` draws a random config
when no model is ready or, with probability ``random_fraction``, from the algorithm's numpy
Generator; otherwise the ready model proposes (its asked trial is failed at once: it is no
observation). The choice for a trial is made once, when it is first asked for; it is part of
the state.

**Never waits.** Without a runner (simulator, tests) the sampler proposes at once, for that
trial. With one (``use_background``: a study's proposal thread) the proposals are asked *ahead*:
a trial that should get the model's proposal takes the one computed since the previous such
trial if it is ready, and the next one is asked at once (from the model's results as they stand);
if none is ready the trial gets a random config (from the Generator) and the proposal in flight
waits for the next trial. Which trials got a model's proposal thus depends on timing; each
config, the Generator, the proposal in flight and its cut-off are stored, so a resume continues
from exactly what was decided (``fallbacks`` counts the random ones).

**Agreement** (``agreement``: a threshold, ``fit: all`` only; None: off). A rung whose results
rank the trials unlike the next higher rung misleads the model (a low fidelity anti-correlated
with the top one), as Hyper-Tune and MFES-HB weigh each fidelity by how well it agrees with the
higher ones. Before each proposal :func:`agreeing_cutoff` measures, for each rung, Kendall's
tau between its results and those of the nearest higher rung (the top's results count as one)
that shares at least ``AGREEMENT_PAIRS`` trials with it, over those trials; the model then
learns only from the rungs above the highest one that disagrees (a tau below the threshold by
more than its standard error; no rung to judge it: not yet known, kept). The model of that cutoff (one per cutoff, key: its steps; 0: every rung) is
built when first needed by replaying every result so far in arrival order, then fed as they come;
with fewer than ``min_points`` results there, the trial gets a random config.

State in parts (``state_delta``): a head, ``"C<trial>"`` (the configs of the trials new since
the previous delta, the first being that trial; ``"c<trial>"``, one config, in older stores),
``"F<trial>"`` (the trials whose top result was observed since, that trial the first;
``"f<trial>"``, one trial, in older stores), ``"o<i>"`` (the results observed since the previous delta, the first
being the i-th, with ``agreement``) and the journal of the model of the rung of that many steps
(key 0: the one model of ``fit: all``): ``"j<key>.b<i>"`` (its entries appended since the
previous delta, from entry i), ``"j<key>.<i>"`` (entry i, changed after it was stored), each
written once, so a commit costs what changed, in one part per kind and model.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from hypersack.core.algorithms.optuna_model import OptunaModel, SamplerSpec, journal_entries
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError
from hypersack.validation import INT53, check_integer, check_number, check_probability

__all__ = ["RungModel", "FITS", "AGREEMENT_PAIRS", "AGREEMENT_DEFAULT", "kendall_tau", "tau_error", "agreeing_cutoff",
           "PairTau", "pair_tau", "cutoff_of_pairs"]

FITS = ("largest", "all")
AGREEMENT_PAIRS = 6        # trials a rung shares with the next one before their agreement counts
AGREEMENT_DEFAULT = 0.3    # the threshold of ``agreement: auto`` with ``fit: all``


def kendall_tau(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Kendall's tau-a of two equally long sequences (1: same order, -1: reversed; 0 for fewer
    than two items): concordant minus discordant pairs over all pairs."""
    if len(xs) != len(ys):
        raise ValueError(f"kendall_tau: {len(xs)} and {len(ys)} items")
    n = len(xs)
    if n < 2:
        return 0.0
    return _sign_sum(np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)) / (n * (n - 1))


def _sign_sum(x: np.ndarray, y: np.ndarray) -> int:
    """Sum over ordered pairs (i, j) of sign(x_i - x_j) * sign(y_i - y_j) (twice concordant
    minus discordant pairs; a NaN compares as a tie), exactly, as an int."""
    # the signs of every pair's differences as int8 (a quarter of float64's memory traffic)
    dx = np.greater.outer(x, x).view(np.int8) - np.less.outer(x, x).view(np.int8)
    dy = np.greater.outer(y, y).view(np.int8) - np.less.outer(y, y).view(np.int8)
    return int(np.einsum("ij,ij->", dx, dy, dtype=np.int64))


def tau_error(n: int) -> float:
    """The standard error of Kendall's tau over ``n`` pairs of independent rankings,
    sqrt(2 (2n + 5) / (9 n (n - 1))); inf for fewer than two."""
    return math.sqrt(2 * (2 * n + 5) / (9 * n * (n - 1))) if n >= 2 else math.inf


class PairTau:
    """Kendall's tau of two rungs over the trials they share, kept as trials join: ``add`` a
    trial's (low, high) values in O(n), ``tau`` equal bit for bit to :func:`kendall_tau` of
    every pair added so far (the same integer sum over the same count)."""

    __slots__ = ("_x", "_y", "n", "_sum")

    def __init__(self, xs: Sequence[float] = (), ys: Sequence[float] = ()):
        self._x, self._y = np.array(xs, dtype=float), np.array(ys, dtype=float)
        self.n = len(self._x)
        self._sum = _sign_sum(self._x, self._y) if self.n >= 2 else 0

    def add(self, x: float, y: float) -> None:
        n = self.n
        if n == len(self._x):                       # grow by doubling: O(1) amortised
            self._x = np.resize(self._x, max(8, 2 * n))
            self._y = np.resize(self._y, max(8, 2 * n))
        if n:
            xs, ys = self._x[:n], self._y[:n]
            dx = np.greater(x, xs).view(np.int8) - np.less(x, xs).view(np.int8)
            dy = np.greater(y, ys).view(np.int8) - np.less(y, ys).view(np.int8)
            self._sum += 2 * int(np.dot(dx, dy.astype(np.int64)))
        self._x[n], self._y[n] = x, y
        self.n = n + 1

    @property
    def tau(self) -> float:
        return self._sum / (self.n * (self.n - 1)) if self.n >= 2 else 0.0


def agreeing_cutoff(results: Mapping[int, Mapping[int, float]], threshold: float,
                    min_pairs: int = AGREEMENT_PAIRS) -> int:
    """The lowest rung (its steps) a model should learn from: no rung from it up disagrees.
    ``results``: steps -> {trial: value}, the top fidelity included as a rung. A rung is judged
    by the nearest higher rung that shares at least ``min_pairs`` trials with it (the widest
    sample: a high rung holds only elite trials, among which even a good low fidelity hardly
    ranks); it disagrees when the Kendall tau of their values over those n trials is below
    ``threshold`` by more than its standard error (:func:`tau_error`); with no such rung it
    counts as agreeing (not yet known). Returns 0 when no rung disagrees (learn from all), else
    the steps of the rung above the highest disagreeing one. Pure and deterministic."""
    return cutoff_of_pairs(sorted(s for s, r in results.items() if r),
                           lambda low, high: pair_tau(results, low, high), threshold, min_pairs)


def pair_tau(results: Mapping[int, Mapping[int, float]], low: int, high: int) -> PairTau:
    """The :class:`PairTau` of rungs ``low`` and ``high`` over the trials they share."""
    upper = results[high]
    shared = [t for t in results[low] if t in upper]
    return PairTau([results[low][t] for t in shared], [upper[t] for t in shared])


def cutoff_of_pairs(rungs: Sequence[int], pair: Callable[[int, int], PairTau],
                    threshold: float, min_pairs: int = AGREEMENT_PAIRS) -> int:
    """:func:`agreeing_cutoff` over ``rungs`` (ascending steps, each with a result) given each
    pair's :class:`PairTau` (``pair(low, high)``)."""
    cutoff = 0
    for i, low in enumerate(rungs):
        for high in rungs[i + 1:]:
            stats = pair(low, high)
            if stats.n < min_pairs:
                continue
            if stats.tau + tau_error(stats.n) < threshold:
                cutoff = rungs[i + 1]
            break
    return cutoff


class RungModel:
    def __init__(self, sampler: SamplerSpec, space: SearchSpace, seed: int, min_points: int,
                 random_fraction: float, feature: str, fit: str = "largest",
                 agreement: float | None = None):
        self.sampler, self.space, self.seed = sampler, space, seed
        self.min_points, self.random_fraction, self.feature = min_points, random_fraction, feature
        self.fit, self.agreement = fit, agreement
        self.log: list[tuple[int, int, float, bool]] = []   # (trial, steps, value, top), agreement
        self.results: dict[int, dict[int, float]] = {}       # steps -> trial -> value, agreement
        self._logged = 0                                     # log entries already in a delta
        self.models: dict[int, OptunaModel] = {}      # steps (0: the one model of "all") -> model
        self.counts: dict[int, int] = {}              # steps -> results recorded there
        self.configs: dict[int, dict[str, Any]] = {}  # trial -> config
        self.tops: set[int] = set()                   # trials whose top result was observed
        self._new_tops: set[int] = set()
        self._plan: tuple[int, int | None] | None = None   # (trial, steps | None: random)
        self._ahead: tuple[int, int] | None = None     # (steps, key) of the proposal asked ahead
        self.fallbacks = 0                            # random configs for want of a proposal
        self._new: set[int] = set()                   # trials whose config is not yet in a delta
        self._runner: Any = None
        self._wait_s = 0.0
        self._cutoffs: dict[float, tuple[int, int]] = {}   # threshold -> (log length, cutoff)
        self._pairs: dict[tuple[int, int], PairTau] = {}   # (low, high) steps: kept taus
        self._model(0)                                # fails fast on a bad sampler or options

    def _model(self, steps: int) -> OptunaModel:
        model = self.models.get(steps)
        if model is None:
            model = OptunaModel(self.sampler, self.space, "maximize", self.seed, self.feature)
            model.use_background(self._runner, self._wait_s)
            self.models[steps] = model
        return model

    def use_background(self, runner: Any, wait_s: float = 0.0) -> None:
        self._runner, self._wait_s = runner, wait_s
        for model in self.models.values():
            model.use_background(runner, wait_s)

    def model_steps(self) -> int | None:
        """Steps of the rung the model would be fitted on now (None: not enough results);
        with ``fit: all``, the largest rung with a result once the model is ready; with
        ``agreement``, the key of the cutoff's model (module doc) once it has enough results."""
        if self.agreement is not None:
            cutoff = self.cutoff()
            held = sum(len(r) for s, r in self.results.items() if s >= cutoff)
            return cutoff if held >= self.min_points else None
        if self.fit == "all":
            return max(self.counts) if sum(self.counts.values()) >= self.min_points else None
        ready = [steps for steps, n in self.counts.items() if n >= self.min_points]
        return max(ready) if ready else None

    def cutoff(self, threshold: float | None = None) -> int:
        """:func:`agreeing_cutoff` of the results observed so far at ``threshold`` (None: the
        ``agreement`` threshold; 0 without ``agreement``): a function of the stored results
        alone (cached per length of the log and threshold)."""
        if self.agreement is None:
            return 0
        threshold = self.agreement if threshold is None else threshold
        cached = self._cutoffs.get(threshold)
        if cached is None or cached[0] != len(self.log):
            rungs = sorted(s for s, r in self.results.items() if r)
            cached = self._cutoffs[threshold] = (
                len(self.log), cutoff_of_pairs(rungs, self._pair, threshold))
        return cached[1]

    def _key(self, steps: int) -> int:
        """The model that proposes from (and is fed) the rung of ``steps`` (with
        ``agreement``: ``steps`` is already a cutoff's key)."""
        if self.agreement is not None:
            return steps
        return 0 if self.fit == "all" else steps

    def _cutoff_model(self, key: int) -> OptunaModel:
        """The model of cutoff ``key``; a new one is fed every result so far at a rung >= key."""
        if key not in self.models:
            model = self._model(key)
            for trial_id, steps, value, top in self.log:
                if steps >= key:
                    model.observe(self.configs[trial_id], value, None if top else steps)
        return self.models[key]

    def observe(self, trial_id: int, steps: int, value: float, top: bool = False) -> None:
        """The result ``trial_id`` recorded at the rung of ``steps`` (``top``: the top fidelity,
        a COMPLETE trial of the ``all`` model)."""
        config = self.configs.get(trial_id)
        if config is None:
            return
        if self.agreement is not None:
            self.log.append((trial_id, steps, value, top))
            self._record(trial_id, steps, value)
            for key, model in self.models.items():
                if steps >= key:
                    model.observe(config, value, None if top else steps)
            self.counts[steps] = self.counts.get(steps, 0) + 1
            return
        model = self._model(self._key(steps))       # journalled; fed to Optuna when it asks
        model.observe(config, value, None if top or self.fit != "all" else steps)
        self.counts[steps] = self.counts.get(steps, 0) + 1

    def _record(self, trial_id: int, steps: int, value: float) -> None:
        """``results[steps][trial_id] = value``, each kept pair tau brought up to date: a new
        trial of a rung joins the pairs it now shares (O(n) each); a replaced value drops that
        rung's pairs (rebuilt from ``results`` when next needed)."""
        rung = self.results.setdefault(steps, {})
        known = trial_id in rung
        rung[trial_id] = value
        for other, values in self.results.items():
            if other == steps or trial_id not in values:
                continue
            key = (other, steps) if other < steps else (steps, other)
            if known:
                self._pairs.pop(key, None)
                continue
            stats = self._pairs.get(key)
            if stats is not None:
                low, high = (values[trial_id], value) if other < steps else (value, values[trial_id])
                stats.add(low, high)

    def _pair(self, low: int, high: int) -> PairTau:
        stats = self._pairs.get((low, high))
        if stats is None:
            stats = self._pairs[(low, high)] = pair_tau(self.results, low, high)
        return stats

    def observe_top(self, trial_id: int, steps: int, value: float) -> None:
        """The result of ``trial_id`` at the top fidelity (``steps``); once per trial."""
        if trial_id in self.tops or trial_id not in self.configs:
            return
        self.tops.add(trial_id)
        self._new_tops.add(trial_id)
        self.observe(trial_id, steps, value, top=True)

    def pin(self, trial_id: int, config: Mapping[str, Any]) -> None:
        """``trial_id`` runs ``config`` (an enqueued one): its results feed the rungs' models."""
        self.configs[trial_id] = dict(config)
        self._new.add(trial_id)

    def propose(self, trial_id: int, rng: np.random.Generator, defer: bool
                ) -> dict[str, Any] | None:
        """The config of new trial ``trial_id`` (never None: see the module doc; ``defer``
        is no longer used)."""
        if self._plan is None or self._plan[0] != trial_id:
            steps = self.model_steps()
            if steps is not None and rng.random() < self.random_fraction:
                steps = None
            self._plan = (trial_id, steps)
        steps = self._plan[1]
        config: dict[str, Any] | None = None
        if steps is not None:
            config = self._proposal(trial_id, self._key(steps))
        if config is None:
            config = self.space.sample(rng)
        self._plan = None
        self.configs[trial_id] = config
        self._new.add(trial_id)
        return config

    def _proposal(self, trial_id: int, steps: int) -> dict[str, Any] | None:
        """The proposal of model ``steps`` (a key) for ``trial_id``: at once without a runner; with one, the
        proposal asked ahead if it is ready (then the next is asked), else None (a random
        config goes instead; the one in flight stays for a later trial)."""
        config: dict[str, Any] | None = None
        if self.agreement is not None:
            self._cutoff_model(steps)
        if self._runner is None:
            config = self._model(steps).propose(trial_id, keep=False)
            return config
        if self._ahead is not None:
            ahead_steps, key = self._ahead
            config = self._model(ahead_steps).propose(key, defer=True, keep=False)
            if config is None:
                self.fallbacks += 1
                return None
        else:
            self.fallbacks += 1
        self._ahead = (steps, trial_id)
        self._model(steps).start(trial_id, keep=False)
        return config

    def _small(self) -> dict[str, Any]:
        return {"counts": {str(s): n for s, n in self.counts.items()},
                "plan": list(self._plan) if self._plan is not None else None,
                "ahead": list(self._ahead) if self._ahead is not None else None,
                "fallbacks": self.fallbacks}

    def state_dict(self) -> dict[str, Any]:
        log = {"log": [list(o) for o in self.log]} if self.agreement is not None else {}
        return {"models": {str(s): m.state_dict() for s, m in self.models.items()},
                "configs": {str(t): c for t, c in self.configs.items()},
                "tops": sorted(self.tops), **log, **self._small()}

    def state_delta(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The head and the parts changed since the previous call (see the module doc)."""
        parts: dict[str, Any] = {}
        if self._new:                                 # the configs since: one part
            new = sorted(self._new)
            parts[f"C{new[0]}"] = {str(t): self.configs[t] for t in new}
        if self._new_tops:                            # the trials whose top came since
            tops = sorted(self._new_tops)
            parts[f"F{tops[0]}"] = tops
        if len(self.log) > self._logged:              # the results logged since: one part
            parts[f"o{self._logged}"] = [list(o) for o in self.log[self._logged:]]
        self._logged = len(self.log)
        self._new, self._new_tops = set(), set()
        models = {}
        for steps, model in self.models.items():
            models[str(steps)], journal = model.delta(f"j{steps}.")
            parts.update(journal)
        return {"models": models, **self._small()}, parts

    def load_state_dict(self, state: Mapping[str, Any],
                        parts: Mapping[str, Any] | None = None) -> None:
        """From ``state_dict()``, or from ``state_delta``'s head with every part stored
        (``parts``, the algorithm's: keys of other prefixes are ignored)."""
        whole = "configs" in state
        singles: dict[str, dict[int, Any]] = {}
        batches: dict[str, dict[int, Any]] = {}
        queued: dict[str, dict[int, Any]] = {}
        queue_keys: dict[str, list[str]] = {}
        log: dict[int, Any] = {}
        if not whole:
            self.configs, self.tops = {}, set()
            for key, part in (parts or {}).items():
                if key[0] == "o" and part is not None:
                    _logged_part(log, int(key[1:]), part)
                elif key[0] == "c" and part is not None:    # stores before "C" parts
                    self.configs[int(key[1:])] = dict(part)
                elif key[0] == "C" and part is not None:
                    self.configs.update((int(t), dict(c)) for t, c in part.items())
                elif key[0] == "f" and part is not None:    # stores before "F" parts
                    self.tops.add(int(key[1:]))
                elif key[0] == "F" and part is not None:
                    self.tops.update(int(t) for t in part)
                elif key[0] == "j" and part is not None:
                    steps, index = key[1:].split(".")
                    if index[0] == "q":           # queued results (OptunaModel.delta)
                        _queued_part(queued.setdefault(steps, {}), index, part)
                        queue_keys.setdefault(steps, []).append(index)
                    elif index[0] == "b":         # entries appended together
                        batches.setdefault(steps, {})[int(index[1:])] = part
                    else:
                        singles.setdefault(steps, {})[int(index)] = part
        else:
            self.configs = {int(t): dict(c) for t, c in state["configs"].items()}
            self.tops = {int(t) for t in state.get("tops", [])}
            log = dict(enumerate(state.get("log", [])))
        self.log = [(int(o[0]), int(o[1]), float(o[2]), bool(o[3])) for _, o in sorted(log.items())]
        self.results = {}
        for trial_id, rung, value, _ in self.log:
            self.results.setdefault(rung, {})[trial_id] = value
        self._logged = 0
        self._cutoffs, self._pairs = {}, {}
        self.models = {}
        for steps, saved in state["models"].items():
            entries = {} if whole else journal_entries(batches.get(steps, {}),
                                                       singles.get(steps, {}))
            model_state = saved if whole else {**saved, "entries": entries,
                                               "queue_entries": queued.get(steps, {}),
                                               "queue_keys": queue_keys.get(steps, [])}
            self._model(int(steps)).load_state_dict(model_state)
        self.counts = {int(s): int(n) for s, n in state["counts"].items()}
        plan, ahead = state.get("plan"), state.get("ahead")
        self._plan = (int(plan[0]), None if plan[1] is None else int(plan[1])) if plan else None
        self._ahead = (int(ahead[0]), int(ahead[1])) if ahead else None
        self.fallbacks = int(state.get("fallbacks", 0))
        self._new, self._new_tops = set(self.configs), set(self.tops)


def _queued_part(queued: dict[int, Any], index: str, part: list[Any]) -> None:
    """Put a model's queue part ``q<index>`` into ``queued`` (index -> result): ``qb<i>``, the
    results queued from the i-th on; ``q<i>`` (stores before batching), the i-th alone."""
    if index[1] == "b":
        for offset, op in enumerate(part):
            queued[int(index[2:]) + offset] = op
    else:
        queued[int(index[1:])] = part


def _logged_part(log: dict[int, Any], start: int, part: list[Any]) -> None:
    """Put an ``o<start>`` part into ``log`` (index -> result): the results logged from
    ``start`` on as a list of them, or (stores before batching) the one result at ``start``."""
    batch = part if part and isinstance(part[0], list) else [part]
    for offset, entry in enumerate(batch):
        log[start + offset] = entry


def build_rung_model(sampler: Any, options: Mapping[str, Any] | None, space: SearchSpace,
                     seed: int, min_points: int | None, random_fraction: Any,
                     feature: str, fit: Any = "largest", agreement: Any = None
                     ) -> RungModel | None:
    """The rung model a multi-fidelity algorithm's ``sampler`` option asks for (None: none).
    ``min_points`` defaults to the number of searched parameters + 1 (BOHB's choice);
    ``fit``: ``"largest"`` or ``"all"``; ``agreement``: None (off), a Kendall tau threshold in
    [-1, 1] (``fit: all`` only) or ``"auto"``: ``AGREEMENT_DEFAULT`` with ``fit: all``, else
    off (module doc)."""
    from hypersack.core.algorithms.optuna_model import parse_sampler
    from hypersack.core.space import Constant
    if fit not in FITS:
        raise ConfigError("algorithm.fit", fit, f"must be one of {list(FITS)}")
    if agreement == "auto":
        agreement = AGREEMENT_DEFAULT if fit == "all" else None
    if agreement is not None:
        if fit != "all":
            raise ConfigError("algorithm.agreement", agreement, "needs fit: all")
        agreement = check_number("algorithm.agreement", agreement, low=-1.0, high=1.0,
                                 hint="(a Kendall tau; or auto, or null: off)")
    if sampler is None:
        return None
    fraction = check_probability("algorithm.random_fraction", random_fraction)
    searched = sum(not isinstance(d, Constant) for d in space.values())
    points = check_integer("algorithm.min_points_in_model",
                           searched + 1 if min_points is None else min_points, low=1, high=INT53)
    return RungModel(parse_sampler(sampler, options), space, seed, points,
                     fraction, feature, fit, agreement)
