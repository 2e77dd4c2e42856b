"""The report's pure series: best so far, down-sampling, lanes, occupancy, importance."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypersack.core.stays import Stay, StayOutcome
from hypersack.report import series


def test_best_so_far_keeps_each_improvement_in_time_order():
    points = [(3.0, 0.5, 2), (1.0, 0.7, 0), (2.0, 0.9, 1), (4.0, 0.4, 3), (5.0, float("nan"), 4)]
    assert series.best_so_far(points, "min") == [(1.0, 0.7, 0), (3.0, 0.5, 2), (4.0, 0.4, 3)]
    assert series.best_so_far(points, "max") == [(1.0, 0.7, 0), (2.0, 0.9, 1)]
    assert series.best_so_far([], "max") == []


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(-10, 10), st.integers(0, 99)), max_size=60),
       st.sampled_from(["min", "max"]))
@settings(max_examples=60, deadline=None)
def test_best_so_far_is_monotone_and_ends_at_the_best(points, mode):
    best = series.best_so_far(points, mode)
    values = [v for _, v, _ in best]
    times = [t for t, _, _ in best]
    assert times == sorted(times)
    assert values == (sorted(values, reverse=True) if mode == "min" else sorted(values))
    assert len(set(values)) == len(values)           # strictly better each time
    if points:
        target = min(v for _, v, _ in points) if mode == "min" else max(v for _, v, _ in points)
        assert values[-1] == target


def test_downsample_keeps_ends_peaks_and_the_point_budget():
    xs = list(range(1000))
    ys = [0.0] * 1000
    ys[500] = 9.0                                     # a spike in the middle
    dx, dy = series.downsample(xs, ys, 20)
    assert len(dx) == 20 and dx[0] == 0 and dx[-1] == 999
    assert 9.0 in dy and dx == sorted(dx)
    assert series.downsample([1, 2], [3, 4], 5) == ([1, 2], [3, 4])
    with pytest.raises(ValueError):
        series.downsample(xs, ys, 1)


def test_learning_curves_share_a_point_budget_and_skip_missing_metrics():
    results = [(t, s, t + s / 100) for t in range(50) for s in range(100, 0, -1)]
    results += [(99, 1, None), (98, 1, float("nan")), (97, 1, "x")]
    curves = series.learning_curves(results, per_curve=60, total=1000)
    assert set(curves) == set(range(50))
    assert all(len(xs) == 20 for xs, _ in curves.values())       # 1000 // 50
    xs, ys = curves[3]
    assert xs[0] == 1 and xs[-1] == 100 and ys[-1] == pytest.approx(4.0)


def _stay(tid, start, end, gpu="g0", share=50.0, pack=None, outcome=StayOutcome.FINISHED):
    return Stay(tid, 1, "n", gpu, start, share, pack, 0, end, None if end is None else outcome)


def _random_stays(rng, n):
    out = []
    for i in range(n):
        start = rng.uniform(0, 50)
        end = None if rng.random() < 0.1 else start + rng.uniform(0, 20)
        out.append(_stay(i, start, end, gpu=f"g{rng.randrange(3)}", share=rng.choice([25.0, 50.0, 100.0]),
                         pack=rng.choice([None, 1, 2])))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_lanes_never_overlap_and_use_no_more_lanes_than_the_peak(seed):
    rng = random.Random(seed)
    stays = _random_stays(rng, 40)
    bars = series.lanes(stays, now=80.0)
    assert sorted(b.stay.trial_id for b in bars) == list(range(40))
    by_lane: dict = {}
    for b in bars:
        by_lane.setdefault((b.device, b.lane), []).append((b.start, b.end))
    for spans in by_lane.values():
        spans.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    for device in {b.device for b in bars}:
        mine = [b for b in bars if b.device == device]
        peak = max(sum(1 for o in mine if o.start <= b.start < o.end or o.start == b.start) for b in mine)
        assert max(b.lane for b in mine) + 1 <= peak


def test_a_pack_gets_neighbouring_lanes_and_an_open_stay_ends_now():
    stays = [_stay(0, 0.0, 10.0, pack=None), _stay(1, 0.0, None, pack=7), _stay(2, 0.0, 5.0, pack=7)]
    bars = {b.stay.trial_id: b for b in series.lanes(stays, now=12.0)}
    assert abs(bars[1].lane - bars[2].lane) == 1
    assert bars[1].end == 12.0


@pytest.mark.parametrize("seed", range(10))
def test_the_stays_sum_to_the_occupancy(seed):
    rng = random.Random(seed)
    stays = _random_stays(rng, 30)
    now = 80.0
    occ = series.occupancy(stays, now)
    for device, (times, levels) in occ.items():
        area = sum(levels[i] * (times[i + 1] - times[i]) for i in range(len(times) - 1))
        mine = [s for s in stays if f"n/{s.gpu}" == device]
        expected = sum(s.share * ((now if s.end is None else s.end) - s.start) for s in mine)
        assert area == pytest.approx(expected)
        assert levels[-1] == 0.0 and min(levels) >= -1e-9
    mean = series.occupancy_mean(occ, 0.0, now)
    total = sum(s.share * ((now if s.end is None else s.end) - s.start) for s in stays)
    assert sum(mean.values()) * now == pytest.approx(total)


def test_occupancy_of_two_co_located_trials_adds_their_shares():
    occ = series.occupancy([_stay(0, 0.0, 10.0, share=30.0), _stay(1, 5.0, 15.0, share=50.0)], 20.0)
    assert occ["n/g0"] == ([0.0, 5.0, 10.0, 15.0], [30.0, 80.0, 50.0, 0.0])


def test_importance_finds_the_parameter_that_drives_the_objective():
    rng = random.Random(0)
    configs = [{"lr": rng.uniform(0, 1), "noise": rng.uniform(0, 1), "opt": rng.choice(["a", "b"]),
                "fixed": 3} for _ in range(300)]
    values = [10 * c["lr"] + (2.0 if c["opt"] == "b" else 0.0) + 0.01 * rng.random() for c in configs]
    scores, method = series.importance(configs, values)
    assert "fANOVA" in method
    assert sum(scores.values()) == pytest.approx(1.0)
    assert scores["lr"] > scores["opt"] > scores["noise"] and scores["fixed"] == 0.0
    assert scores["lr"] > 0.6 and scores["noise"] < 0.05
    assert series.importance(configs[:1], values[:1]) == ({}, "none")
    assert series.importance(configs[:5], [1.0] * 5)[0] == dict.fromkeys(["fixed", "lr", "noise", "opt"], 0.0)


def test_parallel_coordinates_codes_categories_and_puts_the_objective_first():
    dims = series.parallel_coordinates([{"a": 1, "c": "y"}, {"a": 2, "c": "x"}], [0.5, 0.7], "acc")
    assert dims[0] == {"label": "acc", "values": [0.5, 0.7]}
    assert dims[1] == {"label": "a", "values": [1.0, 2.0]}
    assert dims[2] == {"label": "c", "values": [1.0, 0.0], "ticktext": ["x", "y"], "tickvals": [0, 1]}


def test_parallel_coordinates_drop_constants_and_draw_log_parameters_on_log10_axes():
    configs = [{"lr": 1e-4, "wd": 1e-3, "k": 3, "opt": "x"}, {"lr": 1e-2, "wd": 1e-2, "k": 3, "opt": "x"},
               {"lr": 1e-1, "wd": 5e-2, "k": 3, "opt": "y"}]
    dims = series.parallel_coordinates(configs, [0.1, 0.2, 0.3], "acc", log=["lr"])
    assert [d["label"] for d in dims] == ["acc", "lr (log)", "opt", "wd"]     # k never varies
    lr = dims[1]
    assert lr["log"] is True and lr["values"] == pytest.approx([-4.0, -2.0, -1.0])
    assert lr["tickvals"] == [-4.0, -3.0, -2.0, -1.0]
    assert lr["ticktext"] == ["0.0001", "0.001", "0.01", "0.1"]               # the real values
    assert "log" not in dims[3] and dims[3]["values"] == [1e-3, 1e-2, 5e-2]   # not log-sampled
    narrow = series.parallel_coordinates([{"lr": 2.0}, {"lr": 5.0}], [1.0, 2.0], "m", log=["lr"])[1]
    assert narrow["tickvals"][0] == pytest.approx(0.30103) and len(narrow["tickvals"]) == 5
    assert narrow["ticktext"] == ["2", "2.51", "3.16", "3.98", "5"]


def test_slices_give_each_varying_parameter_against_the_objective():
    configs = [{"lr": 0.1, "opt": "a", "k": 1}, {"lr": 0.01, "opt": "b", "k": 1}, {"lr": 1.0, "k": 1}]
    out = series.slices(configs, [0.5, 0.7, 0.9], [3, 4, 5], log=["lr", "opt"])
    assert list(out) == ["lr", "opt"]                                  # k never varies
    assert out["lr"] == {"x": [0.1, 0.01, 1.0], "v": [0.5, 0.7, 0.9], "id": [3, 4, 5],
                         "log": True, "categorical": False}
    assert out["opt"] == {"x": ["a", "b"], "v": [0.5, 0.7], "id": [3, 4],
                          "log": False, "categorical": True}          # only the trials that have it


def test_edf_is_the_fraction_of_values_at_or_below_each_distinct_value():
    xs, ys = series.edf([3.0, 1.0, 2.0, 2.0, float("nan"), None])
    assert xs == [1.0, 2.0, 3.0] and ys == [0.25, 0.75, 1.0]         # ties counted once each
    assert series.edf([]) == ([], []) and series.edf([float("inf")]) == ([], [])
    with pytest.raises(ValueError):
        series.edf([1.0], most=1)


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=300), st.integers(2, 50))
@settings(max_examples=60, deadline=None)
def test_edf_is_monotone_ends_at_one_and_keeps_its_points_exact(values, most):
    xs, ys = series.edf(values, most=most)
    assert len(xs) <= most and xs == sorted(set(xs)) and ys == sorted(ys) and ys[-1] == 1.0
    assert xs[0] == min(values) and xs[-1] == max(values)
    for x, y in zip(xs, ys):                          # a kept point is exact, not interpolated
        assert y == pytest.approx(sum(v <= x for v in values) / len(values))


def test_contour_params_rank_numbers_by_the_given_order_and_set_categories_apart():
    configs = [{"a": i, "b": 0.1 * i, "c": "xy"[i % 2], "k": 1, "z": -i} for i in range(6)]
    configs[0].pop("z")                                    # not in every config: not a candidate
    assert series.contour_params(configs, order=["b", "c", "a"]) == (["b", "a"], ["c"])
    assert series.contour_params(configs) == (["a", "b"], ["c"])      # no order: by name
    assert series.contour_params(configs, most=1) == (["a"], ["c"])
    assert series.contour_params([]) == ([], [])


def test_contour_grid_passes_through_the_trials_and_fills_between_them():
    xs, ys, zs = [1.0, 3.0, 1.0, 3.0, 2.0], [10.0, 10.0, 20.0, 20.0, 15.0], [0.0, 1.0, 2.0, 3.0, 9.0]
    g = series.contour_grid(xs, ys, zs, size=3)
    assert g["x"] == [1.0, 2.0, 3.0] and g["y"] == [10.0, 15.0, 20.0]
    assert g["z"][0][0] == 0.0 and g["z"][0][2] == 1.0 and g["z"][2][0] == 2.0 and g["z"][2][2] == 3.0
    assert g["z"][1][1] == 9.0                       # each trial in its nearest cell, exactly
    assert 0.0 < g["z"][0][1] < 9.0                  # a filled-in cell: a weighted mean
    two = series.contour_grid([1.0, 1.0, 2.0], [1.0, 1.0, 2.0], [4.0, 6.0, 0.0], size=2)
    assert two["z"][0][0] == 5.0                     # two trials in one cell: their mean


def test_contour_grid_spaces_a_log_axis_evenly_in_log_and_refuses_what_it_cannot_draw():
    g = series.contour_grid([0.001, 0.1, 0.01], [0.0, 1.0, 0.5], [1.0, 2.0, 3.0], xlog=True, size=3)
    assert g["x"] == pytest.approx([0.001, 0.01, 0.1])
    assert g["z"][1][1] == 3.0                      # 0.01 is the middle of 0.001..0.1 in log
    lin = series.contour_grid([0.001, 0.1, 0.01], [0.0, 1.0, 0.5], [1.0, 2.0, 3.0], size=3)
    assert lin["z"][1][0] == 3.0                    # linear: 0.01 is nearest the low end
    with pytest.raises(ValueError, match="positive"):
        series.contour_grid([0.0, 1.0], [0.0, 1.0], [1.0, 2.0], xlog=True)
    with pytest.raises(ValueError, match="distinct"):
        series.contour_grid([1.0, 1.0], [0.0, 1.0], [1.0, 2.0])


@given(st.lists(st.tuples(st.floats(0, 10), st.floats(-5, 5), st.floats(-100, 100)), min_size=2,
                max_size=80))
@settings(max_examples=40, deadline=None)
def test_contour_grid_never_leaves_the_range_of_the_values(points):
    xs, ys, zs = zip(*points)
    if len(set(xs)) < 2 or len(set(ys)) < 2:
        return
    g = series.contour_grid(xs, ys, zs, size=8)
    flat = [v for row in g["z"] for v in row]
    assert len(flat) == 64
    assert min(zs) - 1e-9 <= min(flat) and max(flat) <= max(zs) + 1e-9


def test_contour_grid_fills_smoothly_between_trials_without_bullseyes():
    """Two columns of trials (z = 0 left, z = 1 right) and one in between: the fill is the plane
    through them (a thin-plate spline; Laplace's equation where trials are many), not a bump
    around each trial with the mean between them (inverse-distance weighting)."""
    left, right = [(0.0, float(j), 0.0) for j in range(9)], [(1.0, float(j), 1.0) for j in range(9)]
    xs, ys, zs = zip(*left, *right, (0.25, 4.0, 0.25))
    g = series.contour_grid(xs, ys, zs, size=9)
    for row in g["z"]:
        assert row == pytest.approx([i / 8 for i in range(9)], abs=1e-6)


def test_a_packs_members_on_a_device_merge_into_one_stay_and_a_later_run_is_another():
    stays = [_stay(0, 0.0, 10.0, pack=3), _stay(1, 0.0, 12.0, pack=3), _stay(2, 1.0, 5.0),
             _stay(3, 2.0, 11.0, pack=3, gpu="g1"), _stay(4, 20.0, 25.0, pack=3)]
    merged = series.pack_stays(stays)
    packs = [s for s in merged if isinstance(s, series.PackStay)]
    assert [[m.trial_id for m in p.members] for p in packs] == [[0, 1], [3], [4]]
    assert (packs[0].start, packs[0].end, packs[0].gpu, packs[0].pack) == (0.0, 12.0, "g0", 3)
    assert [s.trial_id for s in merged if not isinstance(s, series.PackStay)] == [2]
    bars = series.lanes(merged, now=30.0)
    assert len(bars) == 4 and max(b.lane for b in bars if b.device == "n/g0") == 1   # one lane a pack


def test_contour_grid_is_smooth_around_a_lone_trial_with_many_trials_too():
    """A plane sampled at 200 random points (the Laplace fill) and at 12 (the spline): the
    surface is that plane everywhere, within 2%."""
    import numpy as np
    for n in (12, 200):
        rng = np.random.default_rng(n)
        xs, ys = rng.random(n), rng.random(n)
        g = series.contour_grid(xs, ys, xs + 2 * ys, size=20)
        plane = np.add.outer(2 * np.asarray(g["y"]), np.asarray(g["x"]))
        inside = (plane >= min(xs + 2 * ys)) & (plane <= max(xs + 2 * ys))      # not clipped
        assert np.abs(np.asarray(g["z"]) - plane)[inside].max() < 0.06 * 3, n
