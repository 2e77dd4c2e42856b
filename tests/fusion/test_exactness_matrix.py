"""The exactness contract, layer by layer, through whole packs (issue 28's list).

For each supported layer family (Conv1d + pooling, grouped and depthwise Conv2d + masked
BatchNorm + dropout, Embedding + LayerNorm + SDPA attention, nn.MultiheadAttention, Linear +
BatchNorm1d), six members of one architecture, one per optimizer kind (SGD with momentum and
weight decay, SGD Nesterov, Adam, AdamW, RMSprop, Adagrad), with different batch sizes,
learning-rate schedules and weight decay, train in a pack of 3 slots on the horizontally fused
engine: slots are freed and refilled as members finish, and one member is paused after its
first epoch and resumed later beside others from its checkpoint. In float64 each member's
parameters and optimizer state equal its training alone (a pack of one).
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from fusion_helpers import ListSource, alone, assert_same_state  # noqa: E402
from test_hfused import AttentionBlock, TinyLM  # noqa: E402

from hypersack.fusion.optim import OptimizerConfig, Schedule  # noqa: E402
from hypersack.fusion.runner import Pack, PackStats, _end_epochs, _fill  # noqa: E402
from hypersack.fusion.stack import StackOptions  # noqa: E402
from hypersack.fusion.task import FusableTask, Member  # noqa: E402

N_TRAIN, N_VAL = 24, 6


class LayerTask(FusableTask):
    """A fixed model family on fixed random data, a per-sample squared error to fixed targets.

    ``inputs``: the shape of one sample (floats), or ("tokens", T, vocab)."""

    architecture_keys = ()

    def __init__(self, name, build, inputs):
        self.name, self._build = name, build
        g = torch.Generator().manual_seed(11)
        n = N_TRAIN + N_VAL
        if inputs[0] == "tokens":
            self._x = torch.randint(0, inputs[2], (n, inputs[1]), generator=g)
        else:
            self._x = torch.randn(n, *inputs, generator=g)
        torch.manual_seed(0)
        with torch.no_grad():
            out = build({}).eval()(self._x[:1])
        self._y = torch.randn(n, out[0].numel(), generator=g)

    def build_model(self, config):
        return self._build(config)

    def optimizer(self, config, steps_per_epoch):
        fields = {k: v for k, v in config.items() if k in OptimizerConfig.__dataclass_fields__}
        return OptimizerConfig(**fields)

    def batch_size(self, config):
        return config["batch_size"]

    def max_steps(self, config, default):
        return config["epochs"]

    def train_data(self):
        return self._x[:N_TRAIN], self._y[:N_TRAIN]

    def val_data(self):
        return self._x[N_TRAIN:], self._y[N_TRAIN:]

    def loss(self, outputs, targets):
        return (outputs.flatten(1) - targets).pow(2).mean(1)

    def metrics(self, outputs, targets):
        return {"loss": self.loss(outputs, targets).mean().item()}


class ConvStack1d(nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.body = nn.Sequential(nn.Conv1d(4, 6, 3, padding=1), nn.GELU(), nn.MaxPool1d(2),
                                  nn.Conv1d(6, 6, 3, groups=3), nn.Dropout(dropout),
                                  nn.AdaptiveAvgPool1d(2), nn.Flatten(), nn.Linear(12, 3))

    def forward(self, x):
        return self.body(x)


def _grouped(config):
    return nn.Sequential(
        nn.Conv2d(3, 6, 1, bias=False), nn.BatchNorm2d(6), nn.Hardswish(),
        nn.Conv2d(6, 6, 3, padding=1, groups=6, bias=False), nn.BatchNorm2d(6), nn.ReLU(),
        nn.Conv2d(6, 4, 3, padding=1, groups=2), nn.Dropout(config.get("dropout", 0.0)),
        nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))


def _linear_bn(config):
    return nn.Sequential(nn.Linear(5, 7, bias=False), nn.BatchNorm1d(7), nn.SiLU(),
                         nn.Dropout(config.get("dropout", 0.0)), nn.Linear(7, 2))


class MhaHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.block, self.head = AttentionBlock(batch_first=True, causal=True), nn.Linear(12, 2)

    def forward(self, x):
        return self.head(F.relu(self.block(x)))


TASKS = {
    "conv1d_grouped_pool_dropout": LayerTask("conv1d", lambda c: ConvStack1d(c.get("dropout", 0.0)),
                                             (4, 8)),
    "conv2d_grouped_depthwise_bn": LayerTask("conv2d", _grouped, (3, 6, 6)),
    "linear_batchnorm1d_dropout": LayerTask("linear_bn", _linear_bn, (5,)),
    "embedding_layernorm_sdpa": LayerTask("lm", lambda c: TinyLM(sdpa=True), ("tokens", 4, 11)),
    "multihead_attention": LayerTask("mha", lambda c: MhaHead(), (6, 12)),
}

# One member per optimizer kind; batch sizes, schedules, weight decay and dropout all differ.
MEMBERS = [
    {"kind": "sgd", "lr": 0.02, "momentum": 0.9, "weight_decay": 1e-3, "batch_size": 8},
    {"kind": "sgd", "lr": 0.02, "momentum": 0.8, "nesterov": True, "batch_size": 5,
     "schedule": Schedule(kind="step", step_size=3, gamma=0.5)},
    {"kind": "adam", "lr": 0.005, "betas": (0.8, 0.99), "batch_size": 7, "dropout": 0.3,
     "schedule": Schedule(kind="cosine", total_steps=12, warmup_steps=2)},
    {"kind": "adamw", "lr": 0.005, "weight_decay": 0.05, "batch_size": 24},
    {"kind": "rmsprop", "lr": 0.002, "momentum": 0.5, "batch_size": 6, "dropout": 0.2},
    {"kind": "adagrad", "lr": 0.02, "lr_decay": 0.01, "weight_decay": 0.01, "batch_size": 11},
]
PAUSED = 2      # the Adam member: paused after epoch 1, resumed beside others


def _members(epochs=2):
    return [Member(i, {**cfg, "epochs": epochs}, seed=30 + i) for i, cfg in enumerate(MEMBERS)]


def _run(task, members, stop_at=None, capacity=3):
    """``run_pack``'s loop with at most ``capacity`` members, returning the pack as well."""
    source, stats = ListSource(members, stop_at), PackStats()
    pack = Pack(task, "cpu", torch.float64, StackOptions(capacity=capacity, engine="hfused"))
    ask = True
    while True:
        if ask:
            ask = _fill(pack, source, capacity, stats)
        if len(pack) == 0:
            return source, pack, stats
        rows = pack.train_iteration()
        if rows and _end_epochs(pack, rows, source, stats):
            ask = True


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_layer_family_trains_each_member_as_alone(name):
    task = TASKS[name]
    members = _members()
    first, pack, stats = _run(task, members, stop_at={PAUSED: 1})
    assert pack.engine == "hfused"            # the fused engine, not vmap
    assert stats.loaded == len(members) and stats.peak_members == 3   # slots were refilled
    paused = members[PAUSED]
    resumed = Member(paused.trial_id, paused.config, paused.seed,
                     checkpoint=first.checkpoints[paused.trial_id])
    later, _, _ = _run(task, [Member(9, {**MEMBERS[5], "epochs": 1}, seed=9), resumed],
                       capacity=2)
    for m in members:
        reference = alone(task, m)
        got = later if m.trial_id == PAUSED else first
        assert_same_state(got.checkpoints[m.trial_id], reference.checkpoints[m.trial_id],
                          rtol=1e-9, atol=1e-11)
        assert got.reports[m.trial_id][-1][1]["loss"] == pytest.approx(
            reference.reports[m.trial_id][-1][1]["loss"], rel=1e-9)
    assert [s for s, _ in later.reports[PAUSED]] == [2]
