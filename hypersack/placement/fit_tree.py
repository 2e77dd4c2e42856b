"""A max-tree over GPUs for placing one job at a time in about O(log G): the index behind
``placement.live``.

Each leaf is one GPU with three numbers read from caller-owned arrays: compute ``c[i]``, memory
``m[i]`` (per GPU) and cores ``q[node[i]]`` (per node). Each inner node holds the maxima of its
subtree, so a subtree where no GPU has enough of one of them is skipped whole (branch and bound).
A GPU "fits" a demand (c, m, q) in ``Load.fits``'s comparisons: compute ``c[i] + EPS >= c``,
memory ``m[i] + EPS >= m``, cores ``q[node[i]] + EPS >= q``.

The owner changes the arrays and then calls ``refresh`` with the positions of the GPUs it touched
(a node's cores touch all of its GPUs); queries change nothing but ``missed``. Cores may be left
*stale-high* in the tree (a node's cores went down and only some of its GPUs were refreshed, or
the tree reads a per-node upper bound, ``q``, while the true cores are ``check_q``): the maxima
are then still upper bounds, so no fitting GPU is pruned, and the queries check a leaf's cores in
``check_q`` itself (``fitting_in_order`` leaves that check to its caller). A leaf turned away by
that check appends its node to ``missed`` (the owner may then bring that node's cores in the tree
down to the truth, so the next search prunes it). ``fitting_in_order`` lists the fitting GPUs of
several trees lazily, best first, for data-parallel jobs.
"""
from __future__ import annotations

import heapq
from typing import Iterator, Sequence

from hypersack.placement.model import EPS

__all__ = ["FitTree", "fitting_in_order"]

_NEG = float("-inf")


