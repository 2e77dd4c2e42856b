"""The fusion probe: ``execution: auto`` measures fused against separate on the device at hand.

Before the first trial of a model signature (the trainable and the task's architecture keys)
is committed to a pack, ``FusionAdvisor.fuses`` times a probe (``measure_fusion``):
``steps`` fused steps of a pack of ``width`` members (after ``warmup`` unmeasured ones), the
members' configs being the trial's with the other hyperparameters drawn from the study's space
(so they split into optimizer stacks and pad to the largest batch as the study's packs will),
and ``steps`` steps alone of ``ALONE_MEMBERS`` of them as ``separate`` runs them (the plain
trainable, timed by the Profiler through ``profile_trainable``; a task of the user's alone is a
pack of one). Each side counts its fastest measured step (the least disturbed by whatever else
the machine runs; both sides alike), the alone side the mean of its members' fastest. ``core.packs.choose_fusion`` decides from the figures. The probe is kept in the
job history (``ProfileStore.put_fusion_probe``, keyed by signature, device kind and width), so
a later study on the same file and device decides without probing; the choice is logged, noted
with its reason (``ProfileStore.note``, kind ``execution``) and its figures
(``ProfileStore.record_fusion_choice``) for ``hypersack status`` and the report, and kept in
``decisions`` for the progress view.

On CPU slots the probe runs in the driver (which has imported torch to resolve the task) with
the slot's thread count; on a GPU it runs in a child process that sees only the slot's GPU, so
the driver never holds a CUDA context. A probe that fails (a model the engine cannot run, a
child that dies) counts as no probe: the signature runs separate, with the error in the reason.
The probe runs synchronously in the controller's turn, once per signature: on a device where
trials already run it measures beside them.
"""
from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from hypersack.core.packs import FusionChoice, FusionProbe, choose_fusion

__all__ = ["PROBE_STEPS", "PROBE_WARMUP", "ALONE_MEMBERS", "ProbePlan", "member_configs",
           "measure_fusion", "measure_in_child", "FusionAdvisor", "advise_fusion"]

log = logging.getLogger(__name__)

#: Measured steps per side of the probe, and unmeasured warm-up steps before them.
PROBE_STEPS = 3
PROBE_WARMUP = 1
#: Members of the probed pack also timed alone (the first ones: the trial's own config first).
ALONE_MEMBERS = 3
#: The longest a probe in a child process may take (seconds) before it counts as failed.
CHILD_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class ProbePlan:
    """What one probe runs: ``task`` (the FusableTask), ``plain`` (what ``separate`` runs for
    a trial, ``train(config, ctx)``; None: the task alone, a pack of one), ``configs`` (the
    pack's members, the first the trial's), ``device`` ("cpu", "cuda:0"), ``arch`` (the
    device kind the probe is kept under), ``threads`` (torch threads on CPU; None: as they
    are), ``precision`` / ``graphs`` / ``conv`` (the study's pack options)."""
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


def measure_fusion(plan: ProbePlan) -> FusionProbe:
    """Run ``plan`` in this process and return its figures (see the module docstring)."""
    import torch
    threads = torch.get_num_threads()
    if plan.threads is not None and not plan.device.startswith("cuda"):
        torch.set_num_threads(max(1, plan.threads))
    try:
        fused = _time_pack(plan, plan.configs)
        alone = [_time_alone(plan, c) for c in plan.configs[:max(1, plan.alone_members)]]
    finally:
        torch.set_num_threads(threads)
    return FusionProbe(plan.arch, len(plan.configs), plan.steps, fused,
                       statistics.fmean(alone))


