"""The study specification: what a study.yaml or the Python API declares, validated in one place.

``StudySpec.from_dict`` raises ConfigError naming the dotted field (``executor.workers``) and the
value; ``to_dict`` is the JSON form kept in the study store (resume rebuilds the study from it).
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping

from hypersack.core.controller import Budget
from hypersack.core.failures import DEFAULT_MAX_FAILURES
from hypersack.core.objective import Objective
from hypersack.core.packs import CONV_FORMS, EXECUTION_MODES, GRAPH_MODES, PRECISIONS
from hypersack.core.space import Categorical, Constant, Int, SearchSpace
from hypersack.core.timesharing import TimeSharing
from hypersack.core.timeouts import HEARTBEAT_S, HEARTBEAT_TIMEOUT_S, MIN_HEARTBEAT_TIMEOUT_S
from hypersack.core.keep_best import MAX_KEEP
from hypersack.core.warm_start import check_enqueued
from hypersack.errors import ConfigError
from hypersack.validation import (check_bool, check_choice, check_integer,
                                  check_mapping, check_name,
                                  check_number, check_plain_data, check_references, check_text,
                                  is_integer)

__all__ = ["StudySpec", "ExecutorOptions", "Resources", "PackOptions", "EXECUTION_MODES",
           "check_resumable", "split_precision"]

# Letters of any script (é, ß, 中), digits, _ . -, a letter or digit first (fullmatch: no
# trailing newline); a name is a folder name, so no space, slash or control character.
_NAME = re.compile(r"[^\W_][\w.-]{0,127}")

# Upper bounds of the study's numbers: each far above any real use, low enough that the study
# never allocates, sums or sleeps on an absurd value (a worker list of 10**9 slots...).
MAX_WORKERS = 1024              # the machine's own limit is checked when its slots are built
MAX_RETRIES = 100
MAX_SECONDS = 366 * 24 * 3600.0  # a timeout or time budget of a year
MAX_TRIALS = 10**9
MAX_SEED = 2**32 - 1            # numpy's legacy RandomState (used by Optuna) takes 32 bits
MAX_STEPS = 10**9
MAX_COMPUTE = 10_000.0          # percent of one device
MAX_MEMORY_GB = 1e6
MAX_CPUS = 4096
MAX_PACK_MEMBERS = 1024


def check_fields(section: str, given: Mapping[str, Any], allowed: set[str],
                 root: str = "study") -> None:
    """ConfigError unless ``given`` is a mapping whose keys are all in ``allowed``; ``section``
    is its dotted path ("" at the top, which errors call ``root``)."""
    check_mapping(section or root, given)
    for key in given:
        if key not in allowed:
            prefix = f"{section}." if section else ""
            raise ConfigError(f"{prefix}{key}", given[key],
                              f"is not a known field (known: {', '.join(sorted(allowed))})")


MAX_LOG_MB = 32.0               # the default cap of a trial attempt's log
MAX_LOG_MB_HIGH = 1 << 20       # 1 TB: the highest cap accepted


@dataclass(frozen=True)
class ExecutorOptions:
    """``workers``: parallel trial slots (None: one per GPU, else one per CPU core; on Ray: per
    node). ``max_retries``: relaunches of a trial whose worker process died.
    ``trial_timeout_s``: a trial running longer is killed and FAILED.
    ``heartbeat_timeout_s``: a trial whose worker sent no heartbeat for this long (stopped,
    frozen) is killed and retried as a dead worker's; it shows as "not responding" after half
    of it (``core.timeouts``; default 60, at least 3; None: not watched). The heartbeat is a
    thread of the worker: a trainable stuck in a C call that holds the GIL (a numba kernel
    without ``nogil``) is silent too, so raise it (or set None) for such trainables.
    ``max_log_mb``: the most a trial's attempt writes to its ``trial.log`` (MB); the rest of
    its output is dropped and the cut is marked in the log (default 32; None: no cap).
    ``backend``: "local" (this machine) or "ray" (every node of a Ray cluster).
    ``address`` (Ray only): None starts a local Ray for the run and stops it after; "auto" joins
    the cluster this machine belongs to; "host:port" (a head's GCS) or "ray://host:port" (Ray
    Client) joins that one. ``runtime_env`` (Ray only): passed to ``ray.init`` as it is."""
    workers: int | None = None
    max_retries: int = 2
    trial_timeout_s: float | None = None
    backend: str = "local"
    address: str | None = None
    runtime_env: dict[str, Any] | None = None
    heartbeat_timeout_s: float | None = HEARTBEAT_TIMEOUT_S
    max_log_mb: float | None = MAX_LOG_MB

    _FIELDS = {"workers", "max_retries", "trial_timeout_s", "backend", "address", "runtime_env",
               "heartbeat_timeout_s", "max_log_mb"}

    @property
    def max_log_bytes(self) -> int | None:
        """``max_log_mb`` in bytes (None: no cap)."""
        return None if self.max_log_mb is None else int(self.max_log_mb * 1_000_000)

    def __post_init__(self) -> None:
        if self.workers is not None:
            check_integer("executor.workers", self.workers, low=1, high=MAX_WORKERS)
        check_integer("executor.max_retries", self.max_retries, low=0, high=MAX_RETRIES)
        if self.trial_timeout_s is not None:
            check_number("executor.trial_timeout_s", self.trial_timeout_s, low=0.0, low_open=True,
                         high=MAX_SECONDS, hint="(seconds)")
        if self.heartbeat_timeout_s is not None:
            check_number("executor.heartbeat_timeout_s", self.heartbeat_timeout_s,
                         low=MIN_HEARTBEAT_TIMEOUT_S, high=MAX_SECONDS,
                         hint=f"(seconds; workers send a heartbeat every {HEARTBEAT_S:g} s)")
        if self.max_log_mb is not None:
            check_number("executor.max_log_mb", self.max_log_mb, low=0.0, low_open=True,
                         high=MAX_LOG_MB_HIGH, hint="(megabytes)")
        check_choice("executor.backend", self.backend, BACKENDS)
        if self.address is not None:
            _check_ray_only("executor.address", self.address, self.backend)
            _check_address(self.address)
        if self.runtime_env is not None:
            _check_ray_only("executor.runtime_env", self.runtime_env, self.backend)
            check_mapping("executor.runtime_env", self.runtime_env,
                          what="a mapping (Ray's runtime_env)")
            check_plain_data("executor.runtime_env", dict(self.runtime_env))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "ExecutorOptions":
        d = d or {}
        check_fields("executor", d, cls._FIELDS)
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"workers": self.workers, "max_retries": self.max_retries,
                               "trial_timeout_s": self.trial_timeout_s}
        if self.heartbeat_timeout_s != HEARTBEAT_TIMEOUT_S:     # stored when not the default
            out["heartbeat_timeout_s"] = self.heartbeat_timeout_s
        if self.max_log_mb != MAX_LOG_MB:
            out["max_log_mb"] = self.max_log_mb
        if self.backend != "local":      # a local study's stored form is unchanged
            out.update(backend=self.backend, address=self.address,
                       runtime_env=dict(self.runtime_env) if self.runtime_env else None)
        return out


BACKENDS = ("local", "ray")
_ADDRESS = re.compile(r"(ray://)?[A-Za-z0-9_.\-\[\]:]{1,253}:[0-9]{1,5}")


def _check_ray_only(field: str, value: Any, backend: str) -> None:
    if backend != "ray":
        raise ConfigError(field, value, f"is set while executor.backend is {backend!r} (it is "
                          "an option of backend: ray)")


def _check_address(address: Any) -> None:
    """"auto", "host:port" or "ray://host:port" (the port in 1-65535)."""
    if address == "auto":
        return
    if not isinstance(address, str) or not _ADDRESS.fullmatch(address) \
            or not 0 < int(address.rsplit(":", 1)[1]) < 65536:
        raise ConfigError("executor.address", address, "must be null (start a local Ray), "
                          "'auto', 'host:port' or 'ray://host:port'")


@dataclass(frozen=True)
class Resources:
    """A trial's demand on each device it uses, when no profile says otherwise: ``compute`` in
    percent of one device (100: all of it), ``memory_gb`` of device memory, ``cpus`` host cores."""
    compute: float = 100.0
    memory_gb: float = 0.0
    cpus: int = 1

    _FIELDS = {"compute", "memory_gb", "cpus"}

    def __post_init__(self) -> None:
        check_number("resources.compute", self.compute, low=0.0, low_open=True, high=MAX_COMPUTE,
                     hint="(percent of a device)")
        check_number("resources.memory_gb", self.memory_gb, low=0.0, high=MAX_MEMORY_GB)
        check_integer("resources.cpus", self.cpus, low=0, high=MAX_CPUS)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "Resources":
        d = d or {}
        check_fields("resources", d, cls._FIELDS)
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        return {"compute": self.compute, "memory_gb": self.memory_gb, "cpus": self.cpus}


@dataclass(frozen=True)
class PackOptions:
    """Fused packs (``execution: fused | auto``): ``max_members`` trials at most in one pack
    (one worker process, one fused model); on CUDA a pack may take fewer, as measured memory
    allows. ``graphs``: the whole fused step as one CUDA graph ("auto": on CUDA devices).
    ``conv``: how packs run dense convolutions, "grouped" (one grouped convolution, the
    default) or "bmm" (im2col and one batched GEMM over the members).
    The training precision is the study's ``precision`` (``pack: {precision}`` is its deprecated
    spelling, read by ``split_precision``)."""
    max_members: int = 8
    graphs: str = "auto"
    conv: str = "grouped"

    _FIELDS = {"max_members", "graphs", "conv"}

    def __post_init__(self) -> None:
        check_integer("pack.max_members", self.max_members, low=1, high=MAX_PACK_MEMBERS)
        check_choice("pack.graphs", self.graphs, GRAPH_MODES)
        check_choice("pack.conv", self.conv, CONV_FORMS)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "PackOptions":
        d = d or {}
        check_fields("pack", d, cls._FIELDS)
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (graphs and conv only when not their defaults, so older stored specs
        compare equal)."""
        d: dict[str, Any] = {"max_members": self.max_members}
        if self.graphs != "auto":
            d["graphs"] = self.graphs
        if self.conv != "grouped":
            d["conv"] = self.conv
        return d


