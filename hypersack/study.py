"""The Python API: declare a study, run it, resume it, read its best trial.

    study = hypersack.Study(name="digits", space={...}, objective=("accuracy", "max"),
                            algorithm="random", n_trials=32)
    study.run("digits_mlp")          # or a callable train(config, ctx)
    study.best_trial()               # {"trial_id", "config", "metric", "value"}

Fused packs: ``Study(..., execution="fused", pack={"max_members": 16}).run("digits_mlp")`` (a
built-in with a fusable task), or ``.run(task)`` / ``.run("module:TASK")`` with a
``hypersack.fusion.FusableTask``; ``execution="auto"`` fuses the trials the task accepts.

Coming from Optuna or Ray Tune (README section of that name): ``callbacks=``, ``enqueue()``,
``add_trial()``, ``ask()``/``tell()``, ``set_attr()``/``user_attrs()``, ``shared=``,
``keep_checkpoints_num=``, ``best_checkpoint()``/``export_best()``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from hypersack.callbacks import resolve_callbacks
from hypersack.core.algorithms import make_algorithm
from hypersack.core.algorithms.base import algorithm_spec as make_algorithm_spec
from hypersack.core.controller import Budget
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.core.timesharing import TimeSharing
from hypersack.core.timeouts import HEARTBEAT_TIMEOUT_S
from hypersack.core.keep_best import KeepBest
from hypersack.core.warm_start import Enqueued, check_config
from hypersack.core.spec import (MAX_LOG_MB, ExecutorOptions, PackOptions, Resources, StudySpec,
                                 check_resumable, check_same_study, split_precision)
from hypersack.core.failures import DEFAULT_MAX_FAILURES
from hypersack.errors import (ConfigError, NoTrialCompletedWarning, StorageError,
                              StudyExistsError, TrainableError)
from hypersack.runtime.storage import queries
from hypersack.runtime.devices.slots import Slot
from hypersack.runtime.devices.machine import prepare_driver, prepare_machine
from hypersack.runtime.executors.local import LocalExecutor
from hypersack.runtime.loop.assemble import Assembly, SampleSink, assemble
from hypersack.runtime.loop.run import GROUP_WINDOW_S, StudyRun
from hypersack.runtime.executors.packs import plan_execution
from hypersack.validation import check_bool, check_mapping
from hypersack.runtime.loop.progress import make_progress
from hypersack.runtime.loop.proposals import ProposalRunner
from hypersack.runtime.storage.best_checkpoint import CheckpointKeeper
from hypersack.runtime.loop.callbacks import CallbackRunner, freeze
from hypersack.runtime.worker.checkpoints import ensure_private_dir
from hypersack.runtime.storage.sqlite import DEFAULT_STORAGE, Storage, StudyRow
from hypersack.runtime.worker.shared import WithShared, check_shared
from hypersack.runtime.worker.trainable import TrainableRef
from hypersack.runtime.storage.user_attrs import FILE as ATTRS_FILE, STUDY as STUDY_ATTRS
from hypersack.runtime.storage.user_attrs import AttrsImporter, load_attrs, save_attrs

__all__ = ["Study"]

Trainable = Callable[..., Any] | str


def extend_sys_path(*folders: str | Path) -> None:
    """Put ``folders`` (absolute) at the front of sys.path, as ``python -m`` puts the working
    directory there, so a ``module:function`` next to a study file imports in the driver and, as
    workers get the driver's sys.path, in every worker."""
    for folder in reversed([os.path.abspath(f) for f in folders]):
        if folder not in sys.path:
            sys.path.insert(0, folder)


def _warn_without_result(store: Storage, ended: StudyRun) -> None:
    """Say so when a study ended with no complete trial (every trial failed, most often)."""
    if ended.status != "complete":
        return
    counts = store.counts(store.get_study(ended.name).study_id)
    if not counts["complete"]:
        warnings.warn(f"Study {ended.name!r}: no trial completed ({counts['failed']} failed, "
                      f"{counts['pruned']} pruned); see Study.status() for errors and tracebacks",
                      NoTrialCompletedWarning, stacklevel=4)


