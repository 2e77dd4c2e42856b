"""``execution: auto`` measures: the fusion probe times fused and alone steps, the job history
keeps the probe, the advisor decides once per model signature, and the choice with its figures
reaches ``hypersack status --json`` (``runtime.devices.fusion_probe``)."""
from __future__ import annotations

import json

import pytest

from hypersack.core.packs import FusionProbe
from hypersack.core.space import SearchSpace
from hypersack.runtime.devices.fusion_probe import (FusionAdvisor, ProbePlan, measure_fusion,
                                                    member_configs)
from hypersack.runtime.devices.job_history import ProfileStore, read_fusion_choices


class _Task:
    """What the advisor reads of a task without torch: its architecture keys."""
    architecture_keys = ("hidden",)


class _Measure:
    """A probe that records its plans and answers given step times."""

    def __init__(self, fused_step_s: float, alone_step_s: float, fail: bool = False):
        self.plans: list[ProbePlan] = []
        self.times, self.fail = (fused_step_s, alone_step_s), fail

    def __call__(self, plan: ProbePlan) -> FusionProbe:
        self.plans.append(plan)
        if self.fail:
            raise RuntimeError("no fused layer for GRU")
        return FusionProbe(plan.arch, len(plan.configs), plan.steps, *self.times)


def _advisor(history, measure, width=4, decisions=None):
    space = SearchSpace({"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
                         "hidden": {"type": "categorical", "choices": [8, 16]},
                         "batch_size": {"type": "categorical", "choices": [8, 16]}})
    return FusionAdvisor(history, "study", "task:x", _Task.architecture_keys, _Task(), None,
                         space, 0, width, measure=measure,
                         decisions={} if decisions is None else decisions)


def test_the_advisor_probes_once_per_signature_and_keeps_the_probe(tmp_path):
    measure = _Measure(fused_step_s=0.01, alone_step_s=0.005)     # x4: 400/s against 200/s
    decisions: dict = {}
    with ProfileStore(tmp_path / "h.db") as history:
        advisor = _advisor(history, measure, decisions=decisions)
        assert advisor.fuses({"hidden": 8, "lr": 0.01, "batch_size": 8})
        assert advisor.fuses({"hidden": 8, "lr": 0.05, "batch_size": 16})   # same signature
        assert len(measure.plans) == 1
        plan = measure.plans[0]
        assert len(plan.configs) == 4 and plan.configs[0]["lr"] == 0.01
        assert {c["hidden"] for c in plan.configs} == {8}        # the architecture is kept
        assert len({c["lr"] for c in plan.configs}) == 4           # the rest drawn from the space
        assert history.fusion_probe(_sig({"hidden": 8}), "cpu", 4) == FusionProbe(
            "cpu", 4, plan.steps, 0.01, 0.005)
        assert advisor.fuses({"hidden": 16, "lr": 0.01, "batch_size": 8})
        assert len(measure.plans) == 2
        assert decisions["hidden=8"].reason.startswith(
            "hidden=8 fused x4: 400 member-steps/s vs separate 200/s on cpu -> fused")
        chosen = read_fusion_choices(history._db, "study")
        assert [c["subject"] for c in chosen] == ["hidden=16", "hidden=8"]
        assert chosen[1]["fused_rate"] == pytest.approx(400.0)
    # a later study on the same file and device decides from the kept probe
    again = _Measure(1.0, 1.0)
    with ProfileStore(tmp_path / "h.db") as history:
        assert _advisor(history, again).fuses({"hidden": 8, "lr": 0.02, "batch_size": 8})
        assert again.plans == []
        assert _advisor(history, again, width=2).fuses({"hidden": 8})    # x2: 2/s against 1/s
        assert len(again.plans) == 1      # another width is another probe


def _sig(config):
    from hypersack.runtime.devices.job_history import signature
    return signature("task:x", config, ("hidden",))


def test_architecture_keys_the_config_leaves_out_take_the_tasks_default(tmp_path):
    """A task whose architecture keys include data keys with defaults (``SyntheticTask``):
    configs without them are one signature (was: ConfigError from the signature, the study
    failed)."""
    class _Synthetic:
        architecture_keys = ("width", "image_size", "channels")
    measure = _Measure(0.01, 0.005)
    with ProfileStore(tmp_path / "h.db") as history:
        advisor = _advisor(history, measure)
        advisor.keys = _Synthetic.architecture_keys
        assert advisor.fuses({"width": 8, "image_size": 16, "lr": 0.1})
        assert advisor.fuses({"width": 8, "image_size": 16, "lr": 0.2})
        assert len(measure.plans) == 1
        assert list(advisor.decisions) == ["width=8, image_size=16"]


