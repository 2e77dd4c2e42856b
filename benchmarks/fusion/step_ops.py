"""Aten ops per fused training step against a hand-fused model with torch.optim (issue 38).

Counts every aten op dispatched (a ``TorchDispatchMode``; CPU, deterministic) in:

- ``step``: one steady training iteration of a fused stack (``FusedStack.train_iteration``:
  gather, forward, backward, optimizer; N members, Adam, equal batch sizes) against the same
  work done by a *hand-fused* model the script builds from the member model: every
  ``Conv2d`` as one grouped ``Conv2d`` over N x C channels, every ``BatchNorm2d`` as one over N x C
  channels, every ``Linear`` as one batched matmul (``baddbmm``), the batch gathered from the
  device-resident data by index, the summed per-member mean loss, ``torch.optim.Adam(foreach=True)``
  over its parameters and ``zero_grad``. Goal: engine / reference <= 1.3.
- ``mixed``: the same engine step when members have different batch sizes (padded rows masked:
  BatchNorm statistics over each member's own rows), against the same reference. Goal <= 2.
- ``adam``: one optimizer step over the stack's stacked parameters (``fused_step`` on its rows)
  against ``torch.optim.Adam(foreach=True)`` on copies of the same tensors. Goal: <= 2x the ops.
- ``step_bmm``: the ``step`` row with the stack's dense convolutions as im2col + one batched
  GEMM (``pack.conv: bmm``, ``fused_ops.conv2d_bmm``) instead of grouped convolutions; reported
  beside ``step``, no goal (its case is a GPU's kernels, which ``benchmarks/gpu`` measures).
  Every row also counts its *compute* ops: all but views and metadata (``VIEW_OPS``), a
  host-side proxy for the kernels a GPU would launch.

Op counts do not depend on the model's width (``--width``, default 8) or the image size: the
default shapes are N=8, batch 32, 3x32x32 images.

Times, by turns in one run (A, B, A, B, ...), median of ``--turns``: the Adam step over the
stacked parameters of ``--time-n`` members of width ``--time-width`` (default: N=4 ResNet-18 at
width 64, 44.7 M stacked parameters) against foreach (goal <= 1.5x) and, for reference,
``fused=True``; and the host ms per training step at tiny shapes (width 4, 8x8 images, batch 8),
engine against the hand-fused reference (reported, no goal); and the CPU ms per step of the
``bmm`` conv form against ``grouped`` (width 8, 16x16 images, batch 8; reported, no goal;
``--conv-time`` runs only these rows).

Models: ``resnet18`` (``hypersack.workloads.vision``'s CIFAR ResNet-18) and ``mobilenet``
(MobileNet-v3-small), on CIFAR-shaped synthetic data. Exits 1 when a goal is missed.

    PYTHONPATH=$PWD python benchmarks/fusion/step_ops.py                 # the table, N=8
    PYTHONPATH=$PWD python benchmarks/fusion/step_ops.py --quick         # small widths, no timing
    PYTHONPATH=$PWD python benchmarks/fusion/step_ops.py --ops resnet18  # ops by name
    PYTHONPATH=/work/main python benchmarks/fusion/step_ops.py ...       # another checkout
"""
from __future__ import annotations

import argparse
import collections
import copy
import inspect
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

GOALS = {"step": 1.3, "mixed": 2.0, "adam": 2.0, "adam_time": 1.5}
#: Ops that launch no kernel on a GPU (views and metadata); the rest are "compute" ops.
VIEW_OPS = frozenset({"view", "_unsafe_view", "_reshape_alias", "reshape", "permute", "t",
                      "transpose", "expand", "unsqueeze", "squeeze", "as_strided", "select",
                      "slice", "detach", "alias", "unbind", "split", "chunk", "movedim",
                      "unflatten", "flatten", "view_as", "lift_fresh", "empty", "empty_like",
                      "empty_strided", "new_empty", "new_empty_strided", "split_with_sizes",
                      "is_same_size", "diagonal", "narrow"})


def compute_ops(ops: collections.Counter[str]) -> int:
    """The ops of ``ops`` that are not in ``VIEW_OPS``."""
    return sum(k for name, k in ops.items() if name not in VIEW_OPS)