def _time_pack(plan: ProbePlan, configs: Sequence[Mapping[str, Any]]) -> float:
    """Seconds of the fastest measured step of a pack holding ``configs`` (stacks as a pack worker
    builds them: every slot on CUDA, from 4 and doubling on CPU)."""
    from hypersack.fusion.runner import Pack
    from hypersack.fusion.stack import StackOptions
    from hypersack.fusion.task import Member
    from hypersack.runtime.devices.profiler import Profiler
    precision = plan.precision if plan.precision != "fp32" else plan.task.precision
    cuda = plan.device.startswith("cuda")
    options = StackOptions(capacity=len(configs) if cuda else 4, precision=precision,
                           graphs=plan.graphs, conv=plan.conv)
    pack = Pack(plan.task, plan.device, options=options)
    for i, config in enumerate(configs):
        pack.load(Member(i, config, i, None, None))
    profiler = Profiler(iterations=plan.steps, warmup=plan.warmup, device=plan.device,
                        arch=plan.arch, utilization=lambda: None)
    while not profiler.done:
        with profiler.iteration():
            pack.train_iteration()
            if cuda:
                torch_sync()
    return _fastest(profiler)


def _fastest(profiler: Any) -> float:
    """The fastest measured iteration of ``profiler`` (ProfilingError when none ran)."""
    profile = profiler.profile()
    return min(profiler.times, default=profile.time_per_iter_s)


def torch_sync() -> None:
    import torch
    torch.cuda.synchronize()


def _time_alone(plan: ProbePlan, config: Mapping[str, Any]) -> float:
    """Seconds of the fastest measured step of ``config``'s trial alone, as ``separate``
    runs it."""
    if plan.plain is None:
        return _time_pack(plan, [config])
    from hypersack.runtime.devices.profile_trainable import profile_trainable
    from hypersack.runtime.devices.profiler import Profiler
    profiler = Profiler(iterations=plan.steps, warmup=plan.warmup, device=plan.device,
                        arch=plan.arch, utilization=lambda: None)
    profile_trainable(plan.plain, dict(config), device=plan.device, profiler=profiler)
    return _fastest(profiler)


# ---- in a child process (GPUs) ------------------------------------------------------------------

_SYS_PATH = "HYPERSACK_PROBE_SYS_PATH"
_BOOT = ("import json, os, sys; sys.path[:] = json.loads(os.environ.pop('HYPERSACK_PROBE_SYS_PATH')); "
         "from hypersack.runtime.devices.fusion_probe import _child; _child()")


def measure_in_child(plan: ProbePlan, env: Mapping[str, str],
                     timeout_s: float = CHILD_TIMEOUT_S) -> FusionProbe:
    """``measure_fusion(plan)`` in a new Python process with ``env`` added to its environment
    (the slot's: ``CUDA_VISIBLE_DEVICES``...); RuntimeError when it fails or times out."""
    import cloudpickle
    environ = {**os.environ, **env,
               _SYS_PATH: json.dumps([os.path.abspath(p) for p in sys.path])}
    try:
        done = subprocess.run([sys.executable, "-c", _BOOT], input=cloudpickle.dumps(plan),
                              capture_output=True, env=environ, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the fusion probe took more than {timeout_s:.0f}s") from None
    lines = done.stdout.decode(errors="replace").strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"the fusion probe failed (exit {done.returncode}): {tail[0]}")
    return FusionProbe.from_dict(json.loads(lines[-1]))


def _child() -> None:
    import cloudpickle
    plan = cloudpickle.loads(sys.stdin.buffer.read())
    print(json.dumps(measure_fusion(plan).to_dict()), flush=True)


# ---- the driver's advisor ---------------------------------------------------------------------