def test_separate_when_fused_is_slower_or_the_probe_fails(tmp_path):
    with ProfileStore(tmp_path / "h.db") as history:
        slow = _advisor(history, _Measure(fused_step_s=0.05, alone_step_s=0.01))   # 80/s vs 100/s
        assert not slow.fuses({"hidden": 8})
        failing = _advisor(history, _Measure(0.01, 0.01, fail=True), width=3)
        assert not failing.fuses({"hidden": 8})
        reason = read_fusion_choices(history._db, "study")[0]["reason"]
        assert "probe failed: RuntimeError: no fused layer for GRU" in reason
        assert history.fusion_probe(_sig({"hidden": 8}), "cpu", 3) is None     # nothing kept


def test_member_configs_keep_the_trial_first_and_its_architecture():
    space = SearchSpace({"lr": {"type": "float", "low": 1e-3, "high": 1e-1},
                         "hidden": {"type": "categorical", "choices": [8, 16]}})
    configs = member_configs({"hidden": 8, "lr": 0.5, "epochs": 3}, space, ("hidden",), 3, 1)
    assert configs[0] == {"hidden": 8, "lr": 0.5, "epochs": 3}
    assert all(c["hidden"] == 8 and c["epochs"] == 3 for c in configs)
    assert configs == member_configs({"hidden": 8, "lr": 0.5, "epochs": 3}, space, ("hidden",), 3, 1)


def test_the_probe_times_fused_and_alone_steps_of_a_real_task():
    pytest.importorskip("torch")
    from fused_tasks import SMALL
    configs = tuple({"hidden": 8, "batch_size": b, "optimizer": o, "lr": 0.01}
                    for b, o in ((16, "adam"), (8, "sgd"), (16, "sgd")))
    probe = measure_fusion(ProbePlan(SMALL, None, configs, steps=3, warmup=1, alone_members=2,
                                     threads=1))
    assert probe.valid and probe.width == 3 and probe.steps == 3 and probe.device == "cpu"
    assert json.loads(json.dumps(probe.to_dict())) == probe.to_dict()


def _auto_study(store_path, n_trials):
    import hypersack
    space = {"lr": hypersack.Float(0.005, 0.02), "optimizer": "adam", "hidden": 8,
             "batch_size": 16, "epochs": 1}
    return hypersack.Study(name="auto-probe", space=space, objective=("loss", "min"),
                           n_trials=n_trials, storage=store_path, execution="auto",
                           pack={"max_members": 2})


def _status(store_path, capsys):
    from hypersack.cli import main
    main(["status", "auto-probe", "--storage", str(store_path), "--json"])
    info = json.loads(capsys.readouterr().out)
    main(["status", "auto-probe", "--storage", str(store_path)])
    return info, capsys.readouterr().out


def test_an_auto_study_probes_beside_its_trials_and_status_shows_the_choice(tmp_path, capsys):
    """A real study: its first trial's signature is probed in a child process while the trial
    runs (separate); the choice (the probe's, or separate when the probe was not back before
    the study ended) is in ``hypersack status --json`` and on its text lines."""
    pytest.importorskip("torch")
    from hypersack.runtime.devices.slots import default_slots
    store_path = tmp_path / "study.db"
    study = _auto_study(store_path, 1)
    study.run("fused_tasks:SMALL", progress=False, slots=default_slots(1, gpus=[]))
    assert study.status()["complete"] == 1
    info, text = _status(store_path, capsys)
    [choice] = info["execution_auto"]
    assert choice["subject"] == "hidden=8" and choice["mode"] in ("fused", "separate")
    if "fused_rate" in choice:      # the probe was back: its figures (one trial: a pack of one)
        assert choice["width"] == 1 and choice["device"] == "cpu" and choice["trial_steps"] > 0
    else:
        assert choice["mode"] == "separate" and "not back before the study ended" in choice["reason"]
    assert any(d["kind"] == "execution" and d["reason"] == choice["reason"]
               for d in info["decisions"])
    assert f"execution auto: {choice['reason']}" in text


def test_an_auto_study_decides_from_the_kept_probe(tmp_path, capsys):
    """The warm path: a probe kept in the job history for the signature and the planned width
    decides at the first ask (fused here), the trials run in packs, status shows its figures."""
    pytest.importorskip("torch")
    from hypersack.runtime.devices.job_history import signature
    from hypersack.runtime.devices.slots import default_slots
    from hypersack.runtime.executors.packs import plan_execution
    from hypersack.runtime.worker.trainable import TrainableRef
    store_path = tmp_path / "study.db"
    plain, plan = plan_execution("auto", "fused_tasks:SMALL", 2)
    sig = signature(TrainableRef.of(plain).key, {"hidden": 8}, plan.architecture_keys)
    with ProfileStore(store_path) as history:
        history.put_fusion_probe(sig, FusionProbe("cpu", 2, 2, 0.01, 0.02, trial_steps=10,
                                                  pack_steps=10))
    study = _auto_study(store_path, 2)
    study.run("fused_tasks:SMALL", progress=False, slots=default_slots(1, gpus=[]))
    assert study.status()["complete"] == 2
    info, text = _status(store_path, capsys)
    [choice] = info["execution_auto"]
    assert choice["mode"] == "fused" and choice["fused_rate"] == pytest.approx(200.0)
    assert choice["separate_rate"] == pytest.approx(50.0)
    assert "fused x2: 200 member-steps/s vs separate 50/s over trials of 10 steps" in text


