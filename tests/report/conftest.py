"""Fixtures of the report tests (the store builder is ``report_store.py``)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from report_store import fill_store

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _chromium() -> str | None:
    for candidate in (os.environ.get("HYPERSACK_CHROMIUM"), shutil.which("chromium"),
                      "/usr/bin/chromium", shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        reason = "playwright is not installed (pip install 'hypersack[test]')"
        print(f"SKIP browser tests: {reason}")
        pytest.skip(reason)
    executable = _chromium()
    if executable is None:
        reason = "no Chromium found (apt-get install chromium, or set HYPERSACK_CHROMIUM)"
        print(f"SKIP browser tests: {reason}")
        pytest.skip(reason)
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=executable, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def small_store(tmp_path):
    return fill_store(tmp_path / "s.db")