def split_precision(precision: Any, pack: Mapping[str, Any] | None
                    ) -> tuple[str, dict[str, Any] | None]:
    """(the study's precision, the pack options without ``precision``).

    ``precision`` (None: not given) is the study's: ``fp32`` (the default, the exact mode),
    ``bf16`` or ``fp16``, for its packs and its plain trials of built-in workloads alike. The
    older ``pack: {precision}`` still works with a DeprecationWarning; given both, they must
    agree (ConfigError naming ``pack.precision``)."""
    if not isinstance(pack, Mapping) or "precision" not in pack:
        chosen = "fp32" if precision is None else precision
        check_choice("precision", chosen, PRECISIONS)
        return chosen, (dict(pack) if isinstance(pack, Mapping) else pack)
    old = pack["precision"]
    check_choice("pack.precision", old, PRECISIONS)
    if precision is not None and precision != old:
        raise ConfigError("pack.precision", old, f"differs from precision {precision!r}; set "
                          "only precision (pack.precision is its deprecated spelling)")
    warnings.warn("pack: {precision} is deprecated: set the study's precision (YAML "
                  "'precision: bf16', Study(precision='bf16')), which also applies to plain "
                  "trials of built-in workloads", DeprecationWarning, stacklevel=3)
    return old, {k: v for k, v in pack.items() if k != "precision"}