class _Child:
    """A probe child that answers None ``polls`` times, then ``probe`` (or raises ``error``)."""

    def __init__(self, probe, polls=1, error=None):
        self.probe, self.polls, self.error, self.closed = probe, polls, error, False

    def poll(self):
        if self.polls > 0:
            self.polls -= 1
            return None
        if self.error is not None:
            raise self.error
        return self.probe

    def close(self):
        self.closed = True


def test_separate_while_the_probe_runs_then_as_it_says(tmp_path):
    """The cold path does not wait: asks answer separate while the child runs, the probe
    decides once back and is kept under the planned width (the probed pack may be narrower)."""
    children = []

    def start(plan, env):
        children.append(_Child(FusionProbe("cpu", len(plan.configs), 2, 0.01, 0.02), polls=2))
        return children[-1]

    with ProfileStore(tmp_path / "h.db") as history:
        advisor = _advisor(history, None)
        advisor.start, advisor.probe_width = start, 2
        config = {"hidden": 8, "lr": 0.01, "batch_size": 8}
        assert not advisor.fuses(config)                 # started
        assert not advisor.fuses(config)                 # still running
        assert advisor.decisions == {}
        assert not advisor.fuses({**config, "lr": 0.02})  # still running (the same signature)
        assert advisor.fuses(config)                     # back: x2 200/s against 50/s
        assert len(children) == 1 and children[0].closed
        assert history.fusion_probe(_sig({"hidden": 8}), "cpu", 4).width == 2
        assert advisor.decisions["hidden=8"].fused
        # a probe not back at the study's end: ended, the signature noted separate
        assert not advisor.fuses({"hidden": 16})
        children[-1].polls = 10 ** 9                          # never back
        now = [0.0]
        advisor.close(wait_s=1.0, clock=lambda: now[0],
                      sleep=lambda s: now.__setitem__(0, now[0] + s))
        assert now[0] >= 1.0                                  # waited for it, then ended it
        assert children[1].closed and not advisor.decisions["hidden=16"].fused
        assert "not back before the study ended" in advisor.decisions["hidden=16"].reason
        assert history.fusion_probe(_sig({"hidden": 16}), "cpu", 4) is None


def test_the_studys_end_waits_for_a_probe_still_running_and_keeps_it(tmp_path):
    with ProfileStore(tmp_path / "h.db") as history:
        advisor = _advisor(history, None)
        child = _Child(FusionProbe("cpu", 4, 2, 0.01, 0.02), polls=3)
        advisor.start = lambda plan, env: child
        assert not advisor.fuses({"hidden": 8})
        advisor.close(wait_s=5.0, sleep=lambda s: None)
        assert child.closed and advisor.decisions["hidden=8"].fused
        assert history.fusion_probe(_sig({"hidden": 8}), "cpu", 4) is not None


def test_a_probe_child_that_fails_means_separate(tmp_path):
    with ProfileStore(tmp_path / "h.db") as history:
        advisor = _advisor(history, None)
        advisor.start = lambda plan, env: _Child(None, polls=0, error=RuntimeError("exit 1"))
        assert not advisor.fuses({"hidden": 8})                 # started
        assert not advisor.fuses({"hidden": 8})                 # failed
        assert "probe failed: RuntimeError: exit 1" in advisor.decisions["hidden=8"].reason
        assert not advisor.fuses({"hidden": 8, "lr": 0.5})     # decided: not probed again


