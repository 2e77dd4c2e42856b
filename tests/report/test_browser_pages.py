"""The report's views beside optuna-dashboard's in a real headless Chromium: the contour and EDF
plots, the parameter filter, a trial's details, the Pareto front, and the README's picture.
Split from test_browser.py (the same browser fixture and page helpers) so that the two files
run in parallel under ``pytest -n 2 --dist loadfile``."""
from __future__ import annotations

import math

from test_browser import ROOT, Page, _assert_drawn


def _numbers_store(path, n=30):
    """``n`` trials over three numbers (``x`` linear, ``y`` log-sampled, ``k`` an integer) and
    a category ``c``; the value is driven by ``x`` and ``y`` (``k`` hardly matters); trial 3
    failed, trials 4 and 9 were pruned. Each trial reports ``v`` and ``loss`` at steps 1, 2."""
    import hypersack
    from hypersack.core.stays import Stay, StayOutcome
    from hypersack.core.trial import TrialRecord, TrialState
    from hypersack.runtime.storage.sqlite import Storage
    from report_store import T0
    spec = hypersack.Study(name="nums", objective=("v", "min"), n_trials=n, storage=path,
                           space={"x": {"type": "float", "low": 0.0, "high": 1.0},
                                  "y": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
                                  "k": {"type": "int", "low": 1, "high": 5},
                                  "c": {"type": "categorical", "choices": ["p", "q"]}}).spec.to_dict()
    with Storage(path) as store:
        sid = store.create_study("nums", spec).study_id
        for i in range(n):
            config = {"x": (i * 7 % n) / n, "y": 10 ** (-4 + 4 * ((i * 11) % n) / n), "k": 1 + (i // 6) % 5,
                      "c": "pq"[i % 2]}
            state = (TrialState.FAILED if i == 3 else TrialState.PRUNED if i in (4, 9)
                     else TrialState.COMPLETE)
            value = None if i == 3 else 3 * config["x"] + math.log10(config["y"]) + 0.01 * config["k"]
            record = TrialRecord(i, config, seed=i, state=state, attempts=1, last_step=2, value=value,
                                 metrics={} if value is None else {"v": value},
                                 started_at=T0 + i, finished_at=T0 + i + 5,
                                 error="boom" if value is None else None)
            stay = Stay(i, 1, "n0", "gpu0", T0 + i, 25.0, end=T0 + i + 5,
                        outcome=StayOutcome.FAILED if value is None else StayOutcome.FINISHED)
            results = [] if value is None else [(i, s, {"v": value * s / 2, "loss": 1.0 / s}) for s in (1, 2)]
            store.save_batch(sid, [record], results, stays=[stay])
        store.set_status(sid, "complete")
    return path


def test_the_contour_edf_parameter_filter_and_trial_details_in_the_page(browser, tmp_path):
    """Issue 31 against optuna-dashboard: a contour plot over pairs of numeric parameters (a
    selector, log axes, categories left out with a note), an EDF per state, the table filtered
    by state and by a parameter's range, and a trial's details."""
    from hypersack.report.data import from_storage, payload
    from hypersack.report.html import write_report
    from hypersack.runtime.storage.sqlite import Storage
    with Storage(_numbers_store(tmp_path / "n.db"), readonly=True) as store:
        p = payload(from_storage(store, "nums"))
    page = Page(browser)
    page.page.goto(write_report(tmp_path / "n.html", [p]).as_uri())
    page.page.wait_for_selector("[data-chart='contour'] .main-svg")
    sec = page.page.locator("section[data-study='nums']")
    _assert_drawn(page.charts(sec), ["contour", "edf"])
    contour = sec.locator("[data-chart='contour']")
    figure = sec.locator("figure[data-figure='contour']")
    pick = figure.locator("select[data-select='contour-pair']")
    first = p["contour"]["params"][:2]
    assert set(p["contour"]["params"]) == {"x", "y", "k"} and set(first) == {"x", "y"}   # k hardly matters
    assert pick.locator("option").all_inner_texts()[0] == f"{first[0]} \u00D7 {first[1]}"
    assert pick.locator("option").count() == 3                           # every pair of 3
    assert figure.locator("figcaption").inner_text().startswith(f"Contour: v over {first[0]} and {first[1]}")
    assert "left out (see the slice plot): c" in figure.locator("[data-note]").inner_text()
    drawn = contour.evaluate("e => [e.data[0].type, e.data[0].z.length, e.data[1].x.length, "
                             "e.layout.xaxis.type, e.layout.yaxis.type]")
    types = ["log" if name == "y" else "linear" for name in first]
    assert drawn == ["contour", 30, 29, *types]                 # 29 trials with a value, as dots
    svg = figure.evaluate("f => [f.querySelector('label.pick').getBoundingClientRect().bottom, "
                          "f.querySelector('[data-chart]').getBoundingClientRect().top]")
    assert svg[0] <= svg[1] + 1                                 # the selector above the plot
    pick.select_option(index=2)                             # another pair: redrawn
    last = (p["contour"]["pairs"][2]["x"], p["contour"]["pairs"][2]["y"])
    titles = contour.evaluate("e => [e.layout.xaxis.title.text, e.layout.yaxis.title.text]")
    assert [t.split(" ")[0] for t in titles] == list(last)
    assert figure.locator("figcaption").inner_text().startswith(f"Contour: v over {last[0]} and {last[1]}")
    lines = sec.locator("[data-chart='edf']").evaluate("e => e.data.map(t => [t.name, t.y[0], t.y[t.y.length - 1]])")
    assert lines == [["complete (27)", 0, 1], ["pruned (2)", 0, 1]]
    table = sec.locator("[data-view='table']")
    table.locator("select[data-filter='param']").select_option("x")
    table.locator("input[data-filter='lo']").fill("0.25")
    table.locator("input[data-filter='lo']").dispatch_event("change")
    table.locator("input[data-filter='hi']").fill("0.5")
    table.locator("input[data-filter='hi']").dispatch_event("change")
    col = p["table"]["params"]
    xs = [x for x in col["x"] if 0.25 <= x <= 0.5]
    shown = table.locator("table.trials tbody tr td:nth-child(12)")     # id..waiting, c, k, x
    assert sorted(float(v) for v in shown.all_inner_texts()) == sorted(xs) and 0 < len(xs) < 30
    table.locator("select[data-filter='state']").select_option("pruned")   # both filters at once
    ids = table.locator("table.trials tbody tr").evaluate_all("rs => rs.map(r => +r.dataset.trial)")
    assert ids == [i for i, s, x in zip(p["table"]["id"], p["table"]["state"], col["x"])
                   if s == "pruned" and 0.25 <= x <= 0.5]
    table.locator("select[data-filter='state']").select_option("")
    table.locator("select[data-filter='param']").select_option("c")        # a category: a value
    table.locator("select[data-filter='pick']").select_option("q")
    assert set(table.locator("table.trials tbody tr td:nth-child(10)").all_inner_texts()) == {"q"}
    assert table.locator("table.trials tbody tr").count() == 15
    table.locator("table.trials tbody tr[data-trial='3']").click()          # failed: its details
    detail = sec.locator("[data-view='trial']")
    assert detail.locator("h3").inner_text().startswith("Trial 3 (failed)")
    assert '"c":"q"' in detail.locator(".best-config").inner_text()         # its config
    assert "boom" in detail.locator("pre.failure").inner_text()
    table.locator("table.trials tbody tr[data-trial='5']").click()
    assert detail.locator("[data-view='stays'] tr").count() == 2              # a head and its stay
    metrics = detail.locator("[data-chart='trial-metrics']").evaluate("e => e.data.map(t => [t.name, t.x])")
    assert metrics == [["loss", [1, 2]], ["v", [1, 2]]]                       # every metric by step
    assert page.errors == []


def test_the_docs_screenshot_script_photographs_a_reports_charts_without_its_table(browser, tmp_path):
    """tools/docs_screenshot.py (``make docs-screenshot``), its picture-taking half, on a small
    stored study (the whole script also runs the demo study: a minute, left to the make target)."""
    import struct
    import subprocess
    import sys

    from hypersack.report import build_report
    from report_store import fill_store
    report = build_report(fill_store(tmp_path / "s.db", n=12, units=True), ["small"], tmp_path / "r.html")
    out = tmp_path / "shot.png"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import docs_screenshot as d; "
            "from pathlib import Path; d.screenshot(Path(sys.argv[2]), Path(sys.argv[3]), 1200)")
    done = subprocess.run([sys.executable, "-c", code, str(ROOT / "tools"), str(report), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    width, height = struct.unpack(">II", out.read_bytes()[16:24])
    assert width == 1200 and 1500 < height < 4000 and out.stat().st_size > 50_000
    assert f"wrote {out}" in done.stdout


def test_a_multi_objective_report_draws_the_pareto_front_and_says_what_the_others_show(browser, tmp_path):
    from hypersack.report.data import from_storage, payload
    from hypersack.report.html import write_report
    from report_store import fill_multi_store
    from hypersack.runtime.storage.sqlite import Storage
    path = fill_multi_store(tmp_path / "multi.db")
    with Storage(path, readonly=True) as store:
        p = payload(from_storage(store, "multi"))
    page = Page(browser)
    page.page.goto(write_report(tmp_path / "multi.html", [p]).as_uri())
    page.page.wait_for_selector("[data-chart='pareto'] .main-svg")
    sec = page.page.locator("section[data-study='multi']")
    _assert_drawn(page.charts(sec), ["pareto", "best", "curves", "timeline"])
    traces = sec.locator("[data-chart='pareto']").evaluate(
        "e => e.data.map(t => [t.name, t.x, t.y, t.text])")
    assert traces == [["dominated", [3, 5], [4, 5], ["trial 2", "trial 5"]],
                      ["Pareto front", [1, 2, 2, 4], [5, 3, 3, 1],
                       ["trial 0", "trial 1", "trial 4", "trial 3"]]]
    caption = sec.locator("[data-figure='pareto'] figcaption").inner_text()
    assert caption.startswith("Pareto front: 4 of 6 complete trials") and "latency_ms min" in caption
    for key in ("best", "importance", "slice"):
        assert "first objective, loss" in sec.locator(f"[data-note='{key}']").inner_text(), key
    cards = dict(zip((k.lower() for k in sec.locator(".card .k").all_inner_texts()),
                     sec.locator(".card .v").all_inner_texts()))      # shown in capitals
    assert cards["pareto front"] == "4 trials" and cards["front trials"] == "0, 1, 3, 4"
    assert not any(k.startswith("best") for k in cards)           # no one "best" of a front
    front = sec.locator("[data-view='front'] div").all_inner_texts()
    assert front[0].startswith("trial 0: loss 1, latency_ms 5; config")
    assert "needs at least 10 trials" in sec.locator("[data-note='importance']").inner_text()
    assert page.errors == []


# ---- issue 39: what the report says of packs, fronts, outliers; the history's toggles ------

def _open(browser, tmp_path, store, name):
    from hypersack.report.data import from_storage, payload
    from hypersack.report.html import write_report
    from hypersack.runtime.storage.sqlite import Storage
    with Storage(store, readonly=True) as s:
        p = payload(from_storage(s, name))
    page = Page(browser)
    page.page.goto(write_report(tmp_path / f"{name}.html", [p]).as_uri())
    page.page.wait_for_selector("[data-chart='timeline'] .main-svg")
    return page, page.page.locator(f"section[data-study='{name}']"), p


def _ticks(chart, axis="y"):
    texts = chart.locator(f".{axis}tick text").evaluate_all("els => els.map(e => e.textContent)")
    return [t for t in texts if t and t.strip()]


def test_a_pack_is_one_stay_and_outliers_do_not_squash_the_curves(browser, tmp_path):
    from report_store import fill_pack_store
    page, sec, p = _open(browser, tmp_path, fill_pack_store(tmp_path / "p.db", outlier=True), "packed")
    timeline = sec.locator("[data-chart='timeline']")
    bars = timeline.evaluate("e => e.data.map(t => [t.text, t.hovertext])")
    texts = [x for text, _ in bars for x in text or []]
    assert sorted(texts) == ["pack 3 (4 trials)", "t4"]             # one stay for the 4 members
    hover = [h for _, hs in bars for h in hs or [] if h.startswith("pack 3")]
    assert hover and "trials 0, 1, 2, 3" in hover[0]
    assert "pack 3 (4 trials)" in timeline.inner_text()              # the label a person reads
    boot = timeline.evaluate("e => e.data.filter(t => t.name === 'worker start-up').map(t => [t.base, t.x, t.hovertext])")
    assert boot == [[[30.0], [5.0], ["worker start-up before trial 4 (attempt 1): 5.0 s, not counted "
                                     "as the trial's running time"]]]
    assert "worker start-up" in timeline.locator(".legend").text_content()
    table = sec.locator("[data-view='table'] table.trials")
    heads = table.locator("th").all_inner_texts()
    assert [h.split(" ")[0] for h in heads[:11]] == ["id", "state", "value", "step", "attempts",
                                                     "resumes", "start", "running", "waiting",
                                                     "pack", "seat"]
    row2 = table.locator("tbody tr[data-trial='2'] td").all_inner_texts()
    assert row2[9:11] == ["3", "2"]                                  # pack 3, seat 2
    row4 = table.locator("tbody tr[data-trial='4'] td").all_inner_texts()
    assert row4[7] == "5.0 s"                                        # running: start-up left out
    table.locator("tbody tr[data-trial='2']").click()               # its stay: the pack's
    assert sec.locator("[data-view='stays'] tr").count() == 2
    curves = sec.locator("[data-chart='curves']")
    top = curves.evaluate("e => e._fullLayout.yaxis.range[1]")
    assert top < 10                                                   # the 1e6 does not squash them
    assert "off the chart" in sec.locator("[data-note='curves']").inner_text()
    assert page.errors == []


def test_the_history_and_curves_toggles_the_rank_plot_and_log_ticks(browser, tmp_path):
    page, sec, p = _open(browser, tmp_path, _numbers_store(tmp_path / "n.db"), "nums")
    best = sec.locator("[data-chart='best']")
    fig = sec.locator("figure[data-figure='best']")
    assert len(best.evaluate("e => e.data[0].x")) == 29
    fig.locator("input[data-toggle='no-pruned']").check()             # trials 4 and 9 left out
    assert sorted(best.evaluate("e => e.data[0].text.map(t => +t.split(' ')[1])")) == \
        [i for i in range(30) if i not in (3, 4, 9)]
    assert "pruned trials left out" in fig.locator("figcaption").inner_text()
    fig.locator("input[data-toggle='by-number']").check()             # history by trial number
    assert best.evaluate("e => e.layout.xaxis.title.text") == "trial number"
    assert best.evaluate("e => e.data[0].x") == [i for i in range(30) if i not in (3, 4, 9)]
    fig.locator("input[data-toggle='log']").check()                    # log y: positive values only
    assert best.evaluate("e => e.layout.yaxis.type") == "log"
    assert all(v > 0 for v in best.evaluate("e => e.data[0].y"))
    curves_fig = sec.locator("figure[data-figure='curves']")
    curves_fig.locator("input[data-toggle='no-pruned']").check()
    assert curves_fig.locator("figcaption").inner_text().startswith("Learning curves (27 trials, pruned left out")
    rank = sec.locator("[data-chart='rank']")
    colours = rank.evaluate("e => e.data[0].marker.color")
    assert len(colours) == 29 and min(colours) == 0 and max(colours) == 1
    assert sec.locator("figure[data-figure='rank'] figcaption").inner_text().startswith("Rank: 29 trials over")
    # a log axis labels decades (four decades here), never each digit between them
    for chart, axis in ((sec.locator("[data-chart='contour']"), "y" if p["contour"]["pairs"][0]["y"] == "y" else "x"),):
        ticks = _ticks(chart, axis)
        assert ticks and all(t == "1" or t.startswith("10") for t in ticks), ticks
    slice_ticks = sec.locator("[data-chart='slice']").evaluate(
        "e => Object.keys(e._fullLayout).filter(k => k.startsWith('xaxis') && e._fullLayout[k].type === 'log')"
        ".map(k => e._fullLayout[k].dtick)")
    assert slice_ticks == [1]
    assert page.errors == []
