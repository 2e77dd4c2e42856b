"""The one assembly of a study run (``runtime.loop.assemble``): local runs, Ray and the
simulator all go through it, and it alone wires the controller and runs the loop."""
from __future__ import annotations

import ast
import contextlib
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import hypersack
from hypersack.core.controller import Controller
from hypersack.placement import Cluster, GPU, Node
from hypersack.runtime.executors.local import LocalExecutor
from hypersack.runtime.loop import assemble as assembly
from hypersack.runtime.storage.memory import MemoryStore, SimStudyRow
from hypersack.sim.run import simulate
from hypersack.sim.scenario import scenario_from_dict
from tests.sim.conftest import BASE

ROOT = Path(hypersack.__file__).parent
SPACE = {"x": {"type": "float", "low": 0.0, "high": 1.0}}


class _Reached(Exception):
    """Raised by the spy once the assembly was reached (the run goes no further)."""


def _spy(monkeypatch: pytest.MonkeyPatch, module: Any, *, delegate: bool) -> list[dict]:
    """Record every call of ``module.assemble``; run it for real with ``delegate``."""
    calls: list[dict] = []
    real = module.assemble

    def spy(spec, algorithm, executor, store, row, **kwargs):
        calls.append({"spec": spec, "algorithm": algorithm, "executor": executor,
                      "store": store, **kwargs})
        if not delegate:
            raise _Reached
        return real(spec, algorithm, executor, store, row, **kwargs)
    monkeypatch.setattr(module, "assemble", spy)
    return calls


@cache
def _calls() -> dict[str, set[str]]:
    """Each package module -> the names it calls (``f(...)`` and ``x.f(...)`` count ``f``)."""
    out: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        names = out.setdefault(str(path.relative_to(ROOT)), set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                names.add(node.func.id)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                names.add(node.func.attr)
    return out


def _callers_of(name: str) -> set[str]:
    """The package's modules whose code calls ``name(...)``."""
    return {module for module, names in _calls().items() if name in names}


def test_only_the_assembly_runs_the_loop_and_wires_the_controller():
    assert _callers_of("run_loop") == {"runtime/loop/assemble.py"}
    # The controller takes its inventory, packs and time-sharing at construction, only there.
    for setter in ("set_inventory", "set_packs", "set_time_sharing"):
        assert not hasattr(Controller, setter), setter
    assert _callers_of("ControllerOptions") == {"runtime/loop/assemble.py",
                                                "runtime/loop/run.py", "core/controller.py"}
    # a run's controller is built by the assembly; ask/tell sessions build one with no devices
    assert _callers_of("build_controller") == {"runtime/loop/assemble.py", "runtime/loop/session.py"}
    assert _callers_of("assemble") == {"study.py", "sim/run.py"}


def test_the_local_path_goes_through_the_assembly(monkeypatch, store_path):
    import hypersack.study as study_module
    calls = _spy(monkeypatch, study_module, delegate=False)
    study = hypersack.Study(name="t", space=SPACE, objective=("score", "max"), n_trials=1,
                            storage=store_path, workers=1)
    with pytest.raises(_Reached):
        study.run("trainables:quick", progress=False)
    (call,) = calls
    assert isinstance(call["executor"], LocalExecutor)
    assert call["spec"] is study.spec and call["services"].slots      # the machine


def test_the_ray_path_goes_through_the_assembly(monkeypatch, store_path):
    import hypersack.runtime.executors.ray as ray_module
    import hypersack.study as study_module
    cluster = Cluster([Node("n0", cpus=4, gpus=[GPU("0", "A100", 40)])])

    class Remote:
        def inventory(self):
            return cluster

    opened: list[dict] = []

    @contextlib.contextmanager
    def fake_ray_executor(spec, trainable, plan, study_dir, *, trial_dir):
        opened.append({"spec": spec})      # no callback into the controller: the loop acks
        yield Remote()
    monkeypatch.setattr(ray_module, "ray_executor", fake_ray_executor)
    calls = _spy(monkeypatch, study_module, delegate=False)
    study = hypersack.Study(name="t", space=SPACE, objective=("score", "max"), n_trials=1,
                            storage=store_path, executor="ray")
    with pytest.raises(_Reached):
        study.run("trainables:quick", progress=False)
    (call,) = calls
    assert isinstance(call["executor"], Remote)
    # the inventory the driver's half made of the agents' (scaled under oversubscription: auto)
    assert call["inventory"] is call["services"].cluster
    assert [(n.id, g.id) for n, g in call["inventory"].gpus()] == [("n0", "0")]
    assert call["services"].slots == []          # the driver's half of the machine
    assert opened[0]["spec"] is study.spec


def test_the_simulator_goes_through_the_assembly_with_the_specs_max_retries(monkeypatch):
    import hypersack.sim.run as sim_run
    calls = _spy(monkeypatch, sim_run, delegate=True)
    scenario = scenario_from_dict({**BASE, "study": {**BASE["study"], "max_retries": 5}})
    assert scenario.study.executor.max_retries == 5 == scenario.max_retries
    result = simulate(scenario)
    (call,) = calls
    assert call["executor"] is result.executor and call["store"] is result.store
    assert result.controller is not None and result.controller.max_retries == 5
    assert result.states["complete"] == 8


def test_the_assembly_sets_inventory_packs_and_time_sharing_then_runs_the_loop(monkeypatch):
    scenario = scenario_from_dict({**BASE, "study": {**BASE["study"],
                                                     "time_sharing": {"policy": "hermes"}}})
    seen: dict[str, Any] = {}

    def run_loop(controller, executor, store, row, **kwargs):
        seen.update(allocator=controller.allocator, packs=controller.packs,
                    shared=controller.shared, observers=kwargs["observers"])
        return "ran"
    monkeypatch.setattr(assembly, "run_loop", run_loop)
    result = simulate(scenario)
    assert result.controller is not None and seen["allocator"] is result.controller.allocator
    assert seen["packs"] is None and seen["shared"] is not None
    assert len(seen["observers"]) == 2              # the OOM history, then the sample sink


def test_the_sample_sink_writes_the_services_samples_at_the_end():
    taken = [[("n0", "0", "sample")]]
    saved: list[Any] = []

    class Store(MemoryStore):
        def save_samples(self, study_id, samples):
            saved.append((study_id, list(samples)))

    services = assembly.Services(samples=lambda: taken.pop(0) if taken else [])
    spec = scenario_from_dict(BASE).study

    def run_loop(*args, **kwargs):
        return "ran"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(assembly, "run_loop", run_loop)
        wired = assembly.Assembly(spec, None, None, Store(), SimStudyRow(7, "s"),  # type: ignore[arg-type]
                                  services, clock=lambda: 0.0)
        out = wired.run()
    assert out == "ran" and saved == [(7, [("n0", "0", "sample")])]
