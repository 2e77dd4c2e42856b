"""Check 5, engine part: per workload at N members, the trial alone against the fused pack in
each precision and graph mode, and against N processes (under MPS where the daemon starts).

Modes, each in model-steps/s (mini-batch updates summed over the models):

- ``alone_fp32``: one plain model, torch.optim.Adam, fp32, eager (the trial as users run it);
- ``alone_bf16_graph``: the trial alone as a pack of one, bf16 autocast, step in a CUDA graph;
- ``fused_fp32`` / ``fused_bf16`` / ``fused_bf16_graph``: one pack of N on the horizontally
  fused engine, fp32 eager, bf16 eager, bf16 with the whole step in a CUDA graph;
- ``mps``: N plain fp32 processes started together (``gpu_checks_fusion.run_procs``), under an
  MPS daemon when one starts (``mps_daemon`` says).

Each row's ``graphs`` says whether a CUDA graph was captured and replayed in that mode (the
pack's capture count), not the mode asked for. On the CPU (``--tiny``) graphs cannot be
captured: the graph modes run eagerly (``graphs`` False), so the logic runs in seconds. Per
workload the ratios are ``fused_vs_alone`` (the best fused mode / alone_fp32),
``fused_bf16_graph_vs_alone`` (fused_bf16_graph / alone_fp32: the issue's 10x goal),
``fused_vs_alone_same_precision`` (fused_bf16_graph / alone_bf16_graph), ``fused_fp32_vs_alone``
(fused_fp32 / alone_fp32), ``fused_vs_mps`` (the best fused mode / mps) and
``fused_bf16_graph_vs_mps`` (the issue's 2.5x goal), with ``best_fused_mode`` naming the best.
"""
from __future__ import annotations

import time
from typing import Any, Callable

SMALL_CNN = "small_cnn"
FUSED_MODES = (("fused_fp32", "fp32", "off"), ("fused_bf16", "bf16", "off"),
               ("fused_bf16_graph", "bf16", "on"))


def small_cnn_workload() -> Any:
    """The digits CNN (``hypersack.workloads.digits.build_cnn``) as a GPU-suite workload."""
    from hypersack.workloads.digits import build_cnn, load_digits_split
    from hypersack.workloads.synthetic import Workload
    from hypersack.workloads.vision import classification_loss, classification_metrics
    return Workload(
        name=SMALL_CNN, build=lambda c: build_cnn(int(c["channels"]), int(c["hidden"]), 0.0),
        data=lambda c: load_digits_split(), per_sample_loss=classification_loss,
        metrics=classification_metrics, model_keys=("channels", "hidden"), data_keys=(),
        defaults={"channels": 16, "hidden": 64, "batch_size": 32})


def engine_configs(tiny: bool) -> dict[str, dict[str, Any]]:
    """The config measured per workload (the plan's workload configs, plus the small CNN)."""
    return {SMALL_CNN: {"channels": 4 if tiny else 16, "hidden": 8 if tiny else 64,
                        "batch_size": 8 if tiny else 32}}


def check_engines(plan: dict, measure_in_child: Callable, run_procs: Callable,
                  save: Callable[[dict], None] = lambda figures: None,
                  workloads: list[str] | None = None,
                  before: dict | None = None) -> dict:
    """Rows per workload and mode, and each workload's ratios (see the module docstring);
    ``save(figures so far)`` after each part (one workload's modes, its N processes).
    ``workloads``: these of the plan's (None: all); ``before``: figures of an earlier call,
    continued."""
    spec = plan["fusion"]["engines"]
    before = before or {}
    rows, ratios = list(before.get("rows", [])), dict(before.get("ratios", {}))
    errors = list(before.get("errors", []))
    for name in spec["workloads"] if workloads is None else workloads:
        save({"rows": rows, "ratios": ratios, "errors_so_far": list(errors)})
        config = dict(spec["configs"].get(name) or plan["workloads"][name])
        n = spec["n"]
        try:
            got = measure_in_child(plan, {"what": "engines", "workload": name,
                                          "config": config, "n": n})
        except Exception as exc:       # CheckFailed: one workload's failure is a row
            errors.append(f"{name} engines: {exc}")
            rows.append({"workload": name, "n": n, "error": str(exc)[:300]})
            continue
        modes = got["modes"]
        ratios[name] = dict(_ratios(modes), engine=got["engine"])
        save({"rows": rows + [dict(f, workload=name, n=n, mode=m) for m, f in modes.items()],
              "ratios": ratios, "errors_so_far": list(errors)})
        if spec["mps"]:
            modes["mps"] = _mps(plan, name, config, n, run_procs)
            if "error" in modes["mps"]:
                errors.append(f"{name} mps: {modes['mps']['error']}")
        for mode, figures in modes.items():
            rows.append(dict(figures, workload=name, n=n, mode=mode))
        ratios[name] = dict(_ratios(modes), engine=got["engine"])
    return {"rows": rows, "ratios": ratios, "errors": errors}