class FitTree:
    """Over ``members`` (GPU numbers, in first-fit order; position p holds ``members[p]``)."""

    def __init__(self, members: Sequence[int], c: list[float], m: list[float], q: list[float],
                 node: Sequence[int], check_q: Sequence[float] | None = None,
                 missed: list[int] | None = None):
        """``q``: the per-node cores the tree holds (at least the true ones, ``check_q``,
        default ``q`` itself); ``missed``: where queries note the nodes of leaves that ``check_q``
        turned away (a list the owner may share between trees)."""
        size = 1
        while size < max(1, len(members)):
            size *= 2
        self.members, self.size = list(members), size
        self._src = (c, m, q, node)
        self._check_q = q if check_q is None else check_q
        self.missed: list[int] = [] if missed is None else missed
        self.c, self.m, self.q = [_NEG] * (2 * size), [_NEG] * (2 * size), [_NEG] * (2 * size)
        self.lo = list(range(-size, size))           # the first position under each subtree
        for k in range(size - 1, 0, -1):
            self.lo[k] = self.lo[2 * k]
        self.refresh(range(len(self.members)))

    def refresh(self, positions: Sequence[int]) -> None:
        """Re-read the GPUs at ``positions`` from the arrays and fix the maxima above them (a
        parent whose maxima did not change stops the climb on its branch)."""
        size, members = self.size, self.members
        c, m, q = self.c, self.m, self.q
        src_c, src_m, src_q, node = self._src
        if len(positions) == 1:                   # one GPU (a take): climb one path
            for p in positions:
                i, k = members[p], p + size
                c[k], m[k], q[k] = src_c[i], src_m[i], src_q[node[i]]
                k >>= 1
                while k:
                    a, b = 2 * k, 2 * k + 1
                    nc = c[a] if c[a] >= c[b] else c[b]
                    nm = m[a] if m[a] >= m[b] else m[b]
                    nq = q[a] if q[a] >= q[b] else q[b]
                    if nc == c[k] and nm == m[k] and nq == q[k]:
                        return
                    c[k], m[k], q[k] = nc, nm, nq
                    k >>= 1
            return
        if not positions:
            return
        lo, hi = min(positions), max(positions)
        if hi - lo < 2 * len(positions):          # a run (a node's GPUs): re-read all of it
            self._refresh_run(lo, hi)
            return
        for p in positions:
            i, k = members[p], p + size
            c[k], m[k], q[k] = src_c[i], src_m[i], src_q[node[i]]
        level = sorted({(p + size) >> 1 for p in positions})
        while level:
            up: list[int] = []
            for k in level:
                a, b = 2 * k, 2 * k + 1
                nc = c[a] if c[a] >= c[b] else c[b]
                nm = m[a] if m[a] >= m[b] else m[b]
                nq = q[a] if q[a] >= q[b] else q[b]
                if nc == c[k] and nm == m[k] and nq == q[k]:
                    continue
                c[k], m[k], q[k] = nc, nm, nq
                if k > 1 and (not up or up[-1] != k >> 1):
                    up.append(k >> 1)
            level = up

    def grow(self, positions: Sequence[int]) -> None:
        """``refresh`` for GPUs whose three numbers only went up (or stayed) since they were
        last read (a release): each ancestor rises to the new leaf, and a climb stops at the
        first ancestor already as high; for a node's GPUs, which share their new cores, all but
        the first climb stop within a level or two."""
        size, members = self.size, self.members
        c, m, q = self.c, self.m, self.q
        src_c, src_m, src_q, node = self._src
        for p in positions:
            i, k = members[p], p + size
            vc, vm, vq = src_c[i], src_m[i], src_q[node[i]]
            c[k], m[k], q[k] = vc, vm, vq
            k >>= 1
            while k:
                up = False
                if c[k] < vc:
                    c[k], up = vc, True
                if m[k] < vm:
                    m[k], up = vm, True
                if q[k] < vq:
                    q[k], up = vq, True
                if not up:
                    break
                k >>= 1

    def _refresh_run(self, lo: int, hi: int) -> None:
        """``refresh`` of every position from ``lo`` to ``hi``: level by level, each level's
        changed nodes a run again (re-reading a GPU that did not change is harmless)."""
        size, members = self.size, self.members
        c, m, q = self.c, self.m, self.q
        src_c, src_m, src_q, node = self._src
        for p in range(lo, hi + 1):
            i, k = members[p], p + size
            c[k], m[k], q[k] = src_c[i], src_m[i], src_q[node[i]]
        a, b = (lo + size) >> 1, (hi + size) >> 1
        while a:
            first = last = 0
            for k in range(a, b + 1):
                x, y = 2 * k, 2 * k + 1
                nc = c[x] if c[x] >= c[y] else c[y]
                nm = m[x] if m[x] >= m[y] else m[y]
                nq = q[x] if q[x] >= q[y] else q[y]
                if nc == c[k] and nm == m[k] and nq == q[k]:
                    continue
                c[k], m[k], q[k] = nc, nm, nq
                if not first:
                    first = k
                last = k
            if not first:
                return
            a, b = first >> 1, last >> 1

    def worst(self, c: float, m: float, q: float) -> int | None:
        """The fitting GPU with the most compute (ties: the first), or None."""
        tc, tm, tq, lo, size = self.c, self.m, self.q, self.lo, self.size
        src_q, node = self._check_q, self._src[3]
        if tc[1] + EPS < c or tm[1] + EPS < m or tq[1] + EPS < q:
            return None
        k = 1                                     # fast path: the GPU with the most compute
        while k < size:
            k = 2 * k if tc[2 * k] >= tc[2 * k + 1] else 2 * k + 1
        i = self.members[k - size]
        if tm[k] + EPS >= m and src_q[node[i]] + EPS >= q:
            return i                              # (the leftmost of the maxima: ties go left)
        best_v, best_p = _NEG, None
        stack = [1]
        while stack:
            k = stack.pop()
            v = tc[k]
            if v + EPS < c or tm[k] + EPS < m or tq[k] + EPS < q:
                continue
            if best_p is not None and (v < best_v or (v == best_v and lo[k] > best_p)):
                continue
            if k >= size:
                i = self.members[k - size]
                if src_q[node[i]] + EPS < q:      # the leaf's cores may be stale-high (see doc)
                    self.missed.append(node[i])
                    continue
                best_v, best_p = v, k - size
                continue
            a, b = 2 * k, 2 * k + 1
            if tc[b] > tc[a]:
                stack += (a, b)                   # the richer child is searched first
            else:
                stack += (b, a)
        return None if best_p is None else self.members[best_p]

    def first(self, c: float, m: float, q: float) -> int | None:
        """The first fitting GPU (lowest position), or None."""
        tc, tm, tq, size = self.c, self.m, self.q, self.size
        src_q, node = self._check_q, self._src[3]
        stack = [1]
        while stack:
            k = stack.pop()
            if tc[k] + EPS < c or tm[k] + EPS < m or tq[k] + EPS < q:
                continue
            if k >= size:
                i = self.members[k - size]
                if src_q[node[i]] + EPS < q:      # the leaf's cores may be stale-high (see doc)
                    self.missed.append(node[i])
                    continue
                return i
            stack += (2 * k + 1, 2 * k)
        return None


def fitting_in_order(parts: Sequence[tuple[FitTree, float, float]], q: float,
                     worst: bool) -> Iterator[int]:
    """The GPUs that fit, compute compared as ``c[i] + EPS >= c``, over ``parts``
    (``(tree, c, m)``: one tree per architecture with that architecture's demand), lazily in
    worst-fit order (most compute first, ties: lower GPU number) or first-fit order (GPU
    number). Best-first search: a subtree's bound is its max compute and first GPU, never
    better than a GPU inside it, so GPUs come out in exact order; O(log G) per GPU listed."""
    heap: list[tuple] = []

    def push(t: int, k: int) -> None:
        tree, c, m = parts[t]
        if tree.c[k] + EPS < c or tree.m[k] + EPS < m or tree.q[k] + EPS < q:
            return
        first = tree.members[tree.lo[k]]
        heapq.heappush(heap, ((-tree.c[k], first) if worst else (first,), t, k))

    for t in range(len(parts)):
        push(t, 1)
    while heap:
        _, t, k = heapq.heappop(heap)
        tree = parts[t][0]
        if k >= tree.size:
            yield tree.members[k - tree.size]
            continue
        push(t, 2 * k)
        push(t, 2 * k + 1)
