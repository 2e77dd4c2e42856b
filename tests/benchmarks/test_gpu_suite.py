"""benchmarks/gpu/gpu_suite.py without a GPU: plans and hard limits, failure reasons, the JSON and
the table, the MPS parts against the fake ``nvidia-cuda-mps-control`` of tests/runtime/test_mps.py,
and (slow) whole checks on the CPU with FakeNvml and tiny shapes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))

import gpu_checks_device  # noqa: E402
import gpu_checks_fusion  # noqa: E402
import gpu_checks_studies  # noqa: E402
import gpu_suite  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux-only suite")


CHECK_KEYS = {"id", "name", "status", "reason", "seconds", "limit_s", "figures", "goals"}


def test_hard_limits_bound_the_whole_run():
    full, quick = gpu_suite.make_plan("full", "cuda"), gpu_suite.make_plan("quick", "cuda")
    assert sum(full["limits"].values()) < 30 * 60
    assert sum(quick["limits"].values()) < 12 * 60
    assert quick["limits"]["4"] <= 6 * 60                      # the SP3-like study: 6 minutes
    assert set(full["limits"]) == {str(n) for n in gpu_suite.CHECK_NAMES}
    assert full["sp3"]["trials"] == 32 and quick["sp3"]["trials"] == 16
    assert full["sp3"]["ratios"] == [2.0, 4.0] and quick["sp3"]["ratios"] == []
    assert max(full["fusion"]["n"]) == 64 and 32 in quick["fusion"]["n"]
    assert {"resnet18_cifar", "gpt_lm", "small_cnn"} <= set(quick["fusion"]["engines"]["workloads"])
    assert quick["fusion"]["engines"]["n"] == 32
    assert set(gpu_suite.WORKLOADS) <= set(full["fusion"]["workloads"])
    tiny = gpu_suite.make_plan("tiny", "cpu")
    assert tiny["fake_nvml"] and not full["fake_nvml"]
    assert tiny["workloads"]["gpt_lm"]["vocab"] < 100


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


def test_an_overrunning_process_group_is_stopped(monkeypatch):
    """The check's whole group goes, orphans included (a background child ignores SIGINT): the
    group's SIGKILL comes at the latest after the grace period (shortened here)."""
    monkeypatch.setattr(gpu_suite, "STOP_GRACE_S", 0.5)
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!; sleep 30"], start_new_session=True,
                            stdout=subprocess.PIPE, text=True)
    orphan = int(proc.stdout.readline())
    start = time.monotonic()
    assert gpu_suite._wait_or_stop(proc, 0.2) is True
    assert proc.poll() is not None and time.monotonic() - start < 20
    deadline = time.monotonic() + 5
    while not _gone(orphan) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(orphan)


def test_a_check_over_its_limit_fails_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_suite, "STOP_GRACE_S", 0.5)
    plan = gpu_suite.make_plan("tiny", "cpu")
    plan["limits"]["0"] = 0.3
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "plan.json").write_text(json.dumps(plan))
    entry = gpu_suite.run_check(0, plan, tmp_path, gpu_suite.python_env())
    assert entry["status"] == "fail"
    assert entry["reason"].startswith("timed out after 0.3 s (hard limit)")
    assert CHECK_KEYS <= set(entry)


def test_a_check_stopped_at_its_limit_keeps_the_figures_it_saved(tmp_path, monkeypatch):
    """Check 5 saves its figures part by part; a check stopped at its limit reports them."""
    monkeypatch.setattr(gpu_suite, "STOP_GRACE_S", 0.5)
    plan = gpu_suite.make_plan("tiny", "cpu")
    plan["limits"]["0"] = 0.3
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "plan.json").write_text(json.dumps(plan))
    partial = gpu_checks_fusion.Partial(tmp_path / "work" / "0-detect")
    partial.save(engines={"ratios": {"small_cnn": {"fused_vs_alone": 3.0}}})
    partial.save(study={"fused_vs_separate": 4.0})
    entry = gpu_suite.run_check(0, plan, tmp_path, gpu_suite.python_env())
    assert entry["status"] == "fail" and entry["partial"] is True
    assert entry["figures"] == {"engines": {"ratios": {"small_cnn": {"fused_vs_alone": 3.0}}},
                                "study": {"fused_vs_separate": 4.0}}


