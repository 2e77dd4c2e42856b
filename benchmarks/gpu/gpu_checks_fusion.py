"""Check 5 of the GPU suite: fused packs against a Python loop and against one process per
model, and a fused study against a separate and a co-located one; ``measure`` is the measuring
child's side (``gpu_suite.py --measure JOB``).

Every part (one workload's measurement, its N processes, one study) has its own time limit
(``plan["fusion"]["part_s"]``), and the figures so far are written to ``WORK/partial.json``
after each part, so a part that overruns, or the check's own limit, loses only what was not
yet measured (``gpu_suite.run_check`` reads the partial figures of a check it had to stop).
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from gpu_checks_engines import (SMALL_CNN, check_engines, measure_engines,
                                small_cnn_workload)
from gpu_common import SMALL_MODELS, CheckFailed, _last_line, python_env, run_study, torch_device

SUITE = Path(__file__).resolve().with_name("gpu_suite.py")
SKIPPED = "skipped: check 5's time limit is spent"

# ---- check 5: fused packs against a loop and against processes ---------------------------------

class Partial:
    """The check's figures so far, rewritten to ``work/partial.json`` at each ``save``."""

    def __init__(self, work: Path):
        work.mkdir(parents=True, exist_ok=True)
        self.path = work / "partial.json"
        self.figures: dict[str, Any] = {}

    def save(self, **figures: Any) -> None:
        self.figures.update(figures)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.figures, indent=2, default=str))
        tmp.replace(self.path)


def check_fusion(plan: dict, work: Path) -> dict:
    """Check 5 (see the module docstring). Order: the engine part of the workloads with goals
    (ResNet-18, MobileNet), the study, then the other engine workloads and the full mode's
    rows, so a check short of time loses what has no goal. Fails (``CheckFailed``) when a
    part fails or a goal is missed; on the CPU the goals are not applicable (no verdict)."""
    fusion = plan["fusion"]
    partial = Partial(work)
    deadline = Deadline(plan)
    figures: dict[str, Any] = {}
    errors: list[str] = []
    engines = fusion.get("engines")
    if engines:
        first = [w for w in engines["workloads"] if w in SMALL_MODELS]
        figures["engines"] = _engines(plan, partial, deadline, first, None)
    if fusion["study"]:
        figures["study"] = study_comparison(plan, work, lambda s: partial.save(study=s),
                                            deadline)
        errors += figures["study"].pop("errors")
    if engines:
        rest = [w for w in engines["workloads"] if w not in SMALL_MODELS]
        figures["engines"] = _engines(plan, partial, deadline, rest, figures["engines"])
        errors += figures["engines"].pop("errors")
    rows, memories = _loop_and_procs(plan, partial, deadline, errors)
    figures.update(rows=rows, memory=memories)
    partial.save(**figures)
    goals = _fusion_goals(rows) if fusion["workloads"] else {}
    goals.update(_engine_goals(figures.get("engines")))
    goals.update(_study_goals(figures.get("study")))
    goals = {k: applicable(g, plan["device"]) for k, g in goals.items()}
    skipped = [e for e in errors if SKIPPED in e]       # out of time: only goals can fail it
    errors = [e for e in errors if SKIPPED not in e]
    if skipped:
        figures["skipped"] = skipped
        partial.save(skipped=skipped)
    missed = [f"{k} (target {g['target']}, measured {g['value']})" for k, g in goals.items()
              if g["met"] is False]
    if errors or missed:
        text = "; ".join(([f"goals missed: {', '.join(missed)}"] if missed else []) + errors)
        raise CheckFailed(text[:900], figures, goals)
    outcome = {"figures": figures, "goals": goals}
    if plan["device"] != "cuda":
        outcome["reason"] = "logic only: speed goals are not applicable on the CPU"
    return outcome


class Deadline:
    """Check 5's own clock: its hard limit less a margin to write the result. A part gets at
    most its part limit and never more than what is left (``seconds``); ``spent`` once less
    than ``MIN_PART_S`` is left (the part is skipped, and says so)."""
    MARGIN_S = 15.0
    MIN_PART_S = 10.0

    def __init__(self, plan: dict, now: Callable[[], float] = time.monotonic):
        self.now = now
        self.end = now() + float(plan["limits"]["5"]) - self.MARGIN_S

    def seconds(self, part_s: float) -> float:
        return max(0.0, min(part_s, self.end - self.now()))

    @property
    def spent(self) -> bool:
        return self.end - self.now() < self.MIN_PART_S


