"""An Optuna sampler behind HyperSack's algorithms: one study per model, fed incrementally.

Optuna is imported on first use (extra ``[tpe]``, alias ``[optuna]``).

**Incremental.** An :class:`OptunaModel` owns one in-memory Optuna study for its whole life. Each
proposal is one ``study.ask``; results are told as they arrive (``finish``), or added as
observations (``observe``, BOHB's per-rung models). Nothing is replayed per proposal, so a
proposal costs what Optuna's own ask costs (O(n) for TPE), not O(n) *extra* copies of the journal.

**Deterministic.** Before the ask for trial ``k`` the sampler's random state is set from
``(seed, k)`` (:func:`trial_sampler_seed`): a sampler whose caches are pure functions of the
study (TPE, Random, CMA-ES, QMC: ``REUSED``) is kept and reseeded; any other sampler (GP keeps
the previous fit's kernel parameters) is built afresh per proposal with that seed. The study
itself is mirrored in a JSON journal (``state_dict``): every trial in study order with its
params, state, value, intermediate values and the system attributes samplers store there
(CMA-ES's optimizer, QMC's sequence index). ``load_state_dict`` rebuilds the study from it once,
so a resumed model proposes exactly what the uninterrupted one would.

Building GP afresh per proposal means its kernel fit starts cold each time (Optuna warm-starts
from the previous fit, a cache kept in the sampler object); that costs about 1.2x Optuna's own
GP ask (benchmarks/RESULTS.md) and is the price of exact resume.

*Exception:* a sampler *object* (``Study(algorithm=optuna.samplers.GPSampler(seed=1))``) is used
as given, never reseeded: its random state and caches live in the object, which a state dict
cannot hold, so after a resume its proposals differ from the uninterrupted run's (all results
are still restored). Name the sampler (``{type: optuna, sampler: GPSampler, options: {...}}``)
for exact resume.

**Off the loop's thread.** With a runner (``use_background``: anything whose ``submit(fn)``
returns a ``concurrent.futures.Future``; the study passes a one-thread pool) the ask runs there.
The proposal for trial ``k`` is computed from exactly the results applied when ``k`` was first
asked for (the cut-off): while the ask runs, the study is left to it and new results are queued,
then applied in arrival order once the proposal is collected. ``propose(k, defer=True)`` waits at
most ``wait_s`` (default 0: it only checks, since a wait hands the GIL to the fit and getting it
back can take tens of ms on a busy machine) and otherwise returns None ("ask again"); the queue, the cut-off and ``k`` are
part of the state, so a resume recomputes the same proposal. The *value* of a proposal therefore
never depends on timing, only on the order of events; timing decides only when it is handed out.
Without a runner (simulator, tests) the ask runs inline.
"""
from __future__ import annotations

import copy

import inspect
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from hypersack.core.space import Categorical, Constant, Domain, Float, Int, SearchSpace
from hypersack.errors import ConfigError, MissingDependencyError
from hypersack.validation import check_mapping

__all__ = ["OptunaModel", "SamplerSpec", "import_optuna", "distribution", "parse_sampler",
           "sampler_names", "trial_sampler_seed", "journal_entries", "REUSED"]

# Samplers whose per-instance caches are pure functions of the study: kept and reseeded.
REUSED = frozenset({"TPESampler", "RandomSampler", "CmaEsSampler", "QMCSampler"})
# Samplers whose seed fixes a study-wide structure (QMC's scrambling): built with the study seed.
_STUDY_SEEDED = frozenset({"QMCSampler", "GridSampler"})
_NOT_NAMEABLE = frozenset({"BaseSampler", "BaseGASampler", "PartialFixedSampler"})
_STATES = {"R": "RUNNING", "C": "COMPLETE", "P": "PRUNED", "F": "FAIL"}
_CODES = {v: k for k, v in _STATES.items()}