class OpCounter(TorchDispatchMode):
    """Counts every aten op dispatched inside it, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())


def count_ops(fn: Callable[[], Any]) -> collections.Counter[str]:
    with OpCounter() as counter:
        fn()
    return counter.ops


# ---- the engine --------------------------------------------------------------------------------

def make_task(model: str, width: int, image_size: int, train_size: int):
    from hypersack.workloads.synthetic import SyntheticTask
    from hypersack.workloads.vision import MOBILENET_WORKLOAD, RESNET18_WORKLOAD
    workload = RESNET18_WORKLOAD if model == "resnet18" else MOBILENET_WORKLOAD
    return SyntheticTask(workload, train_size=train_size, val_size=8, image_size=image_size), \
        {"width": width, "train_size": train_size, "val_size": 8, "image_size": image_size}


def engine_stack(model: str, n: int, width: int, image_size: int, batches: list[int],
                 conv: str = "grouped"):
    """A fused stack of ``n`` Adam members (learning rates differ), steady after 2 steps;
    ``conv``: its form of dense convolutions (``StackOptions.conv``)."""
    from hypersack.fusion.runner import Pack
    from hypersack.fusion.stack import StackOptions
    from hypersack.fusion.task import Member
    task, base = make_task(model, width, image_size, train_size=8 * max(batches))
    pack = Pack(task, "cpu", torch.float32, StackOptions(capacity=n, engine="hfused", conv=conv))
    for i in range(n):
        config = dict(base, optimizer="adam", lr=1e-3 * (1 + i), batch_size=batches[i % len(batches)])
        pack.load(Member(trial_id=i, config=config, seed=100 + i))
    stack = pack.stack
    for _ in range(2):
        stack.train_iteration()
    return task, stack


# ---- the hand-fused reference ------------------------------------------------------------------

class BatchedLinear(nn.Module):
    """N linear layers as one ``baddbmm``: input ``[B, N * in]`` or ``[N, B, in]``."""

    def __init__(self, n: int, layer: nn.Linear):
        super().__init__()
        self.n = n
        self.weight = nn.Parameter(layer.weight.detach().expand(n, *layer.weight.shape).clone())
        self.bias = nn.Parameter(layer.bias.detach().expand(n, 1, -1).clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            x = x.view(x.shape[0], self.n, -1).transpose(0, 1)
        return torch.baddbmm(self.bias, x, self.weight.transpose(1, 2))


def hand_fused(model: nn.Module, n: int) -> nn.Module:
    """``model`` with each layer replaced by its N-member grouped / batched counterpart."""
    model = copy.deepcopy(model)

    def replace(module: nn.Module) -> None:
        for name, child in module.named_children():
            if isinstance(child, nn.Conv2d):
                new: nn.Module = nn.Conv2d(n * child.in_channels, n * child.out_channels,
                                           child.kernel_size, child.stride, child.padding,
                                           child.dilation, n * child.groups,
                                           child.bias is not None)
            elif isinstance(child, nn.modules.batchnorm._BatchNorm):
                new = nn.BatchNorm2d(n * child.num_features, child.eps, child.momentum)
            elif isinstance(child, nn.Linear):
                new = BatchedLinear(n, child)
            elif isinstance(child, nn.Dropout):
                new = nn.Identity()
            else:
                replace(child)
                continue
            setattr(module, name, new)
    replace(model)
    return model.train()


class Reference:
    """The hand-fused model's training step on the stack's data (same N, batch and data)."""

    def __init__(self, task, stack, n: int, batch: int):
        torch.manual_seed(0)
        self.model = hand_fused(task.build_model(stack.slots[0].member.config), n)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3, foreach=True)
        self.x, self.y = stack.data.x_train, stack.data.y_train
        g = torch.Generator().manual_seed(0)
        self.order = torch.stack([torch.randperm(len(self.y), generator=g) for _ in range(n)])
        self.n, self.batch, self.pos = n, batch, 0

    def step(self) -> None:
        idx = self.order[:, self.pos:self.pos + self.batch]
        self.pos = (self.pos + self.batch) % (len(self.y) - self.batch)
        x = self.x[idx]                                               # [N, B, C, H, W]
        x = x.transpose(0, 1).reshape(self.batch, -1, *x.shape[3:])    # [B, N * C, H, W]
        out = self.model(x)                                           # [N, B, classes]
        loss = F.cross_entropy(out.flatten(0, 1), self.y[idx].flatten(), reduction="sum") \
            / self.batch
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


# ---- the optimizer step alone ------------------------------------------------------------------

class AdamPair:
    """The stack's Adam step (``fused_step`` on its rows) and torch's on copies of them."""

    def __init__(self, stack, grad_seed: int = 0):
        from hypersack.fusion import optim
        self.optim, self.stack = optim, stack
        params = stack._params()
        g = torch.Generator().manual_seed(grad_seed)
        self.grads = {k: torch.randn(v.shape, generator=g) * 1e-3 for k, v in params.items()}
        self.params = {k: v.detach() for k, v in params.items()}
        self.copies = [v.detach().clone().requires_grad_() for v in params.values()]
        for p, gr in zip(self.copies, self.grads.values()):
            p.grad = gr.clone()
        self.foreach = torch.optim.Adam(self.copies, lr=1e-3, foreach=True)
        self.fused = torch.optim.Adam([p.detach().clone().requires_grad_() for p in self.copies],
                                      lr=1e-3, fused=True)
        for p, gr in zip(self.fused.param_groups[0]["params"], self.grads.values()):
            p.grad = gr.clone()
        self.kwargs: dict[str, Any] = {"keep": stack.rows["active"], "restore": False}
        if "features" in inspect.signature(optim.fused_step).parameters:
            self.kwargs["features"] = stack._features

    def engine(self) -> None:
        s = self.stack
        if hasattr(s, "kind"):       # a checkout from before one stack held every kind
            kind, state, hparams = s.kind, s._prefixed("o."), s._prefixed("h.")
        else:                        # state and hyperparameter rows per kind, schedule shared
            kind, = s.kinds
            state = s._prefixed(f"o.{kind}.")
            hparams = {k: v for k, v in s._prefixed("h.").items() if "." not in k}
            hparams.update(s._prefixed(f"h.{kind}."))
        self.optim.fused_step(kind, self.params, self.grads, state, hparams, s.rows["iter"],
                              **self.kwargs)

    def torch_foreach(self) -> None:
        self.foreach.step()

    def torch_fused(self) -> None:
        self.fused.step()


# ---- measurements ------------------------------------------------------------------------------

def op_rows(model: str, n: int, width: int, image_size: int, batch: int,
            verbose: bool) -> list[dict[str, Any]]:
    task, stack = engine_stack(model, n, width, image_size, [batch])
    reference = Reference(task, stack, n, batch)
    reference.step()
    reference.step()
    engine_ops = count_ops(stack.train_iteration)
    ref_ops = count_ops(reference.step)
    pair = AdamPair(stack)
    pair.engine()
    pair.torch_foreach()
    adam_ops, foreach_ops = count_ops(pair.engine), count_ops(pair.torch_foreach)
    mixed = [batch - (i % 4) * max(1, batch // 8) for i in range(n)]
    _, mixed_stack = engine_stack(model, n, width, image_size, mixed)
    mixed_ops = count_ops(mixed_stack.train_iteration)
    _, bmm_stack = engine_stack(model, n, width, image_size, [batch], conv="bmm")
    bmm_ops = count_ops(bmm_stack.train_iteration)
    if verbose:
        for title, ops in (("engine step", engine_ops), ("engine step, conv bmm", bmm_ops),
                           ("reference step", ref_ops),
                           ("mixed-batch engine step", mixed_ops), ("engine Adam", adam_ops),
                           ("foreach Adam", foreach_ops)):
            print(f"\n{model} {title}: {sum(ops.values())} ops")
            for name, k in ops.most_common(25):
                print(f"  {k:6d}  {name}")
    ref_compute = compute_ops(ref_ops)
    return [
        {"model": model, "what": "training step, equal batches", "engine": sum(engine_ops.values()),
         "reference": sum(ref_ops.values()), "goal": GOALS["step"], "kind": "step",
         "compute": (compute_ops(engine_ops), ref_compute)},
        {"model": model, "what": "training step, conv bmm", "engine": sum(bmm_ops.values()),
         "reference": sum(ref_ops.values()), "goal": None, "kind": "step_bmm",
         "compute": (compute_ops(bmm_ops), ref_compute),
         "convolutions": (engine_ops["convolution"] + engine_ops["convolution_backward"],
                          bmm_ops["convolution"] + bmm_ops["convolution_backward"])},
        {"model": model, "what": f"training step, batches {sorted(set(mixed))}",
         "engine": sum(mixed_ops.values()), "reference": sum(ref_ops.values()),
         "goal": GOALS["mixed"], "kind": "mixed"},
        {"model": model, "what": "one Adam step (foreach)", "engine": sum(adam_ops.values()),
         "reference": sum(foreach_ops.values()), "goal": GOALS["adam"], "kind": "adam"}]


def by_turns(fns: dict[str, Callable[[], Any]], turns: int) -> dict[str, float]:
    """Median seconds of each function, run in turns (A, B, C, A, B, C, ...)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(turns):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def time_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    _, stack = engine_stack("resnet18", args.time_n, args.time_width, 8, [2])
    pair = AdamPair(stack)
    params = sum(p.numel() for p in pair.params.values())
    t = by_turns({"engine": pair.engine, "foreach": pair.torch_foreach,
                  "fused": pair.torch_fused}, args.turns)
    rows.append({"model": "resnet18", "what": f"Adam step ms, {params / 1e6:.1f} M stacked params",
                 "engine": 1e3 * t["engine"], "reference": 1e3 * t["foreach"],
                 "fused": 1e3 * t["fused"], "goal": GOALS["adam_time"], "kind": "adam_time"})
    for model in args.models:      # tiny shapes: the host's share of a step
        task, stack = engine_stack(model, args.n, 4, 8, [8])
        reference = Reference(task, stack, args.n, 8)
        t = by_turns({"engine": stack.train_iteration, "reference": reference.step}, args.turns)
        rows.append({"model": model, "what": "host ms per step (width 4, 8x8, batch 8)",
                     "engine": 1e3 * t["engine"],
                     "reference": 1e3 * t["reference"], "goal": None, "kind": "host"})
    rows += conv_time_rows(args)
    return rows


