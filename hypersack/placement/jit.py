"""Optional machine-code compilation of the placement policies' inner loops, with numba.

``kernel(fn)`` returns ``fn`` compiled by numba (nopython mode, cached on disk beside its module)
when numba is installed (``pip install hypersack[fast]``; the dev and test set-up installs it),
and ``fn`` itself otherwise: the same source then runs as plain Python with the same answers,
only slower. A kernel takes and returns numpy arrays and scalars only, and must not depend on
anything numba and Python would do differently (no dicts or sets of mixed types, no Python
objects). numba's own ``NUMBA_DISABLE_JIT=1`` runs every kernel as Python (tests compare both).

Importing this module does not import numba (about 0.3-0.5 s of CPU): ``kernel`` does, so a
module of kernels is imported only where it is used (``fill`` and ``lagrange`` import theirs on
first use), and a driver or worker that never packs that way never pays for numba.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])

#: True where kernels are compiled: numba is installed and NUMBA_DISABLE_JIT is not set.
COMPILED = (importlib.util.find_spec("numba") is not None
            and os.environ.get("NUMBA_DISABLE_JIT", "0").strip() in ("", "0"))


_warned: set[str] = set()


def warn_interpreted(what: str, size: int, threshold: int) -> None:
    """Warn once per process (``RuntimeWarning``) that ``what`` runs its kernels as plain Python,
    when ``size`` (the call's work, e.g. jobs x GPUs) is at least ``threshold``: such a call is
    10-100x slower than compiled, and the warning names the remedy."""
    if COMPILED or size < threshold or what in _warned:
        return
    _warned.add(what)
    warnings.warn(f"{what} runs as plain Python (numba is not installed or NUMBA_DISABLE_JIT is set): "
                  f"at this size ({size:,}) it is 10-100x slower than compiled; "
                  "pip install hypersack[fast]", RuntimeWarning, stacklevel=3)


def kernel(fn: F) -> F:
    """``fn`` compiled by numba where it is installed, else ``fn`` unchanged (see the module)."""
    if importlib.util.find_spec("numba") is None:
        return fn
    numba: Any = importlib.import_module("numba")
    return cast(F, numba.njit(cache=True, nogil=True)(fn))


def inline_kernel(fn: F) -> F:
    """``kernel`` for a small helper of other kernels: numba inlines it into each caller (no
    call, no reference counting of its array arguments per call); ``fn`` itself without numba."""
    if importlib.util.find_spec("numba") is None:
        return fn
    numba: Any = importlib.import_module("numba")
    return cast(F, numba.njit(cache=True, nogil=True, inline="always")(fn))
