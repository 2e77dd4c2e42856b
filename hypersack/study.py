"""The Python API: declare a study, run it, resume it, read its best trial.

    study = hypersack.Study(name="digits", space={...}, objective=("accuracy", "max"),
                            algorithm="random", n_trials=32)
    study.run("digits_mlp")          # or a callable train(config, ctx)
    study.best_trial()               # {"trial_id", "config", "metric", "value"}

Fused packs: ``Study(..., execution="fused", pack={"max_members": 16}).run("digits_mlp")`` (a
built-in with a fusable task), or ``.run(task)`` / ``.run("module:TASK")`` with a
``hypersack.fusion.FusableTask``; ``execution="auto"`` fuses the trials the task accepts.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Mapping

from hypersack.core.algorithms import make_algorithm
from hypersack.core.algorithms.base import algorithm_spec as make_algorithm_spec
from hypersack.core.controller import Budget
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.core.timesharing import TimeSharing
from hypersack.core.spec import (ExecutorOptions, PackOptions, Resources, StudySpec,
                                 check_resumable)
from hypersack.errors import ConfigError, HyperSackError, TrainableError
from hypersack.runtime import queries
from hypersack.runtime.devices import Slot
from hypersack.runtime.machine import prepare_machine
from hypersack.runtime.executors.local import LocalExecutor
from hypersack.runtime.loop import GROUP_WINDOW_S, StudyRun, build_controller, run_loop
from hypersack.runtime.executors.packs import plan_execution
from hypersack.runtime.progress import make_progress
from hypersack.runtime.checkpoints import ensure_private_dir
from hypersack.runtime.storage import DEFAULT_STORAGE, Storage, StudyRow
from hypersack.runtime.trainable import TrainableRef

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
                      RuntimeWarning, stacklevel=3)


class Study:
    """A hyperparameter study: a search space, an objective, an algorithm and a budget.

    Parameters (a bad value raises ConfigError naming the parameter):

    - ``space``: parameter name -> domain: ``hypersack.Float(low, high, log=False)``,
      ``Int(low, high, step=1, log=False)``, ``Categorical([...])``, a YAML-style dict
      (``{"type": "float", "low": ..., "high": ...}``), or a bare value (a constant).
    - ``objective``: ``(metric, mode)`` or ``{"metric": ..., "mode": ...}``; ``mode`` is "min" or
      "max" and is required. ``metric`` is a name the trainable reports.
    - ``name``: the study's name in the store (letters, digits, ``_ . -``); None: a timestamped
      name ("study-YYYYmmdd-HHMMSS"). An empty string is an error.
    - ``algorithm``: "random", "grid", "tpe", or ``{"type": "sha"|"hyperband"|"asha"|"bohb"|
      "rasda"|"pack_hyperband", **options}`` (README "Algorithms"), or an ``Algorithm`` instance.
    - ``n_trials``: most trials created; ``time_budget_s``: wall seconds of running, summed over
      resumes. At least one is required; when time runs out, running trials stop at their next
      report and keep their last result.
    - ``storage``: the SQLite file (default ``hypersack.db`` in the working directory); trial logs
      and checkpoints go to ``hypersack-runs/<name>/`` beside it.
    - ``seed``: seeds the algorithm and each trial (``ctx.seed``).
    - ``workers``: worker processes; None: one per GPU, else one per CPU core.
    - ``max_retries``: restarts of a trial whose worker process died (from its checkpoint).
    - ``trial_timeout_s``: a trial running longer is killed and FAILED; None: no limit.
    - ``max_steps``: steps per trial, for progress bars and ETA: a number, or the name of a
      space parameter holding it (``"epochs"``).
    - ``trainable``: the default for ``run()``: a callable ``train(config, ctx)``,
      ``"module:function"``, or a built-in (``"digits_mlp"``, ``"digits_cnn"``).
    - ``placement``: how trials share devices: "wfd" (default), "ff", "ffd", "wf", "wfd-ls",
      "fill", "auto", "hay", "ray", "mip", or "exclusive" (one trial per device).
    - ``oversubscription``: ratio r, a device takes trials up to r x 100% compute; a number or
      per architecture (``{"A100": 3}``); None: the inventory's defaults.
    - ``resources``: a trial's demand until it is profiled: ``{"compute": percent,
      "memory_gb": ..., "cpus": ...}``.
    - ``execution``: "separate" (a process per trial), "fused" (trials of one architecture
      trained as one model, needs a ``FusableTask``), or "auto".
    - ``pack``: options of fused packs, ``{"max_members": 16}``.
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
    """

    def __init__(self, space: Mapping[str, Any] | SearchSpace, objective: Any, *,
                 name: str | None = None, algorithm: Any = "random", n_trials: int | None = None,
                 time_budget_s: float | None = None, storage: str | Path = DEFAULT_STORAGE,
                 seed: int = 0, workers: int | None = None, max_retries: int = 2,
                 trial_timeout_s: float | None = None, max_steps: int | str | None = None,
                 trainable: Trainable | None = None, placement: str = "wfd",
                 oversubscription: float | Mapping[str, float] | None = None,
                 resources: Mapping[str, Any] | None = None, execution: str = "separate",
                 pack: Mapping[str, Any] | None = None, unsafe_checkpoints: bool = False,
                 durability: str = "power",
                 time_sharing: str | Mapping[str, Any] | None = None,
                 executor: str | Mapping[str, Any] = "local"):
        if n_trials is None and time_budget_s is None:
            raise ConfigError("n_trials", None, "or time_budget_s must be set: the study needs a budget")
        self._algorithm_instance = algorithm if not isinstance(algorithm, (str, Mapping)) else None
        algorithm_spec = make_algorithm_spec(algorithm)   # an Optuna sampler object: type optuna
        self.spec = StudySpec(
            name=time.strftime("study-%Y%m%d-%H%M%S") if name is None else name,
            space=space if isinstance(space, SearchSpace) else SearchSpace(space),
            objective=Objective.parse(objective), budget=Budget(n_trials, time_budget_s),
            trainable=TrainableRef.storable_name(trainable) if trainable is not None else None,
            algorithm=algorithm_spec, seed=seed,
            executor=ExecutorOptions(workers, max_retries, trial_timeout_s,
                                     **_backend_options(executor)), max_steps=max_steps,
            placement=placement,
            oversubscription=dict(oversubscription) if isinstance(oversubscription, Mapping) else oversubscription,
            resources=Resources.from_dict(resources), execution=execution,
            pack=PackOptions.from_dict(pack), unsafe_checkpoints=unsafe_checkpoints,
            durability=durability,
            time_sharing=TimeSharing.parse(time_sharing))
        self.storage_path = Path(storage)
        self._trainable = trainable

    @classmethod
    def from_spec(cls, spec: StudySpec | Mapping[str, Any], storage: str | Path = DEFAULT_STORAGE) -> "Study":
        spec = spec if isinstance(spec, StudySpec) else StudySpec.from_dict(spec)
        study = cls.__new__(cls)
        study.spec, study.storage_path = spec, Path(storage)
        study._trainable, study._algorithm_instance = spec.trainable, None
        return study

    @classmethod
    def from_yaml(cls, path: str | Path, storage: str | Path | None = None) -> "Study":
        from hypersack.config import load_study_file
        data = load_study_file(path)
        extend_sys_path(Path(path).parent, os.getcwd())
        return cls.from_spec(data, storage or data.get("storage") or DEFAULT_STORAGE)

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
            progress: str | bool | None = None, slots: list[Slot] | None = None) -> StudyRun:
        """Run the study to its budget and return how it ended (``status``: "complete" or
        "interrupted"); warns (RuntimeWarning) when it ended with no complete trial.

        ``trainable``: a callable ``train(config, ctx)`` (shipped to workers by value when it is
        defined in a script or notebook), ``"module:function"``, a built-in name, a
        ``FusableTask`` or ``"module:TASK"``; None: the one given to the constructor or YAML.
        ``if_exists``: "error", "resume" or "replace" when a study of this name is already
        stored. ``progress``: "live", "lines", False, or None (live on a terminal, lines
        otherwise). ``slots``: the devices to run on (default: this machine's GPUs, else its CPU
        cores)."""
        if if_exists not in ("error", "resume", "replace"):
            raise ConfigError("if_exists", if_exists, "must be 'error', 'resume' or 'replace'")
        prepared = self._prepare(trainable)     # bad input fails here, before any file is made
        with Storage(self.storage_path) as store:
            exists = store.has_study(self.name)
            if exists and if_exists == "replace":
                old = store.get_study(self.name)
                store.delete_study(self.name)        # refused while a live driver runs it
                _remove_run_folder(store.study_dir(old))
            resume = exists and if_exists == "resume"
            ended = self._run(store, prepared, resume=resume, progress=progress, slots=slots)
            _warn_without_result(store, ended)
            return ended

    def resume(self, trainable: Trainable | None = None, *, progress: str | bool | None = None,
               slots: list[Slot] | None = None) -> StudyRun:
        """Continue a stored study: finished trials are kept, unfinished ones restart from their
        last checkpoint, the algorithm continues from its saved state."""
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
        plain, plan = plan_execution(self.spec.execution, self._pick_trainable(trainable),
                                     self.spec.pack.max_members)
        ref = TrainableRef.of(plain)
        algorithm = make_algorithm(self._algorithm_instance or self.spec.algorithm,
                                   self.spec.space, self.spec.objective, self.spec.seed)
        return ref, plan, algorithm

    def _run(self, store: Storage, prepared: tuple[TrainableRef, Any, Any], *, resume: bool,
             progress: str | bool | None, slots: list[Slot] | None) -> StudyRun:
        ref, plan, algorithm = prepared
        # Model fits (Optuna samplers) run on this thread, off the loop's (see optuna_model);
        # it ends when the algorithm is dropped.
        algorithm.use_background(ThreadPoolExecutor(1, thread_name_prefix="hypersack-suggest"))
        if resume:
            row = store.get_study(self.name)
            # JSON round trip: the stored spec is JSON, so compare like with like.
            new_spec = json.loads(json.dumps(self.spec.to_dict()))
            check_resumable(row.spec, new_spec)
            store.acquire_lease(row)           # one driver per study: refused while one runs
            store.end_open_stays(row.study_id)  # those of a driver that was killed
            store.update_spec(row.study_id, new_spec)
            store.set_status(row.study_id, "running")
        else:
            row = store.create_study(self.name, self.spec.to_dict())
            store.acquire_lease(row)
        try:
            return self._drive(store, row, ref, plan, algorithm, resume, progress, slots)
        finally:
            store.release_lease(row.study_id)

    def _drive(self, store: Storage, row: StudyRow, ref: TrainableRef, plan: Any, algorithm: Any,
               resume: bool, progress: str | bool | None, slots: list[Slot] | None) -> StudyRun:
        controller = build_controller(self.spec, algorithm, row, store, time.time(), resume)
        study_dir = ensure_private_dir(store.study_dir(row), root=store.artifacts_root)
        store.set_durability(self.spec.durability)
        if self.spec.executor.backend == "ray":
            from hypersack.runtime.executors.ray import drive_on_ray
            # The job history shares the store's connection here too (one commit per turn).
            return drive_on_ray(self.spec, controller, store, row, ref, plan, study_dir,
                                make_progress(self.name, self.spec.steps_for, progress))
        # The job history shares the store's connection: its profiles join each turn's commit.
        with prepare_machine(self.spec, study_dir, store, trainable_name=ref.key,
                             slots=slots, fuses=plan.fuses if plan else None) as machine:
            executor = LocalExecutor(
                machine.slots, ref, trial_dir=lambda trial_id: store.trial_dir(row, trial_id),
                metric=self.spec.objective.metric, steps_for=self.spec.steps_for,
                cluster=machine.cluster,
                share_env=machine.share_env, profile=machine.profile,
                device_events=machine.device_events, packs=plan,
                unsafe_checkpoints=self.spec.unsafe_checkpoints,
                decision_step=controller.next_decision_step)
            controller.set_inventory(executor.inventory(), self.spec.placement, machine.demand)
            controller.set_packs(plan)
            if self.spec.time_sharing is not None:
                controller.set_time_sharing(self.spec.time_sharing)
            sink = _SampleSink(store, row.study_id, machine.samples)
            try:
                return run_loop(controller, executor, store, row,
                                observers=[*machine.observers, sink.observe],
                                progress=make_progress(self.name, self.spec.steps_for, progress),
                                group_window_s=GROUP_WINDOW_S)
            finally:
                sink.flush(quiet=True)

    def _pick_trainable(self, trainable: Trainable | None) -> Trainable:
        chosen = trainable if trainable is not None else self._trainable
        if chosen is None:
            raise TrainableError(
                f"Study {self.name!r} has no trainable: pass one to run()/resume() (a callable "
                "train(config, ctx) or 'module:function'), or set 'trainable' in its YAML")
        return chosen

    # ---- results ---------------------------------------------------------------------------

    def best_trial(self) -> dict[str, Any] | None:
        with Storage(self.storage_path, readonly=True) as store:
            return queries.best_trial(store, self.name)

    def status(self) -> dict[str, Any]:
        with Storage(self.storage_path, readonly=True) as store:
            return queries.status(store, self.name)

    def trials_dataframe(self) -> Any:
        """The trials as a pandas DataFrame, as Optuna's: ``number``, ``value``,
        ``datetime_start``, ``datetime_complete``, ``duration``, ``params_*``, ``state``,
        ``metrics_*`` (the last report's), ``last_step``, ``attempts``, ``retries``, ``error``
        (see ``hypersack.report.frame``). Needs pandas (``pip install hypersack[report]``)."""
        from hypersack.report.frame import trials_dataframe
        with Storage(self.storage_path, readonly=True) as store:
            return trials_dataframe(store, self.name)

    def report(self, path: str | Path = "report.html") -> Path:
        """Write the study's HTML report (``hypersack report``); returns its absolute path."""
        from hypersack.report import build_report
        return build_report(self.storage_path, [self.name], path)

    def results(self, trial_id: int | None = None) -> list[dict[str, Any]]:
        with Storage(self.storage_path, readonly=True) as store:
            return store.load_results(store.get_study(self.name).study_id, trial_id)


def _backend_options(executor: Any) -> dict[str, Any]:
    """The ``executor`` argument as ExecutorOptions fields (backend, address, runtime_env)."""
    if isinstance(executor, str):
        return {"backend": executor}
    if not isinstance(executor, Mapping):
        raise ConfigError("executor", executor, "must be 'local', 'ray' or a mapping "
                          "{backend, address, runtime_env}")
    known = {"backend", "address", "runtime_env"}
    for key in executor:
        if key not in known:
            raise ConfigError(f"executor.{key}", executor[key],
                              f"is not a known field (known: {', '.join(sorted(known))})")
    return dict(executor)


class _SampleSink:
    """Writes the monitor's GPU utilisation samples to the store from the loop's thread: at an
    event at most every ``every_s`` seconds, and once at the end of the run."""

    def __init__(self, store: Storage, study_id: int, take: Callable[[], list] | None,
                 every_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.store, self.study_id, self.take = store, study_id, take
        self.every_s, self.clock = every_s, clock
        self._last = clock()

    def observe(self, event: Any) -> None:
        if self.take is not None and self.clock() - self._last >= self.every_s:
            self.flush()

    def flush(self, quiet: bool = False) -> None:
        """Store what the monitor took since the last flush; ``quiet``: a storage fault is
        dropped (the run's own error, if any, is the one to see)."""
        if self.take is None:
            return
        self._last = self.clock()
        try:
            self.store.save_samples(self.study_id, self.take())
        except HyperSackError:
            if not quiet:
                raise


def _remove_run_folder(folder: Path) -> None:
    """Delete a replaced study's run folder; a symbolic link is unlinked, never followed."""
    if folder.is_symlink():
        folder.unlink()
    elif folder.is_dir():
        shutil.rmtree(folder, ignore_errors=True)