_TORCH_FREE = """
import sys
from hypersack.core.packs import FusionProbe
from hypersack.core.spec import StudySpec
from hypersack.runtime.devices.fusion_probe import advise_fusion
from hypersack.runtime.devices.job_history import ProfileStore, signature
from hypersack.runtime.executors.packs import plan_execution
from hypersack.runtime.worker.trainable import TrainableRef

class Slot:
    gpu, device, env = None, "cpu", {"OMP_NUM_THREADS": "1"}

class Machine:
    slots, execution = [Slot(), Slot()], {}

spec = StudySpec.from_dict({"name": "s", "space": {"lr": [0.1, 0.01], "hidden": 64},
                            "objective": ["loss", "min"], "budget": {"trials": 32},
                            "execution": "auto", "pack": {"max_members": 16}})
plain, plan = plan_execution("auto", "digits_mlp", 16)
ref = TrainableRef.of(plain)
with ProfileStore(sys.argv[1]) as history:
    history.put_fusion_probe(signature(ref.key, {"hidden": 64}, plan.architecture_keys),
                             FusionProbe("cpu", 4, 2, 0.04, 0.002, 0.5, 0.05, 40, 90), width=16)
    history.put_fusion_probe(signature(ref.key, {"hidden": 16}, plan.architecture_keys),
                             FusionProbe("cpu", 4, 2, 0.004, 0.02, 0.5, 0.05, 40, 40), width=16)
    started = []
    advisor = advise_fusion(spec, plan, ref, Machine(), history, ref.key)
    advisor.start = lambda p, env: started.append(p)
    plan.measured, plan.space_accepted = advisor.fuses, advisor.space_accepted
    kept = plan.fuses({"hidden": 64, "lr": 0.1})         # kept probe: separate
    probing = plan.fuses({"hidden": 32, "lr": 0.1})      # no probe: a child starts
    history.put_space_verdict(plan.ref.key, advisor._space_key(), True)
    fused = plan.fuses({"hidden": 16, "lr": 0.1})        # kept fused, the space accepted
print(kept, probing, len(started), fused, "torch" in sys.modules)
"""


def test_auto_with_a_kept_probe_plans_without_importing_torch(tmp_path):
    """The warm path of a built-in: its keys without torch, its kept probe says separate, the
    task's verdict is never needed; a signature without a probe starts a child (the driver
    still imports nothing of torch)."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _TORCH_FREE, str(tmp_path / "h.db")],
                          capture_output=True, text=True, cwd=root,
                          env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "1", "True", "False"]


def test_the_tasks_verdict_on_a_space_is_asked_at_its_corners():
    pytest.importorskip("torch")
    from fused_tasks import SMALL
    from hypersack.runtime.devices.fusion_probe import space_corners, space_verdict
    space = SearchSpace({"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
                         "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
                         "hidden": 8, "batch_size": 16})
    corners = space_corners(space)
    assert len(corners) == 4 and {c["optimizer"] for c in corners} == {"adam", "sgd"}
    assert sorted({c["lr"] for c in corners}) == pytest.approx([1e-3, 1e-1])
    assert space_verdict(SMALL, space) is True
    refused = SearchSpace({"optimizer": {"type": "categorical", "choices": ["adam", "lbfgs"]},
                           "hidden": 8, "batch_size": 16})
    assert space_verdict(SMALL, refused) is False
    assert space_corners(space, cap=3) is None and space_verdict(SMALL, None) is None


@pytest.mark.slow
def test_the_probe_runs_in_a_child_process_as_on_a_gpu():
    """The GPU path (a child process that sees only the slot's device), run on the CPU: the
    plan goes by cloudpickle, the probe comes back as JSON; a child that fails is an error."""
    pytest.importorskip("torch")
    from fused_tasks import SMALL
    from hypersack.runtime.devices.fusion_probe import measure_in_child
    configs = ({"hidden": 8, "batch_size": 16}, {"hidden": 8, "batch_size": 8})
    plan = ProbePlan(SMALL, None, configs, steps=2, warmup=1, alone_members=1, threads=1)
    probe = measure_in_child(plan, {"OMP_NUM_THREADS": "1"})
    assert probe.valid and probe.width == 2 and probe.steps == 2
    bad = ProbePlan(SMALL, None, ({"hidden": 8, "batch_size": 0},), steps=1, warmup=0)
    with pytest.raises(RuntimeError, match="the fusion probe failed"):
        measure_in_child(bad, {})


@pytest.mark.parametrize("options", [{"precision": "bf16"}, {"graphs": "off"}, {"conv": "bmm"}])
def test_a_probe_decides_only_studies_of_its_own_pack_options(tmp_path, options):
    """A probe is kept with the pack options it measured: one of the defaults (fp32, graphs
    auto, grouped convolutions) does not decide a study of other options, which probes anew,
    and each then decides its own kind."""
    import dataclasses
    with ProfileStore(tmp_path / "h.db") as history:
        plain = _Measure(fused_step_s=0.01, alone_step_s=0.005)          # fused at defaults
        assert _advisor(history, plain).fuses({"hidden": 8})
        other = _Measure(fused_step_s=0.04, alone_step_s=0.005)          # separate there
        advisor = dataclasses.replace(_advisor(history, other), **options)
        assert not advisor.fuses({"hidden": 8})
        assert len(other.plans) == 1 and all(
            getattr(other.plans[0], k) == v for k, v in options.items())
        again = _Measure(1.0, 1.0)
        assert _advisor(history, again).fuses({"hidden": 8}) and again.plans == []
        assert not dataclasses.replace(_advisor(history, again), **options).fuses({"hidden": 8})
        assert again.plans == []
