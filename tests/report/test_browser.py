"""The report and the dashboard in a real headless Chromium (Debian's, driven by playwright).

Skipped, with the reason printed, only where playwright or the browser is missing; the
Makefile's set-up installs both (``apt-get install chromium`` where apt works, ``playwright`` in
the ``test`` extra). Nothing is downloaded: playwright drives the system's Chromium.
docs/report.png (the README's picture) comes from ``make docs-screenshot`` (tools/docs_screenshot.py).
"""
from __future__ import annotations

import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
class Page:
    """A page that records console errors and uncaught exceptions, and refuses the network
    beyond this machine (a report must open offline)."""

    def __init__(self, browser, width=1400, height=1000):
        self.page = browser.new_page(viewport={"width": width, "height": height})
        # Rendering a report takes Chromium ~10 s of CPU (software WebGL for the parallel
        # coordinates): playwright's 30 s default is too short on a busy machine.
        self.page.set_default_timeout(180_000)
        self.page.set_default_navigation_timeout(180_000)
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        self.page.route("**/*", self._offline)

    def _offline(self, route):
        url = route.request.url
        if url.startswith(("file:", "data:", "http://127.0.0.1")):
            route.continue_()
        else:
            self.errors.append(f"network request outside this machine: {url}")
            route.abort()

    def charts(self, within=None) -> dict[str, dict]:
        """Each chart (in the locator ``within``, default the page): its trace count, whether
        plotly drew it, its drawn marks and its data points."""
        scope = (within or self.page.locator("body")).locator("[data-chart]")
        return scope.evaluate_all(_CHARTS_JS)


_CHARTS_JS = """els => Object.fromEntries(els.map(e => [e.getAttribute('data-chart'), {
    traces: +(e.getAttribute('data-traces') || 0), drawn: !!e.querySelector('.main-svg'),
    marks: e.querySelectorAll('.point, .bars path, .scatterlayer path, .parcoords .line, canvas').length,
    points: (e.data || []).reduce((n, t) => n + ((t.x || t.dimensions || []).length || 0), 0)}]))"""


def _assert_drawn(charts: dict[str, dict], names: list[str]) -> None:
    assert set(names) <= set(charts), charts
    for name in names:
        c = charts[name]
        assert c["drawn"] and c["traces"] > 0 and c["points"] > 0 and c["marks"] > 0, (name, c)


VIEWS = ["best", "curves", "parallel", "importance", "contour", "edf", "timeline", "occupancy"]


def test_the_report_of_a_simulated_study_and_a_comparison(browser, tmp_path):
    from hypersack.report.data import from_simulation, payload
    from hypersack.report.html import write_report
    from hypersack.sim.run import simulate
    from hypersack.sim.scenario import load_scenario
    scenario = load_scenario(ROOT / "examples" / "sim" / "sp1_4xa100.yaml")
    payloads = []
    for policy in ("exclusive", "wfd"):
        result = simulate(scenario, policy, keep_log=False, keep_results=True)
        data = from_simulation(result, result.store)
        data.name = f"{scenario.name} ({policy})"
        payloads.append(payload(data))
    both = write_report(tmp_path / "cmp.html", payloads)
    page = Page(browser)
    page.page.goto(both.as_uri())
    page.page.wait_for_selector("[data-chart='compare-best'] .main-svg")
    sections = page.page.locator("section[data-study]")
    assert sections.count() == 2
    _assert_drawn(page.charts(page.page.locator("[data-view='compare']")),
                  ["compare-best", "compare-occupancy", "compare-edf"])
    edf = page.page.locator("[data-chart='compare-edf']").evaluate("e => e.data.map(t => t.name)")
    assert edf == [f"{p['name']} (96)" for p in payloads]          # one line per study
    for i in range(2):
        one = sections.nth(i)
        _assert_drawn(page.charts(one), VIEWS)
    wfd = sections.nth(1)
    axes = wfd.locator("[data-chart='contour']").evaluate("e => [e.layout.xaxis.type, e.layout.yaxis.type]")
    assert axes == ["log", "linear"]                  # lr is log-sampled in the scenario: log axis
    assert wfd.locator("[data-chart='parallel']").evaluate("e => e.data[0].dimensions[2].label") == "lr (log)"
    rows = wfd.locator("table.trials tbody tr")
    assert rows.count() == 96
    wfd.locator("table.trials th[data-col='value']").click()      # sortable: ascending by value
    first = float(rows.nth(0).locator("td").nth(2).inner_text())
    assert first == min(v for v in payloads[1]["table"]["value"] if v is not None)
    shot = tmp_path / "report.png"
    wfd.screenshot(path=str(shot))
    assert shot.stat().st_size > 20_000
    assert page.errors == []