@dataclass(eq=False)
class FusionAdvisor:
    """``execution: auto``'s fused-or-separate answer per model signature (module docstring).

    ``history``: the job history (``ProfileStore``); ``study``: the study's name (its notes);
    ``trainable_name``: what signatures hash; ``task`` / ``plain``: as in ``ProbePlan``;
    ``space`` and ``seed``: where the probe's member configs are drawn from; ``width``: the
    planned pack width; ``device`` / ``arch`` / ``threads`` / ``env``: the slot probed on
    (``env`` set for a child process on GPUs); ``measure``: ``ProbePlan -> FusionProbe``
    (tests inject one; default: in this process on CPU, in a child on GPUs); ``decisions``:
    subject -> FusionChoice, shared with the machine's progress lines."""
    history: Any
    study: str
    trainable_name: str
    task: Any
    plain: Any
    space: Any
    seed: int
    width: int
    device: str = "cpu"
    arch: str = "cpu"
    threads: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    precision: str = "fp32"
    graphs: str = "auto"
    conv: str = "grouped"
    measure: Callable[[ProbePlan], FusionProbe] | None = None
    decisions: dict[str, Any] = field(default_factory=dict)
    _choices: dict[str, FusionChoice] = field(default_factory=dict, repr=False)

    def fuses(self, config: Mapping[str, Any]) -> bool:
        """Whether trials of ``config``'s signature run in packs (probed at its first ask)."""
        from hypersack.runtime.devices.job_history import signature
        keys = tuple(self.task.architecture_keys)
        # a key the config leaves out takes the task's default: the same model for every such config
        sig = signature(self.trainable_name, {k: config.get(k) for k in keys}, keys)
        choice = self._choices.get(sig)
        if choice is None:
            choice = self._choices[sig] = self._choose(sig, config, keys)
        return choice.fused

    def _choose(self, sig: str, config: Mapping[str, Any], keys: Sequence[str]) -> FusionChoice:
        subject = ", ".join(f"{k}={config[k]}" for k in keys if k in config) or self.trainable_name
        probe, error = self._probe(sig, config, keys)
        choice = choose_fusion(subject, probe)
        if error is not None:
            choice = FusionChoice(subject, False, f"{choice.reason} ({error})", None)
        self.decisions[subject] = choice
        log.info("execution auto: %s", choice.reason)
        try:
            self.history.note(self.study, "execution", subject, choice.reason)
            self.history.record_fusion_choice(self.study, subject, choice.to_dict())
        except Exception as exc:     # a note is an explanation: never fail the study on it
            log.warning("execution choice not stored: %s", exc)
        return choice

    def _probe(self, sig: str, config: Mapping[str, Any],
               keys: Sequence[str]) -> tuple[FusionProbe | None, str | None]:
        """The stored probe of (``sig``, device kind, width), else a new one, stored."""
        try:
            stored = self.history.fusion_probe(sig, self.arch, self.width)
        except Exception as exc:
            log.warning("fusion probe history not read: %s", exc)
            stored = None
        if stored is not None:
            return stored, None
        try:
            plan = ProbePlan(self.task, self.plain,
                             member_configs(config, self.space, keys, self.width, self.seed),
                             self.device, self.arch, self.threads, self.precision, self.graphs,
                             conv=self.conv)
            probe = self._measure(plan)
        except Exception as exc:     # a model the engine cannot run, a dead child...
            log.warning("fusion probe failed: %s", exc)
            return None, f"probe failed: {type(exc).__name__}: {str(exc)[:200]}"
        try:
            self.history.put_fusion_probe(sig, probe)
        except Exception as exc:
            log.warning("fusion probe not stored: %s", exc)
        return probe, None

    def _measure(self, plan: ProbePlan) -> FusionProbe:
        if self.measure is not None:
            return self.measure(plan)
        if self.device.startswith("cuda"):
            return measure_in_child(plan, self.env)
        return measure_fusion(plan)


def advise_fusion(spec: Any, plan: Any, plain: Any, machine: Any, history: Any,
                  trainable_name: str) -> FusionAdvisor | None:
    """The advisor of a study run on this machine's ``machine.slots`` (the first one is
    probed), or None when the study is not ``execution: auto`` or has no slot here.
    ``plan``: the study's TaskPackPlan; ``plain``: its plain trainable (a callable; a task's own
    ``TaskTrainable`` counts as none: the task alone is timed as a pack of one);
    ``history``: its ``ProfileStore``. Its choices go to ``machine.execution``."""
    from hypersack.core.packs import planned_width
    if plan is None or plan.mode != "auto" or not machine.slots:
        return None
    slot = machine.slots[0]
    threads = slot.env.get("OMP_NUM_THREADS")
    width = planned_width(plan.max_members, spec.budget.trials, len(machine.slots))
    arch = "cpu" if slot.gpu is None else _gpu_arch(machine, slot)
    from hypersack.runtime.worker.pack import TaskTrainable
    own_task = isinstance(plain, TaskTrainable)
    return FusionAdvisor(history, spec.name, trainable_name, plan.task,
                         None if own_task else plain, spec.space, spec.seed, width,
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
