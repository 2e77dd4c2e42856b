"""A study's precision on plain trials of the built-in workloads (``PlainPrecision``): fp32 is
the exact mode, bf16 / fp16 train with fp32 master weights, fp16 skips overflowing steps and
keeps its loss scale across a checkpoint; and the option's path from the spec to the trainable."""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_digits import FakeChannel, make_ctx  # noqa: E402

from hypersack.errors import ConfigError  # noqa: E402
from hypersack.fusion.precision import PlainPrecision  # noqa: E402
from hypersack.workloads import BuiltinAtPrecision, at_precision, digits, vision  # noqa: E402

IMAGES = {"train_size": 48, "val_size": 16, "image_size": 8, "batch_size": 8, "width": 4,
          "lr": 3e-3, "epochs": 3}


def _train(tmp_path, precision, name="a", config=IMAGES, **ctx):
    channel = FakeChannel(stop_after=ctx.pop("stop_after", None))
    vision.train_resnet18(dict(config), make_ctx(tmp_path / name, channel, **ctx),
                          precision=precision)
    return channel


def test_fp32_is_the_default_and_exact(tmp_path):
    default, fp32 = FakeChannel(), _train(tmp_path, "fp32", "b")
    vision.train_resnet18(dict(IMAGES), make_ctx(tmp_path / "a", default))
    assert default.reports == fp32.reports      # bit for bit: no autocast, no scale in fp32


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_changes_the_numbers_but_trains(tmp_path, precision):
    exact, low = _train(tmp_path, "fp32", "a"), _train(tmp_path, precision, "b")
    losses = [m["train_loss"] for _, m in low.reports]
    assert losses[-1] < losses[0]                           # it learns
    if precision == "bf16":                                 # fp16 may skip its first steps
        assert low.reports != exact.reports                 # autocast really ran
    assert low.reports[-1][1]["loss"] == pytest.approx(exact.reports[-1][1]["loss"], rel=0.25)


def test_conv_models_go_channels_last_only_at_reduced_precision():
    model = digits.build_cnn(2, 8, 0.0)
    conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
    PlainPrecision("fp32", "cpu").prepare(model)
    assert conv.weight.is_contiguous()
    amp = PlainPrecision("bf16", "cpu")
    amp.prepare(model)
    assert amp.channels_last and conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert amp.inputs(torch.zeros(2, 3, 4, 4)).is_contiguous(memory_format=torch.channels_last)
    mlp = PlainPrecision("bf16", "cpu")
    mlp.prepare(digits.build_mlp(8, 0.0))
    assert not mlp.channels_last


def test_fp16_skips_an_overflowing_step_and_halves_its_scale():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    amp = PlainPrecision("fp16", "cpu")
    before = [p.detach().clone() for p in model.parameters()]
    loss = (model(torch.ones(1, 2)) * float("inf")).sum()
    assert amp.step(loss, model, optimizer) is False
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    assert amp.state_dict() == {"scale": 2.0 ** 15, "growth": 0.0}
    optimizer.zero_grad()
    loss = model(torch.ones(1, 2)).sum()
    assert amp.step(loss, model, optimizer) is True
    # the update used the unscaled gradient (d loss / d w = 1): w - 0.1
    torch.testing.assert_close(model.weight.detach(), before[0] - 0.1)
    assert amp.state_dict() == {"scale": 2.0 ** 15, "growth": 1.0}


def test_fp16_loss_scale_rides_with_the_checkpoint(tmp_path):
    from hypersack.runtime.worker.checkpoints import read_checkpoint
    config = {**IMAGES, "epochs": 2}
    straight = _train(tmp_path, "fp16", "a", config)
    first = FakeChannel(stop_after=1)
    with pytest.raises(BaseException) as stopped:
        vision.train_resnet18(dict(config), make_ctx(tmp_path / "b", first), precision="fp16")
    assert type(stopped.value).__name__ == "TrialStopped"
    state = read_checkpoint(tmp_path / "b", first.committed)
    assert set(state["loss_scale"]) == {"scale", "growth"}
    assert state["loss_scale"]["growth"] > 0               # six clean steps so far
    resumed = FakeChannel()
    vision.train_resnet18(dict(config), make_ctx(tmp_path / "b", resumed, attempt=2,
                                                 committed=first.committed), precision="fp16")
    assert resumed.reports[-1][1] == pytest.approx(straight.reports[-1][1])


def test_a_bad_precision_names_the_field_and_value():
    with pytest.raises(ConfigError) as info:
        PlainPrecision("fp8", "cpu")
    assert (info.value.field, info.value.value) == ("precision", "fp8")


