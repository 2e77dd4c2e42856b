"""core.packs.slots: when a stack compacts, how far it grows, the padded widths it captures."""
from __future__ import annotations

import pytest

from hypersack.core.packs import bucket_width, compacted_capacity, grown_capacity


@pytest.mark.parametrize("capacity, live, want", [
    (32, 3, 3), (32, 16, 16), (32, 17, None), (4, 2, 2), (4, 3, None), (2, 1, 1), (1, 0, None),
    (8, 0, 1), (3, 1, 1), (3, 2, None)])
def test_a_stack_compacts_to_its_live_members_once_they_fill_half_or_less(capacity, live, want):
    assert compacted_capacity(capacity, live) == want


def test_growth_doubles_up_to_the_cap_but_never_below_the_members():
    assert grown_capacity(4, 5, None) == 8
    assert grown_capacity(3, 4, 32) == 6
    assert grown_capacity(24, 25, 32) == 32
    assert grown_capacity(4, 5, 4) == 5           # a cap below the members does not drop one


def test_widths_round_up_to_few_buckets_with_at_most_a_third_padding():
    assert [bucket_width(w) for w in (1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 17, 25, 33, 100)] == \
        [1, 2, 3, 4, 6, 6, 8, 8, 12, 16, 24, 32, 48, 128]
    for width in range(1, 600):
        bucket = bucket_width(width)
        assert width <= bucket and (bucket - width) * 3 <= bucket
    assert sorted({bucket_width(w) for w in range(16, 129)}) == [16, 24, 32, 48, 64, 96, 128]