class Study:
    """A hyperparameter study: a search space, an objective, an algorithm and a budget.

    Parameters (a bad value raises ConfigError naming the parameter):

    - ``space``: parameter name -> domain: ``hypersack.Float(low, high, log=False)``,
      ``Int(low, high, step=1, log=False)``, ``Categorical([...])``, a YAML-style dict
      (``{"type": "float", "low": ..., "high": ...}``), or a bare value (a constant).
    - ``objective``: ``(metric, mode)`` or ``{"metric": ..., "mode": ...}``; ``mode`` is "min" or
      "max" and is required. ``metric`` is a name the trainable reports. A list of them
      (``[("loss", "min"), ("latency_ms", "min")]``) makes a multi-objective study: every trial
      reports every objective, ``best_trials()`` is the Pareto front (README "Multi-objective").
    - ``name``: the study's name in the store (letters of any script, digits, ``_ . -``); None: a timestamped
      name ("study-YYYYmmdd-HHMMSS"). An empty string is an error.
    - ``algorithm``: "random", "grid", "tpe", or ``{"type": "sha"|"hyperband"|"asha"|"bohb"|
      "rasda"|"pack_hyperband", **options}`` (README "Algorithms"), or an ``Algorithm`` instance.
    - ``n_trials``: most trials created; ``time_budget_s``: wall seconds of running, summed over
      resumes. At least one is required; when time runs out, running trials stop at their next
      report and keep their last result.
    - ``storage``: the SQLite file (default ``hypersack.db`` in the working directory); trial logs
      and checkpoints go to ``hypersack-runs/<name>-<id>/trial-NNNNN/`` beside it (``<id>``: the
      study's identity in the store, so a replaced study never reads another's files).
    - ``seed``: seeds the algorithm and each trial (``ctx.seed``).
    - ``workers``: worker processes; None: one per GPU, else one per CPU core.
    - ``max_retries``: restarts of a trial whose worker process died (from its checkpoint).
    - ``max_failures``: once this many trials in a row failed the same way (the same exception,
      the objective metric missing...), the study stops with one error instead of failing the
      rest one by one (``hypersack.core.failures``); None: never. Default 5.
    - ``trial_timeout_s``: a trial running longer is killed and FAILED; None: no limit.
    - ``heartbeat_timeout_s``: a trial whose worker sent no heartbeat for this long (a stopped
      or frozen process) is killed and retried as a dead worker's; "not responding" after half
      of it. Default 60 s (at least 3); None: not watched (the heartbeat is a thread: a C call
      holding the GIL longer than this is taken for a hang too).
    - ``max_log_mb``: the most one attempt of a trial writes to its ``trial.log`` (MB); the cut
      is marked in the log. Default 32; None: no cap.
    - ``max_steps``: steps per trial, for progress bars and ETA: a number, or the name of a
      space parameter holding it (``"epochs"``).
    - ``trainable``: the default for ``run()``: a callable ``train(config, ctx)``,
      ``"module:function"``, or a built-in (``"digits_mlp"``, ``"digits_cnn"``).
    - ``placement``: how trials share devices: "wfd" (default), "ff", "ffd", "wf", "wfd-ls",
      "fill", "auto", "hay", "ray", "mip", or "exclusive" (one trial per device).
    - ``oversubscription``: ratio r, a device takes trials up to r x 100% compute: "auto"
      (learned from measured co-location, the default on GPUs), "paper" (the HyperSack paper's
      table), a number, or per architecture (``{"A100": 3}``); None: the inventory's defaults.
    - ``resources``: a trial's demand until it is profiled: ``{"compute": percent,
      "memory_gb": ..., "cpus": ...}``.
    - ``execution``: "separate" (a process per trial), "fused" (trials of one architecture
      trained as one model, needs a ``FusableTask``), or "auto".
    - ``pack``: options of fused packs, ``{"max_members": 16, "graphs": "auto", "conv":
      "grouped"}`` (``conv: bmm``: dense convolutions as im2col + one batched GEMM).
    - ``precision``: "fp32" (default, the exact mode), "bf16" or "fp16": autocast over fp32
      master weights (fp16 with a loss scale), channels_last for convolutional models; for fused
      packs and for plain trials of the built-in workloads alike (a trainable of your own keeps
      its own precision). ``pack={"precision": ...}`` is its deprecated spelling.
    - ``unsafe_checkpoints``: read checkpoints with full pickle (any object; runs code). Default
      False: safe loading of plain data (see README "Checkpoints, faults and trust").
    - ``durability``: what an acknowledged report survives: "power" (default: a power loss; the
      store fsyncs every commit) or "process" (a crash of this process, kill -9 included, not a
      power loss; several times the report rate). See README "Durability".
    - ``time_sharing``: time-share devices among trials (Hermes): a policy name ("hermes",
      "rr", "slaq", "fifo") or ``{"policy": ..., "quantum_s": ..., "growth": ...,
      "max_quantum_s": ..., "max_jobs_per_device": ..., "metric": ...}``
      (``hypersack.core.timesharing``). Trials must report with a checkpoint to be preempted.
    - ``executor``: "local" (this machine), "ray" (a local Ray started and stopped by the run),
      or ``{"backend": "ray", "address": "auto" | "host:port" | "ray://host:port",
      "runtime_env": {...}}`` (README "Running on a Ray cluster"; ``pip install
      'hypersack[ray]'``).
    - ``callbacks``: ``hypersack.Callback`` objects or functions ``fn(study, trial)`` told about
      trials as they start, report and end (``hypersack.callbacks``); YAML ``callbacks:
      [module:object]``.
    - ``enqueue``: configs (whole or partial) to run first, as ``Study.enqueue`` adds them.
    - ``shared``: large objects (a data set...) sent once to each worker with the trainable,
      not once per trial; trials read them as ``ctx.shared[name]`` (Ray Tune's
      ``tune.with_parameters``). Not stored: pass them again to resume. Separate execution only.
    - ``keep_checkpoints_num``: keep the checkpoints of only this many best ended trials (by the
      objective); others are deleted when they end or are outdone (Ray Tune's ``num_to_keep``).
      None (default): keep every trial's last checkpoint. See ``best_checkpoint()``.
    """

    def __init__(self, space: Mapping[str, Any] | SearchSpace, objective: Any, *,
                 name: str | None = None, algorithm: Any = "random", n_trials: int | None = None,
                 time_budget_s: float | None = None, storage: str | Path = DEFAULT_STORAGE,
                 seed: int = 0, workers: int | None = None, max_retries: int = 2,
                 trial_timeout_s: float | None = None, max_steps: int | str | None = None,
                 trainable: Trainable | None = None, placement: str = "wfd",
                 oversubscription: str | float | Mapping[str, float] | None = None,
                 resources: Mapping[str, Any] | None = None, execution: str = "separate",
                 pack: Mapping[str, Any] | None = None, precision: str | None = None,
                 unsafe_checkpoints: bool = False,
                 durability: str = "power",
                 time_sharing: str | Mapping[str, Any] | None = None,
                 executor: str | Mapping[str, Any] = "local",
                 max_failures: int | None = DEFAULT_MAX_FAILURES,
                 callbacks: Sequence[Any] = (), enqueue: Sequence[Mapping[str, Any]] = (),
                 shared: Mapping[str, Any] | None = None,
                 keep_checkpoints_num: int | None = None,
                 heartbeat_timeout_s: float | None = HEARTBEAT_TIMEOUT_S,
                 max_log_mb: float | None = MAX_LOG_MB):
        if n_trials is None and time_budget_s is None:
            raise ConfigError("n_trials", None, "the study needs a budget: set n_trials or "
                              "time_budget_s (or both)")
        precision, pack = split_precision(precision, pack)
        self._algorithm_instance = algorithm if not isinstance(algorithm, (str, Mapping)) else None
        algorithm_spec = make_algorithm_spec(algorithm)   # an Optuna sampler object: type optuna
        self.spec = StudySpec(
            name=time.strftime("study-%Y%m%d-%H%M%S") if name is None else name,
            space=space if isinstance(space, SearchSpace) else SearchSpace(space),
            objective=Objective.parse(objective), budget=Budget(n_trials, time_budget_s),
            trainable=TrainableRef.storable_name(trainable) if trainable is not None else None,
            algorithm=algorithm_spec, seed=seed,
            executor=ExecutorOptions(workers, max_retries, trial_timeout_s,
                                     **_backend_options(executor),
                                     heartbeat_timeout_s=heartbeat_timeout_s,
                                     max_log_mb=max_log_mb), max_steps=max_steps,
            placement=placement,
            oversubscription=dict(oversubscription) if isinstance(oversubscription, Mapping) else oversubscription,
            resources=Resources.from_dict(resources), execution=execution,
            pack=PackOptions.from_dict(pack), precision=precision,
            unsafe_checkpoints=unsafe_checkpoints,
            durability=durability,
            time_sharing=TimeSharing.parse(time_sharing), max_failures=max_failures,
            enqueue=tuple(dict(c) if isinstance(c, Mapping) else c for c in enqueue),
            keep_checkpoints_num=keep_checkpoints_num)
        self.storage_path = Path(storage)
        self._trainable = trainable
        # The algorithm built from a spec and not used yet (the first run, ask... takes it).
        self._built: tuple[StudySpec, Any] | None = None
        if self._algorithm_instance is None:       # a bad name or option fails here, not at run()
            self._built = (self.spec, make_algorithm(self.spec.algorithm, self.spec.space,
                                                     self.spec.objective, seed))
        self._callbacks = resolve_callbacks(callbacks)
        self._pending_attrs: dict[str, Any] = {}     # set_attr before the study is stored
        self._shared = check_shared(shared) if shared is not None else None

    @classmethod
    def from_spec(cls, spec: StudySpec | Mapping[str, Any], storage: str | Path = DEFAULT_STORAGE) -> "Study":
        spec = spec if isinstance(spec, StudySpec) else StudySpec.from_dict(spec)
        study = cls.__new__(cls)
        study.spec, study.storage_path = spec, Path(storage)
        study._trainable, study._algorithm_instance = spec.trainable, None
        study._callbacks, study._pending_attrs, study._shared = [], {}, None
        study._built = None
        return study

    @classmethod
    def from_yaml(cls, path: str | Path, storage: str | Path | None = None) -> "Study":
        """The study declared in the YAML file ``path``; its folder is stored with the study, so
        ``resume`` from another folder still finds a ``module:function`` beside the file."""
        from hypersack.config import load_study
        loaded = load_study(path)          # parsed, and its algorithm built, once
        extend_sys_path(loaded.folder, os.getcwd())
        study = cls.from_spec(loaded.spec, storage or loaded.storage or DEFAULT_STORAGE)
        study._built = (loaded.spec, loaded.algorithm)
        return study

    @classmethod
    def load(cls, name: str, storage: str | Path = DEFAULT_STORAGE) -> "Study":
        """The stored study ``name`` (to resume it or read its results)."""
        with Storage(storage, readonly=True) as store:
            row = store.get_study(name)
        return cls.from_spec(StudySpec.from_dict(row.spec), storage)

    @property
    def name(self) -> str:
        return self.spec.name

    # ---- running ---------------------------------------------------------------------------

    def run(self, trainable: Trainable | None = None, *, if_exists: str = "error",
            progress: str | bool | None = None, slots: list[Slot] | None = None,
            load_if_exists: bool = False) -> StudyRun:
        """Run the study to its budget and return how it ended (``status``: "complete" or
        "interrupted"); warns (RuntimeWarning) when it ended with no complete trial.

        ``trainable``: a callable ``train(config, ctx)`` (shipped to workers by value when it is
        defined in a script or notebook), ``"module:function"``, a built-in name, a
        ``FusableTask`` or ``"module:TASK"``; None: the one given to the constructor or YAML.
        ``if_exists``: "error" (StudyExistsError, naming every way on), "resume" or "replace"
        when a study of this name is already stored; ``load_if_exists=True`` (Optuna's word) is
        ``if_exists="resume"``. ``progress``: "live", "lines", False, or None (live on a
        terminal, lines otherwise). ``slots``: the devices to run on (default: this machine's
        GPUs, else its CPU cores). A study that ``max_failures`` stopped raises
        TrialsFailingError (resumable once the cause is fixed).

        Ctrl-C (or SIGTERM): running trials stop at their next report (twice: at once), the
        study is saved, the line that resumes it is printed to stderr, and KeyboardInterrupt is
        raised (as Optuna does): a script ends with status 130 unless it catches it."""
        return _raise_if_signalled(self, self._run_returning(
            trainable, if_exists=if_exists, progress=progress, slots=slots,
            load_if_exists=load_if_exists))

    def _run_returning(self, trainable: Trainable | None = None, *, if_exists: str = "error",
                       progress: str | bool | None = None, slots: list[Slot] | None = None,
                       load_if_exists: bool = False) -> StudyRun:
        """``run``, returning "interrupted" on Ctrl-C (the command line says how to go on)."""
        if_exists = _if_exists(if_exists, load_if_exists)
        prepared = self._prepare(trainable)     # bad input fails here, before any file is made
        with Storage(self.storage_path) as store:
            exists = store.has_study(self.name)
            if exists and if_exists == "error":
                raise StudyExistsError(self.name, str(self.storage_path))
            if exists and if_exists == "replace":
                ended = self._replace(store, prepared, progress=progress, slots=slots)
            else:
                resume = exists and if_exists == "resume"
                ended = self._run(store, prepared, resume=resume, progress=progress, slots=slots)
            _warn_without_result(store, ended)
            return ended

    def _replace(self, store: Storage, prepared: tuple[TrainableRef, Any, Any], *,
                 progress: str | bool | None, slots: list[Slot] | None) -> StudyRun:
        """Run a new study in place of the stored one of this name (refused while a live
        driver runs that). The old study (rows and run folder) is deleted only once the new
        study's executor has started; until then any failure puts it back as it was."""
        old = store.get_study(self.name)
        parked = store.park_study(self.name)
        started = False

        def drop_old() -> None:
            nonlocal started
            store.delete_study(parked.name)
            _remove_run_folder(store.study_dir(old))
            started = True
        try:
            return self._run(store, prepared, resume=False, progress=progress, slots=slots,
                             on_started=drop_old)
        except BaseException:
            if not started:
                _put_back(store, parked, self.name)
            raise

    def resume(self, trainable: Trainable | None = None, *, progress: str | bool | None = None,
               slots: list[Slot] | None = None) -> StudyRun:
        """Continue a stored study: finished trials are kept, unfinished ones restart from their
        last checkpoint, the algorithm continues from its saved state. Ctrl-C: as ``run``."""
        return _raise_if_signalled(self, self._resume_returning(trainable, progress=progress,
                                                                 slots=slots))

    def _resume_returning(self, trainable: Trainable | None = None, *,
                          progress: str | bool | None = None,
                          slots: list[Slot] | None = None) -> StudyRun:
        """``resume``, returning "interrupted" on Ctrl-C (the command line says how to go on)."""
        if self.spec.source_dir is not None:        # the study file's folder (from_yaml)
            extend_sys_path(self.spec.source_dir)
        prepared = self._prepare(trainable)
        with Storage(self.storage_path, readonly=True) as store:
            store.get_study(self.name)   # a missing file or study: an error, and no file made
        with Storage(self.storage_path) as store:
            ended = self._run(store, prepared, resume=True, progress=progress, slots=slots)
            _warn_without_result(store, ended)
            return ended

    def _prepare(self, trainable: Trainable | None) -> tuple[TrainableRef, Any, Any]:
        """The trainable's reference, the pack plan and the algorithm: built before the store is
        opened, so a bad trainable or algorithm option fails before anything is stored."""
        pack = self.spec.pack
        plain, plan = plan_execution(self.spec.execution, self._pick_trainable(trainable),
                                     pack.max_members, self.spec.precision, pack.graphs,
                                     pack.conv)
        if self._shared is not None:
            if plan is not None:
                raise ConfigError("shared", sorted(self._shared), "works with execution "
                                  "'separate' only (fused packs build their data from the task)")
            plain = WithShared(plain, self._shared)
        ref = TrainableRef.of(plain)
        self._resolved = self._callbacks + resolve_callbacks(self.spec.callbacks)
        return ref, plan, self._algorithm()

    def _algorithm(self) -> Any:
        """The study's algorithm, running the enqueued configs first: the one built when the
        study was made (a bad option fails there), the first time and while the spec is the
        same object; else built anew (an algorithm holds state, so each use gets its own)."""
        built, self._built = self._built, None
        if built is not None and built[0] is self.spec and self._algorithm_instance is None:
            algorithm = built[1]
        else:
            algorithm = make_algorithm(self._algorithm_instance or self.spec.algorithm,
                                       self.spec.space, self.spec.objective, self.spec.seed)
        return Enqueued(algorithm, self.spec.enqueue) if self.spec.enqueue else algorithm

    def _run(self, store: Storage, prepared: tuple[TrainableRef, Any, Any], *, resume: bool,
             progress: str | bool | None, slots: list[Slot] | None,
             on_started: Callable[[], None] | None = None) -> StudyRun:
        ref, plan, algorithm = prepared
        # Model fits (Optuna samplers) take at most a share of the loop's time, and the loop
        # never waits for one (runtime.loop.proposals, rung_model); plain samplers ask on a
        # thread of their own (the runner's ``eager``).
        algorithm.use_background(ProposalRunner())
        if resume:
            store.verify_integrity(f"resume study {self.name!r}")   # not from a damaged file
            row = store.get_study(self.name)
            # JSON round trip: the stored spec is JSON, so compare like with like.
            new_spec = json.loads(json.dumps(self.spec.to_dict()))
            if "source_dir" in row.spec and "source_dir" not in new_spec:
                new_spec["source_dir"] = row.spec["source_dir"]    # resumed from Python
            check_resumable(row.spec, new_spec)
            store.acquire_lease(row)           # one driver per study: refused while one runs
            store.end_open_stays(row.study_id)  # those of a driver that was killed
            on_started = _then(lambda: store.update_spec(row.study_id, new_spec), on_started)
        else:
            row = store.create_study(self.name, self.spec.to_dict())
            store.acquire_lease(row)
        try:
            return self._drive(store, row, ref, plan, algorithm, resume, progress, slots,
                               on_started)
        finally:
            store.release_lease(row.study_id)

    def _drive(self, store: Storage, row: StudyRow, ref: TrainableRef, plan: Any, algorithm: Any,
               resume: bool, progress: str | bool | None, slots: list[Slot] | None,
               on_started: Callable[[], None] | None = None) -> StudyRun:
        trial_dir = lambda trial_id: store.trial_dir(row, trial_id)   # noqa: E731
        attrs = AttrsImporter(store, row.study_id, trial_dir,
                              lambda trial_id: store.trial_file(row, trial_id, ATTRS_FILE))
        runner = CallbackRunner(self._resolved, self, attrs.of) if self._resolved else None
        save_attrs(store, row.study_id, STUDY_ATTRS, self._pending_attrs)
        keep = self.spec.keep_checkpoints_num
        keeper = CheckpointKeeper(KeepBest(self.spec.objective, keep), trial_dir) if keep else None
        listeners = [attrs.listen, *(x.listen for x in (keeper, runner) if x is not None)]
        assembly: Assembly | None = None
        try:
            with self._assembled(store, row, ref, plan, algorithm, resume, progress,
                                 slots) as (assembly, view):
                return assembly.run(progress=view, group_window_s=GROUP_WINDOW_S,
                                    on_started=on_started, listeners=listeners)
        finally:
            trials = assembly.controller.trials if assembly is not None else {}
            try:        # first: the last callbacks see every trial's attributes
                # With the run's own error in flight, a store fault here is not the one to see.
                attrs.close(trials, quiet=sys.exc_info()[0] is not None)
            finally:
                if keeper is not None:
                    keeper.close(trials)
                if runner is not None:
                    runner.close(trials)

    def _assembled(self, store: Storage, row: StudyRow, ref: TrainableRef, plan: Any,
                   algorithm: Any, resume: bool, progress: str | bool | None,
                   slots: list[Slot] | None) -> contextlib.AbstractContextManager[tuple[Assembly, Any]]:
        """The run wired by the one assembly (``runtime.loop.assemble``) with its progress view,
        on Ray or on this machine (the spec's backend picks the executor)."""
        study_dir = ensure_private_dir(store.study_dir(row), root=store.artifacts_root)
        store.set_durability(self.spec.durability)
        trial_dir = lambda trial_id: store.trial_dir(row, trial_id)   # noqa: E731
        # The job history shares the store's connection: its profiles join each turn's commit.
        wire = self._assembled_on_ray if self.spec.executor.backend == "ray" else self._assembled_here
        return wire(store, row, ref, plan, algorithm, resume, study_dir, trial_dir, progress, slots)

    @contextlib.contextmanager
    def _assembled_on_ray(self, store: Storage, row: StudyRow, ref: TrainableRef, plan: Any,
                          algorithm: Any, resume: bool, study_dir: Path,
                          trial_dir: Callable[[int], Path], progress: str | bool | None,
                          slots: list[Slot] | None) -> Iterator[tuple[Assembly, Any]]:
        """The run on a Ray cluster: its agents up (errors before any trial), the driver's
        half of the machine (job history), then the assembly."""
        from hypersack.runtime.executors.ray import ray_executor
        view = make_progress(self.name, self.spec.steps_for, progress)
        with ray_executor(self.spec, ref, plan, study_dir, trial_dir=trial_dir) as executor:
            cluster = executor.inventory()
            with prepare_driver(self.spec, cluster, store, trainable_name=ref.key,
                                fuses=plan.fuses if plan else None) as machine:
                yield assemble(self.spec, algorithm, executor, store, row, resume=resume,
                               services=machine, packs=plan, inventory=machine.cluster), view

    @contextlib.contextmanager
    def _assembled_here(self, store: Storage, row: StudyRow, ref: TrainableRef, plan: Any,
                        algorithm: Any, resume: bool, study_dir: Path,
                        trial_dir: Callable[[int], Path], progress: str | bool | None,
                        slots: list[Slot] | None) -> Iterator[tuple[Assembly, Any]]:
        """The run on this machine's devices (``slots``: tests), then the assembly."""
        with prepare_machine(self.spec, study_dir, store, trainable_name=ref.key,
                             slots=slots, fuses=plan.fuses if plan else None) as machine:
            executor = LocalExecutor(
                machine.slots, ref, trial_dir=trial_dir,
                metric=self.spec.objective.metric, steps_for=self.spec.steps_for,
                cluster=machine.cluster,
                share_env=machine.share_env, profile=machine.profile,
                device_events=machine.device_events, packs=plan,
                unsafe_checkpoints=self.spec.unsafe_checkpoints,
                max_log_bytes=self.spec.executor.max_log_bytes)
            advisor = self._fusion_advice(store, ref, plan, machine) if plan else None
            if advisor is not None:
                plan.measured, plan.space_accepted = advisor.fuses, advisor.space_accepted
            view = make_progress(self.name, self.spec.steps_for, progress, machine.decisions)
            try:
                yield assemble(self.spec, algorithm, executor, store, row, resume=resume,
                               services=machine, packs=plan), view
            finally:
                if advisor is not None:
                    advisor.close()

    def _fusion_advice(self, store: Storage, ref: TrainableRef, plan: Any,
                       machine: Any) -> Any:
        """``execution: auto``: the advisor that says fused or separate per model signature,
        measured on this machine (``runtime.devices.fusion_probe``; the plain trainable goes
        to the probe by its reference: the driver does not load it); None in the other
        modes."""
        from hypersack.runtime.devices.fusion_probe import advise_fusion
        from hypersack.runtime.devices.job_history import ProfileStore
        if plan.mode != "auto":
            return None
        return advise_fusion(self.spec, plan, ref, machine, ProfileStore(store), ref.key)

    def _pick_trainable(self, trainable: Trainable | None) -> Trainable:
        chosen = trainable if trainable is not None else self._trainable
        if chosen is None:
            raise TrainableError(
                f"Study {self.name!r} has no trainable: pass one to run()/resume() (a callable "
                "train(config, ctx) or 'module:function'), or set 'trainable' in its YAML")
        return chosen

    # ---- warm start and ask/tell (Optuna's enqueue_trial, add_trial, ask, tell) ------------

    def enqueue(self, config: Mapping[str, Any]) -> None:
        """Run ``config`` (all or some of the space's parameters; the algorithm fills the rest)
        before any suggested config, in the order enqueued. ConfigError naming the key and
        value when it is not in the space. Call before ``run``: it is part of the stored study."""
        checked = check_config(f"enqueue[{len(self.spec.enqueue)}]", config, self.spec.space,
                               partial=True)
        self.spec = dataclasses.replace(self.spec, enqueue=(*self.spec.enqueue, checked))

    def add_trial(self, config: Mapping[str, Any], values: Any) -> dict[str, Any]:
        """Store a trial run elsewhere, COMPLETE, so the algorithm learns from it (samplers
        such as TPE observe it); it is not counted in ``n_trials``. ``values``: the objective
        value, a mapping of metrics, or a list of them (one per step from 1). Returns it as
        ``{"trial_id", "config", "value", ...}``. Creates the study in the store if needed."""
        from hypersack.runtime.loop.session import parse_results, session
        checked = check_config("config", config, self.spec.space, partial=False)
        results = parse_results(values, self.spec.objective)
        with session(self.spec, self.storage_path, self._algorithm()) as controller:
            record = controller.add_external(checked, results, time.time())
        return dataclasses.asdict(freeze(record))

    def ask(self) -> Any:
        """A new trial for a loop of your own: a ``hypersack.FrozenTrial`` (``trial.trial_id``,
        ``trial.config``), RUNNING until ``tell``; None when the budget is spent or the
        algorithm has nothing more. Not for algorithms that pause trials (SHA, Hyperband...)."""
        from hypersack.runtime.loop.session import session
        with session(self.spec, self.storage_path, self._algorithm()) as controller:
            record = controller.ask(time.time())
        return None if record is None else freeze(record)

    def tell(self, trial: Any, value: Any = None, *, state: str = "complete") -> None:
        """End a trial from ``ask`` (or its id): ``value`` is the objective value or a mapping
        of metrics holding it (a multi-objective study: every objective's value, as a list in
        objective order or in the mapping); ``state="failed"`` (value None) records a failure."""
        from hypersack.runtime.loop.session import session, told_metrics
        trial_id = getattr(trial, "trial_id", trial)
        if state not in ("complete", "failed"):
            raise ConfigError("state", state, "must be 'complete' or 'failed'")
        metrics = None
        if state == "complete":
            metrics = told_metrics(value, self.spec.objective)
        with session(self.spec, self.storage_path, self._algorithm()) as controller:
            controller.tell(trial_id, metrics, None, time.time())

    def set_attr(self, key: str, value: Any) -> None:
        """Attach a JSON value to the study (Optuna's ``set_user_attr``); stored at once when
        the study is in the store, else when it is first run. ConfigError naming the key."""
        from hypersack.runtime.storage.user_attrs import check_attr
        check_attr(key, value)
        if self.storage_path.exists():
            with Storage(self.storage_path) as store:
                if store.has_study(self.name):
                    row = store.get_study(self.name)
                    check_same_study(row.spec, json.loads(json.dumps(self.spec.to_dict())),
                                     self.name)
                    save_attrs(store, store.get_study(self.name).study_id, STUDY_ATTRS, {key: value})
                    return
        self._pending_attrs[key] = value

    def user_attrs(self, trial_id: int | None = None) -> dict[str, Any]:
        """The study's attributes (``set_attr``), or those trial ``trial_id`` set (``ctx.set_attr``)."""
        with self._reading() as store:
            attrs = load_attrs(store, store.get_study(self.name).study_id)
        return attrs.get(STUDY_ATTRS if trial_id is None else trial_id, {})

    # ---- results ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Storage]:
        """The store opened read-only, once the stored study of this name is checked to be the
        one this object describes (``check_same_study``): every read goes through here, so a
        Study with another space or objective never reads another study's trials."""
        with Storage(self.storage_path, readonly=True) as store:
            row = store.get_study(self.name)
            check_same_study(row.spec, json.loads(json.dumps(self.spec.to_dict())), self.name)
            yield store

    def best_trial(self) -> dict[str, Any] | None:
        """The best trial as Ray Tune names it: the best last reported value of any trial that
        did not fail (a pruned or paused one counts with the value it reached), or None. A
        multi-objective study has none (ConfigError): see ``best_trials``."""
        with self._reading() as store:
            return queries.best_trial(store, self.name)

    def best_trials(self) -> list[dict[str, Any]]:
        """The Pareto front of a multi-objective study: its COMPLETE trials no other complete
        trial beats in every objective (``core.pareto``), by trial id, each
        ``{"trial_id", "config", "values": {metric: value}, "step", "state"}``; for a
        single-objective study, its best complete trial (or nothing)."""
        with self._reading() as store:
            return queries.best_trials(store, self.name)

    def best_complete_trial(self) -> dict[str, Any] | None:
        """The best trial that trained to its end (state complete), or None; in multi-fidelity
        studies ``best_trial()`` is often a trial pruned after a few steps."""
        with self._reading() as store:
            return queries.best_trial(store, self.name, complete=True)

    def best_checkpoint(self) -> Any:
        """The state the best trial (``best_trial()``) saved with its last checkpointed report,
        read safely as ``ctx.restore()`` reads it; CheckpointError when there is none."""
        from hypersack.runtime.storage.best_checkpoint import best_checkpoint
        with self._reading() as store:
            return best_checkpoint(store, self.name, self.spec.unsafe_checkpoints)[1]

    def export_best(self, out_dir: str | Path) -> Path:
        """Copy the best trial's checkpoint file and ``best.json`` into ``out_dir``
        (``hypersack export-best``); returns the copied file's path."""
        from hypersack.runtime.storage.best_checkpoint import export_best
        with self._reading() as store:
            return export_best(store, self.name, out_dir)

    def status(self) -> dict[str, Any]:
        with self._reading() as store:
            return queries.status(store, self.name)

    def trials_dataframe(self) -> Any:
        """The trials as a pandas DataFrame, as Optuna's: ``number``, ``value``,
        ``datetime_start``, ``datetime_complete``, ``duration``, ``params_*``, ``state``,
        ``metrics_*`` (the last report's), ``last_step``, ``attempts``, ``retries``, ``error``
        (see ``hypersack.report.frame``). Needs pandas (``pip install hypersack[report]``)."""
        from hypersack.report.frame import trials_dataframe
        with self._reading() as store:
            return trials_dataframe(store, self.name)

    def report(self, path: str | Path = "report.html") -> Path:
        """Write the study's HTML report (``hypersack report``); returns its absolute path."""
        from hypersack.report import build_report
        with self._reading():
            pass
        return build_report(self.storage_path, [self.name], path)

    def results(self, trial_id: int | None = None) -> list[dict[str, Any]]:
        with self._reading() as store:
            return store.load_results(store.get_study(self.name).study_id, trial_id)


