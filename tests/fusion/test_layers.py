"""Masked BatchNorm against nn.BatchNorm; per-member dropout streams; module preparation."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.func import functional_call, stack_module_state, vmap  # noqa: E402

from hypersack.errors import ConfigError  # noqa: E402
from hypersack.fusion.layers import (MaskedBatchNorm, MemberDropout, dropout_feature_shapes,  # noqa: E402
                                     member_key, prepare_module, uniform_stream)

F64 = torch.float64


@pytest.mark.parametrize("cls, shape, momentum", [
    (nn.BatchNorm1d, (10, 4), 0.1), (nn.BatchNorm1d, (10, 4, 3), None),
    (nn.BatchNorm2d, (6, 3, 4, 4), 0.3)])
def test_masked_batchnorm_matches_torch(cls, shape, momentum):
    ref = cls(shape[1], momentum=momentum).to(F64)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-1, 1)
    ours = prepare_module(nn.Sequential(ref))[0]
    assert isinstance(ours, MaskedBatchNorm)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        x = torch.randn(*shape, generator=g, dtype=F64) * 2 + 1
        torch.testing.assert_close(ours(x), ref(x), rtol=1e-12, atol=1e-12)
    for name, value in ref.state_dict().items():
        torch.testing.assert_close(ours.state_dict()[name], value, rtol=1e-12, atol=1e-12)
    ref.eval(), ours.eval()
    x = torch.randn(*shape, generator=g, dtype=F64)
    torch.testing.assert_close(ours(x), ref(x), rtol=1e-12, atol=1e-12)


def test_padding_rows_do_not_change_batchnorm():
    """Stacked under vmap: the padded member normalises over its valid rows only."""
    bns = [MaskedBatchNorm(3).to(F64) for _ in range(2)]
    params, buffers = stack_module_state(bns)
    base = MaskedBatchNorm(3).to(F64)
    x = torch.randn(2, 7, 3, dtype=F64)
    weight = torch.tensor([[1.0] * 7, [1.0] * 4 + [0.0] * 3], dtype=F64)

    def member(p, b, x, w):
        base.row_weight = w
        try:
            return functional_call(base, (p, b), (x,))
        finally:
            base.row_weight = None

    out = vmap(member)(params, buffers, x, weight)
    alone = MaskedBatchNorm(3).to(F64)
    torch.testing.assert_close(out[1, :4], alone(x[1, :4]), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(buffers["running_var"][1], alone.running_var)  # updated in place
    torch.testing.assert_close(buffers["num_batches_tracked"], torch.tensor([1, 1]))


def test_uniform_stream_is_per_member_and_width_independent():
    keys = torch.tensor([member_key(s) for s in (1, 2, 3)])
    iters = torch.tensor([0, 5, 9])
    wide = uniform_stream(keys, iters, 0, (8, 5), F64)
    narrow = uniform_stream(keys[1:2], iters[1:2], 0, (3, 5), F64)
    torch.testing.assert_close(wide[1, :3], narrow[0])
    assert not torch.equal(wide[0], wide[2])
    assert not torch.equal(uniform_stream(keys, iters, 1, (8, 5), F64), wide)
    assert not torch.equal(uniform_stream(keys, iters + 1, 0, (8, 5), F64), wide)
    big = uniform_stream(keys, iters, 0, (200, 50), F64)
    assert 0.0 <= big.min() and big.max() < 1.0
    assert big.mean().item() == pytest.approx(0.5, abs=0.01)
    assert (big < 0.2).double().mean().item() == pytest.approx(0.2, abs=0.01)


def test_prepare_module_keeps_names_and_rejects_channel_dropout():
    model = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.Dropout(0.3), nn.Linear(5, 2))
    prepared = prepare_module(model)
    assert isinstance(prepared[2], MemberDropout) and prepared[2].p == 0.3
    assert prepared.state_dict().keys() == model.state_dict().keys()
    assert isinstance(model[1], nn.BatchNorm1d)  # the original is untouched
    assert dropout_feature_shapes(prepared, torch.zeros(4)) == [(5,)]
    with pytest.raises(ConfigError, match="model.1"):
        prepare_module(nn.Sequential(nn.Conv2d(1, 2, 3), nn.Dropout2d(0.1)))


def test_member_dropout_is_identity_without_mask_and_in_eval():
    layer = MemberDropout(0.5)
    x = torch.randn(4, 3)
    assert torch.equal(layer(x), x)
    layer.fused_mask = torch.zeros(4, 3)
    assert torch.equal(layer(x), torch.zeros(4, 3))
    layer.eval()
    assert torch.equal(layer(x), x)


class _MaskMadeOnTheHost(nn.Module):
    """A forward that makes a tensor on a fixed device (it cannot run on the meta device)."""

    def __init__(self):
        super().__init__()
        self.fc, self.drop = nn.Linear(4, 6), nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x)).masked_fill(torch.zeros(6, dtype=torch.bool), 0.0)


def test_dropout_shapes_fall_back_to_the_samples_device():
    model = prepare_module(_MaskMadeOnTheHost())
    assert dropout_feature_shapes(model, torch.zeros(4)) == [(6,)]
    assert dropout_feature_shapes(prepare_module(nn.Linear(4, 2)), torch.zeros(4)) == []
