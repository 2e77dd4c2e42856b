"""Why a fused ResNet-18 pack is not faster than one process per trial on an H100 (issue 17).

    python benchmarks/gpu/gpu_fusion_probe.py [--n 32] [--batch 32] [--channels 64] [--size 32]

Fused packs (``hypersack.fusion``) run N members as one ``torch.func.vmap``-ed model; vmap turns
each member-weighted ``conv2d`` into one grouped convolution (groups = N). This times one 3x3
convolution layer of a CIFAR ResNet-18 (forward + backward, CUDA events, median of repeats) in
the ways a pack or its alternatives run it, for N members of ``batch`` images each:

- ``one``: a single member alone (the per-member cost with the GPU to itself);
- ``loop``: N members one after another in one process (N small launches each);
- ``vmap``: the fused form (what a pack runs): vmap over stacked weights = a grouped conv;
- ``grouped_cl``: the same grouped conv in channels_last memory format;
- ``shared``: N x batch images through ONE weight (a plain conv as large as the fused work):
  how fast the GPU does this much convolution work when cuDNN picks its best kernel.

Throughput is member-steps/s of the layer. If ``vmap`` is far below ``shared``, the fused form's
kernel, not the GPU, bounds a pack; if ``one`` x N is near ``shared``, one member already fills
the GPU and fusion has little to gain. Prints a Markdown table; ``--json`` prints JSON.
"""
from __future__ import annotations

import argparse
import json
import statistics


def _time(fn, warmup: int = 5, repeat: int = 20) -> float:
    """Median seconds of ``fn()`` (CUDA events around each call)."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def probe(n: int, batch: int, channels: int, size: int) -> list[dict]:
    import torch
    import torch.nn.functional as F
    from torch.func import vmap

    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, device=dev, generator=gen)

    x = rand(n, batch, channels, size, size).requires_grad_(True)
    w = (rand(n, channels, channels, 3, 3) * 0.05).requires_grad_(True)
    flops = 2 * 2 * 3 * batch * channels * channels * 9 * size * size   # fwd + 2 bwd convs, x2 MAC

    def step(out):
        out.sum().backward()

    def one():
        step(F.conv2d(x[0], w[0], padding=1))

    def loop():
        step(torch.stack([F.conv2d(x[i], w[i], padding=1) for i in range(n)]))

    def fused():
        step(vmap(lambda xi, wi: F.conv2d(xi, wi, padding=1))(x, w))

    xg = x.detach().transpose(0, 1).reshape(batch, n * channels, size, size)
    xg_cl = xg.contiguous(memory_format=torch.channels_last).requires_grad_(True)
    wg = w.detach().reshape(n * channels, channels, 3, 3)
    wg_cl = wg.contiguous(memory_format=torch.channels_last).requires_grad_(True)

    def grouped_cl():
        step(F.conv2d(xg_cl, wg_cl, padding=1, groups=n))

    xs = x.detach().reshape(n * batch, channels, size, size).requires_grad_(True)
    ws = w.detach()[0].clone().requires_grad_(True)

    def shared():
        step(F.conv2d(xs, ws, padding=1))

    rows = []
    for name, fn, members in (("one", one, 1), ("loop", loop, n), ("vmap", fused, n),
                              ("grouped_cl", grouped_cl, n), ("shared", shared, n)):
        seconds = _time(fn)
        rows.append({"form": name, "members": members, "ms": round(seconds * 1e3, 3),
                     "member_steps_per_s": round(members / seconds, 1),
                     "tflops": round(members * flops / seconds / 1e12, 1)})
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--channels", type=int, default=64)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    import torch
    rows = probe(args.n, args.batch, args.channels, args.size)
    if args.json:
        print(json.dumps({"device": torch.cuda.get_device_name(), "args": vars(args), "rows": rows}))
        return 0
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, TF32 convs "
          f"{torch.backends.cudnn.allow_tf32}; N={args.n} batch={args.batch} "
          f"C={args.channels} {args.size}x{args.size}")
    print("| form | members | ms per step | member-steps/s | TFLOP/s |\n|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['form']} | {r['members']} | {r['ms']} | {r['member_steps_per_s']} | {r['tflops']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
