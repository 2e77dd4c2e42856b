"""The whole fused training step as one CUDA graph, captured once per step shape and replayed.

``StepRunner(step, mode, device)`` runs ``step(key)``, a function of persistent tensors only
(the stack's rows, its static ``pos`` / ``counts`` buffers and the data set): it reads and
writes them in place and returns nothing, so its kernels can be recorded once and replayed.
``key`` is what changes the recorded shapes (the padded batch width, whether rows are padded);
members joining or leaving only rewrite rows and masks, so they never force a new capture.

``mode``: "auto" (graphs on CUDA, eager elsewhere), "on" or "off". The first ``warmup`` steps
of a key run eagerly (on a side stream on CUDA, as capture requires); the next one is captured
and replayed, and every later one replays. A capture that fails turns graphs off for the stack
with one warning and that step runs eagerly: results never depend on the mode. ``capture`` is
injectable (tests drive the same logic on the CPU with a stand-in graph).
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Hashable, Protocol

import torch

from hypersack.core.packs import GRAPH_MODES
from hypersack.errors import ConfigError

__all__ = ["GRAPH_MODES", "StepRunner", "check_graphs"]



def check_graphs(mode: str) -> str:
    if mode not in GRAPH_MODES:
        raise ConfigError("pack.graphs", mode, f"must be one of {list(GRAPH_MODES)}")
    return mode


class Graph(Protocol):
    def replay(self) -> None: ...


_POOLS: dict[torch.device, Any] = {}


def cuda_capture(step: Callable[[Hashable], None], key: Hashable, device: torch.device) -> Graph:
    """Record ``step(key)`` into a new CUDA graph (its kernels do not run: replay them).

    The graphs of one device share one memory pool: they replay one at a time on one stream,
    and each reads only persistent tensors (none reads another's temporaries), so a pack
    holds one step's worth of activations however many shapes it has captured."""
    graph = torch.cuda.CUDAGraph()
    pool = _POOLS.get(device)
    if pool is None:
        pool = _POOLS[device] = torch.cuda.graph_pool_handle()
    with torch.cuda.graph(graph, pool=pool):
        step(key)
    return graph


class StepRunner:
    """Runs a stack's static step eagerly or as replayed graphs (see the module docstring)."""

    def __init__(self, step: Callable[[Hashable], None], mode: str, device: torch.device,
                 warmup: int = 2, capture: Callable[..., Graph] | None = None):
        check_graphs(mode)
        self.step, self.device, self.warmup = step, device, warmup
        self.enabled = mode == "on" or (mode == "auto" and device.type == "cuda")
        if self.enabled and capture is None and device.type != "cuda":
            raise ConfigError("pack.graphs", mode, f"needs a CUDA device (the pack is on {device})")
        self.capture = capture or cuda_capture
        self.graphs: dict[Hashable, Graph] = {}
        self.seen: dict[Hashable, int] = {}
        self.captures = 0

    def reset(self) -> None:
        """Forget every graph (the persistent tensors were replaced)."""
        self.graphs.clear()
        self.seen.clear()

    def __call__(self, key: Hashable) -> None:
        if not self.enabled:
            self.step(key)
            return
        graph = self.graphs.get(key)
        if graph is not None:
            graph.replay()
            return
        self.seen[key] = self.seen.get(key, 0) + 1
        if self.seen[key] <= self.warmup:
            self._eager_warmup(key)
            return
        try:
            graph = self.capture(self.step, key, self.device)
        except Exception as exc:     # any capture failure: eager from now on, same results
            self.enabled = False
            warnings.warn(f"fused pack: CUDA graph capture failed, running eagerly ({exc})",
                          RuntimeWarning, stacklevel=2)
            self.step(key)
            return
        self.graphs[key] = graph
        self.captures += 1
        graph.replay()

    def _eager_warmup(self, key: Hashable) -> None:
        if self.device.type != "cuda":
            self.step(key)
            return
        side: Any = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            self.step(key)
        torch.cuda.current_stream(self.device).wait_stream(side)
