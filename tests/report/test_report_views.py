"""What the report's views are built from (issue 31): importance only from enough trials,
devices named as what they are, progress of the trial budget with an ETA."""
from __future__ import annotations

from hypersack.report.data import from_storage, payload
from hypersack.runtime.storage.sqlite import Storage

from report_store import T0, fill_store


def _payload(path, now=None, status=None):
    with Storage(path, readonly=True) as store:
        data = from_storage(store, "small", now=now)
    data.status = status or data.status      # "running" is shown only while a driver holds it
    return payload(data)


def test_importance_is_a_note_below_10_trials_and_carries_a_caveat_below_30(tmp_path):
    few = _payload(fill_store(tmp_path / "few.db", n=3))
    assert few["importance"]["scores"] == {} and few["importance"]["n"] == 3
    assert few["importance"]["note"] == ("Parameter importance needs at least 10 trials with a value;"
                                         " this study has 3.")
    some = _payload(fill_store(tmp_path / "some.db", n=14))["importance"]    # 2 of 14 failed
    assert some["n"] == 12 and set(some["scores"]) == {"lr", "opt"}     # batch is constant
    assert "only 12 trials" in some["note"]
    many = _payload(fill_store(tmp_path / "many.db", n=40))["importance"]
    assert many["n"] > 30 and many["note"] is None and many["scores"]["lr"] > 0


def test_devices_are_named_cpu_slots_or_gpus_and_say_whether_use_was_measured(tmp_path):
    gpu = _payload(fill_store(tmp_path / "g.db"))["devices"]
    assert gpu == {"kind": "gpu", "measured": True, "names": ["n0/gpu0", "n0/gpu1"]}
    cpu = _payload(fill_store(tmp_path / "c.db", gpus=("cpu0", "cpu1")))["devices"]
    assert cpu == {"kind": "cpu", "measured": False, "names": ["n0/cpu0", "n0/cpu1"]}
    mixed = _payload(fill_store(tmp_path / "m.db", gpus=("cpu0", "gpu1")))["devices"]
    assert mixed["kind"] == "mixed"


def test_a_running_study_shows_finished_of_the_budget_and_an_eta(tmp_path):
    path = fill_store(tmp_path / "r.db", n=8, target=12, status="running", open_last=True)
    s = _payload(path, now=T0 + 40.0, status="running")["summary"]
    assert s["trials"] == 8 and s["target"] == 12
    assert s["counts"] == {"complete": 4, "paused": 1, "pruned": 1, "failed": 1, "running": 1}
    assert s["finished"] == 6        # complete, pruned, failed; not the paused nor the running
    assert s["eta_s"] == 40.0 / 6 * (12 - 6)
    done = _payload(fill_store(tmp_path / "d.db", n=8))["summary"]
    assert done["target"] == 8 and done["eta_s"] is None          # a study that ended has no ETA


def test_every_metric_of_each_trial_by_step_is_in_the_payload(tmp_path):
    from hypersack.core.trial import TrialRecord, TrialState
    path = fill_store(tmp_path / "m.db", n=2)
    with Storage(path) as store:
        sid = store.get_study("small").study_id
        store.save_batch(sid, [TrialRecord(1, {"lr": 0.02, "opt": "b", "batch": 32}, seed=1,
                                           state=TrialState.COMPLETE, attempts=1, last_step=4,
                                           value=0.2)],
                         [(1, 4, {"acc": 0.2, "loss": 1.5, "note": "text", "bad": float("nan")})])
    metrics = _payload(path)["metrics"]
    assert set(metrics) == {"0", "1"} and set(metrics["0"]) == {"acc"}
    assert metrics["1"]["acc"] == [[1, 2, 3, 4], [0.033333, 0.066667, 0.1, 0.2]]
    assert metrics["1"]["loss"] == [[4], [1.5]]            # text and NaN are not drawn


def test_the_contour_pairs_the_most_important_numbers_and_says_what_it_leaves_out(tmp_path):
    few = _payload(fill_store(tmp_path / "few.db", n=4, units=True))["contour"]
    assert few["pairs"] == [] and few["params"] == [] and few["n"] == 4
    assert few["note"].startswith("A contour plot needs at least 5 trials with a value; this study has 4.")
    one = _payload(fill_store(tmp_path / "one.db", n=12))["contour"]       # lr alone is a number
    assert one["pairs"] == [] and "two numeric parameters that vary; this study has 1" in one["note"]
    assert one["excluded"] == ["opt"] and "not numbers are left out (see the slice plot): opt" in one["note"]
    p = _payload(fill_store(tmp_path / "two.db", n=40, units=True))
    c = p["contour"]
    scores = p["importance"]["scores"]
    assert c["params"] == sorted(["lr", "units"], key=lambda k: -scores[k])   # most important first
    assert c["log"] == {"lr": True, "units": False} and c["excluded"] == ["opt"]
    assert [(q["x"], q["y"]) for q in c["pairs"]] == [tuple(c["params"])]
    grid = c["pairs"][0]["grid"]
    assert len(grid["x"]) == len(grid["y"]) == len(grid["z"]) == 30
    lr = grid["x"] if c["params"][0] == "lr" else grid["y"]
    assert lr[0] == 0.01 and abs(lr[1] / lr[0] - lr[2] / lr[1]) < 1e-3       # log-even steps
    assert len(c["trials"]["id"]) == c["n"] == 35 and set(c["trials"]["x"]) == {"lr", "units"}


def test_the_edf_has_a_line_per_state_and_a_note_below_two_trials(tmp_path):
    e = _payload(fill_store(tmp_path / "e.db", n=14))["edf"]
    assert [(line["name"], line["n"]) for line in e["lines"]] == [("complete", 8), ("pruned", 2),
                                                                   ("paused", 2)]
    done = e["lines"][0]
    assert done["x"] == [0.0, 0.2, 0.3, 0.6, 0.7, 0.9, 1.0, 1.3] and done["y"][-1] == 1.0
    assert e["note"] is None
    one = _payload(fill_store(tmp_path / "one.db", n=1))["edf"]
    assert one["lines"] == [] and one["note"] == ("The empirical distribution needs at least 2 "
                                                  "trials with a value; this study has 1.")


def test_a_simulated_report_draws_log_sampled_parameters_on_log_axes():
    from pathlib import Path

    from hypersack.report.data import from_simulation
    from hypersack.sim.run import simulate
    from hypersack.sim.scenario import load_scenario
    scenario = load_scenario(Path(__file__).resolve().parents[2] / "examples" / "sim" / "sp1_4xa100.yaml")
    result = simulate(scenario, "wfd", keep_log=False, keep_results=True)
    p = payload(from_simulation(result, result.store))
    assert [d["label"] for d in p["parallel"]] == ["accuracy", "batch_size", "lr (log)", "model"]
    assert p["slices"]["lr"]["log"] and not p["slices"]["batch_size"]["log"]
    assert p["contour"]["log"] == {"lr": True, "batch_size": False}