def _poll(url: str, stop: threading.Event, seen: dict) -> None:
    """GET ``url`` every 100 ms until ``stop``; counts answers and running trials seen."""
    import json
    while not stop.is_set():
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                p = json.load(r)
            seen["answers"] += 1
            seen["running_curves"] += sum(1 for c in p["curves"] if c["state"] == "running")
        except urllib.error.HTTPError as exc:
            if exc.code != 404 or seen["answers"]:      # 404: the study is not created yet
                seen["errors"].append(repr(exc))
        except Exception as exc:           # recorded, asserted below
            seen["errors"].append(repr(exc))
        stop.wait(0.1)


@pytest.mark.slow
def test_the_dashboard_follows_a_running_study_and_the_driver_never_sees_a_lock(browser, tmp_path, caplog):
    import hypersack
    from hypersack.report.dashboard import Dashboard
    store = tmp_path / "live.db"
    # 6 steps of 0.2 s a trial: each trial runs with results for ~1 s, seen by 100 ms polls.
    study = hypersack.Study(name="live", space={"x": {"type": "float", "low": 0.0, "high": 1.0},
                                                "sleep": 0.2},
                            objective=("score", "max"), n_trials=4, storage=store, workers=2)
    outcome: dict = {}

    def drive() -> None:
        try:
            outcome["run"] = study.run("trainables:checkpointing", progress=False)
        except BaseException as exc:      # the assertion below shows it
            outcome["error"] = exc

    driver = threading.Thread(target=drive)
    driver.start()
    while not store.exists() and driver.is_alive():
        time.sleep(0.05)
    board = Dashboard(store, study="live", port=0, poll_ms=100).start()
    stop = threading.Event()
    seen: dict = {"answers": 0, "running_curves": 0, "errors": []}
    poller = threading.Thread(target=_poll, args=(board.url + "api/study?name=live", stop, seen))
    poller.start()
    page = Page(browser)
    try:
        page.page.goto(board.url + "?poll=100")     # the page may come before the study: it waits
        page.page.wait_for_selector("[data-chart='timeline'] .main-svg", timeout=60_000)
        driver.join(120)
        page.page.wait_for_function(
            "document.querySelector(\"[data-view='status']\").textContent.includes('(complete)')",
            timeout=30_000)                            # the page saw the study end
        charts = page.charts()
        status = page.page.locator("[data-view='status']").inner_text()
        notes = page.page.locator("[data-note]").evaluate_all(
            "els => Object.fromEntries(els.map(e => [e.dataset.note, e.hidden ? '' : e.textContent]))")
        errors = list(page.errors)
    finally:
        stop.set()
        poller.join(10)
        board.close()
    assert "error" not in outcome, outcome.get("error")
    assert outcome["run"].status == "complete"
    assert not [r for r in caplog.records if "locked" in r.getMessage()]
    assert seen["errors"] == [] and seen["answers"] >= 5
    assert seen["running_curves"] > 0                 # running trials' curves were live
    assert "4 of 4 finished" in status
    # 4 trials on CPU slots: no importance (below 10 trials), no occupancy (nothing measured)
    _assert_drawn(charts, ["best", "curves", "parallel", "edf", "timeline"])
    assert "at least 10 trials" in notes["importance"] and "CPU slots" in notes["occupancy"]
    assert "at least 5 trials" in notes["contour"]
    assert errors == []


_BOXES_JS = """fig => { const box = s => { const e = fig.querySelector(s);
    if (!e) { return null; } const r = e.getBoundingClientRect();
    return r.width && r.height ? [r.left, r.top, r.right, r.bottom] : null; };
  return {caption: box('figcaption'), chart: box('[data-chart]'), legend: box('.legend'),
          xtitle: box('.xtitle'), ytitle: box('.ytitle'), modebar: box('.modebar'),
          hidden: fig.querySelector('[data-chart]').style.display === 'none',
          note: fig.querySelector('[data-note]').hidden ? '' : fig.querySelector('[data-note]').textContent}; }"""