def import_optuna(feature: str = "The TPE algorithm") -> Any:
    """Optuna, quietened; MissingDependencyError naming ``feature`` and the `tpe` extra."""
    try:
        import optuna
    except ImportError:
        raise MissingDependencyError(feature, "optuna", "tpe") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def distribution(optuna: Any, domain: Domain) -> Any:
    d = optuna.distributions
    if isinstance(domain, Float):
        return d.FloatDistribution(domain.low, domain.high, log=domain.log)
    if isinstance(domain, Int):
        return d.IntDistribution(domain.low, domain.high, log=domain.log, step=domain.step)
    if isinstance(domain, Categorical):
        return d.CategoricalDistribution(domain.choices)
    raise TypeError(domain)


_STORAGES: dict[int, type] = {}


def _journal_storage(optuna: Any) -> Any:
    """A study's storage for a model: Optuna's in-memory storage, except that a trial the
    model adds from its journal (``add_trial``: made for this study by ``_add``, referenced
    nowhere else, never changed after) is kept as given, not deep-copied; a deep copy of its
    params and distributions was ~90% of the cost of adding a result, which every ask pays
    for the results since the previous one. Optuna's own storage where its internals differ
    from the version this was written for (5.0)."""
    base = optuna.storages.InMemoryStorage
    needed = ("_lock", "_max_trial_id", "_trial_id_to_study_id_and_number", "_studies")
    probe = base()
    if not all(hasattr(probe, n) for n in needed) or not all(
            hasattr(base, n) for n in ("_check_study_id", "_update_cache")):
        return probe
    cls = _STORAGES.get(id(base))
    if cls is None:
        cls = _STORAGES[id(base)] = type("JournalStorage", (base,), {
            "create_new_trial": _create_new_trial, "__doc__": _journal_storage.__doc__})
    return cls()


def _create_new_trial(self: Any, study_id: int, template_trial: Any = None) -> int:
    """``InMemoryStorage.create_new_trial`` (Optuna 5.0) without the deep copy of the
    template (see :func:`_journal_storage`)."""
    if template_trial is None:
        return int(super(type(self), self).create_new_trial(study_id))
    with self._lock:
        self._check_study_id(study_id)
        trial = template_trial
        trial_id = self._max_trial_id + 1
        self._max_trial_id += 1
        trial.number = len(self._studies[study_id].trials)
        trial._trial_id = trial_id
        self._trial_id_to_study_id_and_number[trial_id] = (study_id, trial.number)
        self._studies[study_id].trials.append(trial)
        self._update_cache(trial_id, study_id)
        return int(trial_id)


def journal_entries(batches: Mapping[int, Sequence[Any]], singles: Mapping[int, Any]
                    ) -> dict[int, Any]:
    """A journal's entries (index -> entry) from the parts :meth:`OptunaModel.delta` wrote:
    each batch (index of its first entry -> entries) laid down, then each single entry over
    it (a single is always newer than the batch that first held its index)."""
    entries: dict[int, Any] = {}
    for start, batch in batches.items():
        for offset, entry in enumerate(batch):
            entries[start + offset] = entry
    entries.update(singles)
    return entries


def trial_sampler_seed(seed: int, trial_id: int) -> int:
    """The sampler seed of the proposal for ``trial_id`` (depends on nothing else)."""
    return (seed * 1_000_003 + trial_id) % 2**32


# ---- naming and validating a sampler ---------------------------------------------------------

def _sampler_classes(optuna: Any) -> dict[str, type]:
    base = optuna.samplers.BaseSampler
    return {name: cls for name, cls in vars(optuna.samplers).items()
            if isinstance(cls, type) and issubclass(cls, base) and name not in _NOT_NAMEABLE}


_SHORT = {"nsga2": "nsgaii", "nsga3": "nsgaiii"}     # nsga2 names NSGAIISampler


def _key(name: str) -> str:
    key = name.lower().removesuffix("sampler").replace("_", "").replace("-", "")
    return _SHORT.get(key, key)


def sampler_names(optuna: Any = None) -> list[str]:
    """Class names of the samplers that can be named (``TPESampler``, ``GPSampler``, ...)."""
    return sorted(_sampler_classes(optuna or import_optuna("Optuna samplers")))


