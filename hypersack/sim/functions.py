"""Multi-fidelity test functions from their published formulas, for the simulator and the
search-quality benchmark (``benchmarks/quality/``). Python and numpy only: it imports nothing from
the package, so a peer's process (another virtual environment) can load it by path.

Each function is a callable ``f(config, step) -> float`` to MINIMISE, usable as a scenario's
``curves: {type: function, function: hypersack.sim.functions:hartmann6}``; ``step`` in
``1..max_fidelity`` is the fidelity (a trial's report step), ``config`` holds ``x0 .. x{d-1}``
within ``bounds``. Attributes: ``name``, ``dims``, ``bounds``, ``max_fidelity``, ``optimum``
(the global minimum at the top fidelity), ``argmin`` and ``space()`` (the study's search space).

* Hartmann 3 and 6 (Kandasamy et al. 2017, as ``mf-prior-bench``'s ``MFHartmann`` defines them):
  with ``s = log(z) / log(max_fidelity)`` in [0, 1],
  ``f(x, z) = -sum_i (alpha_i - bias * (1 - s)) * exp(-sum_j A_ij (x_j - P_ij)^2)
  + |N(0, 1)| * noise * (1 - s)``: at the top fidelity the plain Hartmann function, noise-free.
  ``mf-prior-bench``'s defaults are bias 0.5, noise 0.1 (``hartmann3``, ``hartmann6``); its "bad"
  preset, bias 3.5 and noise 4.0 (``hartmann6_bad``), turns the low fidelities upside down
  (every ``alpha_i - bias < 0`` at ``z = 1``): a function with poor low-fidelity correlation.
  The noise is a pure function of (seed, z, x), as there: the same query gives the same value.
* Branin (Kandasamy et al. 2017, BOCA, appendix): ``a (x1 - b(z) x0^2 + c(z) x0 - r)^2 +
  s (1 - t(z)) cos(x0) + s`` with ``b(z) = b - 0.01 (1 - z)``, ``c(z) = c - 0.1 (1 - z)``,
  ``t(z) = t + 0.05 (1 - z)``, the three fidelities of the paper tied to one, ``z = s`` above;
  ``x0`` in [-5, 10], ``x1`` in [0, 15]. Highly correlated fidelities, no noise.
"""
from __future__ import annotations

import math
import struct
import zlib
from statistics import NormalDist
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["MFHartmann", "MFBranin", "hartmann3", "hartmann6", "hartmann6_bad", "branin", "FUNCTIONS"]

_HARTMANN = {
    3: (np.array([[3.0, 10, 30], [0.1, 10, 35], [3.0, 10, 30], [0.1, 10, 35]]),
        1e-4 * np.array([[3689, 1170, 2673], [4699, 4387, 7470], [1091, 8732, 5547],
                         [381, 5743, 8828]], dtype=float),
        -3.86278214782076, (0.114614, 0.555649, 0.852547)),
    6: (np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                  [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]], dtype=float),
        1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                         [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]],
                        dtype=float),
        -3.32236801141551, (0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573)),
}
_ALPHA_LIST = [1.0, 1.2, 3.0, 3.2]


class _MFFunction:
    """Shared parts: the config's coordinates, the fidelity's log scale, the search space."""
    name: str
    dims: int
    bounds: tuple[tuple[float, float], ...]
    optimum: float
    argmin: tuple[float, ...]
    max_fidelity: int

    def __call__(self, config: Mapping[str, Any], step: int) -> float:
        keys = self.__dict__.get("_keys")
        if keys is None:
            keys = self.__dict__["_keys"] = [f"x{i}" for i in range(self.dims)]
        return self._value([float(config[k]) for k in keys], int(step))

    def value(self, x: Sequence[float], fidelity: int) -> float:
        """``f(x, fidelity)``: ``x`` the coordinates in order (a list or a numpy array)."""
        raise NotImplementedError

    def _value(self, xs: list[float], fidelity: int) -> float:
        """``value`` of coordinates that are floats already (subclasses may skip converting)."""
        return self.value(xs, fidelity)

    def scaled(self, fidelity: int) -> float:
        """``log(z) / log(max_fidelity)``, clipped to [0, 1] (1 at and above the top)."""
        z = min(max(int(fidelity), 1), self.max_fidelity)
        return math.log(z) / math.log(self.max_fidelity) if self.max_fidelity > 1 else 1.0

    def _gap(self, fidelity: int) -> float:
        """``1 - scaled(fidelity)``, remembered per fidelity (a simulation asks the same few)."""
        gaps = self.__dict__.setdefault("_gaps", {})
        gap = gaps.get(fidelity)
        if gap is None:
            gap = gaps[fidelity] = 1.0 - self.scaled(fidelity)
        return gap

    def space(self) -> dict[str, dict[str, Any]]:
        return {f"x{i}": {"type": "float", "low": lo, "high": hi}
                for i, (lo, hi) in enumerate(self.bounds)}

    def __repr__(self) -> str:
        return f"<{self.name}: {self.dims}-d, fidelity 1..{self.max_fidelity}>"