def _raise_if_signalled(study: Study, ended: StudyRun) -> StudyRun:
    """``ended``, or, when Ctrl-C (SIGTERM) stopped it, the Python line that resumes the study
    printed to stderr and KeyboardInterrupt raised (the study is saved by then)."""
    if not ended.signalled:
        return ended
    line = resume_line(study.name, study.storage_path, stored_trainable=study.spec.trainable)
    print(f"Study {study.name!r} interrupted and saved; continue it with: {line}",
          file=sys.stderr, flush=True)
    raise KeyboardInterrupt(f"study {study.name!r} interrupted; continue it with: {line}")


def resume_line(name: str, storage: str | Path, stored_trainable: str | None) -> str:
    """The Python that continues the stored study ``name`` (its trainable passed again unless
    the study stores one)."""
    arg = "" if stored_trainable is not None else "train"
    path = str(storage)
    where = "" if path == DEFAULT_STORAGE else f", storage={path!r}"
    return f"hypersack.Study.load({name!r}{where}).resume({arg})"


def _if_exists(if_exists: Any, load_if_exists: Any) -> str:
    """``run``'s choice for a stored study of the same name; ``load_if_exists`` (Optuna's
    word) is ``if_exists="resume"``."""
    if if_exists not in ("error", "resume", "replace"):
        raise ConfigError("if_exists", if_exists, "must be 'error', 'resume' or 'replace'")
    check_bool("load_if_exists", load_if_exists)
    if load_if_exists and if_exists == "replace":
        raise ConfigError("load_if_exists", load_if_exists,
                          "contradicts if_exists='replace' (give one of them)")
    return "resume" if load_if_exists else if_exists