@dataclass(frozen=True)
class SamplerSpec:
    """A sampler by ``name`` (a class of ``optuna.samplers``, or its short form: ``tpe``,
    ``gp``, ``cmaes``, ``qmc``, ``random``...) with constructor ``options``, or an ``instance``.
    ``field`` is the dotted path errors name (``algorithm.sampler``)."""
    name: str = "TPESampler"
    options: Mapping[str, Any] = field(default_factory=dict)
    instance: Any = None
    field: str = "algorithm"
    options_field: str = "algorithm.options"

    def resolve(self, optuna: Any) -> type:
        classes = _sampler_classes(optuna)
        by_key = {_key(n): c for n, c in classes.items()}
        if not isinstance(self.name, str) or _key(self.name) not in by_key:
            raise ConfigError(f"{self.field}.sampler" if self.field else "sampler", self.name,
                              f"must be one of {', '.join(sorted(classes))}")
        return by_key[_key(self.name)]

    def build(self, optuna: Any, seed: int | None) -> Any:
        """A new sampler; ConfigError naming the options when the class refuses them."""
        if self.instance is not None:
            return self.instance
        cls = self.resolve(optuna)
        options = dict(self.options)
        if "seed" in options:
            raise ConfigError(f"{self.options_field}.seed", options["seed"],
                              "is set by the study's seed (set `seed` there)")
        if seed is not None and "seed" in inspect.signature(cls).parameters:
            options["seed"] = seed
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")          # experimental / deprecated arguments
            try:
                return cls(**options)
            except (TypeError, ValueError) as exc:
                raise ConfigError(self.options_field, dict(self.options),
                                  f"are not accepted by {cls.__name__} ({exc})") from None

    @property
    def class_name(self) -> str:
        return type(self.instance).__name__ if self.instance is not None else str(self.name)


def parse_sampler(sampler: Any, options: Any = None, field: str = "algorithm") -> SamplerSpec:
    """``sampler`` as written in a spec: a name, ``{type: name, options: {...}}``, a
    SamplerSpec or an Optuna sampler object; ``options`` goes with a bare name."""
    if isinstance(sampler, SamplerSpec):
        return sampler
    if isinstance(sampler, Mapping):
        unknown = set(sampler) - {"type", "options"}
        if "type" not in sampler or unknown:
            raise ConfigError(f"{field}.sampler", dict(sampler),
                              "must be a sampler name or {type: <name>, options: {...}}")
        if options:
            raise ConfigError(f"{field}.options", options,
                              f"must not be given beside {field}.sampler.options")
        return parse_sampler(sampler["type"], sampler.get("options"), f"{field}.sampler")
    if options is None:
        options = {}
    opt_field = f"{field}.options"
    check_mapping(opt_field, options, what="a mapping of sampler options")
    if isinstance(sampler, str):
        parent = field.removesuffix(".sampler")
        return SamplerSpec(sampler, dict(options), field=parent, options_field=opt_field)
    if hasattr(sampler, "sample_relative") and hasattr(sampler, "sample_independent"):
        if options:
            raise ConfigError(opt_field, options, "must be empty for a sampler object")
        return SamplerSpec(type(sampler).__name__, {}, sampler, field, opt_field)
    raise ConfigError(f"{field}.sampler", sampler,
                      "must be a sampler name (e.g. TPESampler) or an optuna sampler object")


def _reseed(sampler: Any, seed: int, depth: int = 0) -> None:
    """Set every random state of ``sampler`` (and of the samplers it holds) from ``seed``, as
    constructing it with ``seed`` would."""
    for value in vars(sampler).values():
        kind = type(value).__name__
        if kind == "RandomState":                   # numpy's legacy generator, held by samplers
            value.seed(seed)
        elif kind == "LazyRandomState":
            value.rng.seed(seed)
        elif depth < 3 and hasattr(value, "sample_relative") and hasattr(value, "__dict__"):
            _reseed(value, seed, depth + 1)


