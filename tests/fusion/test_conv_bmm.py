"""The batched-GEMM form of a fused Conv2d (``pack.conv: bmm``, issue 38): the same numbers as
the grouped convolution, and members of real models trained with it equal their alone runs."""
from __future__ import annotations

import collections

import pytest

torch = pytest.importorskip("torch")
from torch.nn import functional as F  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from fusion_helpers import alone, assert_same_state, run_members  # noqa: E402
from test_engine_packs import _builtin  # noqa: E402

from hypersack.errors import ConfigError  # noqa: E402
from hypersack.fusion.fused_ops import conv2d_bmm  # noqa: E402
from hypersack.fusion.runner import Pack  # noqa: E402
from hypersack.fusion.stack import StackOptions  # noqa: E402
from hypersack.fusion.task import Member  # noqa: E402

SHAPES = [  # kernel, stride, padding, dilation, in, out, bias
    (3, 1, 1, 1, 3, 4, True), (1, 2, 0, 1, 4, 6, False), (1, 1, 0, 1, 5, 2, True),
    (3, 2, 1, 1, 2, 3, False), (3, 1, 2, 2, 2, 2, True), (5, 1, 0, 1, 2, 3, True)]


@pytest.mark.parametrize("k,s,p,d,cin,cout,bias", SHAPES)
def test_bmm_form_equals_the_grouped_convolution_forward_and_backward(k, s, p, d, cin, cout,
                                                                      bias):
    n, b, size = 3, 2, 7
    g = torch.Generator().manual_seed(k * 100 + s * 10 + p)
    x = torch.randn(b, n * cin, size, size, dtype=torch.float64, generator=g)
    w = torch.randn(n, cout, cin, k, k, dtype=torch.float64, generator=g)
    bb = torch.randn(n, cout, dtype=torch.float64, generator=g) if bias else None
    grad = torch.randn(b, n * cout, (size + 2 * p - d * (k - 1) - 1) // s + 1,
                       (size + 2 * p - d * (k - 1) - 1) // s + 1, dtype=torch.float64,
                       generator=g)

    def run(fn):
        leaves = [t.clone().requires_grad_() for t in (x, w) + ((bb,) if bias else ())]
        out = fn(*leaves)
        out.backward(grad)
        return [out.detach()] + [t.grad for t in leaves]
    want = run(lambda x_, w_, *b_: F.conv2d(x_, w_.reshape(-1, cin, k, k),
                                            b_[0].reshape(-1) if b_ else None, s, p, d, n))
    got = run(lambda x_, w_, *b_: conv2d_bmm(x_, w_, b_[0] if b_ else None, (s, s), (p, p),
                                             (d, d)))
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12)


def test_the_stack_refuses_an_unknown_conv_form():
    with pytest.raises(ConfigError, match="pack.conv"):
        StackOptions(conv="winograd")


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def _step_ops(name, conv):
    task, config = _builtin(name)
    pack = Pack(task, "cpu", torch.float64, StackOptions(capacity=2, conv=conv))
    for i in range(2):
        pack.load(Member(i, {**config, "batch_size": 4, "epochs": 1}, seed=i))
    pack.train_iteration()
    with _Ops() as counted:
        pack.train_iteration()
    return counted.ops


def test_resnet18_on_bmm_runs_no_convolution_and_mobilenet_keeps_its_depthwise_ones():
    grouped, bmm = _step_ops("resnet18_cifar", "grouped"), _step_ops("resnet18_cifar", "bmm")
    assert grouped["aten.convolution"] > 0 and bmm["aten.convolution"] == 0
    assert bmm["aten.bmm"] + bmm["aten.baddbmm"] > grouped["aten.bmm"] + grouped["aten.baddbmm"]
    mobile = _step_ops("mobilenet_v3_small", "bmm")
    assert 0 < mobile["aten.convolution"] < _step_ops("mobilenet_v3_small",
                                                      "grouped")["aten.convolution"]


@pytest.mark.parametrize("name,optimizer", [
    ("resnet18_cifar", {"optimizer": "adam", "lr": 0.01}),
    ("mobilenet_v3_small", {"optimizer": "sgd", "lr": 0.05, "momentum": 0.9,
                            "weight_decay": 1e-3})])
def test_members_on_the_bmm_form_equal_their_alone_runs(name, optimizer):
    task, config = _builtin(name)
    members = [Member(i, {**config, **optimizer, "batch_size": b, "lr": optimizer["lr"] / (i + 1),
                          "epochs": 1}, seed=i) for i, b in enumerate((4, 5))]
    packed, _ = run_members(task, members, max_members=2, conv="bmm")
    # atol as test_engine_packs: a BatchNorm bias before another BatchNorm has a true gradient
    # of 0 that Adam turns into ~1e-9 moves whichever way its rounding noise falls.
    for m in members:
        assert_same_state(packed.checkpoints[m.trial_id], alone(task, m).checkpoints[m.trial_id],
                          rtol=1e-9, atol=1e-8)


def test_bf16_packs_on_the_bmm_form_train_within_bf16_noise_of_fp32():
    task, config = _builtin("resnet18_cifar")
    states = {}
    for conv, precision in (("bmm", "bf16"), ("grouped", "fp32")):
        pack = Pack(task, "cpu", torch.float32, StackOptions(capacity=2, precision=precision,
                                                             conv=conv))
        for i in range(2):
            pack.load(Member(i, {**config, "batch_size": 4, "epochs": 1}, seed=i))
        for _ in range(3):
            pack.train_iteration()
        states[conv] = pack.stack.member_state(1)["model"]
    for name, want in states["grouped"].items():
        if want.is_floating_point():
            torch.testing.assert_close(states["bmm"][name].float(), want, rtol=0.1, atol=0.05)