def applicable(goal: dict, device: str) -> dict:
    """The goal as judged on ``device``: on anything but CUDA no verdict (``met`` None,
    ``applicable`` False): the CPU runs the logic, not the speed."""
    if device == "cuda":
        return dict(goal, applicable=True)
    return dict(goal, met=None, applicable=False,
                note="not applicable on the CPU (the check ran its logic only)")


def _engines(plan: dict, partial: Partial, deadline: "Deadline", workloads: list[str],
             before: dict | None) -> dict:
    def measure(plan_: dict, job: dict) -> dict:
        return measure_in_child(plan_, job, deadline)

    def procs(plan_: dict, name: str, config: dict, n: int, env: Any = None) -> dict:
        return run_procs(plan_, name, config, n, env, deadline)
    got = check_engines(plan, measure, procs, lambda e: partial.save(engines=e), workloads,
                        before)
    partial.save(engines=got)
    return got


def _loop_and_procs(plan: dict, partial: Partial, deadline: "Deadline",
                    errors: list[str]) -> tuple[list[dict], dict]:
    """The full mode's rows: per workload and N, the fused pack, a Python loop and N
    processes."""
    fusion = plan["fusion"]
    rows: list[dict] = []
    memories: dict[str, dict] = {}
    for name in fusion["workloads"]:
        config = plan["workloads"][name]
        try:
            memory = measure_in_child(plan, {"what": "memory", "workload": name,
                                             "config": config}, deadline)
        except CheckFailed as exc:
            errors.append(f"{name} memory: {exc}")
            continue
        memories[name] = {"measured": memory["measured"],
                          "per_member_gb": round(memory["per_member_bytes"] / 2**30, 3),
                          "base_gb": round(memory["base_bytes"] / 2**30, 3),
                          "free_gb": round(memory["free_bytes"] / 2**30, 1)}
        for n in fusion["n"]:
            skip = _too_big(memory, n, fusion["memory_fraction"])
            for mode in ("fused", "loop", "procs"):
                if mode == "procs" and n > fusion["procs_max_n"]:
                    continue
                row = {"workload": name, "n": n, "mode": mode}
                if skip:
                    rows.append(dict(row, skipped=skip))
                    continue
                try:
                    got = run_procs(plan, name, config, n, None, deadline) \
                        if mode == "procs" else \
                        measure_in_child(plan, {"what": mode, "workload": name,
                                                "config": config, "n": n}, deadline)
                except CheckFailed as exc:
                    errors.append(f"{name} N={n} {mode}: {exc}")
                    rows.append(dict(row, error=str(exc)))
                    continue
                rows.append(dict(row, model_steps_per_s=round(n * got["steps"] / got["seconds"],
                                                              2),
                                 peak_memory_mb=round(got["peak_mb"], 1),
                                 **({"graphs": got["graphs"]} if "graphs" in got else {})))
                partial.save(rows=rows, memory=memories)
    _ratios(rows)
    return rows, memories


def _too_big(memory: dict, n: int, fraction: float) -> str | None:
    if not memory.get("measured"):
        return None
    need = memory["base_bytes"] + n * memory["per_member_bytes"]
    room = memory["free_bytes"] * fraction
    if need <= room:
        return None
    return f"needs {need / 2**30:.1f} GiB, {room / 2**30:.1f} GiB usable"


def _ratios(rows: list[dict]) -> None:
    fused = {(r["workload"], r["n"]): r.get("model_steps_per_s") for r in rows
             if r["mode"] == "fused"}
    for r in rows:
        base = fused.get((r["workload"], r["n"]))
        if r["mode"] != "fused" and base and r.get("model_steps_per_s"):
            r["fused_speedup"] = round(base / r["model_steps_per_s"], 2)