def test_check_5_alone_gets_the_issues_8_minutes_and_parts_their_own_limits(tmp_path,
                                                                            monkeypatch):
    quick = gpu_suite.make_plan("quick", "cuda")
    assert quick["limits"]["5"] < gpu_suite.SOLO_LIMITS[5] < 8 * 60
    assert quick["fusion"]["study"]["trials"] == 32
    assert quick["fusion"]["engines"]["workloads"][-1] == "gpt_lm"    # the largest goes last
    parts = quick["fusion"]["part_s"]
    assert max(parts.values()) < quick["limits"]["5"]
    assert gpu_checks_fusion.part_limit(quick, "procs") == parts["procs"]
    seen = {}

    def fake_run_check(number, plan, out, env):
        seen[number] = plan["limits"][str(number)]
        return {"id": number, "name": gpu_suite.CHECK_NAMES[number], "status": "pass",
                "seconds": 0.0, "limit_s": 0, "figures": {}, "goals": {}}
    monkeypatch.setattr(gpu_suite, "run_check", fake_run_check)
    gpu_suite.main(["--out", str(tmp_path), "--device", "cuda", "--quick", "--only", "5"])
    assert seen[5] == gpu_suite.SOLO_LIMITS[5]
    gpu_suite.main(["--out", str(tmp_path), "--device", "cuda", "--quick", "--only", "4,5"])
    assert seen[5] == quick["limits"]["5"]


def test_a_measuring_child_past_its_part_limit_fails_that_part(monkeypatch):
    plan = gpu_suite.make_plan("tiny", "cpu")
    plan["fusion"]["part_s"]["measure"] = 0.01
    with pytest.raises(gpu_suite.CheckFailed, match="timed out after 0.01 s"):
        gpu_checks_fusion.measure_in_child(plan, {"what": "engines", "workload": "small_cnn"})


def test_study_ratios_and_goals():
    spec = {"workload": "w", "trials": 4, "epochs": 2}
    rows = {"separate": {"makespan_s": 90.0}, "colocated": {"makespan_s": 40.0},
            "fused": {"makespan_s": 20.0}}
    figures = gpu_checks_fusion._study_figures(spec, rows, [])
    assert (figures["fused_vs_separate"], figures["fused_vs_colocated"]) == (4.5, 2.0)
    goals = gpu_checks_fusion._study_goals(figures)
    assert goals["fused_study_vs_separate"]["met"] and goals["fused_study_vs_colocated"]["met"]
    rows["fused"]["makespan_s"] = 45.0
    goals = gpu_checks_fusion._study_goals(gpu_checks_fusion._study_figures(spec, rows, []))
    assert not goals["fused_study_vs_separate"]["met"]
    assert not goals["fused_study_vs_colocated"]["met"]
    del rows["colocated"]
    figures = gpu_checks_fusion._study_figures(spec, rows, [])
    assert figures["fused_vs_colocated"] is None
    assert gpu_checks_fusion._study_goals(figures)["fused_study_vs_colocated"]["met"] is False


def test_crashes_and_check_failures_become_reasons(tmp_path, monkeypatch):
    def crash(plan, work):
        return 1 / 0

    def refuse(plan, work):
        raise gpu_suite.CheckFailed("the monitor took 0 samples", {"samples": 0},
                                    {"g": {"target": 1, "value": 0, "met": False}})
    monkeypatch.setitem(gpu_suite.CHECKS, 1, crash)
    monkeypatch.setitem(gpu_suite.CHECKS, 2, refuse)
    plan = gpu_suite.make_plan("tiny", "cpu")
    assert gpu_suite.run_check_here(1, plan, tmp_path / "w1", tmp_path / "1.json") == 1
    crashed = json.loads((tmp_path / "1.json").read_text())
    assert crashed["status"] == "fail" and crashed["reason"].startswith("ZeroDivisionError")
    assert gpu_suite.run_check_here(2, plan, tmp_path / "w2", tmp_path / "2.json") == 1
    refused = json.loads((tmp_path / "2.json").read_text())
    assert refused["reason"] == "the monitor took 0 samples"
    assert refused["figures"] == {"samples": 0} and refused["goals"]["g"]["met"] is False


