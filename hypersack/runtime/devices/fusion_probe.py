"""The fusion probe: ``execution: auto`` measures fused against separate on the device at hand.

The first time a model signature (the trainable and the task's architecture keys) is asked
about, ``FusionAdvisor.fuses`` looks for its kept probe in the job history
(``ProfileStore.fusion_probe``, keyed by signature with the study's pack options where they are
not the defaults, device kind and planned pack width): found,
it decides at once, and the driver never imports the task nor torch (a built-in's keys are
``workloads.FUSED_BUILTIN_KEYS``). Not found, it starts a probe (``measure_fusion``) in a child
process (``ProbeChild``: on a GPU it sees only the slot's device, so the driver never holds a
CUDA context; on CPU it runs with the slot's threads) and answers *separate* until the probe
is back: the study's first trials run as ``separate`` would, beside the probe, instead of
waiting for it. Each later ask polls the child; its figures decide the rest of the study.
At the study's end a probe still running is waited for (``CLOSE_WAIT_S``), then kept. With
the probe, the child also asks the task about the corners of the study's space
(``space_verdict``): a task that accepts them all accepts every config of the space, so a
later study that fuses needs no verdict from the task (no torch in the driver).

The probe (``measure_fusion``, in the child), after what a worker pays once (imports, the
data, torch's first step): a pack of the planned width (a fused step's time is far from
proportional to its members at small shapes, on CPU too) whose members' configs are the trial's with the other
hyperparameters drawn from the study's space (so they split into optimizer stacks and pad to
the largest batch as the study's packs will), timed from its start (members built, data, its
first ``warmup`` steps: ``fused_fixed_s``) and over ``steps`` steady steps (the fastest counts:
the least disturbed by whatever else the machine runs; both sides alike); then ``alone_members``
of those configs alone as ``separate`` runs them (the plain trainable through the Profiler and
``profile_trainable``; a task of the user's alone is a pack of one), from their start and over
their steady steps; and the length of each member's trial (epochs x steps per epoch).
``core.packs.choose_fusion`` decides from the figures for the study's trials (the study's
``waves``: trials per pack seat). The probe is kept in the job history, so a later study on the
same file and device decides without probing; the choice is logged, noted with its reason
(``ProfileStore.note``, kind ``execution``) and its figures
(``ProfileStore.record_fusion_choice``) for ``hypersack status`` and the report, and kept in
``decisions`` for the progress view. A probe that fails (a model the engine cannot run, a
child that dies) counts as no probe: the signature runs separate, with the error in the reason.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from hypersack.core.packs import FusionChoice, FusionProbe, choose_fusion

__all__ = ["PROBE_STEPS", "PROBE_WARMUP", "ALONE_MEMBERS", "MAX_CORNERS", "ProbePlan", "space_corners", "space_verdict",
           "member_configs", "measure_fusion", "ProbeChild", "measure_in_child",
           "FusionAdvisor", "advise_fusion"]

log = logging.getLogger(__name__)

#: Measured steady steps per side of the probe, after ``PROBE_WARMUP`` steps timed as the start.
PROBE_STEPS = 2
PROBE_WARMUP = 1
#: Members of the probed pack also timed alone (the first ones: the trial's own config first).
ALONE_MEMBERS = 2
#: The longest a probe in a child process may take (seconds) before it counts as failed.
CHILD_TIMEOUT_S = 600.0
#: The longest a study's end waits for its probes still running (seconds).
CLOSE_WAIT_S = 60.0


@dataclass(frozen=True)
class ProbePlan:
    """What one probe runs: ``task`` (the FusableTask, or the ``TrainableRef`` a worker loads
    it from), ``plain`` (what ``separate`` runs for a trial, ``train(config, ctx)``, or its
    ``TrainableRef``; None: the task alone, a pack of one), ``configs`` (the pack's members,
    the first the trial's; those the task refuses are left out), ``device`` ("cpu",
    "cuda:0"), ``arch`` (the device kind the probe is kept under), ``threads`` (torch threads
    on CPU; None: as they are), ``precision`` / ``graphs`` / ``conv`` (the study's pack options),
    ``steps`` measured after ``warmup`` (>= 1) start steps, ``alone_members`` timed alone;
    ``space``: the study's space, whose corners the child also asks the task about
    (``space_verdict``; None: not asked)."""
    task: Any
    plain: Any
    configs: tuple[Mapping[str, Any], ...]
    device: str = "cpu"
    arch: str = "cpu"
    threads: int | None = None
    precision: str = "fp32"
    graphs: str = "auto"
    conv: str = "grouped"
    steps: int = PROBE_STEPS
    warmup: int = PROBE_WARMUP
    alone_members: int = ALONE_MEMBERS
    space: Any = None


def member_configs(config: Mapping[str, Any], space: Any, keep: Sequence[str], width: int,
                   seed: int) -> tuple[dict[str, Any], ...]:
    """``width`` member configs: ``config`` first, then ``config`` with every space parameter
    but those in ``keep`` (the architecture keys) drawn from ``space`` (seeded by ``seed``)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    out = [dict(config)]
    for _ in range(width - 1):
        drawn = space.sample(rng) if space is not None else {}
        out.append({**config, **{k: v for k, v in drawn.items() if k not in keep}})
    return tuple(out)


#: The most corner configs of a space ``space_verdict`` asks the task about.
MAX_CORNERS = 256


def space_corners(space: Any, cap: int = MAX_CORNERS) -> list[dict[str, Any]] | None:
    """Every config of ``space`` whose numbers are at their bounds and whose categoricals take
    every choice (each domain's ``grid(2)``), or None when there are more than ``cap``."""
    import itertools
    axes = [(name, domain.grid(2)) for name, domain in space.items()]
    count = 1
    for _, values in axes:
        count *= max(1, len(values))
    if count > cap:
        return None
    names = [name for name, _ in axes]
    return [dict(zip(names, combo)) for combo in itertools.product(*(v for _, v in axes))]


def space_verdict(task: Any, space: Any) -> bool | None:
    """Whether ``task`` accepts every corner of ``space`` (its range checks are intervals and
    its choices sets, so then it accepts every config of the space), None when unknown (no
    space, too many corners)."""
    corners = space_corners(space) if space is not None else None
    if corners is None:
        return None
    return all(_accepted(task, c) for c in corners)


def measure_fusion(plan: ProbePlan) -> FusionProbe:
    """Run ``plan`` in this process and return its figures (see the module docstring).
    ValueError when the task refuses every config."""
    import torch
    task, plain = _loaded(plan.task, task=True), _loaded(plan.plain, task=False)
    configs = [c for c in plan.configs if _accepted(task, c)]
    if not configs:
        raise ValueError(f"the task refuses every probed config (first: {dict(plan.configs[0])})")
    threads = torch.get_num_threads()
    if plan.threads is not None and not plan.device.startswith("cuda"):
        torch.set_num_threads(max(1, plan.threads))
    try:
        _warm_up(plan, task, plain, configs[0])
        fused_step, fused_fixed, lengths, step = _time_pack(plan, task, configs)
        alone = [_time_alone(plan, task, plain, c, lengths[i])
                 for i, c in enumerate(configs[:max(1, plan.alone_members)])]
        fused_step = min(fused_step, step())    # by turns: fused, alone, fused
    finally:
        torch.set_num_threads(threads)
    return FusionProbe(plan.arch, len(configs), plan.steps, fused_step,
                       statistics.fmean(a[0] for a in alone), fused_fixed,
                       statistics.fmean(a[1] for a in alone), statistics.fmean(lengths),
                       float(max(lengths)), tuple(lengths))


def _warm_up(plan: ProbePlan, task: Any, plain: Any, config: Mapping[str, Any]) -> None:
    """What a worker does once, not per trial or pack: the fused engine imported, the task's
    data loaded, torch's first-use costs paid (a few untimed steps alone), so fixed costs
    measure what each trial and each pack pays."""
    import hypersack.fusion.runner  # noqa: F401
    task.train_data()
    _time_pack(dataclasses.replace(plan, steps=1, warmup=1), task, [config], epoch_ends=False)
    if plain is not None:
        _time_alone(dataclasses.replace(plan, steps=1, warmup=1), task, plain, config, 1.0)


def _loaded(thing: Any, task: bool) -> Any:
    """``thing``, or what its ``TrainableRef`` names (a task: the object itself)."""
    from hypersack.runtime.worker.trainable import TrainableRef
    if not isinstance(thing, TrainableRef):
        return thing
    if task and thing.payload is None and thing.reference is not None:
        from hypersack.runtime.worker.pack import resolve_reference
        return resolve_reference(thing.reference)
    return thing.load()


def _accepted(task: Any, config: Mapping[str, Any]) -> bool:
    from hypersack.runtime.worker.pack import task_accepts
    return task_accepts(task, config)


def _time_pack(plan: ProbePlan, task: Any, configs: Sequence[Mapping[str, Any]],
               epoch_ends: bool = True
               ) -> tuple[float, float, list[float], Callable[[], float]]:
    """(steady step s, fixed s, each member's trial length in steps, one more timed step) of
    a pack holding
    ``configs`` (stacks as a pack worker builds them: every slot on CUDA, from 4 and doubling
    on CPU). Fixed: the pack's start (members built, its first ``warmup`` steps, less as many
    steady steps) and, with ``epoch_ends``, its members' epoch ends (evaluation and state,
    once per epoch of its longest member)."""
    from hypersack.fusion.runner import Pack
    from hypersack.fusion.stack import StackOptions, steps_per_epoch
    from hypersack.fusion.task import Member
    precision = plan.precision if plan.precision != "fp32" else task.precision
    cuda = plan.device.startswith("cuda")
    options = StackOptions(capacity=len(configs) if cuda else 4, precision=precision,
                           graphs=plan.graphs, conv=plan.conv)
    began = time.perf_counter()
    pack = Pack(task, plan.device, options=options)
    rows = [pack.load(Member(i, config, i, None, None)) for i, config in enumerate(configs)]
    step = _stepper(pack.train_iteration, cuda)
    for _ in range(max(1, plan.warmup)):
        step()
    started = time.perf_counter() - began
    steady = min(step() for _ in range(max(1, plan.steps)))
    fixed = max(0.0, started - max(1, plan.warmup) * steady)
    if epoch_ends and pack.stack is not None:
        begin = time.perf_counter()
        pack.stack.evaluate(rows)
        for row in rows:
            pack.stack.member_state(row)
        fixed += (time.perf_counter() - begin) * max(task.max_steps(c, None) for c in configs)
    lengths = [float(task.max_steps(c, None) * steps_per_epoch(pack.data.n, task.batch_size(c)))
               for c in configs]
    return steady, fixed, lengths, step


def _stepper(train: Callable[[], Any], cuda: bool) -> Callable[[], float]:
    """One call of ``train`` (synchronised on CUDA), returning its seconds."""
    def step() -> float:
        begin = time.perf_counter()
        train()
        if cuda:
            torch_sync()
        return time.perf_counter() - begin
    return step


def torch_sync() -> None:
    import torch
    torch.cuda.synchronize()


def _time_alone(plan: ProbePlan, task: Any, plain: Any, config: Mapping[str, Any],
                length: float) -> tuple[float, float]:
    """(steady step s, fixed s) of ``config``'s trial alone as ``separate`` runs it, one whole
    trial of ``length`` steps: fixed is its time beyond ``length`` steady steps (its start,
    evaluations, checkpoints). Steady: the fastest of its first ``steps`` steps after
    ``warmup``, as the pack's."""
    if plain is None:
        steady, fixed, _, _ = _time_pack(plan, task, [config])
        return steady, fixed
    from hypersack.runtime.devices.profile_trainable import profile_trainable
    from hypersack.runtime.devices.profiler import Profiler
    profiler = Profiler(iterations=1 << 30, warmup=max(1, plan.warmup), device=plan.device,
                        arch=plan.arch, utilization=lambda: None)
    began = time.perf_counter()
    profile_trainable(plain, dict(config), device=plan.device, profiler=profiler)
    total = time.perf_counter() - began
    steady = min(profiler.times[:max(1, plan.steps)])
    return steady, max(0.0, total - length * steady)


# ---- in a child process ---------------------------------------------------------------------

_SYS_PATH = "HYPERSACK_PROBE_SYS_PATH"
_PLAN = "HYPERSACK_PROBE_PLAN"
_BOOT = ("import json, os, sys; sys.path[:] = json.loads(os.environ.pop('HYPERSACK_PROBE_SYS_PATH')); "
         "from hypersack.runtime.devices.fusion_probe import _child; _child()")


class ProbeChild:
    """``measure_fusion(plan)`` running in a new Python process with ``env`` added to its
    environment (the slot's: ``CUDA_VISIBLE_DEVICES``, ``OMP_NUM_THREADS``...); started at
    once, never waited for: ``poll`` answers. The plan travels by a cloudpickle file, the probe
    comes back as a JSON line; ``clock``: monotonic seconds (injected for tests)."""

    def __init__(self, plan: ProbePlan, env: Mapping[str, str],
                 timeout_s: float = CHILD_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic):
        import cloudpickle
        self._files = [tempfile.TemporaryFile() for _ in range(2)]
        with tempfile.NamedTemporaryFile(prefix="hypersack-probe-", suffix=".pkl",
                                         delete=False) as f:
            f.write(cloudpickle.dumps(plan))
        self._plan_path = f.name
        environ = {**os.environ, **env, _PLAN: f.name,
                   _SYS_PATH: json.dumps([os.path.abspath(p) for p in sys.path])}
        self._proc = subprocess.Popen([sys.executable, "-c", _BOOT], stdin=subprocess.DEVNULL,
                                      stdout=self._files[0], stderr=self._files[1], env=environ)
        self._clock, self._deadline = clock, clock() + timeout_s
        self._timeout_s = timeout_s
        #: Once back: whether the task accepts the whole space (``space_verdict``).
        self.space_accepted: bool | None = None

    def poll(self) -> FusionProbe | None:
        """The probe once the child is done, None while it runs; RuntimeError when it failed
        or ran past its time (then it is ended)."""
        code = self._proc.poll()
        if code is None:
            if self._clock() < self._deadline:
                return None
            self.close()
            raise RuntimeError(f"the fusion probe took more than {self._timeout_s:.0f}s")
        out, err = (self._read(f) for f in self._files)
        self.close()
        lines = out.strip().splitlines()
        if code != 0 or not lines:
            tail = err.strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"the fusion probe failed (exit {code}): {tail[0]}")
        data = json.loads(lines[-1])
        self.space_accepted = data.get("space_accepted")
        return FusionProbe.from_dict(data)

    @staticmethod
    def _read(f: Any) -> str:
        f.seek(0)
        return bytes(f.read()).decode(errors="replace")

    def close(self) -> None:
        """End the child if it still runs; remove its files."""
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        for f in self._files:
            f.close()
        try:
            os.unlink(self._plan_path)
        except OSError:
            pass