def _fusion_goals(rows: list[dict]) -> dict:
    best: dict[str, float] = {}
    for r in rows:
        if r["mode"] == "procs" and r["n"] >= 32 and "fused_speedup" in r:
            best[r["workload"]] = max(best.get(r["workload"], 0.0), r["fused_speedup"])
    measured = [name for name in SMALL_MODELS if name in best]     # quick: ResNet-18 only
    met = bool(measured) and all(best[name] >= 10 for name in measured)
    return {"fused_vs_procs_at_n32": {"target": 10.0, "value": best or None, "met": met}}


def _engine_goals(engines: dict | None) -> dict:
    """The issue's goals for the fused engine at N = 32 on ResNet-18 and MobileNet: the pack
    in bf16 with its step as a captured CUDA graph >= 10x the trial alone (fp32 eager), and
    >= 2.5x N processes under MPS. A workload not measured, a graph not captured or an MPS
    daemon that did not start misses its goal (the value says which)."""
    if not engines:
        return {}
    ratios = engines.get("ratios", {})
    alone: dict[str, Any] = {}
    mps: dict[str, Any] = {}
    for name in SMALL_MODELS:
        r = ratios.get(name) or {}
        graph = r.get("graph_captured")
        alone[name] = r.get("fused_bf16_graph_vs_alone") if graph else \
            (None if not r else "graph not captured")
        mps[name] = r.get("fused_bf16_graph_vs_mps") if graph and r.get("mps_daemon") else \
            (None if not r else ("graph not captured" if not graph else "no MPS daemon"))

    def met(values: dict, target: float) -> bool:
        return all(isinstance(v, (int, float)) and v >= target for v in values.values())
    return {"fused_bf16_graph_vs_alone": {"target": 10.0, "value": alone, "met": met(alone, 10.0)},
            "fused_bf16_graph_vs_mps": {"target": 2.5, "value": mps, "met": met(mps, 2.5)}}


def _study_goals(study: dict | None) -> dict:
    """The fused study >= 3x the separate one and faster than the co-located one."""
    if not study:
        return {}
    sep, col = study.get("fused_vs_separate"), study.get("fused_vs_colocated")
    return {"fused_study_vs_separate": {"target": 3.0, "value": sep,
                                        "met": sep is not None and sep >= 3.0},
            "fused_study_vs_colocated": {"target": 1.0, "value": col,
                                         "met": col is not None and col > 1.0}}


def part_limit(plan: dict, part: str) -> float:
    """Seconds one part of check 5 may take (``measure``, ``procs`` or ``study``)."""
    return float(plan["fusion"].get("part_s", {}).get(part, 600))


def _limit(plan: dict, part: str, deadline: "Deadline | None") -> float:
    """The part's limit, cut to what the check has left; CheckFailed when that is nothing."""
    limit = part_limit(plan, part)
    if deadline is None:
        return limit
    if deadline.spent:
        raise CheckFailed(f"{SKIPPED} ({plan['limits']['5']} s)")
    return deadline.seconds(limit)