def _told(value: float | Sequence[float] | None) -> float | list[float] | None:
    """A value as the journal keeps it (a list for several objectives); None unless finite."""
    if value is None:
        return None
    if type(value) is float:                      # the common case, without the ABC check
        return value if math.isfinite(value) else None
    values = [float(v) for v in value] if isinstance(value, Sequence) else [float(value)]
    if not all(math.isfinite(v) for v in values):
        return None
    return values if isinstance(value, Sequence) else values[0]


class _Done:
    """A finished computation with the ``Future.result`` interface (inline mode)."""

    def __init__(self, value: Any):
        self._value = value

    def result(self, timeout: float | None = None) -> Any:
        return self._value

    def done(self) -> bool:
        return True


# ---- the model -------------------------------------------------------------------------------

class OptunaModel:
    """One Optuna study fed incrementally (see the module docstring for the contract).

    ``direction``: "minimize" or "maximize" (values are told as given), or a list of them for
    a multi-objective study, whose values are then tuples (one per direction; the journal's
    ``v`` is a list). Trials are HyperSack trial ids; ``observe`` adds results that belong to no
    proposal (BOHB's rung models).
    """

    def __init__(self, sampler: SamplerSpec, space: SearchSpace, direction: str | list[str],
                 seed: int = 0, feature: str = "Optuna samplers"):
        self._optuna = import_optuna(feature)
        self.spec, self.space, self.direction, self.seed = sampler, space, direction, seed
        self._names = [n for n, d in space.items() if not isinstance(d, Constant)]
        self._constants = {n: d.value for n, d in space.items() if isinstance(d, Constant)}
        self._order = list(space)
        self._dists = {n: distribution(self._optuna, space[n]) for n in self._names}
        cls_name = sampler.resolve(self._optuna).__name__ if sampler.instance is None \
            else sampler.class_name
        self._reused = sampler.instance is None and cls_name in REUSED
        build_seed = seed if cls_name in _STUDY_SEEDED else trial_sampler_seed(seed, 0)
        self._sampler = sampler.build(self._optuna, build_seed)   # fails fast on bad options
        self._study_seeded = cls_name in _STUDY_SEEDED
        self._multi = not isinstance(direction, str)
        self._study: Any = None
        self._synced = 0                           # journal entries the study holds
        self._changed: set[int] = set()            # journal entries changed since ``delta``
        self._delta_len = 0                        # journal length at the previous ``delta``
        self._head: tuple[tuple[Any, ...], dict[str, Any]] | None = None   # delta's last head
        self._journal: list[dict[str, Any]] = []   # study trials, in study order
        self._number: dict[int, int] = {}          # HyperSack trial -> Optuna trial number
        self._study_attrs: dict[str, Any] = {}
        self._queue: list[list[Any]] = []             # results waiting while an ask runs
        self._queue_stored = 0                     # queue entries ``delta`` handed out as parts
        self._queue_drained = False                # the queue was emptied since ``delta``
        self._queue_keys: set[str] = set()         # the queue's stored parts (key suffixes)
        self._inflight: int | None = None          # trial whose proposal is being computed
        self._keep = True                          # keep the asked trial (else: fail it)
        self._future: Any = None
        self._runner: Any = None
        self.wait_s = 0.0
        self.told = 0                              # COMPLETE/PRUNED trials

    # ---- wiring --------------------------------------------------------------------------

    def use_background(self, runner: Any, wait_s: float = 0.0) -> None:
        """Run asks with ``runner.submit(fn)`` (a Future); ``propose(defer=True)`` waits at
        most ``wait_s`` seconds for one (0: it only checks). None: inline."""
        self._runner, self.wait_s = runner, float(wait_s)

    @property
    def pending(self) -> int | None:
        """The trial whose proposal is being computed, or None."""
        return self._inflight

    # ---- proposals -----------------------------------------------------------------------

    def propose(self, trial_id: int, defer: bool = False, keep: bool = True
                ) -> dict[str, Any] | None:
        """The config for ``trial_id``; None when ``defer`` and it is still being computed.
        ``keep=False``: the asked trial is failed at once (it is no observation of this model).
        """
        self.start(trial_id, keep)
        return self._collect(self.wait_s if defer else None)

    def start(self, trial_id: int, keep: bool = True) -> None:
        """Start computing the proposal for ``trial_id`` (off the loop's thread with a
        runner); ``propose(trial_id)`` collects it. No-op while it is the one in flight."""
        if self._inflight is not None and self._inflight != trial_id:
            self._settle()                        # another trial took its place
        if self._inflight is None:
            self._inflight, self._keep, self._future = trial_id, keep, None
        if self._future is None:
            self._future = self._start(trial_id, self._keep)

    def _settle(self) -> None:
        """Finish the proposal in flight and drop it (its trial was never created)."""
        dropped, kept = self._inflight, self._keep
        if dropped is None:
            return
        if self._future is None:
            self._future = self._start(dropped, kept)
        self._collect(None)
        if kept:
            self.finish(dropped, None, "failed")

    def _start(self, trial_id: int, keep: bool) -> Any:
        study = self._study_object()
        cutoff = len(self._journal)               # unchanged while the ask runs (``_submit``)
        seed = trial_sampler_seed(self.seed, trial_id)
        if self.spec.instance is not None:
            sampler = self._sampler
        elif self._reused:
            sampler = self._sampler
            _reseed(sampler, seed)
        else:
            sampler = self.spec.build(self._optuna, self.seed if self._study_seeded else seed)
        study.sampler = sampler
        job: Callable[[], Any] = lambda: self._ask(study, keep, cutoff)   # noqa: E731
        return self._runner.submit(job) if self._runner is not None else _Done(job())

    def _ask(self, study: Any, keep: bool, cutoff: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """Runs off the loop's thread with a runner: touches only the study and sampler (it
        first adds the journal's entries up to ``cutoff`` that the study lacks)."""
        self._sync(cutoff)
        trial = study.ask(self._dists)
        if not keep:
            study.tell(trial, state=self._optuna.trial.TrialState.FAIL)
        attrs = study._storage.get_trial(trial._trial_id).system_attrs
        return trial.params, dict(attrs) if attrs else {}

    def _collect(self, timeout: float | None) -> dict[str, Any] | None:
        if timeout is not None and timeout <= 0:
            if not self._future.done():         # no wait: waiting gives the GIL away
                return None
            timeout = None
        try:
            params, attrs = self._future.result(timeout=timeout)
        except TimeoutError:
            return None
        trial_id, keep = self._inflight, self._keep
        self._inflight = self._future = None
        if trial_id is None:
            return None
        entry: dict[str, Any] = {"p": [params[n] for n in self._names], "s": "R" if keep else "F"}
        if keep:
            entry["t"] = trial_id
            self._number[trial_id] = len(self._journal)
        if attrs:
            entry["a"] = attrs
        self._changed.add(len(self._journal))
        self._journal.append(entry)
        self._synced = len(self._journal)        # the asked trial is in the study
        study_attrs = self._study._storage.get_study_system_attrs(self._study._study_id)
        if study_attrs != self._study_attrs:
            self._study_attrs = dict(study_attrs)
        queued, self._queue = self._queue, []
        self._queue_drained = True
        for op in queued:
            self._apply(op)
        constants = self._constants
        return {name: constants[name] if name in constants else params[name]
                for name in self._order}

    # ---- results -------------------------------------------------------------------------

    def report(self, trial_id: int, step: int, value: float) -> None:
        """An intermediate result of a kept trial (the first value of a step counts)."""
        self._submit(["report", trial_id, int(step), float(value)])

    def finish(self, trial_id: int, value: float | Sequence[float] | None, state: str) -> None:
        """``state``: complete, pruned or failed; a missing or non-finite value fails it."""
        told = _told(value)
        code = "F" if told is None or state == "failed" else ("P" if state == "pruned" else "C")
        self._submit(["finish", trial_id, told, code])

    def observe(self, config: Mapping[str, Any], value: float | Sequence[float],
                step: int | None = None) -> None:
        """A result that belongs to no proposal of this model (ignored unless finite): a
        COMPLETE trial of that value, or with ``step`` a PRUNED one whose last intermediate
        value is ``value`` at ``step`` (Optuna's TPE ranks pruned trials below complete ones,
        the further a trial went the higher, then by that value)."""
        told = _told(value)
        if told is not None:
            op = ["observe", [config[n] for n in self._names], told]
            self._submit(op if step is None else [*op, int(step)])

    def _submit(self, op: list[Any]) -> None:
        if self._inflight is not None:
            self._queue.append(op)
        else:
            self._apply(op)

    def _apply(self, op: list[Any]) -> None:
        if op[0] == "observe":                   # the study gets it when it next asks
            self._changed.add(len(self._journal))
            self._journal.append({"p": op[1], "s": "C", "v": op[2]} if len(op) == 3 else
                                 {"p": op[1], "s": "P", "i": {str(op[3]): op[2]}})
            self.told += 1
            return
        study = self._ensure_study()
        TrialState = self._optuna.trial.TrialState
        kind = op[0]
        number = self._number.get(op[1])
        if number is None or self._journal[number]["s"] != "R":
            return                                   # unknown, or already finished
        entry = self._journal[number]
        tid = study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
        if kind == "report":
            steps = entry.setdefault("i", {})
            if str(op[2]) not in steps:
                steps[str(op[2])] = op[3]
                self._changed.add(number)
                study._storage.set_trial_intermediate_value(tid, op[2], op[3])
            return
        state = TrialState[_STATES[op[3]]]
        study.tell(number, op[2] if state == TrialState.COMPLETE else None, state=state)
        frozen = study._storage.get_trial(tid)
        entry["s"] = op[3]
        self._changed.add(number)
        if frozen.values is not None:
            entry["v"] = frozen.values if self._multi else frozen.values[0]
        if frozen.system_attrs:
            entry["a"] = dict(frozen.system_attrs)
        self.told += op[3] in "CP"

    # ---- the study and its journal ------------------------------------------------------

    def _ensure_study(self) -> Any:
        """The study, holding every journal entry."""
        study = self._study_object()
        self._sync(len(self._journal))
        return study

    def _study_object(self) -> Any:
        """The study, made (with the study attributes) if need be; it may lack the newest
        journal entries (``_sync``)."""
        if self._study is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                directions = self.direction if self._multi else [self.direction]
                self._study = self._optuna.create_study(sampler=self._sampler,
                                                        directions=directions,
                                                        storage=_journal_storage(self._optuna))
            self._synced = 0
            for key, value in self._study_attrs.items():
                self._study._storage.set_study_system_attr(self._study._study_id, key, value)
        return self._study

    def _sync(self, upto: int) -> None:
        """Add the journal's entries before ``upto`` that the study lacks, in journal order
        (results are journalled at once and reach the study only when it next asks: the
        loop's thread does not pay Optuna's ``add_trial`` for a model that never asks)."""
        for entry in self._journal[self._synced:upto]:
            self._add(self._study, entry, journal=False)
        self._synced = max(self._synced, upto)

    def _add(self, study: Any, entry: dict[str, Any], journal: bool = True) -> None:
        state = self._optuna.trial.TrialState[_STATES[entry["s"]]]
        steps = {int(s): v for s, v in entry.get("i", {}).items()}
        study.add_trial(self._optuna.trial.create_trial(
            params=dict(zip(self._names, entry["p"])), distributions=dict(self._dists),
            **{"values" if self._multi else "value": entry.get("v")}, state=state, intermediate_values=steps,
            system_attrs=copy.deepcopy(entry["a"]) if entry.get("a") else {}))
        if journal:
            self._changed.add(len(self._journal))
            self._journal.append(entry)

    def state_dict(self) -> dict[str, Any]:
        """JSON: the journal, the study's system attributes, queued results, the proposal in
        flight. Entries are shared, not copied: serialise before the next call."""
        return {"trials": list(self._journal), "study_attrs": dict(self._study_attrs),
                "queue": [list(op) for op in self._queue], "inflight": self._inflight,
                "keep": self._keep}

    def delta(self, prefix: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """``state_dict()`` in parts: the head (the journal's length ``n``, the queue's
        ``queued`` and the rest) and what changed since the previous call: the entries appended
        since then as ONE part keyed ``<prefix>b<index of the first>`` (a list), an older entry
        that changed keyed ``<prefix><index>`` (it overrides the batch that held it), the results
        queued since then as one part keyed ``<prefix>qb<index of the first>`` (once the queue
        was emptied, its stored parts are removed and it starts again from 0: a queue that
        grows while an ask waits is never rewritten whole at each commit). ``load_state_dict``
        takes the head with ``entries`` (index -> entry: :func:`journal_entries` of the parts),
        ``queued``'s results as ``queue_entries`` (index -> result) and the key suffixes of the
        queue's parts found (``queue_keys``: removed once the queue is stored again)."""
        key = (len(self._journal), len(self._queue), self._inflight, self._keep,
               self._study_attrs, self._queue_drained, bool(self._changed))
        if self._head is not None and self._head[0] == key and not self._changed:
            return self._head[1], {}                # nothing changed since: the same head
        head = {"n": len(self._journal), "study_attrs": dict(self._study_attrs),
                "queued": len(self._queue), "inflight": self._inflight, "keep": self._keep}
        first = self._delta_len
        parts: dict[str, Any] = {f"{prefix}{i}": self._journal[i]
                                 for i in sorted(self._changed) if i < first}
        if len(self._journal) > first:
            parts[f"{prefix}b{first}"] = self._journal[first:]
        self._changed, self._delta_len = set(), len(self._journal)
        first = 0 if self._queue_drained else self._queue_stored
        if self._queue_drained:                   # emptied since: its stored parts go
            parts.update({prefix + k: None for k in sorted(self._queue_keys)})
            self._queue_keys = set()
        if len(self._queue) > first:
            parts[f"{prefix}qb{first}"] = [list(op) for op in self._queue[first:]]
            self._queue_keys.add(f"qb{first}")
        self._queue_stored, self._queue_drained = len(self._queue), False
        self._head = ((len(self._journal), len(self._queue), self._inflight, self._keep,
                       self._study_attrs, False, False), head)
        return head, parts

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` (``state_dict()``, or ``delta``'s head with ``entries``);
        the study is rebuilt from the journal on first use. Every entry is then due in the
        next ``delta``."""
        if "trials" in state:
            self._journal = [dict(e) for e in state["trials"]]
        else:
            entries = state["entries"]
            self._journal = [dict(entries[i]) for i in range(int(state["n"]))]
        self._changed = set(range(len(self._journal)))       # every entry due again, alone
        self._delta_len, self._head = len(self._journal), None
        self._number = {int(e["t"]): i for i, e in enumerate(self._journal) if "t" in e}
        self._study_attrs = dict(state.get("study_attrs", {}))
        if "queued" in state:
            queued = state.get("queue_entries", {})
            self._queue = [list(queued[i]) for i in range(int(state["queued"]))]
        else:
            self._queue = [list(op) for op in state.get("queue", [])]
        self._queue_stored, self._queue_drained = 0, True     # every queued part is due again
        self._queue_keys = {str(k) for k in state.get("queue_keys", ())}   # ...the found ones go
        self._inflight = state.get("inflight")
        self._keep = bool(state.get("keep", True))
        self._future, self._study, self._synced = None, None, 0
        self.told = sum(e["s"] in "CP" for e in self._journal)

    # ---- reading ---------------------------------------------------------------------------

    def trials(self) -> list[dict[str, Any]]:
        """The journal (study order): ``t`` trial, ``p`` params, ``s`` R/C/P/F, ``v`` value."""
        return [dict(e) for e in self._journal]