def measure_in_child(plan: ProbePlan, env: Mapping[str, str],
                     timeout_s: float = CHILD_TIMEOUT_S) -> FusionProbe:
    """``ProbeChild(plan, env)``, waited for (RuntimeError when it fails or times out)."""
    child = ProbeChild(plan, env, timeout_s)
    try:
        while True:
            probe = child.poll()
            if probe is not None:
                return probe
            time.sleep(0.05)
    finally:
        child.close()


def _child() -> None:
    import cloudpickle
    with open(os.environ.pop(_PLAN), "rb") as f:
        plan = cloudpickle.loads(f.read())
    probe = measure_fusion(plan)
    verdict = space_verdict(_loaded(plan.task, task=True), plan.space)
    print(json.dumps({**probe.to_dict(), "space_accepted": verdict}), flush=True)


# ---- the driver's advisor ---------------------------------------------------------------------

@dataclass(eq=False)
class FusionAdvisor:
    """``execution: auto``'s fused-or-separate answer per model signature (module docstring).

    ``history``: the job history (``ProfileStore``); ``study``: the study's name (its notes);
    ``trainable_name``: what signatures hash; ``keys``: the task's architecture keys;
    ``task`` / ``plain``: as in ``ProbePlan`` (references: the driver loads neither);
    ``space`` and ``seed``: where the probe's member configs are drawn from; ``width``: the
    planned pack width (the key a probe is kept under); ``probe_width``: the probed pack's
    (None: ``width``); ``waves``: the study's trials per pack seat (``core.packs.study_waves``);
    ``device`` / ``arch`` / ``threads`` / ``env``: the slot probed on; ``measure``:
    ``ProbePlan -> FusionProbe`` run at the ask (tests inject one); ``start``: ``(plan, env)
    -> child`` with ``poll()`` and ``close()`` as ``ProbeChild`` (the default when neither is
    given); ``decisions``: subject -> FusionChoice, shared with the machine's progress lines."""
    history: Any
    study: str
    trainable_name: str
    keys: tuple[str, ...]
    task: Any
    plain: Any
    space: Any
    seed: int
    width: int
    probe_width: int | None = None
    waves: float = 1.0
    device: str = "cpu"
    arch: str = "cpu"
    threads: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    precision: str = "fp32"
    graphs: str = "auto"
    conv: str = "grouped"
    measure: Callable[[ProbePlan], FusionProbe] | None = None
    start: Callable[[ProbePlan, Mapping[str, str]], Any] | None = None
    decisions: dict[str, Any] = field(default_factory=dict)
    _choices: dict[str, FusionChoice] = field(default_factory=dict, repr=False)
    _pending: dict[str, tuple[ProbeChild, str]] = field(default_factory=dict, repr=False)

    def fuses(self, config: Mapping[str, Any]) -> bool:
        """Whether trials of ``config``'s signature run in packs now: decided at its first ask
        from a kept probe, else False while its probe runs, then as the probe says."""
        from hypersack.runtime.devices.job_history import signature
        # a key the config leaves out takes the task's default: the same model for every such config
        sig = signature(self.trainable_name, {k: config.get(k) for k in self.keys}, self.keys)
        choice = self._choices.get(sig)
        if choice is None:
            choice = self._pending_choice(sig) if sig in self._pending \
                else self._first_ask(sig, config)
        return choice is not None and choice.fused

    def _first_ask(self, sig: str, config: Mapping[str, Any]) -> FusionChoice | None:
        subject = ", ".join(f"{k}={config[k]}" for k in self.keys if k in config) \
            or self.trainable_name
        stored = self._stored(sig)
        if stored is not None:
            return self._decide(sig, subject, stored, None)
        try:
            plan = ProbePlan(self.task, self.plain,
                             member_configs(config, self.space, self.keys,
                                            self.probe_width or self.width, self.seed),
                             self.device, self.arch, self.threads, self.precision, self.graphs,
                             conv=self.conv, space=self.space)
            if self.measure is not None:
                return self._decide(sig, subject, self._kept(sig, self.measure(plan)), None)
            self._pending[sig] = ((self.start or ProbeChild)(plan, self.env), subject)
        except Exception as exc:     # a model the engine cannot run, no child...
            return self._failed(sig, subject, exc)
        log.info("execution auto: probing %s (separate until it is measured)", subject)
        return None

    def _pending_choice(self, sig: str) -> FusionChoice | None:
        child, subject = self._pending[sig]
        try:
            probe = child.poll()
        except Exception as exc:
            del self._pending[sig]
            child.close()
            return self._failed(sig, subject, exc)
        if probe is None:
            return None
        del self._pending[sig]
        child.close()
        self._keep_verdict(getattr(child, "space_accepted", None))
        return self._decide(sig, subject, self._kept(sig, probe), None)

    def _failed(self, sig: str, subject: str, exc: BaseException) -> FusionChoice:
        log.warning("fusion probe failed: %s", exc)
        return self._decide(sig, subject, None,
                            f"probe failed: {type(exc).__name__}: {str(exc)[:200]}")

    def _decide(self, sig: str, subject: str, probe: FusionProbe | None,
                error: str | None) -> FusionChoice:
        choice = choose_fusion(subject, probe, waves=self.waves)
        if error is not None:
            choice = FusionChoice(subject, False, f"{choice.reason} ({error})", None)
        self._choices[sig] = self.decisions[subject] = choice
        log.info("execution auto: %s", choice.reason)
        try:
            self.history.note(self.study, "execution", subject, choice.reason)
            self.history.record_fusion_choice(self.study, subject, choice.to_dict())
        except Exception as exc:     # a note is an explanation: never fail the study on it
            log.warning("execution choice not stored: %s", exc)
        return choice

    def _probe_key(self, sig: str) -> str:
        """What a probe of ``sig`` is kept under: the signature, with the study's pack options
        (precision, graphs, conv) where they are not the defaults (fp32, auto, grouped), so a
        probe of bf16 packs never decides an fp32 study nor one of grouped convolutions a bmm
        study; probes kept before the options counted were all of the defaults and keep
        deciding studies of the defaults."""
        options = [f"{name}={value}" for name, value, default in (
            ("precision", self.precision, "fp32"), ("graphs", self.graphs, "auto"),
            ("conv", self.conv, "grouped")) if value != default]
        return sig if not options else f"{sig}|{','.join(options)}"

    def _stored(self, sig: str) -> FusionProbe | None:
        """The kept probe of (``sig`` and the pack options, device kind, planned width), or
        None."""
        try:
            stored: FusionProbe | None = self.history.fusion_probe(self._probe_key(sig),
                                                                   self.arch, self.width)
            return stored
        except Exception as exc:
            log.warning("fusion probe history not read: %s", exc)
            return None

    def _kept(self, sig: str, probe: FusionProbe) -> FusionProbe:
        try:
            self.history.put_fusion_probe(self._probe_key(sig), probe, width=self.width)
        except Exception as exc:
            log.warning("fusion probe not stored: %s", exc)
        return probe

    def _space_key(self) -> str:
        import hashlib
        data = self.space.to_dict() if hasattr(self.space, "to_dict") else repr(self.space)
        return hashlib.sha1(json.dumps(data, sort_keys=True, default=repr).encode()).hexdigest()

    def _task_key(self) -> str:
        return str(getattr(self.task, "key", None) or self.trainable_name)

    def _keep_verdict(self, accepted: bool | None) -> None:
        if accepted is None:
            return
        try:
            self.history.put_space_verdict(self._task_key(), self._space_key(), accepted)
        except Exception as exc:
            log.warning("the task's verdict on the space not stored: %s", exc)

    def space_accepted(self) -> bool:
        """Whether a probe of this task found that it accepts every config of this study's
        space (kept in the job history): then a config's verdict needs no task (no torch in
        the driver)."""
        if self.space is None:
            return False
        try:
            return bool(self.history.space_verdict(self._task_key(), self._space_key()))
        except Exception as exc:
            log.warning("the task's verdict on the space not read: %s", exc)
            return False

    def close(self, wait_s: float = CLOSE_WAIT_S, clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> None:
        """At the study's end: a probe still running is waited for up to ``wait_s`` seconds
        (all together; a short study under load would else never keep one), then kept and
        decides (a later study decides from it); one not back by then is ended, its signature
        noted separate."""
        deadline = clock() + wait_s
        while self._pending and clock() < deadline:
            for sig in list(self._pending):
                self._pending_choice(sig)
            if self._pending:
                sleep(0.1)
        for sig in list(self._pending):
            child, subject = self._pending.pop(sig)
            self._decide(sig, subject, None, "its probe was not back before the study ended")
            child.close()


def advise_fusion(spec: Any, plan: Any, plain: Any, machine: Any, history: Any,
                  trainable_name: str) -> FusionAdvisor | None:
    """The advisor of a study run on this machine's ``machine.slots`` (the first one is
    probed), or None when the study is not ``execution: auto`` or has no slot here.
    ``plan``: the study's TaskPackPlan (its task is sent to the probe by ``plan.ref`` when it
    has one); ``plain``: its plain trainable or that trainable's ``TrainableRef`` (ignored
    when ``plan.own_task``: the task alone is timed as a pack of one); ``history``: its
    ``ProfileStore``. Its choices go to ``machine.execution``."""
    from hypersack.core.packs import planned_width, study_waves
    if plan is None or plan.mode != "auto" or not machine.slots:
        return None
    slot = machine.slots[0]
    threads = slot.env.get("OMP_NUM_THREADS")
    devices = len(machine.slots)
    width = planned_width(plan.max_members, spec.budget.trials, devices)
    arch = "cpu" if slot.gpu is None else _gpu_arch(machine, slot)
    task = plan.ref if getattr(plan, "ref", None) is not None else plan.task
    return FusionAdvisor(history, spec.name, trainable_name, tuple(plan.architecture_keys),
                         task, None if getattr(plan, "own_task", False) else plain, spec.space,
                         spec.seed, width, None,
                         study_waves(spec.budget.trials, width, devices),
                         device=slot.device, arch=arch,
                         threads=int(threads) if threads and threads.isdigit() else None,
                         env=dict(slot.env), precision=plan.precision, graphs=plan.graphs,
                         conv=plan.conv,
                         decisions=machine.execution)


def _gpu_arch(machine: Any, slot: Any) -> str:
    """The architecture of ``slot``'s GPU in the machine's inventory ("gpu" when unknown)."""
    for _, gpu in machine.cluster.gpus():
        if gpu.id == slot.key:
            return str(gpu.arch)
    return "gpu"
