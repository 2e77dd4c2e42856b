"""Regenerate docs/report.png (the README's picture) from a real study's report.

Runs the demo study (examples/digits.yaml: 32 digits MLP trials under ASHA, about a minute on two
cores) into a fresh store in a temporary folder, writes its HTML report, opens it in the system's
headless Chromium (playwright drives it; nothing is downloaded) and takes a picture of the
study's charts, from its summary down to the trials table (left out: it is long).

    python tools/docs_screenshot.py [--study examples/digits.yaml] [--out docs/report.png]

``make docs-screenshot`` runs it. Needs the ``report`` and ``test`` extras and Chromium
(``make browser``); ``HYPERSACK_CHROMIUM`` names another Chromium.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    """The system's Chromium: ``HYPERSACK_CHROMIUM``, else ``chromium`` on the PATH."""
    for candidate in (os.environ.get("HYPERSACK_CHROMIUM"), shutil.which("chromium"),
                      "/usr/bin/chromium", shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    sys.exit("no Chromium found: run `make browser` (apt-get install chromium) or set HYPERSACK_CHROMIUM")


def run_study(study: Path, folder: Path) -> tuple[Path, str]:
    """Run ``study`` afresh into ``folder``/study.db (its run folders under ``folder``); returns
    the store and the study's name."""
    import yaml

    from hypersack.cli import main
    store = folder / "study.db"
    cwd = os.getcwd()
    os.chdir(folder)                      # the trials' run folders land here, not in the repo
    try:
        code = main(["run", str(study.resolve()), "--storage", str(store), "--replace"])
    finally:
        os.chdir(cwd)
    if code != 0:
        sys.exit(f"the study {study} failed (exit code {code})")
    return store, yaml.safe_load(study.read_text())["name"]


def screenshot(report: Path, out: Path, width: int) -> None:
    """The report's study section, summary to charts (the trials table left out), as PNG."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=ARGS)
        page = browser.new_page(viewport={"width": width, "height": 1000}, device_scale_factor=1)
        page.set_default_timeout(180_000)
        page.goto(report.resolve().as_uri())
        page.wait_for_selector("[data-chart='timeline'] .main-svg")
        page.wait_for_timeout(500)        # plotly's last relayout (legends, colour bars)
        top, bottom = page.evaluate("""() => { const s = document.querySelector('section[data-study]');
            const h = [...s.querySelectorAll('h3')].find(e => e.textContent === 'Trials');
            return [s.getBoundingClientRect().top + scrollY, h.getBoundingClientRect().top + scrollY]; }""")
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), full_page=True,
                        clip={"x": 0, "y": 0, "width": width, "height": bottom})
        browser.close()
    print(f"wrote {out} ({width} x {int(bottom)} px; the study section starts at {int(top)} px)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", type=Path, default=ROOT / "examples" / "digits.yaml")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "report.png")
    parser.add_argument("--width", type=int, default=1400)
    args = parser.parse_args(argv)
    from hypersack.report import build_report
    with tempfile.TemporaryDirectory(prefix="hypersack-docs-") as tmp:
        folder = Path(tmp)
        store, name = run_study(args.study, folder)
        report = build_report(store, [name], folder / "report.html")
        screenshot(report, args.out, args.width)
    return 0


if __name__ == "__main__":
    sys.exit(main())