def measure_in_child(plan: dict, job: dict, deadline: "Deadline | None" = None) -> dict:
    """One measurement in a fresh process (its own peak memory); ``--measure JOB``; a child
    past its part limit (or the check's time left) is killed and the part fails with
    "timed out"."""
    job = dict(job, device=torch_device(plan), steps=plan["fusion"]["steps"],
               warmup=plan["fusion"]["warmup"])
    limit = _limit(plan, "measure", deadline)
    try:
        done = subprocess.run([sys.executable, str(SUITE), "--measure", json.dumps(job)],
                              capture_output=True, text=True, env=python_env(), timeout=limit)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"{job['what']} timed out after {limit:g} s (part limit)") from None
    if done.returncode != 0:
        raise CheckFailed(_last_line(done.stderr))
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_procs(plan: dict, name: str, config: dict, n: int,
              env: dict[str, str] | None = None, deadline: "Deadline | None" = None) -> dict:
    """N processes, one model each, started together behind a file barrier; the time from the
    first one's timed start to the last one's end. ``env``: extra environment (MPS's)."""
    with tempfile.TemporaryDirectory() as barrier:
        job = {"what": "loop", "workload": name, "config": config, "n": 1,
               "device": torch_device(plan), "steps": plan["fusion"]["steps"],
               "warmup": plan["fusion"]["warmup"], "barrier": barrier}
        procs = [subprocess.Popen([sys.executable, str(SUITE), "--measure",
                                   json.dumps(dict(job, rank=i))], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=python_env(env))
                 for i in range(n)]
        limit = _limit(plan, "procs", deadline)
        ends = time.monotonic() + limit
        try:
            while len(list(Path(barrier).glob("ready-*"))) < n:
                if any(p.poll() not in (None, 0) for p in procs):
                    bad = next(p for p in procs if p.poll() not in (None, 0))
                    raise CheckFailed(f"a process did not get ready: "
                                      f"{_last_line(bad.stderr.read())}")
                if time.monotonic() > ends:
                    raise CheckFailed(f"{n} processes not ready after {limit:g} s (part limit)")
                time.sleep(0.05)
            (Path(barrier) / "go").touch()
            results = []
            for p in procs:
                try:
                    out, err = p.communicate(timeout=max(1.0, ends - time.monotonic()))
                except subprocess.TimeoutExpired:
                    raise CheckFailed(f"{n} processes timed out after {limit:g} s "
                                      "(part limit)") from None
                if p.returncode != 0:
                    raise CheckFailed(_last_line(err))
                results.append(json.loads(out.strip().splitlines()[-1]))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {"seconds": seconds, "steps": plan["fusion"]["steps"],
            "peak_mb": sum(r["peak_mb"] for r in results)}


STUDY_EXECUTIONS = (
    # (name, Study options): one trial per device at a time; trials co-located under MPS at
    # the paper's oversubscription ratio; every trial in fused packs.
    ("separate", {"execution": "separate", "placement": "exclusive"}),
    ("colocated", {"execution": "separate", "placement": "wfd", "oversubscription": "paper"}),
    ("fused", {"execution": "fused"}),
)


def study_comparison(plan: dict, work: Path, save: Callable[[dict], None],
                     deadline: "Deadline | None" = None) -> dict:
    """The same ASHA study (``plan["fusion"]["study"]``: workload, config, trials, epochs) run
    separately, co-located and fused; makespans and ``fused_vs_separate`` /
    ``fused_vs_colocated``. Each study's time budget is the part limit, so an overrun ends that
    study (its row says ``complete`` < trials) instead of the check."""
    spec = plan["fusion"]["study"]
    config = dict(spec["config"], epochs=spec["epochs"])
    space = dict(config, lr={"type": "float", "low": 1e-3, "high": 3e-2, "log": True})
    algorithm = {"type": "asha", "min_t": 1, "max_t": spec["epochs"], "reduction_factor": 3,
                 "mode": "stop"}
    rows: dict[str, dict] = {}
    errors: list[str] = []
    for name, options in STUDY_EXECUTIONS:
        trainable: Any = spec["workload"]
        if name == "fused":        # the task of this data (the built-in's has the defaults)
            trainable = _task({"workload": spec["workload"], "config": config})[1]
            options = dict(options, pack={"max_members": spec["max_members"]})
        try:
            budget = _limit(plan, "study", deadline)
            row = run_study(f"study-{name}", work, space, spec["trials"], trainable,
                            algorithm=algorithm, workers=spec["workers"],
                            time_budget_s=budget, **options)
        except Exception as exc:      # one study's failure is a row, not the check's end
            errors.append(f"study {name}: {type(exc).__name__}: {exc}"[:300])
            rows[name] = {"error": str(exc)[:300]}
            continue
        row.pop("results")
        rows[name] = row
        if row["ended"] < spec["trials"] or row["failed"]:
            errors.append(f"study {name}: {row['ended']} of {spec['trials']} trials ended "
                          f"({row['failed']} failed) in {row['makespan_s']} s")
        save(_study_figures(spec, rows, errors))
    return dict(_study_figures(spec, rows, []), errors=errors)


