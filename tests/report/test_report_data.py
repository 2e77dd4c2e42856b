"""The report's payload, the HTML file, the CLI commands, the DataFrame and the dashboard's API."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request

import pytest

from hypersack.report import build_report
from hypersack.report.data import from_storage, payload
from hypersack.runtime.storage.sqlite import Storage

from report_store import T0, fill_store


def _payload(path, name="small"):
    with Storage(path, readonly=True) as store:
        return payload(from_storage(store, name))


def test_the_payload_holds_every_view(small_store):
    p = _payload(small_store)
    assert p["metric"] == "acc" and p["mode"] == "max" and p["status"] == "complete"
    s = p["summary"]
    assert s["trials"] == 8 and s["devices"] == 2 and s["stays"] == 8
    assert s["best"]["trial_id"] == 7 and s["counts"]["failed"] == 1
    assert p["best"]["v"] == sorted(p["best"]["v"]) and p["best"]["id"][-1] == 7
    assert len(p["curves"]) == 8 and all(len(c["x"]) == 3 for c in p["curves"])
    assert p["lanes"]["start"][0] == 0.0                     # seconds since the first launch
    assert set(p["lanes"]["outcome"]) == {"finished", "paused", "preempted", "resized", "pruned",
                                          "failed", "lost"}
    assert set(p["occupancy"]) == {"n0/gpu0", "n0/gpu1"}
    assert max(p["occupancy"]["n0/gpu0"][1]) == 100.0        # two half-device trials at once
    assert p["utilization"]["n0/gpu0"] == [[0.0, 1.0, 2.0, 3.0, 4.0], [40.0, 41.0, 42.0, 43.0, 44.0]]
    assert p["importance"]["scores"] == {} and "at least 10" in p["importance"]["note"]
    assert [d["label"] for d in p["parallel"]] == ["acc", "lr (log)", "opt"]   # batch is constant
    failed = p["table"]["state"].index("failed")
    assert "ValueError: boom" in p["table"]["traceback"][failed]
    json.dumps(p, allow_nan=False)


def test_a_running_study_ends_its_open_stays_now_and_shows_running_curves(tmp_path):
    path = fill_store(tmp_path / "r.db", status="running", open_last=True)
    with Storage(path, readonly=True) as store:
        p = payload(from_storage(store, "small", now=T0 + 100.0))
    i = p["lanes"]["trial"].index(7)
    assert p["lanes"]["outcome"][i] == "running" and p["lanes"]["end"][i] == 100.0
    assert [c["state"] for c in p["curves"] if c["id"] == 7] == ["running"]


def test_the_report_is_one_self_contained_file(small_store, tmp_path):
    out = build_report(small_store, ["small"], tmp_path / "r.html")
    page = out.read_text()
    assert out.is_absolute() and page.startswith("<!DOCTYPE html>")
    from hypersack.report.html import plotly_js
    assert plotly_js() in page                                 # plotly.js inline, once
    ours = page.replace(plotly_js(), "")
    assert not re.search(r'<script[^>]+src=|<link[^>]+href="(?!data:)|https?://', ours)   # nothing fetched
    assert "Plotly" in page and "HyperSack.render" in page
    data = re.search(r'<script id="hypersack-data" type="application/json">(.*?)</script>', page, re.S)
    assert [p["name"] for p in json.loads(data.group(1))] == ["small"]


def test_data_cannot_close_the_script_element(tmp_path):
    from hypersack.report.html import report_html
    page = report_html([{"name": "</script><b>x", "metric": "m"}])
    assert "</script><b>" not in page


def _hs(*args, cwd):
    return subprocess.run([sys.executable, "-m", "hypersack", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def _main(*args, cwd, capsys):
    """``hypersack ARGS`` through the console entry point in this process, run from ``cwd``."""
    import os
    from types import SimpleNamespace

    from hypersack._entry import main
    here = os.getcwd()
    os.chdir(cwd)
    try:
        capsys.readouterr()
        code = main(list(args))
    finally:
        os.chdir(here)
    out = capsys.readouterr()
    return SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)


def test_report_command_writes_one_study_or_a_comparison(tmp_path, capsys):
    path = fill_store(tmp_path / "s.db", name="a")
    fill_store(path, name="b")
    one = _hs("report", "a", "--storage", str(path), cwd=tmp_path)       # the command's process
    assert one.returncode == 0, one.stderr
    assert (tmp_path / "a-report.html").exists() and str(tmp_path / "a-report.html") in one.stdout
    two = _main("report", "a", "b", "-o", "cmp.html", "--storage", str(path), cwd=tmp_path,
                capsys=capsys)
    assert two.returncode == 0, two.stderr
    page = (tmp_path / "cmp.html").read_text()
    assert '"name":"a"' in page and '"name":"b"' in page
    missing = _main("report", "nope", "--storage", str(path), cwd=tmp_path, capsys=capsys)
    assert missing.returncode == 2 and "nope" in missing.stderr


def test_without_plotly_the_error_names_the_extra(small_store, tmp_path, monkeypatch):
    from hypersack.errors import MissingDependencyError
    from hypersack.report import html
    html.plotly_js.cache_clear()
    monkeypatch.setitem(sys.modules, "plotly.offline", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'hypersack\[report\]'"):
        build_report(small_store, ["small"], tmp_path / "r.html")
    html.plotly_js.cache_clear()


def test_trials_dataframe_is_shaped_as_optunas(small_store):
    import hypersack
    frame = hypersack.Study.load("small", small_store).trials_dataframe()
    assert list(frame.columns)[:5] == ["number", "value", "datetime_start", "datetime_complete", "duration"]
    assert {"params_lr", "params_opt", "state", "metrics_acc"} <= set(frame.columns)
    assert list(frame["number"]) == list(range(8))
    row = frame.iloc[0]
    assert row["duration"].total_seconds() == pytest.approx(8.0) and row["state"] == "complete"
    assert list(frame["datetime_complete"].isna()) == [s == "paused" for s in frame["state"]]


def test_export_parquet_round_trips_or_names_pyarrow(small_store, tmp_path, capsys):
    out = _main("export", "small", "--format", "parquet", "-o", "t.parquet", "--storage",
                str(small_store), cwd=tmp_path, capsys=capsys)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        assert out.returncode == 2 and "hypersack[parquet]" in out.stderr
        return
    assert out.returncode == 0, out.stderr
    import pandas
    frame = pandas.read_parquet(tmp_path / "t.parquet")
    assert len(frame) == 8 and frame["params_lr"].iloc[2] == pytest.approx(0.03)


def test_the_dashboard_api_reads_the_store_read_only(small_store):
    from hypersack.report.dashboard import Dashboard
    board = Dashboard(small_store, port=0).start()
    try:
        assert board.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(board.url + "api/studies", timeout=10) as r:
            assert [s["name"] for s in json.load(r)] == ["small"]
        with urllib.request.urlopen(board.url + "api/study?name=small", timeout=10) as r:
            assert json.load(r)["summary"]["trials"] == 8
        with urllib.request.urlopen(board.url, timeout=10) as r:
            assert b"HyperSack.live" in r.read()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(board.url + "api/study?name=nope", timeout=10)
        assert missing.value.code == 404
    finally:
        board.close()


def test_dashboard_arguments_are_checked():
    from hypersack.errors import ConfigError
    from hypersack.report.dashboard import Dashboard
    with pytest.raises(ConfigError, match="--port"):
        Dashboard("x.db", port=70000)
    with pytest.raises(ConfigError, match="--poll-ms"):
        Dashboard("x.db", port=0, poll_ms=0)


def test_the_sample_sink_writes_at_most_every_period_and_at_the_end(small_store):
    from hypersack.runtime.devices.monitor import Sample
    from hypersack.study import _SampleSink
    now = [0.0]
    taken = [[("n0", "gpu1", Sample(T0 + 50, 10.0, 1.0, 1))], [("n0", "gpu1", Sample(T0 + 60, 20.0, 1.0, 1))]]
    with Storage(small_store) as store:
        sink = _SampleSink(store, 1, lambda: taken.pop(0) if taken else [], every_s=10.0, clock=lambda: now[0])
        sink.observe(None)                      # too soon: nothing taken
        assert len(taken) == 2
        now[0] = 11.0
        sink.observe(None)
        sink.flush()
        gpu1 = [s["utilization"] for s in store.load_samples(1) if s["gpu"] == "gpu1"]
    assert gpu1 == [10.0, 20.0]


def test_numbers_are_rounded_to_five_significant_digits_and_print_short():
    from hypersack.report.data import _rs
    values = [0.30000000000000004, 123456.7, None, float("nan"), -0.000123456789, 0.0, 2.0, 1e300]
    out = _rs(values)
    assert out == [0.3, 123460.0, None, None, -0.00012346, 0.0, 2.0, 1e300]
    assert json.dumps(out) == "[0.3, 123460.0, null, null, -0.00012346, 0.0, 2.0, 1e+300]"
    assert _rs([10.0, 12.5], shift=10.0) == [0.0, 2.5] and _rs([]) == []


def test_the_table_has_a_column_per_parameter(small_store):
    table = _payload(small_store)["table"]
    assert set(table["params"]) == {"lr", "opt", "batch"}
    assert table["params"]["lr"][:2] == [0.01, 0.02] and table["params"]["opt"][:2] == ["a", "b"]


def test_dashboard_command_serves_on_localhost_until_interrupted(small_store, tmp_path):
    """Started with SIGINT ignored, as ``cmd &`` in a script (or a test run in the background)
    starts it: the dashboard still stops on SIGINT, exit code 0."""
    import signal
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)     # the child inherits SIG_IGN
    try:
        proc = subprocess.Popen([sys.executable, "-m", "hypersack", "dashboard", "--port", "0",
                                 "--storage", str(small_store)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        line = proc.stdout.readline()
        url = re.search(r"(http://127\.0\.0\.1:\d+/)", line).group(1)
        with urllib.request.urlopen(url + "api/studies", timeout=60) as r:
            assert [s["name"] for s in json.load(r)] == ["small"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:                  # never leave a server behind
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_the_dashboard_stops_on_a_signal_it_inherited_ignored_and_restores_it(small_store, signum):
    """``serve_until_interrupted`` takes SIGINT and SIGTERM while it serves, even when the
    process started with them ignored (then Python installs no KeyboardInterrupt handler), and
    puts the previous handlers back."""
    import os
    import signal
    import threading
    import time

    from hypersack.report import dashboard
    sig = getattr(signal, signum)
    previous = signal.signal(sig, signal.SIG_IGN)

    taken: list[bool] = []

    def send_once_taken() -> None:
        deadline = time.monotonic() + 30
        while signal.getsignal(sig) is not dashboard._interrupt and time.monotonic() < deadline:
            time.sleep(0.01)
        taken.append(signal.getsignal(sig) is dashboard._interrupt)
        if taken[0]:
            os.kill(os.getpid(), sig)
        else:
            board._server.shutdown()             # the signal would be ignored: end it here
    try:
        board = dashboard.Dashboard(small_store, port=0)
        sender = threading.Thread(target=send_once_taken)
        sender.start()
        board.serve_until_interrupted()          # returns on the signal
        sender.join()
        assert taken == [True], "the dashboard did not take the signal while it served"
        assert signal.getsignal(sig) is signal.SIG_IGN
    finally:
        signal.signal(sig, previous)


def test_simulate_report_writes_the_run_and_compare_the_first_and_last_policy(tmp_path, capsys):
    from pathlib import Path

    from hypersack.cli import main
    scenario = str(Path(__file__).resolve().parents[2] / "examples" / "sim" / "sp1_4xa100.yaml")
    assert main(["simulate", scenario, "--report", str(tmp_path / "run.html"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    page = Path(out["report"]).read_text()
    assert '"source":"simulation"' in page and '"name":"sp1-4xa100 (wfd)"' in page
    assert '"outcome":["finished"' in page                     # the simulator recorded stays
    assert main(["simulate", scenario, "--compare", "--report", str(tmp_path / "cmp.html"), "--json"]) == 0
    page = Path(json.loads(capsys.readouterr().out)["report"]).read_text()
    assert '"name":"sp1-4xa100 (exclusive)"' in page and '"name":"sp1-4xa100 (wfd)"' in page


def test_a_study_without_trials_reports_empty_views(tmp_path):
    import hypersack
    path = tmp_path / "e.db"
    spec = hypersack.Study(name="e", space={"x": {"type": "float", "low": 0, "high": 1}},
                           objective=("a", "max"), n_trials=1, storage=path).spec.to_dict()
    with Storage(path) as store:
        store.create_study("e", spec)
    p = _payload(path, "e")
    assert p["summary"]["duration_s"] == 0.0 and p["summary"]["trials"] == 0
    assert p["curves"] == [] and p["lanes"]["trial"] == [] and p["best"]["v"] == []
    assert build_report(path, ["e"], tmp_path / "e.html").exists()


def test_the_dashboard_lists_nothing_while_a_store_is_being_created(tmp_path):
    from hypersack.errors import StudyNotFoundError
    from hypersack.report.dashboard import Dashboard
    (tmp_path / "new.db").write_bytes(b"")             # the driver's file, before its schema
    boards = [Dashboard(tmp_path / "new.db", port=0), Dashboard(tmp_path / "none.db", port=0)]
    try:
        assert [b.studies() for b in boards] == [[], []]
        for board in boards:              # a study asked for then is not there yet: a 404
            with pytest.raises(StudyNotFoundError, match="No study named 'live'"):
                board.study("live")
    finally:
        for b in boards:
            b.close()


def test_a_multi_objective_payload_marks_the_pareto_front(tmp_path, small_store):
    from report_store import MULTI_VALUES, fill_multi_store
    p = _payload(fill_multi_store(tmp_path / "multi.db"), "multi")
    f = p["pareto"]
    assert f["metrics"] == ["loss", "latency_ms"] and f["modes"] == ["min", "min"]
    assert f["id"] == [0, 1, 2, 3, 4, 5]                      # complete trials only
    assert list(zip(f["x"], f["y"])) == MULTI_VALUES
    assert f["front"] == [True, True, False, True, True, False]   # ties kept, 2 and 5 dominated
    assert p["metric"] == "loss"                               # the other views: the first objective
    assert _payload(small_store)["pareto"] is None             # one objective: no front view


def test_a_fused_pack_is_one_stay_with_its_members_and_the_table_names_pack_and_seat(tmp_path):
    from report_store import fill_pack_store
    with Storage(fill_pack_store(tmp_path / "p.db"), readonly=True) as store:
        p = payload(from_storage(store, "packed"))
    lanes = p["lanes"]
    assert lanes["members"] == [[0, 1, 2, 3], None] and lanes["pack"] == ["3", None]
    assert lanes["start"] == [0.0, 30.0] and lanes["end"] == [13.0, 40.0]
    assert p["table"]["pack"] == ["3", "3", "3", "3", None] and p["table"]["seat"] == [0, 1, 2, 3, None]
    assert lanes["began"] == [None, 35.0]                    # the plain trial's worker started up
    assert p["table"]["running"][4] == 5.0                   # 10 s on the slot, 5 s of start-up


def test_a_multi_objective_summary_holds_the_front_not_one_best(tmp_path):
    from report_store import fill_multi_store
    with Storage(fill_multi_store(tmp_path / "m.db"), readonly=True) as store:
        s = payload(from_storage(store, "multi"))["summary"]
    assert s["best"] is None and s["best_complete"] is None
    assert [t["trial_id"] for t in s["front"]] == [0, 1, 3, 4]
    assert s["front"][0]["values"] == {"loss": 1.0, "latency_ms": 5.0}


def test_the_importance_says_why_it_is_empty_when_no_parameter_varies():
    from hypersack.report.data import _importance
    valued = [{"config": {"a": 1}, "value": float(i)} for i in range(12)]
    assert _importance(valued)["note"] == ("No parameter varies across the 12 trials with a "
                                           "value: there is nothing to rank.")
    assert "at least 10 trials" in _importance(valued[:3])["note"]


def test_the_learning_curves_range_leaves_an_outlier_out():
    from hypersack.report.data import _robust_range
    values = [1.0 + 0.01 * i for i in range(100)] + [1e6]
    r = _robust_range(values)
    assert r["linear"][1] < 3 and r["clipped"] == 1 and r["log"][1] < 1
    assert _robust_range([-1.0, 1.0])["log"] is None and _robust_range([]) is None


def test_the_learning_curves_range_keeps_slow_early_epochs():
    from hypersack.report.data import _robust_range
    values = [0.1, 0.2, 0.3] + [0.9 + 0.001 * i for i in range(60)]     # early epochs, then a plateau
    r = _robust_range(values)
    assert r["clipped"] == 0 and r["linear"][0] < 0.1
    ten = [0.2 + 0.1 * i for i in range(9)] + [1e6]                   # one diverged value in ten
    assert _robust_range(ten)["clipped"] == 1 and _robust_range(ten)["linear"][1] < 2