def _backend_options(executor: Any) -> dict[str, Any]:
    """The ``executor`` argument as ExecutorOptions fields (backend, address, runtime_env)."""
    if isinstance(executor, str):
        return {"backend": executor}
    check_mapping("executor", executor, what="'local', 'ray' or a mapping "
                  "{backend, address, runtime_env}")
    known = {"backend", "address", "runtime_env"}
    for key in executor:
        if key not in known:
            raise ConfigError(f"executor.{key}", executor[key],
                              f"is not a known field (known: {', '.join(sorted(known))})")
    return dict(executor)


_SampleSink = SampleSink     # its old name here


def _then(first: Callable[[], None], then: Callable[[], None] | None) -> Callable[[], None]:
    """``first`` then ``then``: what a run does once its executor has started (before that, a
    run that fails or is stopped leaves the stored study as it was)."""
    def both() -> None:
        first()
        if then is not None:
            then()
    return both


def _put_back(store: Storage, parked: StudyRow, name: str) -> None:
    """A replacement that never started: the parked study gets its name back, and the
    replacement's rows and run folder go."""
    try:
        new = store.get_study(name) if store.has_study(name) else None
        store.unpark_study(parked, name)
        if new is not None:
            _remove_run_folder(store.study_dir(new))
    except StorageError:          # the run's own error is the one to see
        pass


def _remove_run_folder(folder: Path) -> None:
    """Delete a replaced study's run folder; a symbolic link is unlinked, never followed."""
    if folder.is_symlink():
        folder.unlink()
    elif folder.is_dir():
        shutil.rmtree(folder, ignore_errors=True)
