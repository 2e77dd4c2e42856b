"""The report's series, computed from plain data: pure functions, no I/O, no plotting.

Every time here is in seconds on one axis chosen by the caller (the report uses seconds since
the study's first launch). Values follow the study's objective: ``mode`` is "min" or "max".
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from hypersack.core.stays import Stay

__all__ = ["best_so_far", "downsample", "learning_curves", "lanes", "occupancy", "occupancy_mean",
           "importance", "parallel_coordinates", "slices", "edf", "contour_params", "contour_grid",
           "LaneBar"]


def best_so_far(points: Iterable[tuple[float, float, int]], mode: str) -> list[tuple[float, float, int]]:
    """``(t, best value, trial id)`` each time the best value improved, in time order.

    ``points``: ``(t, value, trial_id)`` of the trials that count (each trial's value and when
    it was reached); non-finite values are skipped. Ties in time keep input order. The values
    returned are strictly better one after another (monotone: never worse)."""
    sign = 1.0 if mode == "min" else -1.0
    out: list[tuple[float, float, int]] = []
    for t, value, trial_id in sorted(points, key=lambda p: p[0]):
        if value is None or not math.isfinite(value):
            continue
        if not out or sign * value < sign * out[-1][1]:
            out.append((t, float(value), trial_id))
    return out


def downsample(xs: Sequence[float], ys: Sequence[float], n: int) -> tuple[list[float], list[float]]:
    """At most ``n`` (>= 2) points of a curve: the first and the last, and in each of the
    buckets between them the point furthest from the bucket's mean (peaks and dips stay)."""
    if n < 2:
        raise ValueError(f"n must be >= 2, got {n}")
    if len(xs) <= n:
        return list(xs), list(ys)
    keep = [0]
    inner = n - 2
    span = (len(xs) - 2) / inner
    for b in range(inner):
        lo, hi = 1 + int(b * span), 1 + int((b + 1) * span)
        hi = max(hi, lo + 1)
        mean = sum(ys[lo:hi]) / (hi - lo)
        keep.append(max(range(lo, hi), key=lambda i: abs(ys[i] - mean)))
    keep.append(len(xs) - 1)
    return [xs[i] for i in keep], [ys[i] for i in keep]


