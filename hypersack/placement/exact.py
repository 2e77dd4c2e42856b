"""Exact sums of floats, rounded once: how a GPU's and a node's load are added up.

A load is the sum of its jobs' demands (compute, memory per GPU; cores per node). Summed in
floating point the result depends on the order of the terms (``0.1 + 0.2 - 0.2 != 0.1``), so a
load kept by adding and subtracting would drift from one summed anew. Here a sum is kept exactly,
as an integer count of ``2**-1074`` (every finite float is a whole number of those), and read as
the float nearest to it (``rounded``, ties to even): the load of a GPU is a function of the set of
its jobs alone, whatever the order they came and went in, and adding or removing a job costs O(1).

``units(x)`` converts one non-negative finite float (demands are checked to be such); results are
cached per value, so a study's few distinct demands are converted once. ``rounded`` is cached per
sum the same way (a study's loads take few distinct values; a lookup costs a seventh of the
division of two 1,100-bit integers).
"""
from __future__ import annotations

__all__ = ["units", "rounded"]

_SCALE = 1 << 1074                       # 2**1074: units per 1.0
_CACHE: dict[float, int] = {}
_ROUNDED: dict[int, float] = {}           # exact sum -> its float (``rounded``), bounded


def units(x: float) -> int:
    """``x`` (a finite float) as an exact whole number of ``2**-1074``."""
    found = _CACHE.get(x)
    if found is None:
        p, q = float(x).as_integer_ratio()     # q is a power of two <= 2**1074
        found = p * (_SCALE // q)
        if len(_CACHE) >= 4096:
            _CACHE.clear()
        _CACHE[x] = found
    return found


def rounded(n: int) -> float:
    """The float nearest to ``n * 2**-1074`` (ties to even; +-inf beyond the float range)."""
    found = _ROUNDED.get(n)
    if found is None:
        found = _rounded(n)
        if len(_ROUNDED) >= 4096:
            _ROUNDED.clear()
        _ROUNDED[n] = found
    return found


def _rounded(n: int) -> float:
    if not n:
        return 0.0
    try:
        return n / _SCALE                      # int / int is correctly rounded in Python
    except OverflowError:
        return float("inf") if n > 0 else float("-inf")