def _study_figures(spec: dict, rows: dict[str, dict], errors: list[str]) -> dict:
    def ratio(base: str) -> float | None:
        a, b = rows.get(base, {}).get("makespan_s"), rows.get("fused", {}).get("makespan_s")
        return round(a / b, 2) if a and b else None
    return {"workload": spec["workload"], "trials": spec["trials"], "epochs": spec["epochs"],
            "algorithm": "asha", "rows": rows, "fused_vs_separate": ratio("separate"),
            "fused_vs_colocated": ratio("colocated"), "errors_so_far": list(errors)}


# ---- the measuring child (``--measure``) -------------------------------------------------------

def _sync(device: str) -> None:
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _peak_mb(device: str) -> float:
    import resource

    import torch
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _task(job: dict) -> Any:
    from hypersack.workloads import lm, vision
    from hypersack.workloads.synthetic import SyntheticTask
    if job["workload"] == SMALL_CNN:
        workload = small_cnn_workload()
        return workload, SyntheticTask(workload)
    workload = {"resnet18_cifar": vision.RESNET18_WORKLOAD, "gpt_lm": lm.GPT_WORKLOAD,
                "mobilenet_v3_small": vision.MOBILENET_WORKLOAD}[job["workload"]]
    data = {k: job["config"][k] for k in workload.data_keys if k in job["config"]}
    return workload, SyntheticTask(workload, **data)


def measure(job: dict) -> dict:
    import torch
    from hypersack.fusion.task import Member
    device, steps, warmup = job["device"], job["steps"], job["warmup"]
    workload, task = _task(job)
    if job["what"] == "memory":
        from hypersack.fusion.memory import measure_member_memory
        profile = measure_member_memory(task, job["config"], device)
        if device.startswith("cuda"):
            torch.cuda.empty_cache()      # the probe packs' cached blocks are not "used"
        free = torch.cuda.mem_get_info()[0] if device.startswith("cuda") else 0
        return {"measured": profile.measured, "base_bytes": profile.base_bytes,
                "per_member_bytes": profile.per_member_bytes, "free_bytes": free}
    if job["what"] == "engines":
        return measure_engines(job, workload, task, _loop_step, _sync, _peak_mb)
    configs = [dict(job["config"], lr=1e-3 * (1 + i % 7), optimizer="adam")
               for i in range(job["n"])]
    pack = None
    if job["what"] == "fused":
        from hypersack.fusion.runner import Pack
        pack = Pack(task, device)
        for i, config in enumerate(configs):
            pack.load(Member(trial_id=i, config=config, seed=i))
        step: Callable[[int], None] = lambda k: pack.train_iteration()  # noqa: E731
    else:
        step = _loop_step(workload, task, configs, device)
    for k in range(warmup):
        step(k)
    _sync(device)
    if "barrier" in job:
        (Path(job["barrier"]) / f"ready-{job['rank']}").touch()
        while not (Path(job["barrier"]) / "go").exists():
            time.sleep(0.01)
    start, t0 = time.time(), time.perf_counter()
    for k in range(steps):
        step(warmup + k)
    _sync(device)
    seconds = time.perf_counter() - t0
    got = {"seconds": seconds, "steps": steps, "peak_mb": _peak_mb(device), "start": start,
           "end": start + seconds}
    if pack is not None:           # whether its step ran as a captured graph
        got["graphs"] = pack.captures > 0 and pack.graphs_enabled
    return got


def _loop_step(workload: Any, task: Any, configs: list[dict], device: str) -> Callable[[int], None]:
    """N plain models with torch.optim.Adam, trained one after the other at every step."""
    import torch
    x, y = (t.to(device) for t in task.train_data())
    models, optimizers = [], []
    for i, config in enumerate(configs):
        torch.manual_seed(i)
        model = workload.build(workload.with_defaults(config)).to(device).train()
        models.append(model)
        optimizers.append(torch.optim.Adam(model.parameters(), lr=config["lr"]))
    b = int(workload.with_defaults(configs[0])["batch_size"])
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0)).to(device)

    def step(k: int) -> None:
        start = (k * b) % max(len(y) - b, 1)
        idx = order[start:start + b]
        for model, optimizer in zip(models, optimizers):
            optimizer.zero_grad(set_to_none=True)
            workload.per_sample_loss(model(x[idx]), y[idx]).mean().backward()
            optimizer.step()
    return step