def _check_execution(mode: Any) -> None:
    check_choice("execution", mode, EXECUTION_MODES)


def _check_oversubscription(value: Any) -> None:
    """None, ``auto``, ``paper``, a ratio >= 1, or ``{architecture: ratio}``."""
    from hypersack.core.oversubscription import Oversubscription
    Oversubscription.parse(value)


def _check_algorithm(algorithm: Any) -> None:
    """A mapping whose ``type`` is a name and whose options are plain (JSON) data: the study
    store keeps it as JSON, and the algorithm registry looks the type up by name."""
    if not isinstance(algorithm, Mapping) or "type" not in algorithm:
        raise ConfigError("algorithm", algorithm, "must be a name or a mapping with a 'type'")
    if not isinstance(algorithm["type"], str):
        raise ConfigError("algorithm.type", algorithm["type"], "must be the name of an algorithm")
    for key, option in algorithm.items():
        if not isinstance(key, str):
            raise ConfigError("algorithm", key, "must have option names that are strings")
        check_plain_data(f"algorithm.{key}", option)


def _check_max_steps(max_steps: Any, space: SearchSpace) -> None:
    """An integer >= 1, or the name of a space parameter whose every value is one."""
    if max_steps is None:
        return
    if not isinstance(max_steps, str):
        check_integer("max_steps", max_steps, low=1, high=MAX_STEPS,
                      hint="or the name of a space parameter")
        return
    if max_steps not in space:
        raise ConfigError("max_steps", max_steps, "must be an integer >= 1 or the name of a space parameter")
    domain = space[max_steps]
    values = (list(domain.choices) if isinstance(domain, Categorical)
              else [domain.value] if isinstance(domain, Constant)
              else [domain.low, domain.high] if isinstance(domain, Int) else None)
    if values is None or not all(is_integer(v) and 1 <= v <= MAX_STEPS for v in values):
        raise ConfigError(f"space.{max_steps}", domain.to_dict(),
                          f"must give integers in [1, {MAX_STEPS}]: max_steps names it as the "
                          "steps of a trial")


