"""The horizontally fused engine, op by op: N members at once equal each member run alone."""
from __future__ import annotations

import math
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.func import stack_module_state  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from hypersack.fusion.fused_ops import FUSED_MODULES, FuseContext, Unfusable  # noqa: E402
from hypersack.fusion.hfused import FusedProgram, choose_engine  # noqa: E402
from hypersack.fusion.layers import prepare_module  # noqa: E402

F64 = torch.float64
N = 3


class Residual(nn.Module):
    def __init__(self, body: nn.Module):
        super().__init__()
        self.body = body

    def forward(self, x):
        return F.relu(x + self.body(x))


class SqueezeExcite(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(c, 2, 1), nn.Conv2d(2, c, 1)

    def forward(self, x):
        return x * F.hardsigmoid(self.expand(F.relu(self.reduce(x.mean(dim=(2, 3),
                                                                         keepdim=True)))))


class Head(nn.Module):
    """Global mean over space, then a linear layer (CF -> NB at the boundary)."""

    def __init__(self, c: int, out: int):
        super().__init__()
        self.fc = nn.Linear(c, out)

    def forward(self, x):
        return self.fc(x.mean(dim=(2, 3)))


class Attention(nn.Module):
    """Shape-dependent views, matmuls, a shared causal mask and SDPA (members never mix)."""

    def __init__(self, width: int, heads: int, sdpa: bool):
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.scale = math.sqrt(width // heads)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        if self.sdpa:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) / self.scale
            scores = scores.masked_fill(torch.ones(4, 4, dtype=torch.bool).triu(1), -1e9)
            out = scores.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, t, c))


class TinyLM(nn.Module):
    def __init__(self, sdpa: bool = False):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(11, 8), nn.Embedding(4, 8)
        self.ln1, self.attn = nn.LayerNorm(8), Attention(8, 2, sdpa)
        self.ln2, self.mlp = nn.LayerNorm(8), nn.Sequential(nn.Linear(8, 16), nn.GELU(),
                                                            nn.Linear(16, 8))
        self.head = nn.Linear(8, 11, bias=False)

    def forward(self, x):
        h = self.tokens(x) + self.positions(torch.arange(x.shape[-1], device=x.device))
        h = h + self.attn(self.ln1(h))
        h = h + self.mlp(self.ln2(h))
        return self.head(h)


class AttentionBlock(nn.Module):
    """nn.MultiheadAttention (batch first or not, causal mask or none) in a residual block."""

    def __init__(self, batch_first: bool, causal: bool):
        super().__init__()
        self.causal = causal
        self.ln = nn.LayerNorm(12)
        self.attn = nn.MultiheadAttention(12, 3, batch_first=batch_first)

    def forward(self, x):
        h = self.ln(x)
        mask = torch.ones(6, 6, dtype=torch.bool).triu(1) if self.causal else None
        out, _ = self.attn(h, h, h, need_weights=False, attn_mask=mask)
        return x + out


IMAGE, SEQ, TOKENS, FLAT = (5, 3, 8, 8), (5, 6, 12), (5, 4), (5, 6)
MODELS = {
    "linear_mlp": (lambda: nn.Sequential(nn.Linear(6, 7), nn.Tanh(), nn.Linear(7, 2)), FLAT),
    "linear_no_bias_3d": (lambda: nn.Sequential(nn.Linear(12, 5, bias=False), nn.SiLU()), SEQ),
    "batchnorm1d_2d": (lambda: nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4), nn.ReLU()),
                       FLAT),
    "batchnorm1d_3d_cumulative": (lambda: nn.Sequential(nn.BatchNorm1d(6, momentum=None)), SEQ),
    "conv1d_pool1d": (lambda: nn.Sequential(nn.Conv1d(6, 4, 3, padding=1), nn.MaxPool1d(2),
                                            nn.AdaptiveAvgPool1d(2), nn.Flatten()), SEQ),
    "conv2d_bn_pool": (lambda: nn.Sequential(
        nn.Conv2d(3, 4, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU6(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16, 3)), IMAGE),
    "grouped_and_depthwise": (lambda: nn.Sequential(
        nn.Conv2d(3, 6, 1), nn.Conv2d(6, 6, 3, padding=1, groups=2), nn.Hardswish(),
        nn.Conv2d(6, 6, 3, padding=1, groups=6), nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(1),
        nn.Flatten()), IMAGE),
    "residual_se_head": (lambda: nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4),
        Residual(nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4))),
        SqueezeExcite(4), Head(4, 3)), IMAGE),
    "unflatten": (lambda: nn.Sequential(nn.Unflatten(1, (2, 3)), nn.Conv1d(2, 2, 2),
                                        nn.Flatten(), nn.Linear(4, 2)), FLAT),
    "language_model": (TinyLM, TOKENS),
    "multihead_attention": (lambda: AttentionBlock(batch_first=True, causal=True), SEQ),
    "multihead_attention_seq_first": (lambda: AttentionBlock(batch_first=False, causal=False),
                                      (6, 5, 12)),
    "language_model_sdpa": (lambda: TinyLM(sdpa=True), TOKENS),
}