def _overlap(a, b) -> bool:
    return bool(a and b) and a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_charts_keep_titles_legends_and_toolbars_apart_and_name_what_they_show(browser, tmp_path):
    """Issue 31: captions above the toolbar, legends clear of axis titles; log axes, no constant
    axes; importance only from 10 trials; CPU slots named, their occupancy not drawn; progress;
    one timeline row per device; the table filtered by state."""
    from hypersack.report.data import from_storage, payload
    from hypersack.report.html import write_report
    from report_store import fill_store
    from hypersack.runtime.storage.sqlite import Storage
    payloads = []
    for name, n, gpus in (("gpus", 40, ("gpu0", "gpu1")), ("cpus", 6, ("cpu0", "cpu1"))):
        path = fill_store(tmp_path / f"{name}.db", name=name, n=n, gpus=gpus, units=name == "gpus")
        with Storage(path, readonly=True) as store:
            payloads.append(payload(from_storage(store, name)))
    page = Page(browser)
    page.page.goto(write_report(tmp_path / "views.html", payloads).as_uri())
    page.page.wait_for_selector("section[data-study='cpus'] [data-chart='timeline'] .main-svg")
    figures = {}
    for study in ("gpus", "cpus"):
        sec = page.page.locator(f"section[data-study='{study}']")
        for fig in sec.locator("figure[data-figure]").all():
            figures[(study, fig.get_attribute("data-figure"))] = fig.evaluate(_BOXES_JS)
    assert len(figures) == 20                    # 10 per study (the rank plot: issue 39)
    assert sum(1 for f in figures.values() if f["legend"] and f["xtitle"] and f["modebar"]) >= 4
    for key, f in figures.items():
        assert f["caption"], key                                  # every chart is titled
        if f["hidden"]:
            continue
        assert f["caption"][3] <= f["chart"][1] + 1, key          # the title above the plot
        assert not _overlap(f["legend"], f["xtitle"]) and not _overlap(f["legend"], f["ytitle"]), key
        assert not _overlap(f["legend"], f["modebar"]), key
    gpu = page.page.locator("section[data-study='gpus']")
    cpu = page.page.locator("section[data-study='cpus']")
    dims = gpu.locator("[data-chart='parallel']").evaluate("e => e.data[0].dimensions")
    assert [d["label"] for d in dims] == ["acc", "lr (log)", "opt", "units"]   # batch is constant
    assert dims[1]["ticktext"][0] == "0.01" and dims[1]["tickvals"][0] == -2.0
    assert not figures[("gpus", "importance")]["hidden"] and figures[("gpus", "importance")]["note"] == ""
    assert figures[("cpus", "importance")]["hidden"]
    assert "at least 10 trials" in figures[("cpus", "importance")]["note"]
    assert figures[("cpus", "occupancy")]["hidden"] and "CPU slots" in figures[("cpus", "occupancy")]["note"]
    assert not figures[("gpus", "contour")]["hidden"] and not figures[("gpus", "edf")]["hidden"]
    assert figures[("cpus", "contour")]["hidden"] and not figures[("cpus", "edf")]["hidden"]
    assert not figures[("gpus", "occupancy")]["hidden"]
    captions = [cpu.locator("[data-figure='timeline'] figcaption").inner_text(),
                gpu.locator("[data-figure='timeline'] figcaption").inner_text()]
    assert captions[0].startswith("CPU-slot timeline") and captions[1].startswith("GPU timeline")
    rows = gpu.locator("[data-chart='timeline']").evaluate(
        "e => [...new Set(e.data.flatMap(t => t.y))].sort()")
    assert rows == ["n0/gpu0", "n0/gpu1"]                          # one row per device
    bands = gpu.locator("[data-chart='timeline']").evaluate(
        "e => e.data.flatMap(t => t.offset.map((o, i) => [o, o + t.width[i]]))")
    assert {(round(lo, 3), round(hi, 3)) for lo, hi in bands} == {(0.017, 0.403), (-0.403, -0.017)}
    assert "34 of 40" in gpu.locator(".card").first.inner_text()
    cards = [c.lower() for c in cpu.locator(".card .k").all_inner_texts()]
    assert "cpu slots" in cards and "mean occupancy" not in cards
    assert "mean occupancy" in [c.lower() for c in gpu.locator(".card .k").all_inner_texts()]
    gpu.locator("select[data-filter='state']").select_option("failed")
    states = gpu.locator("table.trials tbody tr td:nth-child(2)").all_inner_texts()
    assert states and set(states) == {"failed"}
    kinds = gpu.locator("[data-chart='slice']").evaluate(
        "e => [e.layout.xaxis.type, e.layout.xaxis2.type, e.data.length]")
    assert kinds == ["log", "category", 3]                 # lr on a log axis, opt by category
    gpu.locator("table.trials tbody tr").first.click()     # a failed trial: its details
    detail = gpu.locator("[data-view='trial']")
    assert detail.locator("h3").inner_text().startswith("Trial 5 (failed)")
    assert "ValueError: boom" in detail.locator("pre.failure").inner_text()
    assert detail.locator("[data-view='stays'] tr").count() == 2        # a head and one stay
    metric = detail.locator("[data-chart='trial-metrics']").evaluate("e => e.data.map(t => [t.name, t.x])")
    assert metric == [["acc", [1, 2, 3]]]
    if os.environ.get("HYPERSACK_SCREENSHOTS"):
        page.page.screenshot(path=str(tmp_path / "views.png"), full_page=True)
    assert page.errors == []
