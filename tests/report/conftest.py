"""Fixtures of the report tests (the store builder is ``report_store.py``)."""
from __future__ import annotations

import pytest
from report_store import fill_store


@pytest.fixture
def small_store(tmp_path):
    return fill_store(tmp_path / "s.db")
