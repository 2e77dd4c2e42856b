"""The whole fused training step as one CUDA graph, captured once per step shape and replayed.

``StepRunner(step, mode, device)`` runs ``step(key)``, a function of persistent tensors only
(the stack's rows, its static ``pos`` / ``counts`` buffers and the data set): it reads and
writes them in place and returns nothing, so its kernels can be recorded once and replayed.
``key`` is what changes the recorded shapes (the padded batch width, whether rows are padded);
members joining or leaving only rewrite rows and masks, so they never force a new capture.

Graphs are cached by key, at most ``max_graphs`` (least recently replayed first out). A graph
reads the persistent tensors by address, so nothing it reads may be freed while it lives: the
stack's rows live until ``reset`` (which drops every graph), and a tensor made outside the
step but read inside it (a cached constant such as ``layers``' dropout offsets) is handed to
``keep_alive`` while the step is captured, which ties it to that graph's entry. A cache must
not keep a tensor made *during* a capture (``capturing()``): its kernels ran only as recorded,
so after a failed capture it holds garbage, and it lives in the graph's private pool.

Memory pools. A runner's graphs share one private pool (they replay one at a time on one
stream and read only persistent tensors, so a pack holds one step's activations however many
shapes it captured). The pool is the runner's own and is renewed whenever the runner holds no
graph (its first capture, after ``reset``): PyTorch's allocator asserts
(``CUDACachingAllocator``: ``it->second->use_count > 0``) when a capture begins on a pool
whose graphs were all destroyed while the pool still holds memory, which a pool shared by
every pack of a process (a benchmark running one pack after another) or reused after
``reset`` meets. An evicted graph goes only after its replacement is captured, so the pool
never loses its last graph while the runner is still capturing into it.

``mode``: "auto" (graphs on CUDA, eager elsewhere), "on" or "off". The first ``warmup`` steps
of a key run eagerly (on a side stream on CUDA, as capture requires); the next one is captured
and replayed, and every later one replays. A capture that fails turns graphs off for the stack
with one warning and that step runs eagerly: results never depend on the mode. ``capture`` is
injectable (tests drive the same logic on the CPU with a stand-in graph).
"""
from __future__ import annotations

import contextlib
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator, Protocol

import torch

from hypersack.core.packs import GRAPH_MODES
from hypersack.errors import ConfigError

__all__ = ["GRAPH_MODES", "StepRunner", "capturing", "check_graphs", "keep_alive"]

_HELD: list[list[Any]] = []      # the tensors of the captures in progress (innermost last)


def keep_alive(tensor: torch.Tensor) -> torch.Tensor:
    """Tie ``tensor`` to the graph being captured, if any (it then lives as long as that
    graph's cache entry); returns it."""
    if _HELD:
        _HELD[-1].append(tensor)
    return tensor


def capturing() -> bool:
    """Whether a ``StepRunner`` is capturing a step now (a cache must not keep what it makes)."""
    return bool(_HELD)


@contextlib.contextmanager
def _holding() -> Iterator[list[Any]]:
    held: list[Any] = []
    _HELD.append(held)
    try:
        yield held
    finally:
        _HELD.pop()



def check_graphs(mode: str) -> str:
    if mode not in GRAPH_MODES:
        raise ConfigError("pack.graphs", mode, f"must be one of {list(GRAPH_MODES)}")
    return mode


class Graph(Protocol):
    def replay(self) -> None: ...


def new_pool(device: torch.device) -> Any:
    """A fresh private memory pool for the graphs of one runner (a token off CUDA)."""
    return torch.cuda.graph_pool_handle() if device.type == "cuda" else object()


def cuda_capture(step: Callable[[Hashable], None], key: Hashable, device: torch.device,
                 pool: Any) -> Graph:
    """Record ``step(key)`` into a new CUDA graph allocating from ``pool`` (its kernels do not
    run: replay them)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        step(key)
    return graph


@dataclass
class _Entry:
    graph: Graph
    held: list[Any] = field(default_factory=list)   # tensors made outside, read by the graph


class StepRunner:
    """Runs a stack's static step eagerly or as replayed graphs (see the module docstring).
    ``captures`` counts the graphs captured (evicted or reset ones included)."""

    def __init__(self, step: Callable[[Hashable], None], mode: str, device: torch.device,
                 warmup: int = 2, capture: Callable[..., Graph] | None = None,
                 max_graphs: int = 8, pools: Callable[[torch.device], Any] = new_pool):
        """``capture(step, key, device, pool)`` records a graph (default ``cuda_capture``);
        ``pools(device)`` makes a pool handle (default ``new_pool``)."""
        check_graphs(mode)
        self.step, self.device, self.warmup = step, device, warmup
        self.enabled = mode == "on" or (mode == "auto" and device.type == "cuda")
        if self.enabled and capture is None and device.type != "cuda":
            raise ConfigError("pack.graphs", mode, f"needs a CUDA device (the pack is on {device})")
        self.capture = capture or cuda_capture
        self.pools, self.pool = pools, None
        self.max_graphs = max(1, max_graphs)
        self.graphs: OrderedDict[Hashable, _Entry] = OrderedDict()
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
        entry = self.graphs.get(key)
        if entry is not None:
            self.graphs.move_to_end(key)
            entry.graph.replay()
            return
        self.seen[key] = self.seen.get(key, 0) + 1
        if self.seen[key] <= self.warmup:
            self._eager_warmup(key)
            return
        if not self.graphs:       # no graph holds the pool: a fresh one (module docstring)
            self.pool = self.pools(self.device)
        try:
            with _holding() as held:
                graph = self.capture(self.step, key, self.device, self.pool)
        except Exception as exc:     # any capture failure: eager from now on, same results
            self.enabled = False
            warnings.warn(f"fused pack: CUDA graph capture failed, running eagerly ({exc})",
                          RuntimeWarning, stacklevel=2)
            self.step(key)
            return
        while len(self.graphs) >= self.max_graphs:
            old, _ = self.graphs.popitem(last=False)    # least recently replayed
            self.seen.pop(old, None)
        self.graphs[key] = _Entry(graph, held)
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