def test_without_a_gpu_every_check_is_skipped_with_a_reason(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gpu_suite, "_cuda_available", lambda: False)
    assert gpu_suite.main(["--out", str(tmp_path), "--only", "1,5"]) == 1
    results = json.loads((tmp_path / "gpu_results.json").read_text())
    assert results["schema"] == gpu_suite.SCHEMA and results["passed"] is False
    assert {"date", "device_name", "driver", "mode", "checks", "goals"} <= set(results)
    assert [c["id"] for c in results["checks"]] == [0, 1, 5]
    for check in results["checks"]:
        assert CHECK_KEYS <= set(check)
        assert check["status"] == "skipped" and "no CUDA GPU" in check["reason"]
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1].startswith("| 5 | fusion | SKIPPED")          # the table comes last
    assert (tmp_path / "gpu_results.md").read_text().strip().endswith(printed[-1])


def test_table_shows_figures_goals_and_escapes_pipes():
    results = {"mode": "quick", "device_name": "NVIDIA H100 80GB HBM3", "driver": "560.1",
               "date": "2026-11-22",
               "checks": [{"id": 4, "name": "sp3_makespan", "status": "fail", "seconds": 3.0,
                           "reason": "a | b", "goals": {},
                           "figures": {"rows": [{"study": "exclusive", "makespan_s": 100.0,
                                                 "speedup_vs_exclusive": 1.0},
                                                {"study": "wfd-mps-r4", "makespan_s": 20.0,
                                                 "speedup_vs_exclusive": 5.0}]}}],
               "goals": {"wfd_mps_vs_exclusive": {"target": 4.0, "value": 5.0, "met": True}}}
    table = gpu_suite.markdown(results)
    assert "| 4 | sp3_makespan | FAIL | 3.0 | exclusive 100.0 s (1.0x); wfd-mps-r4 20.0 s (5.0x) " \
           "| a / b |" in table
    assert table.splitlines()[-1] == "- goal wfd_mps_vs_exclusive: target 4.0, measured 5.0, met"


def test_fusion_ratios_goals_and_memory_skips():
    rows = []
    for name, procs in (("resnet18_cifar", 8.0), ("mobilenet_v3_small", 12.0)):
        rows += [{"workload": name, "n": 32, "mode": "fused", "model_steps_per_s": 120.0},
                 {"workload": name, "n": 32, "mode": "procs", "model_steps_per_s": procs},
                 {"workload": name, "n": 32, "mode": "loop", "model_steps_per_s": 60.0}]
    gpu_checks_fusion._ratios(rows)
    assert [r.get("fused_speedup") for r in rows] == [None, 15.0, 2.0, None, 10.0, 2.0]
    goal = gpu_checks_fusion._fusion_goals(rows)["fused_vs_procs_at_n32"]
    assert goal["value"] == {"resnet18_cifar": 15.0, "mobilenet_v3_small": 10.0}
    assert goal["met"] is True
    rows[1]["fused_speedup"] = 9.9
    assert gpu_checks_fusion._fusion_goals(rows)["fused_vs_procs_at_n32"]["met"] is False
    memory = {"measured": True, "base_bytes": 2**30, "per_member_bytes": 2**30,
              "free_bytes": 40 * 2**30}
    assert gpu_checks_fusion._too_big(memory, 30, 0.85) is None
    assert gpu_checks_fusion._too_big(memory, 40, 0.85) == "needs 41.0 GiB, 34.0 GiB usable"
    assert gpu_checks_fusion._too_big({"measured": False}, 10**6, 0.85) is None


