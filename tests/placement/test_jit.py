"""hypersack.placement.jit: a kernel gives the same answers compiled and as plain Python."""
from __future__ import annotations

import numpy as np
import pytest

from hypersack.placement import jit


def _total_of_positive(values: np.ndarray) -> float:
    total = 0.0
    for value in values:
        if value > 0:
            total += value
    return total


def test_kernel_answers_as_the_python_function() -> None:
    compiled = jit.kernel(_total_of_positive)
    values = np.array([1.5, -2.0, 3.0, 0.0])
    assert compiled(values) == _total_of_positive(values) == 4.5


def test_kernel_is_compiled_where_numba_is_installed() -> None:
    numba = pytest.importorskip("numba")
    compiled = jit.kernel(_total_of_positive)
    assert jit.COMPILED == (not numba.config.DISABLE_JIT)
    if jit.COMPILED:
        assert compiled is not _total_of_positive and hasattr(compiled, "py_func")


def test_an_interpreted_kernel_warns_once_from_its_threshold_and_names_the_extra(monkeypatch) -> None:
    monkeypatch.setattr(jit, "COMPILED", False)
    monkeypatch.setattr(jit, "_warned", set())
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jit.warn_interpreted("placement fill", 1_999, 2_000)      # below the threshold: quiet
        jit.warn_interpreted("placement fill", 2_000, 2_000)
        jit.warn_interpreted("placement fill", 9_000, 2_000)      # once per process
    assert len(caught) == 1 and issubclass(caught[0].category, RuntimeWarning)
    assert "placement fill" in str(caught[0].message) and "hypersack[fast]" in str(caught[0].message)
    monkeypatch.setattr(jit, "COMPILED", True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jit.warn_interpreted("placement lagrange", 10**9, 1)
    assert caught == []


def test_importing_the_placement_policies_does_not_import_numba() -> None:
    import subprocess
    import sys
    code = ("import sys, hypersack.placement, hypersack.placement.jit, hypersack.study; "
            "print('numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"      # numba (0.3-0.5 s) only where a kernel module is used
