"""Checks 4, 6 and 7 of the GPU suite: SP3-like makespans, the OOM retry, data-parallel ranks."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpu_common import CheckFailed, run_python, run_study, torch_device

# ---- check 4: makespan of an SP3-like study ----------------------------------------------------
#
# The HyperSack paper's setting: lightweight image models that leave an H100 idle while the CPU
# loads and augments their data. Every trial reads CIFAR-10-shaped uint8 images through a
# DataLoader (random crop, flip, normalise in ``cpus`` - 1 worker processes: ``data: pipeline``)
# and trains ResNet-18 or MobileNet-v3-small; random search over model, lr, batch size and
# optimizer. The studies share one SQLite file, hence one job history: ``exclusive`` profiles
# each model alone, the paper's ratio records how co-location slowed trials down, and
# ``oversubscription: auto`` then starts from what those measured.

SP3_MODELS = ["resnet18_cifar", "mobilenet_v3_small"]


def sp3_space(plan: dict, train_size: int) -> dict[str, Any]:
    base = dict(plan["workloads"]["resnet18_cifar"])
    base.pop("batch_size")
    if plan["mode"] != "tiny":
        base.pop("width", None)           # each model's own default width
    base.update(train_size=train_size, epochs=plan["sp3"]["epochs"], data="pipeline",
                cpus=plan["sp3"]["cpus"])
    space: dict[str, Any] = dict(base)
    space["model"] = {"type": "categorical", "choices": list(SP3_MODELS)}
    space["lr"] = {"type": "float", "low": 0.001, "high": 0.1, "log": True}
    space["optimizer"] = {"type": "categorical", "choices": ["sgd", "adam"]}
    batches = [8] if plan["mode"] == "tiny" else [32, 64, 128]
    space["batch_size"] = {"type": "categorical", "choices": batches}
    return space


def calibrate_train_size(plan: dict) -> int:
    """Training samples for one SP3 trial to last about ``trial_s`` seconds alone (ResNet-18,
    batch 64, through the pipeline).

    Profiled in a child process: this process must hold no CUDA context of its own while the
    studies' MPS daemons serve their trials."""
    if not plan["sp3"]["trial_s"]:
        return plan["workloads"]["resnet18_cifar"]["train_size"]
    config = dict(plan["workloads"]["resnet18_cifar"], batch_size=64, epochs=10**6,
                  data="pipeline", cpus=plan["sp3"]["cpus"])
    seconds = run_python(
        "import json\n"
        "from hypersack.runtime.devices.profile_trainable import profile_trainable\n"
        "from hypersack.workloads.vision import train_resnet18\n"
        f"p = profile_trainable(train_resnet18, {config!r}, n_iters=10, "
        f"device={torch_device(plan)!r})\n"
        "print(json.dumps(p.time_per_iter_s))\n", timeout=120)
    steps = plan["sp3"]["trial_s"] / max(float(seconds), 1e-4) / plan["sp3"]["epochs"]
    return int(min(50_000, max(512, steps * 64)))


def _without_mps_on_path() -> str:
    """PATH minus every directory holding ``nvidia-cuda-mps-control`` (forces time slicing)."""
    from hypersack.runtime.devices.mps import MPS_CONTROL
    keep = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not (Path(d) / MPS_CONTROL).exists()]
    return os.pathsep.join(keep)


def sp3_studies(plan: dict) -> list[dict[str, Any]]:
    """The studies of check 4, in the order they run (they share one job history):
    ``name``, ``placement``, ``oversubscription``, ``mps`` (False: time slicing), ``execution``.
    Tiny (CPU) mode runs exclusive, paper and auto only: on CPU slots the others are the same
    path, and each study costs its workers' start (torch's import)."""
    sp3 = plan["sp3"]
    studies = [dict(name="exclusive", placement="exclusive", oversubscription="paper", mps=False),
               dict(name="wfd-mps-paper", placement="wfd", oversubscription="paper", mps=True)]
    studies += [dict(name=f"wfd-mps-r{r:g}", placement="wfd", oversubscription=float(r), mps=True)
                for r in sp3["ratios"]]
    studies += [dict(name="wfd-mps-auto", placement="wfd", oversubscription="auto", mps=True),
                dict(name="wfd-timeslice-paper", placement="wfd", oversubscription="paper",
                     mps=False),
                dict(name="wfd-mps-auto-execution-auto", placement="wfd", oversubscription="auto",
                     mps=True, execution="auto")]
    if plan["mode"] == "tiny":
        return [s for s in studies if s["name"] in ("exclusive", "wfd-mps-paper", "wfd-mps-auto")]
    return studies