def _check_budget(budget: Any) -> None:
    """The YAML form of the budget, before Budget() sees it."""
    check_fields("budget", budget, {"trials", "time_s"})
    if budget.get("trials") is not None:
        check_integer("budget.trials", budget["trials"], low=1, high=MAX_TRIALS)
    if budget.get("time_s") is not None:
        check_number("budget.time_s", budget["time_s"], low=0.0, low_open=True, high=MAX_SECONDS,
                     hint="(seconds)")


#: ``durability`` -> the SQLite ``synchronous`` level the study store commits with.
DURABILITY = {"power": "FULL", "process": "NORMAL"}


def check_durability(value: Any, field_name: str = "durability") -> str:
    """``value`` when it is a durability level ("power" or "process"), else ConfigError."""
    if not isinstance(value, str) or value not in DURABILITY:
        raise ConfigError(field_name, value, "must be 'power' (survives a power loss: fsync at "
                          "every commit) or 'process' (survives a crash of the process)")
    return value


def _check_placement(value: Any) -> None:
    """A policy name, or ``{policy: NAME, OPTION: VALUE}`` (``placement.parse_placement``)."""
    from hypersack.placement import parse_placement
    parse_placement(value)


@dataclass(frozen=True)
class StudySpec:
    name: str
    space: SearchSpace
    objective: Objective
    budget: Budget
    trainable: str | None = None          # "module:function" or a built-in name; None: passed in Python
    algorithm: dict[str, Any] = field(default_factory=lambda: {"type": "random"})
    seed: int = 0
    executor: ExecutorOptions = ExecutorOptions()
    max_steps: int | str | None = None    # steps per trial (int) or the config key holding it
    description: str = ""
    placement: Any = "wfd"                # policy name, or {policy: hay, w_frag: .., w_entire: ..}
    # Oversubscription ratio r (core.oversubscription): "auto" (learned from co-located trials
    # per GPU architecture, the paper's ratio until measured), "paper" (the paper's table), one
    # number for every device, or per architecture ({A100: 3}). None: "auto" on GPUs; 1 for CPU
    # slots in every mode but a number.
    oversubscription: str | float | dict[str, float] | None = None
    resources: Resources = Resources()    # a trial's demand when no profile says otherwise
    # separate: one process per trial; fused: every trial in a pack of its fusable task; auto:
    # the trials the task accepts fuse, the others run separately.
    execution: str = "separate"
    pack: PackOptions = PackOptions()
    # Training precision of packs and of built-in workloads' plain trials: fp32 (exact), bf16,
    # fp16 (autocast over fp32 master weights; hypersack.fusion.precision).
    precision: str = "fp32"
    # Read checkpoints with full pickle (arbitrary objects): only for run folders no one else can
    # write. Default: safe loading of plain data (see hypersack.runtime.worker.checkpoints).
    unsafe_checkpoints: bool = False
    # What an acknowledged report survives: "power" (fsync at every commit: a power loss) or
    # "process" (a crash of the driver's process, kill -9 included; no fsync per commit).
    durability: str = "power"
    # Time-sharing of devices among trials (Hermes and its baselines); None: none.
    time_sharing: TimeSharing | None = None
    # Trials failing the same way in a row that stop the study (core.failures); None: never.
    max_failures: int | None = DEFAULT_MAX_FAILURES
    # The study file's folder (absolute), searched for a module:function trainable on resume.
    source_dir: str | None = None
    # "module:object" callbacks (hypersack.callbacks), resolved by the driver at run time.
    callbacks: tuple[str, ...] = ()
    # Configs (whole or partial) to run first, in order (Optuna's enqueue_trial).
    enqueue: tuple[dict[str, Any], ...] = ()
    # Keep the checkpoints of only this many best ended trials (core.keep_best); None: all.
    keep_checkpoints_num: int | None = None

    _FIELDS = {"name", "space", "objective", "budget", "trainable", "algorithm", "seed", "executor",
               "max_steps", "description", "storage", "placement", "oversubscription", "resources",
               "execution", "pack", "precision", "unsafe_checkpoints", "durability",
               "time_sharing", "max_failures", "source_dir", "callbacks", "enqueue",
               "keep_checkpoints_num"}

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigError("name", self.name,
                              "must be 1-128 letters, digits, '_', '.' or '-' (letters of any "
                              "script: 'é' is one), starting with a letter or digit (no space or "
                              "'/')")
        check_integer("seed", self.seed, low=0, high=MAX_SEED)
        if self.trainable is not None:
            check_name("trainable", self.trainable, max_len=1024)
        check_text("description", self.description)
        _check_budget({"trials": self.budget.trials, "time_s": self.budget.time_s})
        _check_algorithm(self.algorithm)
        _check_max_steps(self.max_steps, self.space)
        _check_placement(self.placement)
        _check_oversubscription(self.oversubscription)
        _check_execution(self.execution)
        check_choice("precision", self.precision, PRECISIONS)
        check_bool("unsafe_checkpoints", self.unsafe_checkpoints)
        check_durability(self.durability)
        object.__setattr__(self, "time_sharing", TimeSharing.parse(self.time_sharing))
        if self.max_failures is not None:
            check_integer("max_failures", self.max_failures, low=1, high=MAX_TRIALS,
                          hint="or null (never stop the study for failing trials)")
        if self.source_dir is not None:
            check_name("source_dir", self.source_dir, max_len=4096)
        object.__setattr__(self, "callbacks", check_references("callbacks", self.callbacks))
        object.__setattr__(self, "enqueue", check_enqueued(self.enqueue, self.space))
        if self.keep_checkpoints_num is not None:
            check_integer("keep_checkpoints_num", self.keep_checkpoints_num, low=1, high=MAX_KEEP)

    @property
    def ratios(self) -> Any:
        """``oversubscription`` as its value object (``core.oversubscription.Oversubscription``,
        validated with the spec)."""
        from hypersack.core.oversubscription import Oversubscription
        return Oversubscription.parse(self.oversubscription)

    def steps_for(self, config: Mapping[str, Any]) -> int | None:
        """Planned steps of a trial with ``config`` (for progress bars), or None if unknown."""
        if isinstance(self.max_steps, str):
            value = config.get(self.max_steps)
            return int(value) if isinstance(value, (int, float)) else None
        return self.max_steps

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "StudySpec":
        """Validate a study declaration; ``storage`` is accepted and ignored here (the CLI uses it)."""
        check_fields("", d, cls._FIELDS)
        for required in ("name", "space", "objective", "budget"):
            if required not in d:
                raise ConfigError(required, None, "is required")
        budget = d["budget"]
        _check_budget(budget)
        if isinstance(d["objective"], Mapping):    # keys of any type, before Objective sorts them
            check_fields("objective", d["objective"], {"metric", "mode"})
        elif isinstance(d["objective"], list):     # several objectives: each one's keys
            for i, part in enumerate(d["objective"]):
                if isinstance(part, Mapping):
                    check_fields(f"objective[{i}]", part, {"metric", "mode"})
        if d.get("storage") is not None:
            check_name("storage", d["storage"], max_len=4096)
        algorithm = d.get("algorithm", {"type": "random"})
        if isinstance(algorithm, str):
            algorithm = {"type": algorithm}
        if not isinstance(algorithm, Mapping) or "type" not in algorithm:
            raise ConfigError("algorithm", algorithm, "must be a name or a mapping with a 'type'")
        precision, pack = split_precision(d.get("precision"), d.get("pack"))
        return cls(name=d["name"], space=SearchSpace(d["space"]),
                   objective=Objective.parse(d["objective"]), budget=Budget(**budget),
                   trainable=d.get("trainable"), algorithm=dict(algorithm), seed=d.get("seed", 0),
                   executor=ExecutorOptions.from_dict(d.get("executor")),
                   max_steps=d.get("max_steps"), description=d.get("description", ""),
                   placement=d.get("placement", "wfd"), oversubscription=d.get("oversubscription"),
                   resources=Resources.from_dict(d.get("resources")),
                   execution=d.get("execution", "separate"), pack=PackOptions.from_dict(pack),
                   precision=precision,
                   unsafe_checkpoints=d.get("unsafe_checkpoints", False),
                   durability=d.get("durability", "power"),
                   time_sharing=TimeSharing.parse(d.get("time_sharing")),
                   max_failures=d.get("max_failures", DEFAULT_MAX_FAILURES),
                   source_dir=d.get("source_dir"),
                   callbacks=d.get("callbacks") or (), enqueue=d.get("enqueue") or (),
                   keep_checkpoints_num=d.get("keep_checkpoints_num"))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``time_sharing``, ``max_failures``, ``source_dir``, ``precision``... only when not
        their defaults, so older stored specs compare equal)."""
        d = self._to_dict()
        if self.time_sharing is not None:
            d["time_sharing"] = self.time_sharing.to_dict()
        if self.max_failures != DEFAULT_MAX_FAILURES:
            d["max_failures"] = self.max_failures
        if self.source_dir is not None:
            d["source_dir"] = self.source_dir
        if self.callbacks:
            d["callbacks"] = list(self.callbacks)
        if self.enqueue:
            d["enqueue"] = [dict(c) for c in self.enqueue]
        if self.keep_checkpoints_num is not None:
            d["keep_checkpoints_num"] = self.keep_checkpoints_num
        if self.precision != "fp32":
            d["precision"] = self.precision
        return d

    def _to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "trainable": self.trainable, "space": self.space.to_dict(),
                "objective": self.objective.to_spec(),
                "budget": {"trials": self.budget.trials, "time_s": self.budget.time_s},
                "algorithm": dict(self.algorithm), "seed": self.seed,
                "executor": self.executor.to_dict(), "max_steps": self.max_steps,
                "description": self.description, "placement": self.placement,
                "oversubscription": (dict(self.oversubscription) if isinstance(self.oversubscription, Mapping)
                                     else self.oversubscription),
                "resources": self.resources.to_dict(), "execution": self.execution,
                "pack": self.pack.to_dict(), "unsafe_checkpoints": self.unsafe_checkpoints,
                "durability": self.durability}


# Fields a resumed study may change: how much to run and how, not what is searched.
RESUMABLE_CHANGES = frozenset({"budget", "executor", "max_steps", "description", "placement",
                               "oversubscription", "resources", "execution", "pack",
                               "precision", "unsafe_checkpoints", "durability", "time_sharing",
                               "max_failures", "source_dir", "callbacks",
                               "keep_checkpoints_num", "enqueue"})


def check_resumable(stored: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Raise ConfigError when ``new`` changes what the stored study searches (its space,
    objective, algorithm, seed or trainable); budget and executor options may change."""
    for key in sorted(set(stored) | set(new)):
        if key not in RESUMABLE_CHANGES and stored.get(key) != new.get(key):
            raise ConfigError(key, new.get(key),
                              f"differs from the stored study's {stored.get(key)!r}; only "
                              f"{', '.join(sorted(RESUMABLE_CHANGES))} may change on resume "
                              "(replace the study, or give it another name)")


def check_same_study(stored: Mapping[str, Any], new: Mapping[str, Any], name: str) -> None:
    """Raise ConfigError when a ``Study`` described as ``new`` reads the stored study ``name``
    whose spec is ``stored`` but describes another one (another space, objective, algorithm or
    seed): its results would be silently another study's. What may change on resume may differ;
    a trainable is compared only when both name one (one passed to ``run()`` is not stored)."""
    for key in sorted(set(stored) | set(new)):
        if key in RESUMABLE_CHANGES or key == "name":
            continue
        if key == "trainable" and (stored.get(key) is None or new.get(key) is None):
            continue
        if stored.get(key) != new.get(key):
            raise ConfigError(key, new.get(key),
                              f"differs from the stored study {name!r}'s {stored.get(key)!r}: "
                              "this Study describes another study than the one stored under "
                              "its name (read the stored one with Study.load(name, storage))")
