"""See a study: the HTML report, the live dashboard, and the series they draw.

    hypersack report STUDY -o report.html        # one self-contained file (opens offline)
    hypersack report A B -o compare.html         # two studies side by side
    hypersack dashboard [STUDY] --port 8080      # live, on 127.0.0.1

``build_report(storage_path, names, out)`` is the Python form of ``hypersack report``. Needs
plotly (``pip install hypersack[report]``) for the page; the series (``report.series``) do not.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["build_report"]


def build_report(storage: str | Path, names: list[str], out: str | Path) -> Path:
    """Write the report of the stored studies ``names`` (one, or several compared) to ``out``;
    returns the file's absolute path."""
    from hypersack.report.data import from_storage, payload
    from hypersack.report.html import plotly_js, write_report
    from hypersack.runtime.storage.sqlite import Storage
    plotly_js()                   # a missing extra fails before any reading
    with Storage(storage, readonly=True) as store:
        payloads = [payload(from_storage(store, name)) for name in names]
    return write_report(out, payloads)