def _auto_ratio_now(history: Path, arch: str) -> dict[str, Any]:
    """What ``oversubscription: auto`` chooses for ``arch`` from the history as it is now."""
    from hypersack.core.oversubscription import auto_ratio
    from hypersack.runtime.devices.job_history import ProfileStore
    with ProfileStore(history) as store:
        choice = auto_ratio(arch, store.colocations(arch))
    return {"ratio": choice.ratio, "reason": choice.reason}


def _arch(plan: dict) -> str:
    if plan["device"] != "cuda":
        return "cpu"
    from gpu_common import nvml_source
    from hypersack.runtime.devices.inventory import arch_from_name
    source = nvml_source(plan)
    try:
        devices = source.snapshot()
    finally:
        source.close()
    return arch_from_name(devices[0].name) if devices else "gpu"


def _run_sp3(plan: dict, work: Path, space: dict, study: dict, history: Path) -> dict[str, Any]:
    options: dict[str, Any] = {"workers": plan["sp3"]["workers"], "storage": history,
                               "placement": study["placement"],
                               "oversubscription": study["oversubscription"]}
    if "execution" in study:
        options["execution"] = study["execution"]
    saved = os.environ.get("PATH", "")
    if not study["mps"]:
        os.environ["PATH"] = _without_mps_on_path()
    try:
        row = run_study(study["name"], work, space, plan["sp3"]["trials"], "cifar_classifier",
                        **options)
    finally:
        os.environ["PATH"] = saved
    uses_mps = (study["mps"] and plan["device"] == "cuda" and row["mps_fallback"] is None)
    return dict(row, oversubscription=study["oversubscription"], mps=uses_mps)


def check_makespan(plan: dict, work: Path) -> dict:
    sp3 = plan["sp3"]
    train_size = calibrate_train_size(plan)
    space = sp3_space(plan, train_size)
    history, arch = work / "history.db", _arch(plan)
    for stale in work.glob("history.db*"):     # a fresh history for every run of the check
        stale.unlink()
    rows = []
    for study in sp3_studies(plan):
        chosen = _auto_ratio_now(history, arch) if study["oversubscription"] == "auto" else None
        row = _run_sp3(plan, work, space, study, history)
        rows.append(dict(row, auto=chosen) if chosen else row)
    base = rows[0]["makespan_s"]
    for row in rows:
        row.pop("results")
        row["speedup_vs_exclusive"] = round(base / row["makespan_s"], 2)
    by_name = {row["study"]: row for row in rows}
    best_mps = max((row["speedup_vs_exclusive"] for row in rows if row["mps"]), default=None)
    figures = {"train_size": train_size, "trials": sp3["trials"], "epochs": sp3["epochs"],
               "arch": arch, "rows": rows, "best_mps_speedup": best_mps,
               "auto_after": _auto_ratio_now(history, arch)}
    auto = by_name["wfd-mps-auto"]["speedup_vs_exclusive"]
    paper = by_name["wfd-mps-paper"]["speedup_vs_exclusive"]
    goals = {"wfd_mps_vs_exclusive": {"target": 4.0, "value": best_mps,
                                      "met": best_mps is not None and best_mps >= 4.0},
             "auto_vs_paper": {"target": 1.0, "value": round(auto / paper, 2),
                               "met": auto >= paper}}
    incomplete = [row["study"] for row in rows if row["complete"] != sp3["trials"]]
    if incomplete:
        raise CheckFailed(f"studies with failed trials: {incomplete}", figures, goals)
    if plan["device"] == "cuda" and not any(row["mps"] for row in rows):
        raise CheckFailed("no wfd study ran with MPS (see mps_fallback)", figures, goals)
    return {"figures": figures, "goals": goals}


# ---- check 6: the OOM retry --------------------------------------------------------------------

# Longest a CPU holder waits for its co-located holder to be refused (check 6 on the CPU).
REFUSAL_WAIT_S = 60.0