def conv_time_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """CPU ms per step of the two conv forms by turns (the GPU's A/B: ``benchmarks/gpu``)."""
    rows = []
    for model in args.models:
        _, grouped = engine_stack(model, args.n, 8, 16, [8])
        _, bmm = engine_stack(model, args.n, 8, 16, [8], conv="bmm")
        t = by_turns({"bmm": bmm.train_iteration, "grouped": grouped.train_iteration},
                     args.turns)
        rows.append({"model": model, "what": "CPU ms per step, conv bmm vs grouped",
                     "engine": 1e3 * t["bmm"], "reference": 1e3 * t["grouped"], "goal": None,
                     "kind": "conv_time"})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,mobilenet")
    ap.add_argument("--n", type=int, default=8, help="members (default 8)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--width", type=int, default=8,
                    help="model width for the op counts (8; counts do not depend on it)")
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--time-n", type=int, default=4)
    ap.add_argument("--time-width", type=int, default=64)
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small widths and images, no timing")
    ap.add_argument("--no-time", action="store_true", help="op counts only")
    ap.add_argument("--no-ops", action="store_true", help="times only")
    ap.add_argument("--ops", default="", help="print ops by name for these models")
    ap.add_argument("--json", default="")
    ap.add_argument("--conv-time", action="store_true", help="only the conv forms' times")
    args = ap.parse_args()
    args.models = [m for m in args.models.split(",") if m]
    if args.quick:
        args.width, args.image_size, args.batch, args.no_time = 4, 8, 8, True
    torch.set_num_threads(max(1, torch.get_num_threads()))
    rows: list[dict[str, Any]] = []
    if args.conv_time:
        args.no_ops, args.no_time = True, True
        rows += conv_time_rows(args)
    for model in ([] if args.no_ops else args.models):
        rows += op_rows(model, args.n, args.width, args.image_size, args.batch,
                        model in args.ops.split(","))
    if not args.no_time:
        rows += time_rows(args)
    failed = report(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 1 if failed else 0


def report(rows: list[dict[str, Any]]) -> bool:
    print(f"\n{'model':10s} {'what':42s} {'engine':>9s} {'reference':>10s} {'ratio':>6s} "
          f"{'goal':>6s}  result")
    failed = False
    for r in rows:
        ratio = r["engine"] / r["reference"]
        r["ratio"] = ratio
        verdict = "-"
        if r["goal"] is not None:
            ok = ratio <= r["goal"]
            failed |= not ok
            verdict = "PASS" if ok else "FAIL"
        goal = f"{r['goal']:.1f}" if r["goal"] is not None else "-"
        fmt = "{:9.1f} {:10.1f}" if isinstance(r["engine"], float) else "{:9d} {:10d}"
        extra = f"  (fused=True {r['fused']:.1f} ms)" if "fused" in r else ""
        if "compute" in r:
            extra += f"  (compute ops {r['compute'][0]} vs {r['compute'][1]})"
        if "convolutions" in r:
            extra += f"  (convolution ops grouped {r['convolutions'][0]}, bmm " \
                     f"{r['convolutions'][1]})"
        print(f"{r['model']:10s} {r['what']:42s} " + fmt.format(r["engine"], r["reference"])
              + f" {ratio:6.2f} {goal:>6s}  {verdict}{extra}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