# ---- from the study's option to the trainable -----------------------------------------------

def test_at_precision_wraps_builtins_only():
    assert at_precision("digits_mlp", "fp32") == "digits_mlp"
    wrapped = at_precision("builtin:resnet18_cifar", "bf16")
    assert isinstance(wrapped, BuiltinAtPrecision)
    assert (wrapped.name, wrapped.precision) == ("resnet18_cifar", "bf16")
    assert at_precision("synthetic_chain", "bf16") == "synthetic_chain"   # no model to cast
    assert at_precision("my.module:train", "bf16") == "my.module:train"   # the user's own

    def mine(config, ctx):
        pass
    assert at_precision(mine, "fp16") is mine


def test_builtin_at_precision_calls_the_builtin_with_it(monkeypatch):
    seen = {}

    def fake(config, ctx, precision="fp32"):
        seen.update(config=config, ctx=ctx, precision=precision)
    monkeypatch.setattr(digits, "train_mlp", fake)
    BuiltinAtPrecision("digits_mlp", "fp16")({"lr": 1}, "ctx")
    assert seen == {"config": {"lr": 1}, "ctx": "ctx", "precision": "fp16"}


def test_plan_execution_gives_plain_trials_the_study_precision():
    from hypersack.runtime.executors.packs import plan_execution
    from hypersack.runtime.worker.pack import TaskTrainable
    from hypersack.workloads.digits_fused import DIGITS_MLP
    plain, plan = plan_execution("separate", "digits_cnn", 4, "bf16")
    assert isinstance(plain, BuiltinAtPrecision) and plain.precision == "bf16" and plan is None
    plain, plan = plan_execution("auto", "resnet18_cifar", 4, "fp16")
    assert isinstance(plain, BuiltinAtPrecision) and plan.precision == "fp16"
    plain, _ = plan_execution("separate", DIGITS_MLP, 4, "bf16")
    assert isinstance(plain, TaskTrainable) and plain.precision == "bf16"
    plain, _ = plan_execution("separate", DIGITS_MLP, 4, "fp32")
    assert plain.precision is None                     # fp32: the task's own precision
    assert plan_execution("separate", "digits_cnn", 4, "fp32")[0] == "digits_cnn"


def _spec(**extra):
    from hypersack.core.spec import StudySpec
    return StudySpec.from_dict({"name": "s", "space": {"lr": [0.1]},
                                "objective": {"metric": "loss", "mode": "min"},
                                "budget": {"trials": 1}, **extra})


def test_precision_is_a_study_option_and_pack_precision_its_deprecated_spelling():
    assert _spec().precision == "fp32" and "precision" not in _spec().to_dict()
    bf16 = _spec(precision="bf16")
    assert bf16.precision == "bf16" and bf16.to_dict()["precision"] == "bf16"
    assert _spec(**{"precision": "bf16"}).to_dict() == bf16.to_dict()
    with pytest.warns(DeprecationWarning, match="precision"):
        old = _spec(pack={"max_members": 4, "precision": "fp16"})
    assert old.precision == "fp16" and old.pack.max_members == 4
    assert "precision" not in old.to_dict()["pack"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _spec(**old.to_dict())      # a stored spec reads back without the warning
    with pytest.warns(DeprecationWarning):
        _spec(precision="fp16", pack={"precision": "fp16"})     # the same value: fine


@pytest.mark.parametrize("extra, field, value", [
    ({"precision": "fp8"}, "precision", "fp8"),
    ({"precision": True}, "precision", True),
    ({"pack": {"precision": "half"}}, "pack.precision", "half"),
    ({"precision": "bf16", "pack": {"precision": "fp16"}}, "pack.precision", "fp16"),
])
def test_bad_precision_is_refused_naming_field_and_value(extra, field, value):
    with pytest.raises(ConfigError) as info:
        _spec(**extra)
    assert (info.value.field, info.value.value) == (field, value)


def test_study_takes_precision(tmp_path):
    from hypersack import Study
    study = Study({"lr": [0.1]}, ("loss", "min"), n_trials=1, storage=tmp_path / "db.sqlite",
                  precision="bf16", pack={"max_members": 2})
    assert study.spec.precision == "bf16" and study.spec.pack.max_members == 2
    with pytest.raises(ConfigError) as info:
        Study({"lr": [0.1]}, ("loss", "min"), n_trials=1, storage=tmp_path / "db.sqlite",
              precision="fp64")
    assert info.value.field == "precision"