def hold_memory(config: dict, ctx: Any) -> None:
    """Hold ``fraction`` of the device's memory for ``steps`` steps of ``step_s`` seconds.

    On CUDA the memory is really allocated (a co-located second holder runs out of memory). On
    the CPU a ledger file stands for the device: a holder that would take it past 1.0 raises the
    error text a CUDA OOM has, after leaving a ``.refused`` mark beside the ledger; a first
    attempt that got its share holds it until that mark appears (at most ``REFUSAL_WAIT_S``), so
    the co-located holder is refused however late its worker starts on a busy machine."""
    import fcntl
    import time as _time
    from pathlib import Path as _Path
    start = _time.time()
    fraction = float(config["fraction"])
    held = None
    if ctx.device.startswith("cuda"):
        import torch
        total = torch.cuda.mem_get_info()[1]
        held = torch.empty(int(total * fraction), dtype=torch.uint8, device=ctx.device)
    else:
        refused = _Path(str(config["ledger"]) + ".refused")
        with open(config["ledger"], "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            used = float(f.read() or 0)
            if used + fraction > 1.0:
                refused.touch()
                raise RuntimeError(f"CUDA out of memory (simulated on CPU: {used:.2f} of the "
                                   f"device held, {fraction:.2f} more asked)")
            f.seek(0)
            f.truncate()
            f.write(str(used + fraction))
        deadline = _time.monotonic() + REFUSAL_WAIT_S
        while ctx.attempt == 1 and not refused.exists() and _time.monotonic() < deadline:
            _time.sleep(0.05)
    try:
        for step in range(1, int(config["steps"]) + 1):
            _time.sleep(float(config["step_s"]))
            ctx.report(step, accuracy=1.0, attempt=ctx.attempt, t_start=start,
                       t_end=_time.time())
    finally:
        del held
        if not ctx.device.startswith("cuda"):
            with open(config["ledger"], "a+") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                f.seek(0)
                used = float(f.read() or 0)
                f.seek(0)
                f.truncate()
                f.write(str(max(0.0, used - fraction)))


def check_oom(plan: dict, work: Path) -> dict:
    oom = plan["oom"]
    import hypersack
    # two trials of one config: a space with nothing to search runs one trial, so the two
    # differ in a replica number that the trainable ignores (grid: exactly 0 and 1)
    space = {"fraction": oom["fraction"], "steps": oom["steps"], "step_s": oom["step_s"],
             "ledger": str(work / "ledger"), "epochs": oom["steps"],
             "replica": hypersack.Categorical([0, 1])}
    # memory_gb 1: a default of 0 would let the retried trial (whose demand becomes the whole
    # device) still fit beside a holder that declared nothing.
    row = run_study("oom", work, space, 2, hold_memory, placement="wfd", oversubscription=2.0,
                    algorithm="grid",
                    max_retries=2, workers=oom["workers"], resources={"memory_gb": 1.0})
    last: dict[int, dict] = {}
    for result in row["results"]:
        last[result["trial_id"]] = result
    figures = {"complete": row["complete"], "failed": row["failed"],
               "makespan_s": row["makespan_s"],
               "attempts": {str(t): r["attempt"] for t, r in last.items()}}
    if row["complete"] != 2:
        raise CheckFailed(f"{row['failed']} of 2 trials failed: the OOM was not recovered",
                          figures)
    retried = [t for t, r in last.items() if r["attempt"] > 1]
    if len(retried) != 1:
        raise CheckFailed(f"expected one trial retried after an OOM, got {len(retried)}",
                          figures)
    other = next(t for t in last if t not in retried)
    alone = last[retried[0]]["t_start"] >= last[other]["t_end"] - 0.5
    figures["retry_ran_alone"] = alone
    if not alone:
        raise CheckFailed("the retried trial ran beside the other holder again", figures)
    return {"figures": figures}


# ---- check 7: data-parallel ranks --------------------------------------------------------------

def check_data_parallel(plan: dict, work: Path) -> dict:
    from hypersack.runtime.devices.slots import Slot
    epochs = plan["dp"]["epochs"]
    config = dict(plan["workloads"]["resnet18_cifar"], epochs=epochs)
    config["lr"] = 0.01
    algorithm = {"type": "rasda", "min_t": 1, "max_t": epochs, "sf": 2, "rf": 2,
                 "base_resources": 2, "max_resources": 2}
    options: dict[str, Any] = {"algorithm": algorithm}
    gpus = _gpu_count(plan)
    if plan["device"] == "cpu":
        backend = "gloo"
        options["slots"] = [Slot(i, None, {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"})
                            for i in range(2)]
    elif gpus >= 2:
        backend = "nccl"
    else:
        backend = "gloo"
        env = {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0],
               "HYPERSACK_DIST_BACKEND": "gloo"}
        options["slots"] = [Slot(i, i, dict(env)) for i in range(2)]
    row = run_study("dp", work, config, 1, "resnet18_cifar", **options)
    workers = [r.get("workers") for r in row["results"]]
    figures = {"backend": backend, "gpus": gpus, "makespan_s": row["makespan_s"],
               "complete": row["complete"], "workers_reported": workers}
    if row["complete"] != 1:
        raise CheckFailed(f"the two-rank trial failed ({backend})", figures)
    if not workers or workers[-1] != 2:
        raise CheckFailed(f"the trial reported workers={workers}, not 2 ranks", figures)
    return {"figures": figures}


def _gpu_count(plan: dict) -> int:
    if plan["device"] != "cuda":
        return 0
    import torch
    return torch.cuda.device_count()


