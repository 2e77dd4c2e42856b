"""A small GPT-style language model (Pythia-31M-class) on synthetic token sequences.

``train_gpt`` (``gpt_lm``): a decoder-only transformer with learned position embeddings, pre-norm
blocks (LayerNorm, causal multi-head self-attention, LayerNorm, 4x GELU MLP) and an untied
output head. The defaults are Pythia-31M's shape: ``width`` (d_model) 256, ``layers`` 6,
``heads`` 8, ``vocab`` 50304 (30.5M parameters); ``seq_len`` 128 (Pythia trains on 2048: set it
for the paper's SP4 sizes), ``batch_size`` 8, ``train_size`` 512 and ``val_size`` 16 sequences.
Everything shrinks for CPU tests (``vocab`` 64, ``width`` 16, ``layers`` 1, ``seq_len`` 8...).

Attention is written out (``softmax(q k^T / sqrt(d)) v`` with a causal mask) rather than
``scaled_dot_product_attention``, whose fused kernels have no ``vmap`` batching rule: fused
packs would fall back to a slow per-member loop.

Data: each sequence of ``seq_len`` + 1 tokens follows a fixed random permutation of the vocabulary
(token t is followed by perm[t]) with probability 0.9 and is uniform otherwise, drawn from
``DATA_SEED``; inputs are the first ``seq_len`` tokens, targets the next ones. The best possible
cross-entropy is therefore about 0.9 nats below a uniform guess's ln(vocab) scale, so learning is
visible within an epoch. Per epoch: ``loss`` (validation cross-entropy per token),
``perplexity``, ``accuracy`` (next-token), ``train_loss``, ``steps``, ``workers``. Other config
keys are those of ``hypersack.workloads.synthetic``; ``dropout`` (0.0) after attention and MLP.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import torch
import torch.fx
from torch import nn
from torch.nn import functional as F

from hypersack.errors import ConfigError
from hypersack.workloads.synthetic import (DATA_SEED, SyntheticTask, Workload, count,
                                           dropout_rate, fit)

__all__ = ["GPT", "train_gpt", "token_data", "GPT_WORKLOAD", "GPT_LM"]

FOLLOW_PROBABILITY = 0.9


def token_data(config: Mapping[str, Any]):
    """``(x_train, y_train, x_val, y_val)``: int64 ``[n, seq_len]`` token sequences on the CPU."""
    n_train, n_val = count(config, "train_size", 512), count(config, "val_size", 16)
    seq_len, vocab = count(config, "seq_len", 128), count(config, "vocab", 50304)
    g = torch.Generator().manual_seed(DATA_SEED)
    follow = torch.randperm(vocab, generator=g)
    n = n_train + n_val
    tokens = torch.empty(n, seq_len + 1, dtype=torch.int64)
    tokens[:, 0] = torch.randint(0, vocab, (n,), generator=g)
    for t in range(1, seq_len + 1):
        keep = torch.rand(n, generator=g) < FOLLOW_PROBABILITY
        noise = torch.randint(0, vocab, (n,), generator=g)
        tokens[:, t] = torch.where(keep, follow[tokens[:, t - 1]], noise)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def causal_mask(t: int, device: torch.device) -> torch.Tensor:
    """``[t, t]`` True on and below the diagonal (a leaf for torch.fx: ``t`` may be traced)."""
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()


torch.fx.wrap("causal_mask")


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.root_head_width = math.sqrt(width // heads)   # a constant: torch.fx traces forward
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / self.root_head_width
        causal = causal_mask(t, x.device)
        scores = scores.masked_fill(~causal, float("-inf"))
        out = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, c)
        return self.drop(self.proj(out))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, dropout)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token ids ``[B, T]`` (T <= ``seq_len``) to next-token logits ``[B, T, vocab]``."""

    def __init__(self, vocab: int = 50304, width: int = 256, layers: int = 6, heads: int = 8,
                 seq_len: int = 128, dropout: float = 0.0):
        super().__init__()
        if width % heads:
            raise ConfigError("config.heads", heads, f"must divide width ({width})")
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(seq_len, width)
        self.blocks = nn.Sequential(*[Block(width, heads, dropout) for _ in range(layers)])
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[-1], device=x.device)
        h = self.tokens(x) + self.positions(positions)
        return self.head(self.ln(self.blocks(h)))


def token_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-sequence mean cross-entropy ``[B]`` of logits ``[B, T, V]`` against ``[B, T]``."""
    per_token = F.cross_entropy(outputs.flatten(0, 1), targets.flatten(), reduction="none")
    return per_token.view(targets.shape).mean(dim=-1)


def token_metrics(outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    loss = F.cross_entropy(outputs.flatten(0, 1), targets.flatten()).item()
    accuracy = (outputs.argmax(dim=-1) == targets).to(outputs.dtype).mean().item()
    return {"loss": loss, "perplexity": math.exp(min(loss, 50.0)), "accuracy": accuracy}


def _build(config: Mapping[str, Any]) -> nn.Module:
    return GPT(vocab=count(config, "vocab", 50304), width=count(config, "width", 256),
               layers=count(config, "layers", 6), heads=count(config, "heads", 8),
               seq_len=count(config, "seq_len", 128), dropout=dropout_rate(config))


GPT_WORKLOAD = Workload(
    name="gpt_lm", build=_build, data=token_data, per_sample_loss=token_loss,
    metrics=token_metrics, model_keys=("width", "layers", "heads"),
    data_keys=("train_size", "val_size", "seq_len", "vocab", "data"),
    defaults={"train_size": 512, "val_size": 16, "seq_len": 128, "vocab": 50304, "width": 256,
              "layers": 6, "heads": 8, "batch_size": 8, "data": "synthetic"},
    eval_batch=8, inputs="tokens")


def train_gpt(config: Mapping[str, Any], ctx: Any, precision: str = "fp32") -> None:
    """The GPT language model on synthetic token sequences (see the module docstring)."""
    fit(GPT_WORKLOAD, config, ctx, precision)


GPT_LM = SyntheticTask(GPT_WORKLOAD)