class MFHartmann(_MFFunction):
    """Hartmann ``dims`` (3 or 6) with a fidelity ``1..max_fidelity`` (module docstring)."""

    def __init__(self, dims: int = 6, bias: float = 0.5, noise: float = 0.1,
                 max_fidelity: int = 100, seed: int = 1337, name: str | None = None):
        if dims not in _HARTMANN:
            raise ValueError(f"MFHartmann dims={dims!r}: must be 3 or 6")
        if int(max_fidelity) < 1 or bias < 0 or noise < 0:
            raise ValueError(f"MFHartmann max_fidelity={max_fidelity!r}, bias={bias!r}, "
                             f"noise={noise!r}: need max_fidelity >= 1, bias and noise >= 0")
        self.dims, self.bias, self.noise = dims, float(bias), float(noise)
        self.max_fidelity, self.seed = int(max_fidelity), int(seed)
        a, p, self.optimum, self.argmin = _HARTMANN[dims]
        self._a_rows, self._p_rows = a.tolist(), p.tolist()     # plain floats: faster than numpy here
        self._rows = [(alpha, tuple(a_row), tuple(p_row))
                      for alpha, a_row, p_row in zip(_ALPHA_LIST, self._a_rows, self._p_rows)]
        self.bounds = ((0.0, 1.0),) * dims
        self.name = name or f"hartmann{dims}"

    def value(self, x: Sequence[float], fidelity: int) -> float:
        return self._value([float(v) for v in x], fidelity)

    def _value(self, xs: list[float], fidelity: int) -> float:
        """``value`` of coordinates that are floats already."""
        gap = self._gap(fidelity)
        h = 0.0
        bias_gap, exp = self.bias * gap, math.exp
        if self.dims == 6:            # written out: the same sums in the same order, 3x faster
            x0, x1, x2, x3, x4, x5 = xs
            for alpha, (a0, a1, a2, a3, a4, a5), (p0, p1, p2, p3, p4, p5) in self._rows:
                inner = (a0 * (x0 - p0) ** 2 + a1 * (x1 - p1) ** 2 + a2 * (x2 - p2) ** 2
                         + a3 * (x3 - p3) ** 2 + a4 * (x4 - p4) ** 2 + a5 * (x5 - p5) ** 2)
                h -= (alpha - bias_gap) * exp(-inner)
        else:
            for alpha, a_row, p_row in self._rows:
                inner = sum(a * (xi - p) ** 2 for a, xi, p in zip(a_row, xs, p_row))
                h -= (alpha - bias_gap) * exp(-inner)
        if self.noise > 0 and gap > 0:
            h += abs(_normal(self.seed, int(fidelity), xs)) * self.noise * gap
        return h


class MFBranin(_MFFunction):
    """Branin with one fidelity ``1..max_fidelity`` (module docstring)."""

    def __init__(self, max_fidelity: int = 100, name: str = "branin"):
        if int(max_fidelity) < 1:
            raise ValueError(f"MFBranin max_fidelity={max_fidelity!r}: must be >= 1")
        self.dims, self.max_fidelity, self.name = 2, int(max_fidelity), name
        self.bounds = ((-5.0, 10.0), (0.0, 15.0))
        self.optimum, self.argmin = 0.397887357729738, (math.pi, 2.275)

    def value(self, x: Sequence[float], fidelity: int) -> float:
        gap = 1.0 - self.scaled(fidelity)
        b = 5.1 / (4 * math.pi ** 2) - 0.01 * gap
        c = 5 / math.pi - 0.1 * gap
        t = 1 / (8 * math.pi) + 0.05 * gap
        x0, x1 = float(x[0]), float(x[1])
        return (x1 - b * x0 * x0 + c * x0 - 6.0) ** 2 + 10.0 * (1 - t) * math.cos(x0) + 10.0


def _normal(seed: int, fidelity: int, x: Sequence[float]) -> float:
    """A standard normal draw that is a pure function of (seed, fidelity, x): a 32-bit hash of
    x's float64 bytes through the normal's inverse CDF (cheaper than seeding a generator)."""
    start = _STARTS.get((seed, fidelity))
    if start is None:
        if len(_STARTS) > 4096:
            _STARTS.clear()
        start = _STARTS[(seed, fidelity)] = zlib.crc32(f"{seed}:{fidelity}".encode())
    key = zlib.crc32(struct.pack(f"<{len(x)}d", *x), start)
    return _STANDARD.inv_cdf((key + 0.5) / 2.0 ** 32)


_STARTS: dict[tuple[int, int], int] = {}     # (seed, fidelity) -> the crc32 the hash starts from


_STANDARD = NormalDist()

hartmann3 = MFHartmann(3)
hartmann6 = MFHartmann(6)
hartmann6_bad = MFHartmann(6, bias=3.5, noise=4.0, name="hartmann6_bad")
branin = MFBranin()

FUNCTIONS: dict[str, _MFFunction] = {f.name: f for f in (hartmann3, hartmann6, branin, hartmann6_bad)}


def check_optimum(f: _MFFunction, points: Sequence[Sequence[float]] = ()) -> float:
    """``f`` at its ``argmin`` at the top fidelity (a self-check of the published constants)."""
    return f.value(list(points[0] if points else f.argmin), f.max_fidelity)