def learning_curves(results: Iterable[tuple[int, float, Any]], *, per_curve: int = 60,
                    total: int = 120_000) -> dict[int, tuple[list[float], list[float]]]:
    """Per trial, ``(steps, values)`` by step, down-sampled so that a curve has at most
    ``per_curve`` points and all curves together about ``total`` (never fewer than 2 per curve).
    ``results``: ``(trial_id, step, value)`` of the metric drawn; a missing (None), non-numeric
    or non-finite value is skipped."""
    curves: dict[int, tuple[list[float], list[float]]] = {}
    for trial_id, step, value in results:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            xs, ys = curves.setdefault(trial_id, ([], []))
            xs.append(step)
            ys.append(float(value))
    if not curves:
        return {}
    budget = max(2, min(per_curve, total // len(curves)))
    out = {}
    for trial_id, (xs, ys) in curves.items():
        if any(b < a for a, b in zip(xs, xs[1:])):
            order = sorted(range(len(xs)), key=xs.__getitem__)
            xs, ys = [xs[i] for i in order], [ys[i] for i in order]
        out[trial_id] = downsample(xs, ys, budget)
    return out


@dataclass(frozen=True)
class LaneBar:
    """A stay drawn on its device's row: ``lane`` 0.. separates co-located stays."""
    device: str
    lane: int
    start: float
    end: float
    stay: Any          # a Stay, or a PackStay (a fused pack drawn as one)


def _device(stay: Stay) -> str:
    return f"{stay.node}/{stay.gpu}"


def _ends(stays: Iterable[Any], now: float) -> list[tuple[Any, float, float]]:
    """Each stay with its start and end; an open stay ends at ``now`` (never before its start)."""
    return [(s, s.start, max(s.start, now if s.end is None else s.end)) for s in stays]


@dataclass(frozen=True)
class PackStay:
    """A fused pack's time on one device, drawn as one stay: from its first member's launch to
    its last member's end (None while one runs); ``members``: each member's stay, by start."""
    members: tuple[Stay, ...]

    def __getattr__(self, name: str) -> Any:        # trial_id, attempt, node, gpu, share, pack, ...
        return getattr(self.members[0], name)

    @property
    def start(self) -> float:
        return min(m.start for m in self.members)

    @property
    def end(self) -> float | None:
        ends = [m.end for m in self.members]
        return None if None in ends else max(e for e in ends if e is not None)

    @property
    def outcome(self) -> Any:
        """The pack's last member's outcome (None while one runs)."""
        if self.end is None:
            return None
        return max(self.members, key=lambda m: m.end or 0.0).outcome


def pack_stays(stays: Iterable[Stay]) -> list[Stay | PackStay]:
    """``stays`` with each fused pack's members on a device merged into one ``PackStay`` (a
    pack that ran again later, after all its members had left, is another one); plain stays
    as they are, in order of start."""
    out: list[Any] = []
    open_packs: dict[tuple[str, Any], list[Stay]] = {}
    for stay in sorted(stays, key=lambda s: (s.start, s.trial_id)):
        if stay.pack is None:
            out.append(stay)
            continue
        key = (_device(stay), stay.pack)
        group = open_packs.get(key)
        ends = [m.end for m in group] if group else []
        if group is None or (None not in ends and stay.start > max(e for e in ends if e is not None)):
            group = open_packs[key] = []
            out.append(group)
        group.append(stay)
    return [PackStay(tuple(item)) if isinstance(item, list) else item for item in out]


def lanes(stays: Iterable[Stay | PackStay], now: float) -> list[LaneBar]:
    """Bars of a per-GPU timeline: on each device, stays that overlap in time get different
    lanes (lowest free lane first, so the lanes of one device never overlap and a device uses
    as many lanes as it ever held trials at once). Members of one pack starting together get
    neighbouring lanes. Open stays end at ``now``."""
    by_device: dict[str, list[tuple[Stay, float, float]]] = {}
    for item in _ends(stays, now):
        by_device.setdefault(_device(item[0]), []).append(item)
    out: list[LaneBar] = []
    for device in sorted(by_device):
        lane_end: list[float] = []          # when each lane becomes free
        for stay, start, end in sorted(by_device[device],
                                       key=lambda i: (i[1], str(i[0].pack), i[0].trial_id)):
            lane = next((k for k, free in enumerate(lane_end) if free <= start), len(lane_end))
            if lane == len(lane_end):
                lane_end.append(end)
            else:
                lane_end[lane] = end
            out.append(LaneBar(device, lane, start, end, stay))
    return out


def occupancy(stays: Iterable[Stay], now: float) -> dict[str, tuple[list[float], list[float]]]:
    """Per device, the allocated compute in percent as a step function ``(times, levels)``:
    ``levels[i]`` holds from ``times[i]`` to ``times[i + 1]`` (the last level is 0). The sum of
    the stays' shares active at each time; its integral equals sum(share x duration)."""
    deltas: dict[str, dict[float, float]] = {}
    for stay, start, end in _ends(stays, now):
        if end <= start:
            continue
        d = deltas.setdefault(_device(stay), {})
        d[start] = d.get(start, 0.0) + stay.share
        d[end] = d.get(end, 0.0) - stay.share
    out = {}
    for device, changes in sorted(deltas.items()):
        times, levels, level = [], [], 0.0
        for t in sorted(changes):
            level += changes[t]
            times.append(t)
            levels.append(0.0 if abs(level) < 1e-9 else level)
        out[device] = (times, levels)
    return out


def occupancy_mean(series: Mapping[str, tuple[list[float], list[float]]], start: float,
                   end: float) -> dict[str, float]:
    """Per device, the mean allocated compute (percent) over ``[start, end]``."""
    span = end - start
    out = {}
    for device, (times, levels) in series.items():
        area = 0.0
        for i in range(len(times) - 1):
            lo, hi = max(times[i], start), min(times[i + 1], end)
            if hi > lo:
                area += levels[i] * (hi - lo)
        out[device] = area / span if span > 0 else 0.0
    return out


def _common_keys(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The parameters every config has, sorted."""
    if not configs:
        return []
    common = set(configs[0])
    for c in configs[1:]:
        common.intersection_update(c)
    return sorted(common)


def _encode(values: Sequence[Any]) -> tuple[list[float], list[str] | None]:
    """Numbers as they are (bools as 0/1); anything else as category codes, with their labels."""
    if all(isinstance(v, (int, float)) for v in values):
        return [float(v) for v in values], None
    labels = sorted({str(v) for v in values})
    index = {label: i for i, label in enumerate(labels)}
    return [float(index[str(v)]) for v in values], labels


def importance(configs: Sequence[Mapping[str, Any]], values: Sequence[float]
               ) -> tuple[dict[str, float], str]:
    """Each parameter's share of the objective's variation (sums to 1), and the method's name.

    fANOVA's main effect of parameter i is Var(E[y | x_i]) / Var(y): how much of the objective's
    variance the parameter explains alone. Here it is estimated directly: the trials are split
    into bins of x_i (its categories, or up to 10 quantile bins of a number, about 10 trials
    each) and the variance of the bins' mean objective, weighted by their sizes, is divided by
    the objective's variance (the correlation ratio). The shares are normalised to sum to 1, as
    Optuna shows importances. Numpy only, linear in the trials: 10,000 trials take
    milliseconds. Parameters that never vary get 0; fewer than 2 trials: {}."""
    names = _common_keys(configs)
    if len(values) < 2 or not names:
        return {}, "none"
    y = np.asarray(values, dtype=float)
    scores = dict.fromkeys(names, 0.0)
    if float(y.var()) <= 0.0:
        return scores, "none"
    for name in names:
        codes, labels = _encode([c[name] for c in configs])
        scores[name] = _main_effect(np.asarray(codes), labels is not None, y)
    total = sum(scores.values())
    normalised = {n: v / total for n, v in scores.items()} if total > 0 else scores
    return normalised, "fANOVA main effect (binned variance of conditional means)"


def _main_effect(x: np.ndarray, categorical: bool, y: np.ndarray) -> float:
    """Var(E[y | bin(x)]) / Var(y) over the bins of ``x`` (see ``importance``)."""
    distinct = np.unique(x)
    if len(distinct) < 2:
        return 0.0
    if categorical or len(distinct) <= 10:
        bins = np.searchsorted(distinct, x)
    else:
        k = int(min(10, max(2, len(x) // 10)))
        edges = np.quantile(x, np.linspace(0, 1, k + 1)[1:-1])
        bins = np.searchsorted(edges, x, side="right")
    counts = np.bincount(bins)
    sums = np.bincount(bins, weights=y)
    used = counts > 0
    means = sums[used] / counts[used]
    between = float(np.sum(counts[used] * (means - y.mean()) ** 2) / len(y))
    return between / float(y.var())


def parallel_coordinates(configs: Sequence[Mapping[str, Any]], values: Sequence[float],
                         metric: str, log: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Dimensions for a parallel-coordinates chart, objective first: ``{"label", "values"}``,
    plus ``"ticktext"``/``"tickvals"`` for a categorical parameter (its values as codes).
    Only parameters every config has and that take two or more values are drawn (a constant
    is no axis). A parameter named in ``log`` (sampled log-uniformly) whose values are all
    positive is drawn as log10 of its values, with ``"log": True`` and ticks at the decades
    (and the ends) labelled with the real values: plotly's parcoords has no log axis."""
    dims: list[dict[str, Any]] = [{"label": metric, "values": [float(v) for v in values]}]
    logs = set(log)
    for name in _common_keys(configs):
        column = [c[name] for c in configs]
        if len({repr(v) for v in column}) < 2:
            continue
        codes, labels = _encode(column)
        dim: dict[str, Any] = {"label": name, "values": codes}
        if labels is not None:
            dim["ticktext"], dim["tickvals"] = labels, list(range(len(labels)))
        elif name in logs and min(codes) > 0:
            dim.update(_log_dimension(name, codes))
        dims.append(dim)
    return dims


def _log_dimension(name: str, xs: list[float]) -> dict[str, Any]:
    """A log-sampled parameter's dimension: log10 values, ticks at the decades in range, or,
    where fewer than 3 decades fall inside, at 5 log-even points from the least value to the
    greatest; labelled with the real values (3 significant digits)."""
    logs = [math.log10(x) for x in xs]
    lo, hi = min(logs), max(logs)
    ticks = [float(k) for k in range(math.ceil(lo), math.floor(hi) + 1)]
    if len(ticks) < 3:
        ticks = [lo + (hi - lo) * k / 4 for k in range(5)]
    return {"label": f"{name} (log)", "values": logs, "log": True, "tickvals": ticks,
            "ticktext": [f"{10 ** t:.3g}" for t in ticks]}


def slices(configs: Sequence[Mapping[str, Any]], values: Sequence[float], ids: Sequence[int],
           log: Iterable[str] = ()) -> dict[str, dict[str, Any]]:
    """A slice plot's data: per parameter that takes two or more values, the trials that have
    it as ``{"x", "v", "id"}`` (its values, the objective's, the trial ids), ``"log"`` (sampled
    log-uniformly, all values positive: draw on a log axis) and ``"categorical"`` (not numbers:
    ``x`` holds the values as text). Parameters in name order."""
    logs = set(log)
    out: dict[str, dict[str, Any]] = {}
    for name in sorted({k for c in configs for k in c}):
        rows = [(c[name], v, i) for c, v, i in zip(configs, values, ids) if name in c]
        xs = [r[0] for r in rows]
        if len({repr(x) for x in xs}) < 2:
            continue
        numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)
        out[name] = {"x": [float(x) for x in xs] if numeric else [str(x) for x in xs],
                     "v": [float(r[1]) for r in rows], "id": [r[2] for r in rows],
                     "log": numeric and name in logs and min(xs) > 0, "categorical": not numeric}
    return out


def edf(values: Iterable[float], most: int = 400) -> tuple[list[float], list[float]]:
    """The empirical distribution of ``values`` (Optuna's plot_edf): ``(xs, ys)`` with ``xs`` the
    distinct finite values in increasing order and ``ys[i]`` the fraction of the values
    ``<= xs[i]`` (non-decreasing, the last 1.0); draw it as a step function (``hv``). Above
    ``most`` (>= 2) distinct values, ``most`` of them evenly spaced in rank, the first and the
    last kept (each kept point stays exact). No finite value: ``([], [])``."""
    if most < 2:
        raise ValueError(f"most must be >= 2, got {most}")
    finite = np.sort(np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float))
    if not len(finite):
        return [], []
    xs, counts = np.unique(finite, return_counts=True)
    ys = np.cumsum(counts) / len(finite)
    if len(xs) > most:
        keep = np.unique(np.round(np.linspace(0, len(xs) - 1, most)).astype(int))
        xs, ys = xs[keep], ys[keep]
    return xs.tolist(), ys.tolist()


def _numeric(column: Sequence[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in column)


def contour_params(configs: Sequence[Mapping[str, Any]], order: Sequence[str] = (),
                   most: int = 4) -> tuple[list[str], list[str]]:
    """The parameters a contour plot pairs, and those it leaves out because they are not
    numbers (categorical). Candidates: parameters every config has that take two or more
    values; the numeric ones are ranked by ``order`` (e.g. most important first), the others
    after them in name order, and the first ``most`` kept."""
    numeric: list[str] = []
    categorical: list[str] = []
    for name in _common_keys(configs):
        column = [c[name] for c in configs]
        if len({repr(v) for v in column}) < 2:
            continue
        (numeric if _numeric(column) else categorical).append(name)
    rank = {name: i for i, name in enumerate(order)}
    numeric.sort(key=lambda n: (rank.get(n, len(rank)), n))
    return numeric[:most], categorical


def contour_grid(xs: Sequence[float], ys: Sequence[float], zs: Sequence[float], *,
                 xlog: bool = False, ylog: bool = False, size: int = 30) -> dict[str, Any]:
    """The objective ``zs`` over a ``size`` x ``size`` grid spanning the trials' ``xs`` and
    ``ys`` (log-even steps on a log axis, whose values must be positive): each trial falls in
    its nearest cell (cells holding several: their mean); the other cells are filled by a
    thin-plate spline through the filled cells (an RBF: the smoothest surface through them,
    with no bullseye around each trial as inverse-distance weighting makes), or, beyond
    ``TPS_MAX_CELLS`` filled cells, by Laplace's equation (each the mean of its neighbours, as
    optuna-dashboard fills); clipped to the range of the values, which it never leaves.
    Returns ``{"x": [size], "y": [size], "z": [size rows of size]}`` (``z[j][i]`` at
    ``(x[i], y[j])``), grid values in real units. Needs two or more distinct ``xs`` and ``ys``."""
    if size < 2:
        raise ValueError(f"size must be >= 2, got {size}")
    gx, cx = _axis_cells(np.asarray(xs, dtype=float), xlog, size)
    gy, cy = _axis_cells(np.asarray(ys, dtype=float), ylog, size)
    z = np.asarray(zs, dtype=float)
    cell = cy * size + cx
    counts = np.bincount(cell, minlength=size * size)
    sums = np.bincount(cell, weights=z, minlength=size * size)
    filled = counts > 0
    grid = np.zeros(size * size)
    grid[filled] = sums[filled] / counts[filled]   # a filled cell: its own mean, exactly
    if 3 <= int(filled.sum()) <= TPS_MAX_CELLS:
        smooth = _thin_plate_fill(filled, grid, size)
        grid[~filled] = smooth[~filled] if smooth is not None else _laplace_fill(filled, grid, size)
    else:
        grid[~filled] = _laplace_fill(filled, grid, size)
    known = grid[filled]
    grid = np.clip(grid, known.min(), known.max())
    return {"x": gx.tolist(), "y": gy.tolist(), "z": grid.reshape(size, size).tolist()}


TPS_MAX_CELLS = 150     # more filled cells: the Laplace fill (dense enough; the spline solve grows as n^3)


def _thin_plate_fill(filled: np.ndarray, grid: np.ndarray, size: int) -> np.ndarray | None:
    """Every cell's value on the thin-plate spline (r^2 log r, plus a plane) through the filled
    cells, in cell units; None when the filled cells are on one line (no unique plane)."""
    cells = np.flatnonzero(filled)
    cj, ci = np.divmod(cells, size)
    centres = np.column_stack([ci, cj]).astype(float)
    n = len(cells)

    def kernel(points: np.ndarray) -> np.ndarray:
        r2 = ((points[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(r2 > 0, 0.5 * r2 * np.log(r2), 0.0)
    system = np.zeros((n + 3, n + 3))
    system[:n, :n] = kernel(centres)
    system[:n, n:] = np.column_stack([np.ones(n), centres])
    system[n:, :n] = system[:n, n:].T
    rhs = np.concatenate([grid[cells], np.zeros(3)])
    try:
        weights = np.linalg.solve(system, rhs)
    except np.linalg.LinAlgError:
        return None
    if not np.all(np.isfinite(weights)):
        return None
    jj, ii = np.divmod(np.arange(size * size), size)
    everywhere = np.column_stack([ii, jj]).astype(float)
    return np.asarray(kernel(everywhere) @ weights[:n] + weights[n] + everywhere @ weights[n + 1:])


def _laplace_fill(filled: np.ndarray, grid: np.ndarray, size: int) -> np.ndarray:
    """The values of the cells not ``filled`` of a ``size`` x ``size`` grid (flat, row-major)
    that make each the mean of its 2-4 neighbours (the grid's discrete Laplace equation, its
    edges reflecting), the filled cells held: conjugate gradients on the free cells' system
    (symmetric positive definite once a cell is filled), a stencil per step, to 1e-10."""
    free = ~filled.reshape(size, size)
    degree = _neighbour_sum(np.ones((size, size)), size)

    def laplacian(v: np.ndarray) -> np.ndarray:       # on the free cells, filled ones at 0
        full = np.zeros((size, size))
        full[free] = v
        return (degree * full - _neighbour_sum(full, size))[free]

    held = np.where(free, 0.0, grid.reshape(size, size))
    b = _neighbour_sum(held, size)[free]
    x = np.full(b.shape, float(grid[filled].mean()))
    r = b - laplacian(x)
    d, rr = r.copy(), float(r @ r)
    for _ in range(4 * size * size):
        if rr <= 1e-20 * max(1.0, float(b @ b)):
            break
        ad = laplacian(d)
        step = rr / float(d @ ad)
        x += step * d
        r -= step * ad
        rr, before = float(r @ r), rr
        d = r + (rr / before) * d
    return x


def _neighbour_sum(g: np.ndarray, size: int) -> np.ndarray:
    """Each cell's sum over its 2-4 grid neighbours (none beyond the edges)."""
    out = np.zeros_like(g)
    out[1:, :] += g[:-1, :]
    out[:-1, :] += g[1:, :]
    out[:, 1:] += g[:, :-1]
    out[:, :-1] += g[:, 1:]
    return out


def _axis_cells(values: np.ndarray, log: bool, size: int) -> tuple[np.ndarray, np.ndarray]:
    """A grid axis of ``size`` points over the values' range (log-even for ``log``) in real
    units, and each value's nearest grid index."""
    if len(values) == 0 or float(values.min()) == float(values.max()):
        raise ValueError("a contour axis needs two or more distinct values")
    if log and float(values.min()) <= 0:
        raise ValueError("a log axis needs positive values")
    u = np.log10(values) if log else values
    lo, hi = float(u.min()), float(u.max())
    cells = np.clip(np.rint((u - lo) / (hi - lo) * (size - 1)), 0, size - 1).astype(int)
    axis = np.linspace(lo, hi, size)
    return (10.0 ** axis if log else axis), cells
