"""The GPU-sized workloads on tiny shapes: plain trainables through a real TrialContext, fused
tasks through the fused runner, and the two agreeing."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fusion"))

from fusion_helpers import run_members  # noqa: E402
from test_digits import FakeChannel, make_ctx  # noqa: E402

from hypersack.errors import ConfigError  # noqa: E402
from hypersack.fusion.task import FusableTask, Member  # noqa: E402
from hypersack.runtime.worker.trainable import resolve_reference  # noqa: E402
from hypersack.workloads import BUILTINS, FUSED_BUILTINS  # noqa: E402
from hypersack.workloads import lm, synthetic, vision  # noqa: E402
from hypersack.workloads.synthetic import SyntheticTask  # noqa: E402

IMAGES = {"train_size": 24, "val_size": 8, "image_size": 8, "batch_size": 8}
TINY = {
    "resnet18_cifar": (vision.RESNET18_WORKLOAD, {**IMAGES, "width": 2}),
    "mobilenet_v3_small": (vision.MOBILENET_WORKLOAD, {**IMAGES, "width": 2}),
    "gpt_lm": (lm.GPT_WORKLOAD, {"train_size": 24, "val_size": 8, "seq_len": 6, "vocab": 32,
                                 "width": 8, "layers": 1, "heads": 2, "batch_size": 8}),
}
DATA_ONLY = ("train_size", "val_size", "image_size", "seq_len", "vocab")


def tiny_task(name: str) -> SyntheticTask:
    workload, config = TINY[name]
    return SyntheticTask(workload, **{k: v for k, v in config.items() if k in DATA_ONLY})


@pytest.mark.parametrize("name", sorted(TINY))
def test_builtins_resolve_to_trainables_and_tasks(name):
    assert callable(resolve_reference(name))
    module, attr = FUSED_BUILTINS[name].split(":")
    task = getattr(__import__(module, fromlist=[attr]), attr)
    assert isinstance(task, FusableTask) and task.name == name
    assert name in BUILTINS


def test_default_shapes_are_the_named_models():
    """Parameter counts of the default configs: ResNet-18 11.2M, MobileNet-v3-small 1.5M,
    Pythia-31M-class GPT 30.5M (meta device: nothing is allocated)."""
    def params(workload):
        with torch.device("meta"):
            model = workload.build(workload.defaults)
        return sum(p.numel() for p in model.parameters())
    assert params(vision.RESNET18_WORKLOAD) == 11_173_962
    assert 1.4e6 < params(vision.MOBILENET_WORKLOAD) < 1.6e6
    assert 30e6 < params(lm.GPT_WORKLOAD) < 31e6


@pytest.mark.parametrize("name", sorted(TINY))
def test_forward_backward_on_tiny_shapes(name):
    workload, config = TINY[name]
    config = workload.with_defaults(config)
    x, y, _, _ = workload.data(config)
    torch.manual_seed(0)
    model = workload.build(config)
    loss = workload.per_sample_loss(model(x[:4]), y[:4])
    assert loss.shape == (4,) and torch.isfinite(loss).all()
    loss.mean().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_data_is_fixed_and_learnable_shaped():
    a = vision.image_data(IMAGES)
    b = vision.image_data(IMAGES)
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert a[0].shape == (24, 3, 8, 8) and a[2].shape == (8, 3, 8, 8)
    x, y, _, _ = lm.token_data({"train_size": 50, "seq_len": 20, "vocab": 32})
    assert x.dtype == torch.int64 and x.shape == (50, 20)
    assert torch.equal(x[:, 1:], y[:, :-1])       # targets are the inputs shifted by one
    follow = torch.randperm(32, generator=torch.Generator().manual_seed(synthetic.DATA_SEED))
    share = (follow[x] == y).float().mean().item()
    assert 0.85 < share < 0.95                     # the bigram chain, followed 90% of the time


@pytest.mark.parametrize("name", sorted(TINY))
def test_plain_trainable_reports_every_epoch(name, tmp_path):
    workload, config = TINY[name]
    channel = FakeChannel()
    train = resolve_reference(name)
    train({**config, "epochs": 2}, make_ctx(tmp_path, channel))
    assert [step for step, _ in channel.reports] == [1, 2]
    metrics = channel.reports[-1][1]
    assert {"loss", "train_loss", "steps", "workers", "accuracy"} <= set(metrics)
    assert metrics["steps"] == 2 * math.ceil(24 / 8)
    if name == "gpt_lm":
        assert metrics["perplexity"] == pytest.approx(math.exp(metrics["loss"]))


def test_checkpoint_before_report_and_resume_continues_exactly(tmp_path):
    _, config = TINY["gpt_lm"]
    config = {**config, "epochs": 3, "lr": 3e-3}
    straight = FakeChannel()
    lm.train_gpt(config, make_ctx(tmp_path / "a", straight))

    first = FakeChannel(stop_after=1)
    with pytest.raises(BaseException) as stopped:
        lm.train_gpt(config, make_ctx(tmp_path / "b", first))
    assert type(stopped.value).__name__ == "TrialStopped"
    assert first.committed is not None                    # the checkpoint rode with its report
    resumed = FakeChannel()
    lm.train_gpt(config, make_ctx(tmp_path / "b", resumed, attempt=2, committed=first.committed))
    assert [s for s, _ in resumed.reports] == [2, 3]
    assert resumed.reports[-1][1] == pytest.approx(straight.reports[-1][1])


def test_save_and_report_is_the_one_place_that_pairs_them():
    calls = []

    class Ctx:
        def report(self, step, checkpoint=None, **metrics):
            calls.append(("report", step, checkpoint, metrics))
    synthetic.save_and_report(Ctx(), 4, {"epoch": 4}, loss=0.5)
    assert calls == [("report", 4, {"epoch": 4}, {"loss": 0.5})]     # durable together


@pytest.mark.parametrize("name", ["resnet18_cifar", "gpt_lm"])
def test_a_fused_member_alone_follows_the_plain_trainable(name):
    """Same init, data, shuffling and update rule (SGD here): a member alone in a pack ends its
    first epoch where the plain training loop does (float64, to rounding)."""
    workload, config = TINY[name]
    config = {**config, "optimizer": "sgd", "lr": 0.05, "epochs": 1}
    source, _ = run_members(tiny_task(name), [Member(0, config, seed=3)], max_members=1)
    got = source.checkpoints[0]["model"]

    full = workload.with_defaults(config)
    x, y, _, _ = workload.data(full)
    torch.manual_seed(3)
    model = workload.build(full).double()
    optimizer = synthetic.build_optimizer(model, synthetic.parse_settings(full, None))
    synthetic.train_epoch(model, optimizer, x.double() if x.is_floating_point() else x, y,
                          full["batch_size"], synthetic._epoch_seed(3, 1),
                          workload.per_sample_loss)
    for key, value in model.state_dict().items():
        torch.testing.assert_close(got[key].to(value.dtype), value, rtol=1e-8, atol=1e-10)


def test_fused_pack_trains_members_side_by_side_and_refuses_other_data():
    task = tiny_task("gpt_lm")
    _, config = TINY["gpt_lm"]
    members = [Member(i, {**config, "lr": 1e-3 * (i + 1), "epochs": 2}, seed=i) for i in range(3)]
    members.append(Member(9, {**config, "seq_len": 7}, seed=9))
    source, stats = run_members(task, members, dtype=torch.float32)
    assert stats.peak_members == 3 and sorted(source.reports) == [0, 1, 2]
    assert isinstance(source.failures[9], ConfigError)
    assert source.failures[9].field in ("config.seq_len", "member[9].config")
    assert [s for s, _ in source.reports[0]] == [1, 2]
    assert {"loss", "perplexity", "accuracy", "train_loss"} <= set(source.reports[0][-1][1])


@pytest.mark.parametrize("config, field", [
    ({"optimizer": "lbfgs"}, "config.optimizer"),
    ({"batch_size": 0}, "config.batch_size"),
    ({"width": 2.5}, "config.width"),
    ({"lr": 0}, "config.lr"),
])
def test_invalid_configs_name_the_field(config, field, tmp_path):
    with pytest.raises(ConfigError) as info:
        vision.train_resnet18({**TINY["resnet18_cifar"][1], **config},
                              make_ctx(tmp_path, FakeChannel()))
    assert info.value.field == field


def test_heads_must_divide_width():
    with pytest.raises(ConfigError, match="heads"):
        lm.GPT(vocab=8, width=10, heads=3)


def test_task_data_keys_are_checked():
    with pytest.raises(ConfigError, match="data keys"):
        SyntheticTask(vision.RESNET18_WORKLOAD, seq_len=4)
