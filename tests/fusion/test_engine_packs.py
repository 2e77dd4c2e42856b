"""Packs on the horizontally fused engine: isolation, slots, engines, graphs and precision."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from fusion_helpers import (FakeGraph, TinyTask, alone, assert_same_state,  # noqa: E402
                            run_members)

from hypersack.errors import ConfigError  # noqa: E402
from hypersack.fusion.graphs import StepRunner  # noqa: E402
from hypersack.fusion.runner import Pack, run_pack  # noqa: E402
from hypersack.fusion.stack import StackOptions  # noqa: E402
from hypersack.fusion.task import Member  # noqa: E402

from fusion_helpers import ListSource  # noqa: E402


class ConvTask(TinyTask):
    """Conv2d -> BatchNorm2d -> ReLU -> Dropout -> MaxPool2d -> Flatten -> Linear on 2x6x6."""

    name = "tiny_conv"

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self._x = torch.randn(self._x.shape[0], 2, 6, 6, generator=g)

    def build_model(self, config):
        return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4),
                             nn.ReLU(), nn.Dropout(config.get("dropout", 0.0)), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(36, 3))


TASK = ConvTask()
KINDS = {"sgd": {"optimizer": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-3},
         "adamw": {"optimizer": "adamw", "lr": 0.01, "weight_decay": 0.05},
         "rmsprop": {"optimizer": "rmsprop", "lr": 0.005, "momentum": 0.5}}


def conv_members(base, count=3, epochs=2):
    variants = [{"batch_size": 8, "dropout": 0.0}, {"batch_size": 5, "dropout": 0.3},
                {"batch_size": 16, "dropout": 0.5, "lr": base["lr"] / 2}]
    return [Member(i, {**base, **variants[i % 3], "epochs": epochs}, seed=50 + i)
            for i in range(count)]


def run_with(task, members, options, stop_at=None, dtype=torch.float64):
    source = ListSource(members, stop_at)
    pack = Pack(task, "cpu", dtype, options)
    from hypersack.fusion import runner
    stats = runner.PackStats()
    ask = True
    while True:
        if ask:
            ask = runner._fill(pack, source, options.capacity, stats)
        if len(pack) == 0:
            return source, pack
        rows = pack.train_iteration()
        if rows and runner._end_epochs(pack, rows, source, stats):
            ask = True


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_conv_members_equal_their_alone_runs(kind):
    members = conv_members(KINDS[kind])
    packed, stats = run_members(TASK, members, max_members=3)
    assert stats.peak_members == 3
    for m in members:
        assert_same_state(packed.checkpoints[m.trial_id], alone(TASK, m).checkpoints[m.trial_id])


def test_the_default_engine_is_horizontal_and_agrees_with_vmap():
    members = conv_members(KINDS["adamw"])
    fused, pack = run_with(TASK, members, StackOptions(capacity=3))
    vmapped, vpack = run_with(TASK, members, StackOptions(capacity=3, engine="vmap"))
    assert pack.engine == "hfused" and vpack.engine == "vmap"
    for m in members:
        assert_same_state(fused.checkpoints[m.trial_id], vmapped.checkpoints[m.trial_id],
                          rtol=1e-9, atol=1e-11)


def test_a_checkpoint_moves_between_engines():
    target = conv_members(KINDS["sgd"], epochs=3)[1]
    whole, _ = run_with(TASK, [target], StackOptions(capacity=1))
    first, _ = run_with(TASK, [target], StackOptions(capacity=1), stop_at={target.trial_id: 1})
    resumed = Member(target.trial_id, target.config, target.seed,
                     checkpoint=first.checkpoints[target.trial_id])
    rest, _ = run_with(TASK, [resumed], StackOptions(capacity=1, engine="vmap"))
    assert [s for s, _ in rest.reports[target.trial_id]] == [2, 3]
    assert_same_state(rest.checkpoints[target.trial_id], whole.checkpoints[target.trial_id],
                      rtol=1e-9, atol=1e-11)


def test_slots_keep_shapes_and_a_free_slot_is_untouched():
    pack = Pack(TASK, "cpu", torch.float64, StackOptions(capacity=4))
    members = conv_members(KINDS["adamw"], count=3, epochs=5)
    rows = [pack.load(m) for m in members[:2]]
    stack = pack.stack
    weight = stack.rows["p.0.weight"]
    assert stack.capacity == 4 and len(stack) == 2 and rows == [0, 1]
    for _ in range(3):
        stack.train_iteration()         # the stack's own step: no compaction (see test_compaction)
    pack.free([0])
    frozen = {k: v.detach().clone() for k, v in stack.rows.items()
              if k[:2] == "p." or k in ("iter", "loss_sum")}
    for _ in range(3):
        stack.train_iteration()
    for k, v in frozen.items():
        assert torch.equal(stack.rows[k][0], v[0]), k               # the free slot: untouched
    assert not torch.equal(stack.rows["p.0.weight"][1], frozen["p.0.weight"][1])
    assert pack.load(members[2]) == 0                              # refilled, same tensors
    assert stack.rows["p.0.weight"] is weight and stack.capacity == 4


def test_a_refilled_slot_trains_like_alone_and_capacity_doubles_when_full():
    members = conv_members(KINDS["rmsprop"], count=5, epochs=1)
    packed, pack = run_with(TASK, members, StackOptions(capacity=2), )
    for m in members:
        assert_same_state(packed.checkpoints[m.trial_id], alone(TASK, m).checkpoints[m.trial_id])
    grown = Pack(TASK, "cpu", torch.float64, StackOptions(capacity=2))
    for m in members:
        grown.load(m)
    assert grown.stack.capacity == 8 and len(grown) == 5


def test_the_graph_step_replays_per_shape_and_gives_the_eager_results():
    members = conv_members(KINDS["adamw"], count=3, epochs=2)
    captured: list[FakeGraph] = []

    def capture(step, key, device, pool=None):
        captured.append(FakeGraph(step, key))
        return captured[-1]

    original = Pack.load

    def load_with_graphs(self, member):
        row = original(self, member)
        stack = self.stack
        if not stack.runner.enabled:
            stack.runner = StepRunner(stack._device_step, "on", stack.device, capture=capture)
        return row

    eager, _ = run_with(TASK, members, StackOptions(capacity=2))
    try:
        Pack.load = load_with_graphs        # members come and go through 2 slots
        graphed, _ = run_with(TASK, members, StackOptions(capacity=2))
    finally:
        Pack.load = original
    keys = [g.key for g in captured]
    assert len(keys) == len(set(keys)) and len(keys) <= 4     # once per (width, padded)
    assert sum(g.replays for g in captured) > 2 * len(captured)
    for m in members:
        assert_same_state(graphed.checkpoints[m.trial_id], eager.checkpoints[m.trial_id],
                          rtol=1e-12, atol=1e-14)


def test_graphs_on_needs_cuda_and_options_are_checked():
    with pytest.raises(ConfigError, match="pack.graphs"):
        run_pack(TASK, ListSource(conv_members(KINDS["sgd"], 1)), graphs="on")
    for field, kwargs in (("pack.precision", {"precision": "fp8"}),
                          ("pack.engine", {"engine": "jit"}), ("pack.capacity", {"capacity": 0})):
        with pytest.raises(ConfigError, match=field):
            StackOptions(**kwargs)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_trains_close_to_fp32(precision):
    members = conv_members(KINDS["adamw"], count=2, epochs=1)
    exact, _ = run_with(TASK, members, StackOptions(capacity=2), dtype=torch.float32)
    low, pack = run_with(TASK, members, StackOptions(capacity=2, precision=precision),
                         dtype=torch.float32)
    for m in members:
        got, want = low.checkpoints[m.trial_id]["model"], exact.checkpoints[m.trial_id]["model"]
        for name in want:
            assert got[name].dtype == want[name].dtype          # fp32 master weights
            assert torch.isfinite(got[name]).all()
            if precision == "bf16":     # fp16 may skip an overflowing first step (scale 2**16)
                torch.testing.assert_close(got[name], want[name], rtol=0.1, atol=0.05)
        assert low.reports[m.trial_id][-1][1]["loss"] == pytest.approx(
            exact.reports[m.trial_id][-1][1]["loss"], rel=0.1)


def test_fp16_member_that_overflows_skips_its_step_and_halves_its_scale():
    from hypersack.fusion.precision import LossScale
    scale, growth = torch.tensor([8.0, 8.0, 8.0]), torch.tensor([5, 1999, 7])
    grads = {"w": torch.tensor([[1.0, 2.0], [4.0, 8.0], [float("inf"), 1.0]])}
    unscaled, finite = LossScale.unscale(grads, scale)
    assert finite.tolist() == [True, True, False]
    torch.testing.assert_close(unscaled["w"][:2], torch.tensor([[0.125, 0.25], [0.5, 1.0]]))
    LossScale().update(scale, growth, finite, torch.tensor([True, True, True]))
    assert scale.tolist() == [8.0, 16.0, 4.0] and growth.tolist() == [6, 0, 0]


def _builtin(name):
    from hypersack.workloads import lm, vision
    from hypersack.workloads.digits_fused import DIGITS_CNN, DIGITS_MLP
    from hypersack.workloads.synthetic import SyntheticTask
    images = {"train_size": 12, "val_size": 4, "image_size": 8}
    tokens = {"train_size": 12, "val_size": 4, "seq_len": 6, "vocab": 32}
    tiny = {
        "digits_mlp": (DIGITS_MLP, {"hidden": 8, "dropout": 0.2}),
        "digits_cnn": (DIGITS_CNN, {"hidden": 8, "channels": 2, "dropout": 0.2}),
        "resnet18_cifar": (SyntheticTask(vision.RESNET18_WORKLOAD, **images),
                           {**images, "width": 2}),
        "mobilenet_v3_small": (SyntheticTask(vision.MOBILENET_WORKLOAD, **images),
                               {**images, "width": 2, "dropout": 0.2}),
        "gpt_lm": (SyntheticTask(lm.GPT_WORKLOAD, **tokens), {**tokens, "width": 8, "layers": 1,
                                                              "heads": 2, "dropout": 0.1}),
    }
    return tiny[name]


@pytest.mark.parametrize("name", ["digits_mlp", "digits_cnn", "resnet18_cifar",
                                  "mobilenet_v3_small", "gpt_lm"])
def test_builtin_workloads_fuse_horizontally(name, recwarn):
    task, config = _builtin(name)
    pack = Pack(task, "cpu", torch.float64, StackOptions(capacity=2))
    pack.load(Member(0, {**config, "batch_size": 4, "epochs": 1}, seed=1))
    assert pack.engine == "hfused"
    assert not [w for w in recwarn if "vmap" in str(w.message)]


@pytest.mark.parametrize("name", ["mobilenet_v3_small", "gpt_lm"])
def test_builtin_members_equal_their_alone_runs(name):
    task, config = _builtin(name)
    members = [Member(i, {**config, "batch_size": b, "lr": 0.01 / (i + 1), "epochs": 1},
                      seed=i) for i, b in enumerate((4, 5))]
    packed, _ = run_members(task, members, max_members=2)
    # atol: a BatchNorm bias followed (through a conv) by another BatchNorm has a true gradient
    # of 0; Adam turns its rounding noise into ~1e-9 moves, whichever way it is computed.
    for m in members:
        assert_same_state(packed.checkpoints[m.trial_id], alone(task, m).checkpoints[m.trial_id],
                          rtol=1e-9, atol=1e-8)


class GRUNet(nn.Module):
    """A GRU over the 6 features as 2 steps of 3: neither fusable nor vmappable."""

    def __init__(self, hidden):
        super().__init__()
        self.gru = nn.GRU(3, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 3)

    def forward(self, x):
        out, _ = self.gru(x.view(x.shape[0], 2, 3))
        return self.head(out[:, -1])


class GRUTask(TinyTask):
    name = "tiny_gru"

    def build_model(self, config):
        return GRUNet(config.get("hidden", 8))


def test_a_model_neither_engine_takes_trains_each_member_on_its_own_with_one_line(recwarn):
    task = GRUTask()
    members = [Member(i, {"optimizer": kind, "lr": 0.01, "batch_size": 6 + i, "epochs": 2},
                      seed=i) for i, kind in enumerate(("adam", "sgd", "adam"))]
    packed, pack = run_with(task, members, StackOptions(capacity=3))
    lines = [str(w.message) for w in recwarn if "fused pack" in str(w.message)]
    assert pack.engine == "loop" and len(lines) == 1
    assert "model.gru (GRU)" in lines[0] and "vmap cannot run it" in lines[0]
    for m in members:
        assert [s for s, _ in packed.reports[m.trial_id]] == [1, 2]
        assert_same_state(packed.checkpoints[m.trial_id], alone(task, m).checkpoints[m.trial_id])