def test_mps_check_fails_clearly_without_the_control_program(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(gpu_suite.CheckFailed, match="nvidia-cuda-mps-control is not on PATH"):
        gpu_checks_device.check_mps(gpu_suite.make_plan("tiny", "cpu"), tmp_path)


def test_refused_mps_falls_back_to_time_slicing(tmp_path):
    got = gpu_checks_device._refused(tmp_path)
    assert got["ok"] is True and "Insufficient Permissions" in got["reason"]


def test_stale_daemon_is_recovered_with_the_fake_control(fake_mps, tmp_path):
    assert gpu_checks_device._stale_recovery(tmp_path / "crashed") is True
    assert [c["what"] for c in fake_mps()] == ["start", "quit", "start", "quit"]


def test_path_without_mps_forces_time_slicing(fake_mps):
    from hypersack.runtime.devices.mps import MPS_CONTROL
    assert any((Path(d) / MPS_CONTROL).exists() for d in os.environ["PATH"].split(os.pathsep))
    stripped = gpu_checks_studies._without_mps_on_path()
    assert not any((Path(d) / MPS_CONTROL).exists() for d in stripped.split(os.pathsep))


def test_the_cpu_memory_holder_fails_like_a_cuda_oom(tmp_path):
    from hypersack.runtime.worker.process_io import is_oom
    ledger = tmp_path / "ledger"
    ledger.write_text("0.5")

    class Ctx:
        device, attempt = "cpu", 1
    with pytest.raises(RuntimeError) as info:
        gpu_checks_studies.hold_memory({"fraction": 0.6, "ledger": str(ledger), "steps": 1,
                               "step_s": 0.0}, Ctx())
    assert is_oom(info.value)
    assert ledger.read_text() == "0.5"                  # nothing was taken


def test_sp3_space_is_a_resnet_and_mobilenet_study_on_the_pipeline():
    plan = gpu_suite.make_plan("full", "cuda")
    space = gpu_checks_studies.sp3_space(plan, 8192)
    assert space["train_size"] == 8192 and "width" not in space     # each model's own width
    assert space["model"]["choices"] == ["resnet18_cifar", "mobilenet_v3_small"]
    assert space["data"] == "pipeline" and space["cpus"] == 2 and space["epochs"] == 3
    assert space["batch_size"]["choices"] == [32, 64, 128]
    assert space["optimizer"]["choices"] == ["sgd", "adam"]


def test_sp3_studies_share_a_history_exclusive_first_then_paper_then_auto():
    names = [s["name"] for s in gpu_checks_studies.sp3_studies(gpu_suite.make_plan("quick",
                                                                                   "cuda"))]
    assert names == ["exclusive", "wfd-mps-paper", "wfd-mps-auto", "wfd-timeslice-paper",
                     "wfd-mps-auto-execution-auto"]
    full = gpu_checks_studies.sp3_studies(gpu_suite.make_plan("full", "cuda"))
    assert [s["oversubscription"] for s in full][2:4] == [2.0, 4.0]


# ---- whole checks on the CPU ------------------------------------------------------------------

def _small_tiny_plan(mode: str, device: str) -> dict:
    """The tiny plan with shorter jobs: the monitored job trains 0.5 s (its process lives over a
    second with torch's import, >= 3 samples at 0.25 s), each MPS trial 0.3 s, OOM steps 0.1 s."""
    plan = _make_plan(mode, device)
    plan.update(monitor_job_s=0.5, mps_job_s=0.3)
    plan["oom"]["step_s"] = 0.1
    return plan


_make_plan = gpu_suite.make_plan


@pytest.mark.slow
def test_cpu_suite_runs_the_detect_monitor_and_oom_checks(tmp_path, fake_mps, monkeypatch, capsys):
    """The suite's command line in this process (``main``), each check in its own process group
    as on a GPU: detection (FakeNvml), the monitor while the real training job (``_TRAIN_FOR``,
    torch) runs, and the OOM retry of a real study. MPS and the data-parallel check are below."""
    monkeypatch.setattr(gpu_suite, "make_plan", _small_tiny_plan)
    code = gpu_suite.main(["--out", str(tmp_path), "--device", "cpu", "--tiny", "--only", "1,6"])
    printed = capsys.readouterr().out
    results = json.loads((tmp_path / "gpu_results.json").read_text())
    by_name = {c["name"]: c for c in results["checks"]}
    assert code == 0, printed
    assert [c["id"] for c in results["checks"]] == [0, 1, 6]
    assert results["device_name"] == "NVIDIA H100 80GB HBM3 (FakeNvml)" and results["fake_nvml"]
    assert all(c["status"] == "pass" for c in results["checks"]), by_name
    assert by_name["nvml_monitor"]["figures"]["samples"] >= 3
    assert by_name["nvml_monitor"]["figures"]["max_utilization"] > 0
    assert sorted(by_name["oom_retry"]["figures"]["attempts"].values()) == [1, 2]
    assert by_name["oom_retry"]["figures"]["retry_ran_alone"] is True
    assert printed.strip().splitlines()[-1].startswith("| 6 | oom_retry | PASS")


_SHARE_JOB = """
import json, os, time
time.sleep({seconds!r})
print(json.dumps({{"share": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "pid": os.getpid(),
                   "cuda": False}}))
"""


@pytest.mark.slow
def test_the_mps_check_passes_with_the_fake_control(tmp_path, fake_mps, monkeypatch):
    """Check 2 in this process (``run_check_here``, as its child does) against the fake
    ``nvidia-cuda-mps-control``: daemon start, two co-located jobs at 50% each, clean stop, a
    stale daemon recovered, the refused-MPS fallback. The co-located jobs print their share
    without training (the real job's source is run by the monitor check above)."""
    monkeypatch.setattr(gpu_checks_device, "train_for_code",
                        lambda plan, seconds, trial_dir, name="resnet18_cifar":
                        _SHARE_JOB.format(seconds=seconds))
    plan = _small_tiny_plan("tiny", "cpu")
    assert gpu_suite.run_check_here(2, plan, tmp_path / "work", tmp_path / "2.json") == 0
    result = json.loads((tmp_path / "2.json").read_text())
    assert result["status"] == "pass", result
    figures = result["figures"]
    assert sorted(t["share"] for t in figures["trials"]) == ["50", "50"]
    assert figures["pids_after_stop"] == 0 and figures["control_socket_left"] is False
    assert figures["stale_recovered"] is True and figures["fallback"]["ok"] is True
    assert any(c["what"] == "start" for c in fake_mps())


@pytest.mark.parametrize("workers, status", [([1, 2], "pass"), ([1, 1], "fail")])
def test_the_data_parallel_check_wants_two_ranks_reported(tmp_path, monkeypatch, workers, status):
    """Check 7's decision on the study it ran: on the CPU two gloo slots, pass only when the
    trial reported 2 ranks. (A real trial grown to two data-parallel gloo workers on the CPU is
    tests/runtime/test_placement_study.py; on a GPU the suite runs this check whole.)"""
    ran = {}

    def fake_study(name, work, space, trials, trainable, **options):
        ran.update(name=name, trainable=trainable, options=options)
        return {"makespan_s": 1.0, "complete": 1, "results": [{"workers": w} for w in workers]}
    monkeypatch.setattr(gpu_checks_studies, "run_study", fake_study)
    plan = gpu_suite.make_plan("tiny", "cpu")
    assert gpu_suite.run_check_here(7, plan, tmp_path / "work", tmp_path / "7.json") == \
        (0 if status == "pass" else 1)
    result = json.loads((tmp_path / "7.json").read_text())
    assert result["status"] == status
    assert result["figures"]["backend"] == "gloo" and result["figures"]["workers_reported"] == workers
    if status == "fail":
        assert "not 2 ranks" in result["reason"]
    assert ran["trainable"] == "resnet18_cifar" and ran["options"]["algorithm"]["type"] == "rasda"
    slots = ran["options"]["slots"]
    assert len(slots) == 2 and all(s.env["CUDA_VISIBLE_DEVICES"] == "" for s in slots)


def test_cpu_mode_puts_the_fake_mps_control_on_path_when_none_is_there(tmp_path, monkeypatch):
    """README's ``--device cpu --tiny`` on a machine without MPS: check 2 finds the fake."""
    import shutil
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    env = gpu_suite._fake_mps_env(tmp_path / "fake")
    control = shutil.which("nvidia-cuda-mps-control", path=env["PATH"])
    assert control is not None and control.startswith(str(tmp_path / "fake"))
    assert env["FAKE_MPS_RECORD"].startswith(str(tmp_path / "fake"))
    monkeypatch.setenv("PATH", env["PATH"])                  # a real one there: left as it is
    assert gpu_suite._fake_mps_env(tmp_path / "again") == {}


def test_engine_ratios_take_the_best_fused_mode_against_alone_and_mps():
    from gpu_checks_engines import _ratios
    modes = {"alone_fp32": {"model_steps_per_s": 100.0},
             "alone_bf16_graph": {"model_steps_per_s": 200.0},
             "fused_fp32": {"model_steps_per_s": 500.0},
             "fused_bf16": {"model_steps_per_s": 1200.0},
             "fused_bf16_graph": {"model_steps_per_s": 1000.0},
             "mps": {"model_steps_per_s": 400.0}}
    r = _ratios(modes)
    assert r["best_fused_mode"] == "fused_bf16"
    assert (r["fused_vs_alone"], r["fused_vs_mps"]) == (12.0, 3.0)
    assert r["fused_vs_alone_same_precision"] == 5.0 and r["fused_fp32_vs_alone"] == 5.0
    del modes["mps"], modes["alone_bf16_graph"]
    r = _ratios(modes)
    assert r["fused_vs_mps"] is None and r["fused_vs_alone_same_precision"] is None


def _engine_figures(alone, mps, captured=True, daemon=True):
    ratios = {name: {"fused_bf16_graph_vs_alone": alone, "fused_bf16_graph_vs_mps": mps,
                     "graph_captured": captured, "mps_daemon": daemon}
              for name in ("resnet18_cifar", "mobilenet_v3_small")}
    return {"rows": [], "ratios": ratios, "errors": []}


def _fake_parts(monkeypatch, engines, study=None):
    calls = []

    def check_engines(plan, measure, procs, save, workloads, before):
        calls.append(list(workloads))
        return dict(engines, errors=list(engines["errors"])) if before is None else before
    monkeypatch.setattr(gpu_checks_fusion, "check_engines", check_engines)
    monkeypatch.setattr(gpu_checks_fusion, "study_comparison",
                        lambda plan, work, save, deadline: dict(study or {
                            "fused_vs_separate": 4.0, "fused_vs_colocated": 2.0}, errors=[]))
    return calls


@pytest.mark.parametrize("figures, missed", [
    (_engine_figures(12.0, 3.0), []),
    (_engine_figures(9.0, 3.0), ["fused_bf16_graph_vs_alone"]),
    (_engine_figures(12.0, 2.4), ["fused_bf16_graph_vs_mps"]),
    (_engine_figures(12.0, 3.0, captured=False), ["fused_bf16_graph_vs_alone",
                                                   "fused_bf16_graph_vs_mps"]),
    (_engine_figures(12.0, 3.0, daemon=False), ["fused_bf16_graph_vs_mps"]),
])
def test_check_5_fails_when_a_goal_is_missed_on_a_gpu(tmp_path, monkeypatch, figures, missed):
    plan = gpu_suite.make_plan("quick", "cuda")
    calls = _fake_parts(monkeypatch, figures)
    if not missed:
        outcome = gpu_checks_fusion.check_fusion(plan, tmp_path)
        assert all(g["met"] for g in outcome["goals"].values())
    else:
        with pytest.raises(gpu_suite.CheckFailed) as info:
            gpu_checks_fusion.check_fusion(plan, tmp_path)
        goals = info.value.args[2]
        assert sorted(k for k, g in goals.items() if not g["met"]) == sorted(missed)
        assert info.value.args[0].startswith("goals missed: ")
    # the goal workloads first, then the study, then the rest
    assert calls == [["resnet18_cifar", "mobilenet_v3_small"], ["small_cnn", "gpt_lm"]]


def test_on_the_cpu_check_5_gives_no_verdict_on_its_goals(tmp_path, monkeypatch):
    plan = gpu_suite.make_plan("tiny", "cpu")
    _fake_parts(monkeypatch, _engine_figures(1.0, 0.5, captured=False))
    outcome = gpu_checks_fusion.check_fusion(plan, tmp_path)
    assert outcome["reason"].startswith("logic only")
    assert outcome["goals"] and all(g["met"] is None and g["applicable"] is False
                                    for g in outcome["goals"].values())
    table = gpu_suite.markdown({"mode": "tiny", "device_name": "no GPU", "driver": "n/a",
                                "date": "d", "checks": [], "goals": outcome["goals"]})
    assert "not applicable on the CPU (no verdict)" in table and "NOT met" not in table


def test_check_5_keeps_its_own_clock_and_skips_what_has_no_time_left():
    now = [0.0]
    plan = {"limits": {"5": 100}, "fusion": {"part_s": {"measure": 60}}}
    deadline = gpu_checks_fusion.Deadline(plan, now=lambda: now[0])
    assert gpu_checks_fusion._limit(plan, "measure", deadline) == 60
    now[0] = 50.0
    assert gpu_checks_fusion._limit(plan, "measure", deadline) == 35    # 100 - 15 margin - 50
    now[0] = 80.0
    with pytest.raises(gpu_suite.CheckFailed, match=gpu_checks_fusion.SKIPPED):
        gpu_checks_fusion._limit(plan, "measure", deadline)
