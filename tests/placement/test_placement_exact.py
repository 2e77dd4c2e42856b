"""``placement.exact``: a load kept as an exact sum and read as the nearest float."""
from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from hypersack.placement.exact import rounded, units

FLOATS = st.floats(min_value=0, max_value=1e300, allow_nan=False, allow_infinity=False)
SMALL = st.one_of(st.sampled_from([0.1, 0.2, 0.3, 33.3, 12.5, 1e-300, 5e-324, 2.0 ** 60]), FLOATS)


@settings(max_examples=300, deadline=None)
@given(SMALL)
def test_a_value_converts_exactly_and_back(x):
    assert units(x) == Fraction(x) * 2 ** 1074
    assert rounded(units(x)) == x


@settings(max_examples=300, deadline=None)
@given(st.lists(SMALL, max_size=12), st.randoms(use_true_random=False))
def test_a_sum_is_the_exact_sum_rounded_once_in_any_order(xs, rnd):
    exact = float(sum((Fraction(x) for x in xs), Fraction(0)))
    total = sum(units(x) for x in xs)
    assert rounded(total) == exact
    shuffled = list(xs)
    rnd.shuffle(shuffled)
    extra = [0.1, 33.3, 7.0]                      # added, then taken away again
    running = sum(units(x) for x in shuffled[:len(xs) // 2] + extra + shuffled[len(xs) // 2:])
    running -= sum(units(x) for x in extra)
    assert running == total and rounded(running) == exact


def test_known_order_dependent_float_sums_come_out_exact():
    assert 0.1 + 0.2 - 0.2 != 0.1                   # what plain float bookkeeping would give
    assert rounded(units(0.1) + units(0.2) - units(0.2)) == 0.1
    assert rounded(units(0.1) + units(0.2)) == 0.30000000000000004   # nearest to 0.1 + 0.2 exactly
    assert rounded(0) == 0.0 and rounded(-units(2.5)) == -2.5
    assert rounded(units(1.7e308) * 4) == float("inf")
