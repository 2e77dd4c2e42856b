"""The HTML page: one self-contained file (plotly.js, the page's script and the data inline) that
opens offline, for a report; the same page, fed by the JSON API, for the live dashboard."""
from __future__ import annotations

import html
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from hypersack.errors import MissingDependencyError

__all__ = ["plotly_js", "report_html", "dashboard_html", "write_report"]


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """The minified plotly.js shipped in the ``plotly`` package (the ``report`` extra)."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise MissingDependencyError("The HTML report and the dashboard", "plotly", "report") from None
    return get_plotlyjs()


def _asset(name: str) -> str:
    return resources.files("hypersack.report").joinpath("assets", name).read_text(encoding="utf-8")


def _script_json(value: Any) -> str:
    """JSON safe inside a <script> element (no ``</script>`` or ``<!--`` can end it early)."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _page(title: str, body_script: str, subtitle: str) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title>"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><link rel=\"icon\" href=\"data:,\">"
        f"<style>{_asset('report.css')}</style>"
        f"<script>{plotly_js()}</script>"
        f"<script>{_asset('report.js')}</script></head><body>"
        f"<header class=\"top\"><h1>HyperSack</h1><span class=\"sub\">{html.escape(subtitle)}</span></header>"
        "<div id=\"hypersack-root\"></div>"
        f"{body_script}</body></html>\n")


def report_html(payloads: list[dict[str, Any]]) -> str:
    """A report of one study, or a comparison of several (``data.payload`` each)."""
    names = " vs ".join(p["name"] for p in payloads)
    script = (f"<script id=\"hypersack-data\" type=\"application/json\">{_script_json(payloads)}</script>"
              "<script>HyperSack.render(document.getElementById('hypersack-root'), "
              "JSON.parse(document.getElementById('hypersack-data').textContent));</script>")
    return _page(f"HyperSack report: {names}", script, f"report of {names}")


def dashboard_html(study: str | None, poll_ms: int) -> str:
    """The live page: lists the store's studies and redraws the chosen one every ``poll_ms``
    (the URL's ``?study=`` and ``?poll=`` override both)."""
    options = _script_json({"study": study, "poll": poll_ms})
    script = ("<script>(function(){var o=" + options + ",q=new URLSearchParams(location.search);"
              "if(q.get('study')){o.study=q.get('study');}if(q.get('poll')){o.poll=+q.get('poll');}"
              "HyperSack.live(document.getElementById('hypersack-root'),o);})();</script>")
    return _page("HyperSack dashboard", script, "live dashboard")


def write_report(path: str | Path, payloads: list[dict[str, Any]]) -> Path:
    """Write the report file; returns its absolute path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report_html(payloads), encoding="utf-8")
    return out.resolve()