def _mps(plan: dict, name: str, config: dict, n: int, run_procs: Callable) -> dict:
    daemon, env = None, None
    if plan["device"] == "cuda":
        from hypersack.runtime.devices.mps import MpsDaemon
        import tempfile
        daemon = MpsDaemon(tempfile.mkdtemp(prefix="hs-mps-"), timeout_s=20)
        env = daemon.env_for(100.0) if daemon.start() else None
    try:
        got = run_procs(plan, name, config, n, env=env)
    except Exception as exc:     # CheckFailed (a part limit included): the row says why
        return {"error": str(exc)[:300], "mps_daemon": env is not None}
    finally:
        if daemon is not None and env is not None:
            daemon.stop()
    return {"model_steps_per_s": round(n * got["steps"] / got["seconds"], 2),
            "peak_memory_mb": round(got["peak_mb"], 1), "mps_daemon": env is not None}


def _ratios(modes: dict) -> dict:
    """The issue's ratios: ``fused_vs_alone`` is the fused pack in its best mode over the trial
    alone in fp32 eager (what a user runs today); ``fused_vs_alone_same_precision`` compares
    bf16 + graph on both sides; ``fused_vs_mps`` the best fused mode over N processes."""
    def rate(mode: str) -> float | None:
        return (modes.get(mode) or {}).get("model_steps_per_s")

    def ratio(x: float | None, y: float | None) -> float | None:
        return round(x / y, 2) if x and y else None
    fused = {mode: rate(mode) for mode, _, _ in FUSED_MODES if rate(mode)}
    best = max(fused, key=lambda m: fused[m]) if fused else None
    top = fused.get(best) if best else None
    graph = rate("fused_bf16_graph")
    return {"fused_vs_alone": ratio(top, rate("alone_fp32")),
            "fused_bf16_graph_vs_alone": ratio(graph, rate("alone_fp32")),
            "fused_vs_alone_same_precision": ratio(graph, rate("alone_bf16_graph")),
            "fused_fp32_vs_alone": ratio(rate("fused_fp32"), rate("alone_fp32")),
            "fused_vs_mps": ratio(top, rate("mps")),
            "fused_bf16_graph_vs_mps": ratio(graph, rate("mps")),
            "graph_captured": bool((modes.get("fused_bf16_graph") or {}).get("graphs")),
            "mps_daemon": (modes.get("mps") or {}).get("mps_daemon"),
            "best_fused_mode": best}


# ---- the measuring child (``--measure`` with what = "engines") ---------------------------------

def measure_engines(job: dict, workload: Any, task: Any, loop_step: Callable,
                    sync: Callable, peak_mb: Callable) -> dict:
    """Every mode of one workload in this one process (one start-up, one pack built)."""
    device, n = job["device"], job["n"]
    config = dict(job["config"], optimizer="adam")
    graphs = "on" if device.startswith("cuda") else "off"
    modes: dict[str, dict] = {}
    step = loop_step(workload, task, [dict(config, lr=1e-3)], device)
    modes["alone_fp32"] = _timed(step, 1, job, sync, peak_mb)
    # the lone pack lives only in this call: its memory is free before the pack of N is built
    modes["alone_bf16_graph"] = _alone_graph(task, device, config, graphs, job, sync, peak_mb)
    pack = _pack(task, device, [dict(config, lr=1e-3 * (1 + i % 7)) for i in range(n)],
                 "fp32", "off")
    engine = pack.engine
    for mode, precision, graph in FUSED_MODES:
        pack.set_mode(precision, graph if graphs == "on" else "off")
        modes[mode] = dict(_timed(lambda k: pack.train_iteration(), n, job, sync, peak_mb),
                           graphs=_captured(pack))
    return {"modes": modes, "engine": engine}


def _alone_graph(task: Any, device: str, config: dict, graphs: str, job: dict,
                 sync: Callable, peak_mb: Callable) -> dict:
    """The trial alone as a pack of one in bf16, its step a CUDA graph where one is captured."""
    alone = _pack(task, device, [config], "bf16", graphs)
    return dict(_timed(lambda k: alone.train_iteration(), 1, job, sync, peak_mb),
                graphs=_captured(alone))


def _captured(pack: Any) -> bool:
    """Whether the pack's step ran as a captured CUDA graph (captured and still on)."""
    return pack.captures > 0 and pack.graphs_enabled


def _pack(task: Any, device: str, configs: list[dict], precision: str, graphs: str) -> Any:
    from hypersack.fusion.runner import Pack
    from hypersack.fusion.stack import StackOptions
    from hypersack.fusion.task import Member
    pack = Pack(task, device, options=StackOptions(capacity=len(configs), precision=precision,
                                                   graphs=graphs))
    for i, config in enumerate(configs):
        pack.load(Member(trial_id=i, config=config, seed=i))
    return pack


def _timed(step: Callable[[int], None], models: int, job: dict, sync: Callable,
           peak_mb: Callable) -> dict:
    for k in range(job["warmup"]):
        step(k)
    sync(job["device"])
    start = time.perf_counter()
    for k in range(job["steps"]):
        step(job["warmup"] + k)
    sync(job["device"])
    seconds = time.perf_counter() - start
    peak = peak_mb(job["device"])
    if job["device"].startswith("cuda"):
        import torch
        torch.cuda.reset_peak_memory_stats()
    return {"model_steps_per_s": round(models * job["steps"] / seconds, 2),
            "peak_memory_mb": round(peak, 1)}
