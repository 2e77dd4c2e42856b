"""The cluster simulator: the real study loop, controller, algorithms and placement policies on a
simulated executor and clock (Syne Tune's SimulatorBackend, Gavel's simulator).

    from hypersack.sim import load_scenario, simulate
    result = simulate(load_scenario("examples/sim/sp1_4xa100.yaml"), policy="wfd")
    result.makespan_s, result.occupancy, result.utilization

Pieces: ``SimClock`` and ``SimExecutor`` (event heap), ``PerfModel`` (step times, sharing,
data-parallel scaling, costs), curve models (``ReplayCurves``, ``ParametricCurves``),
``MemoryStore`` (what the loop persists), scenarios (``load_scenario``) and ``compare``.
"""
from hypersack.sim.clock import SimClock, SimulationStalled
from hypersack.sim.curves import CurveModel, ParametricCurves, ReplayCurves
from hypersack.sim.executor import DeviceChange, SimExecutor
from hypersack.sim.perf import PerfModel, PerfParams, Profile, ProfileTable
from hypersack.sim.run import SimResult, simulate
from hypersack.sim.scenario import Scenario, load_scenario, scenario_from_dict
from hypersack.runtime.storage.memory import MemoryStore

__all__ = ["SimClock", "SimulationStalled", "SimExecutor", "DeviceChange", "PerfModel",
           "PerfParams", "Profile", "ProfileTable", "CurveModel", "ParametricCurves",
           "ReplayCurves", "MemoryStore", "Scenario", "load_scenario", "scenario_from_dict",
           "SimResult", "simulate"]
