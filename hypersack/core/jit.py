"""Optional machine-code compilation of the packers' inner loops, with numba.

``kernel(fn)`` returns ``fn`` compiled by numba (nopython mode, cached on disk beside its module)
when numba is installed (``pip install hypersack[fast]``; the dev and test set-up installs it),
and ``fn`` itself otherwise: the same source then runs as plain Python with the same answers,
only slower. A kernel takes and returns numpy arrays and scalars only, and must not depend on
anything numba and Python would do differently (no dicts or sets of mixed types, no Python
objects). numba's own ``NUMBA_DISABLE_JIT=1`` runs every kernel as Python (tests compare both).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])

_numba: Any
try:  # pragma: no cover - which branch runs depends on the machine's extras
    _numba = importlib.import_module("numba")
except ImportError:  # pragma: no cover
    _numba = None

#: True where kernels are compiled (numba importable and not disabled).
COMPILED = _numba is not None and not _numba.config.DISABLE_JIT


def kernel(fn: F) -> F:
    """``fn`` compiled by numba where it is installed, else ``fn`` unchanged (see the module)."""
    if _numba is None:
        return fn
    return cast(F, _numba.njit(cache=True, nogil=True)(fn))