def members(build):
    out = []
    for i in range(N):
        torch.manual_seed(i)
        model = prepare_module(build()).to(F64)
        for name, b in model.named_buffers():        # non-trivial running statistics
            if b.is_floating_point():
                b.uniform_(0.5, 1.5)
        out.append(model.train())
    return out


def inputs(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    if shape == TOKENS:
        return torch.randint(0, 11, (N, *shape), generator=g)
    return torch.randn(N, *shape, generator=g, dtype=F64)


def run_fused(models, x, training=True, row_weight=None):
    program = FusedProgram(models[0])
    params, buffers = stack_module_state(models)
    params = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    ctx = FuseContext(n=N, params=params, buffers=buffers, training=training,
                      row_weight=row_weight, dropout_index=program.dropout_index)
    return program.run(ctx, x), params, buffers


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_member_equals_its_model_alone(name):
    build, shape = MODELS[name]
    models = members(build)
    x = inputs(shape)
    fused, params, buffers = run_fused(members(build), x)
    weights = torch.randn(fused.shape, dtype=F64, generator=torch.Generator().manual_seed(9))
    grads = torch.autograd.grad((fused * weights).sum(), list(params.values()))
    for i, model in enumerate(models):
        alone = model(x[i])
        torch.testing.assert_close(fused[i], alone, rtol=1e-10, atol=1e-12)
        mine = torch.autograd.grad((alone * weights[i]).sum(), list(model.parameters()))
        for g_all, g_one in zip(grads, mine):
            torch.testing.assert_close(g_all[i], g_one, rtol=1e-9, atol=1e-12)
        for key, value in model.state_dict().items():
            if key in buffers:
                torch.testing.assert_close(buffers[key][i], value, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["conv2d_bn_pool", "residual_se_head", "language_model"])
def test_eval_mode_equals_alone(name):
    build, shape = MODELS[name]
    models = [m.eval() for m in members(build)]
    x = inputs(shape, seed=1)
    fused, _, _ = run_fused(members(build), x, training=False)
    for i, model in enumerate(models):
        torch.testing.assert_close(fused[i], model(x[i]), rtol=1e-10, atol=1e-12)


def test_padded_rows_change_no_batch_statistics():
    build, shape = MODELS["conv2d_bn_pool"]
    models = members(build)
    x = inputs(shape)
    keep = [5, 3, 1]
    weight = torch.tensor([[1.0] * k + [0.0] * (5 - k) for k in keep], dtype=F64)
    fused, _, buffers = run_fused(members(build), x, row_weight=weight)
    for i, (model, k) in enumerate(zip(models, keep)):
        torch.testing.assert_close(fused[i, :k], model(x[i, :k]), rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(buffers["1.running_var"][i], model[1].running_var)


def test_dropout_uses_the_members_mask():
    model = prepare_module(nn.Sequential(nn.Conv2d(3, 2, 1), nn.Dropout(0.5), nn.Flatten()))
    program = FusedProgram(model.to(F64))
    params, buffers = stack_module_state([model] * N)
    mask = (torch.rand(N, 5, 2, 8, 8, dtype=F64) > 0.5).to(F64) * 2
    ctx = FuseContext(n=N, params=params, buffers=buffers, training=True, masks={0: mask},
                      dropout_index=program.dropout_index)
    out = program.run(ctx, inputs(IMAGE))
    for i in range(N):
        want = (model[0](inputs(IMAGE)[i]) * mask[i]).flatten(1)
        torch.testing.assert_close(out[i], want, rtol=1e-12, atol=1e-12)


def test_the_table_covers_the_layer_types_the_issue_names():
    for cls in (nn.Linear, nn.Conv1d, nn.Conv2d, nn.LayerNorm, nn.Embedding, nn.MaxPool2d,
                nn.AdaptiveAvgPool2d, nn.Flatten, nn.ReLU):
        assert cls in FUSED_MODULES


class FunctionalDropout(nn.Module):
    def forward(self, x):
        return F.dropout(x, 0.5, self.training)


@pytest.mark.parametrize("model, where", [
    (nn.Sequential(nn.Linear(6, 4), nn.PReLU()), "model.1"),
    (nn.Sequential(nn.Conv2d(3, 4, 1), nn.GroupNorm(2, 4)), "model.1"),
    (nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")), "model.0"),
    (nn.Sequential(nn.Linear(6, 4), FunctionalDropout()), "dropout"),
])
def test_what_cannot_fuse_falls_back_to_vmap_with_one_warning(model, where):
    base = prepare_module(model).to(F64)
    sample = inputs(IMAGE if isinstance(model[0], nn.Conv2d) else FLAT)[:2]
    with pytest.raises(Unfusable, match=where):
        prog = FusedProgram(base)
        ctx = FuseContext(n=2, params=dict(stack_module_state([base, base])[0]), buffers={},
                          training=True, dropout_index=prog.dropout_index)
        prog.run(ctx, sample)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert choose_engine("auto", base, sample, lambda p, b, x: x, 1e-9) is None
    assert len(caught) == 1 and "vmap" in str(caught[0].message)
    with pytest.raises(Unfusable):
        choose_engine("hfused", base, sample, lambda p, b, x: x, 1e-9)
