"""``hypersack simulate SCENARIO.yaml``: run a scenario on the simulated cluster and print figures.

    hypersack simulate examples/sim/sp1_4xa100.yaml                # wfd against exclusive
    hypersack simulate examples/sim/sp1_4xa100.yaml --compare      # exclusive, ff, ffd, wf, wfd
    hypersack simulate examples/sim/rasda_cv_64xa100.yaml --compare   # ASHA against RASDA
    hypersack simulate examples/sim/hermes_bins.yaml --compare     # FIFO, RR, SLAQ, Hermes
    hypersack simulate SCENARIO --timeline run.csv                 # + run.png when matplotlib is there
    hypersack simulate examples/sim/pack_hyperband_mlp3.yaml --compare --execution separate
    hypersack simulate SCENARIO --report run.html                  # the HTML report of the run
    hypersack simulate examples/sim/hartmann6_quality.yaml --compare   # regret at 25/50/100% budget
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from hypersack.errors import HyperSackError
from hypersack.sim.compare import (BASELINE, algorithm_rows, compare_algorithms, compare_policies,
                                   compare_quality, compare_time_sharing, policy_rows,
                                   time_sharing_rows)
from hypersack.sim.run import SimResult, simulate
from hypersack.sim.scenario import Scenario, load_scenario
from hypersack.sim.timeline import write_csv, write_gantt

__all__ = ["add_parser", "main"]

EXIT_ERROR = 2


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("simulate", help="run a scenario on a simulated GPU cluster")
    p.add_argument("scenario", help="scenario YAML (see examples/sim/)")
    p.add_argument("--policy", default=None, help="placement policy (default: the scenario's)")
    p.add_argument("--compare", action="store_true",
                   help="run the scenario's comparison: its policies and/or its algorithms")
    p.add_argument("--timeline", metavar="FILE", default=None,
                   help="write the per-GPU occupancy timeline CSV to FILE and a Gantt PNG beside it")
    p.add_argument("--execution", choices=["separate", "fused", "auto"], default=None,
                   help="run the study's trials separately or in fused packs (default: the scenario's)")
    p.add_argument("--report", metavar="FILE", nargs="?", const="", default=None,
                   help="write the run's HTML report (default FILE: SCENARIO-POLICY.html); with "
                        "--compare, one report of the compared runs: the first and the last "
                        "placement policy, every algorithm, every time-sharing policy")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=main)
    return p


def main(args: argparse.Namespace) -> int:
    try:
        scenario = load_scenario(args.scenario)
        if getattr(args, "execution", None):
            scenario = scenario.with_execution(args.execution)
        if args.compare:
            out = _compare(scenario, args.policy)
        else:
            out = _single(scenario, args.policy, args.timeline)
        if getattr(args, "report", None) is not None:
            out["report"] = _write_report(scenario, args.policy, args.compare, args.report)
    except HyperSackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        _print(out)
    return 0


# ---- the runs -------------------------------------------------------------------------------

def _single(scenario: Scenario, policy: str | None, timeline: str | None) -> dict[str, Any]:
    policy = policy or scenario.policy
    result = simulate(scenario, policy, keep_log=False)
    out = {"scenario": scenario.name, "run": _figures(result), **_labels(scenario, result)}
    if policy != BASELINE:
        base = simulate(scenario, BASELINE, keep_log=False)
        out["baseline"] = _figures(base)
        out["speedup_vs_exclusive"] = base.makespan_s / result.makespan_s if result.makespan_s else None
    if timeline:
        out["timeline"] = _write_timeline(result, Path(timeline))
    return out


def _compare(scenario: Scenario, policy: str | None) -> dict[str, Any]:
    if not (scenario.compare_policies or scenario.compare_algorithms
            or scenario.compare_time_sharing):
        raise HyperSackError(f"The scenario {scenario.name!r} has no compare section "
                             "(compare.policies, compare.algorithms or compare.time_sharing)")
    out: dict[str, Any] = {"scenario": scenario.name}
    last: SimResult | None = None
    if scenario.compare_policies:
        results = compare_policies(scenario, scenario.compare_policies)
        out["policies"] = policy_rows(results, scenario.reference)
        last = results[-1]
    if scenario.compare_algorithms:
        if scenario.compares_quality:
            runs, out["quality"] = compare_quality(scenario, scenario.compare_algorithms, policy)
        else:
            runs = compare_algorithms(scenario, scenario.compare_algorithms, policy)
        out["algorithms"] = algorithm_rows(runs, scenario.reference)
        last = runs[-1][1]
    if scenario.compare_time_sharing:
        shared = compare_time_sharing(scenario, scenario.compare_time_sharing, policy)
        out["time_sharing"] = time_sharing_rows(shared, scenario.reference)
        last = shared[-1][1]
    out.update(_labels(scenario, last))
    return out


def _figures(r: SimResult) -> dict[str, Any]:
    return {"policy": r.policy, "algorithm": r.algorithm, "makespan_s": r.makespan_s,
            "occupancy": r.occupancy, "utilization": r.utilization, "busy": r.busy,
            "time_to_best_s": r.time_to_best_s, "best_value": r.best_value, "best_trial": r.best_trial,
            "trials": r.trials, "states": r.states, "packs": r.packs,
            "largest_pack": r.largest_pack, "wall_s": r.wall_s,
            "simulated_s_per_wall_s": r.sim_per_wall}


def _labels(scenario: Scenario, r: SimResult | None) -> dict[str, Any]:
    return {"unvalidated": r.unvalidated if r else [], "calibrated": list(scenario.perf.params.calibrated),
            "profiles_source": scenario.profiles_source, "curves": scenario.curves.describe(),
            "reference": scenario.reference, "notes": scenario.notes}


def _write_timeline(result: SimResult, path: Path) -> dict[str, Any]:
    csv_path = path if path.suffix == ".csv" else path.with_suffix(".csv")
    png_path = csv_path.with_suffix(".png")
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    intervals = result.executor.timeline.intervals if result.executor is not None else []
    write_csv(intervals, csv_path)
    drew = write_gantt(intervals, png_path,
                       f"{result.scenario} ({result.policy})")
    return {"csv": str(csv_path), "png": str(png_path) if drew else None,
            "note": None if drew else "matplotlib is not installed: CSV only (pip install matplotlib)"}


def _write_report(scenario: Scenario, policy: str | None, compare: bool, path: str) -> str:
    """The HTML report of one run (the scenario's policy, or ``policy``), or with ``compare`` of
    every compared run side by side (``_report_runs``). Runs the simulations again keeping
    every result (the figures above keep none)."""
    from hypersack.report.data import from_simulation, payload
    from hypersack.report.html import plotly_js, write_report
    plotly_js()                        # a missing extra fails before the simulations
    runs = _report_runs(scenario, policy, compare)
    payloads = []
    for label, variant, p in runs:
        result = simulate(variant, p, keep_log=False, keep_results=True)
        data = from_simulation(result, result.store)
        data.name = f"{scenario.name} ({label or result.policy})"
        payloads.append(payload(data))
    names = [label or str(p or scenario.policy) for label, _, p in runs]
    default = f"{scenario.name}-{'-vs-'.join(names)}.html".replace(" ", "_")
    return str(write_report(path or default, payloads))


def _report_runs(scenario: Scenario, policy: str | None,
                 compare: bool) -> list[tuple[str | None, Scenario, str | None]]:
    """(label, scenario, placement policy) of each run a report shows: the one run; with
    ``compare``, the first and the last compared placement policy (e.g. exclusive vs wfd), then
    every compared algorithm and every compared time-sharing policy (labelled by name)."""
    if not compare:
        return [(None, scenario, policy or scenario.policy)]
    runs: list[tuple[str | None, Scenario, str | None]] = []
    if len(scenario.compare_policies) > 1:
        runs += [(None, scenario, p) for p in (scenario.compare_policies[0],
                                               scenario.compare_policies[-1])]
    runs += [(label, scenario.with_algorithm(spec), policy)
             for label, spec in scenario.compare_algorithms.items()]
    runs += [(f"time sharing {p}", scenario.with_time_sharing(p), policy)
             for p in scenario.compare_time_sharing]
    return runs or [(None, scenario, policy or scenario.policy)]


# ---- printing -------------------------------------------------------------------------------

def _print(out: dict[str, Any]) -> None:
    print(f"scenario {out['scenario']}")
    if "run" in out:
        _print_run(out)
    if "policies" in out:
        _table(["policy", "makespan", "speedup", "paper", "occupancy", "utilization", "time to best"],
               [[r["policy"], _dur(r["makespan_s"]), _x(r["speedup"]), _x(r["paper_speedup"]),
                 _pct(r["occupancy"]), _pct(r["utilization"]), _dur(r["time_to_best_s"])]
                for r in out["policies"]])
    if "algorithms" in out:
        _table(["algorithm", "runtime", "speedup", "paper runtime", "best value", "time to best", "trials"],
               [[r["algorithm"], _dur(r["makespan_s"]), _x(r["speedup"]), _dur(r["paper_runtime_s"]),
                 _num(r["best_value"]), _dur(r["time_to_best_s"]), str(r["trials"])]
                for r in out["algorithms"]])
    if "quality" in out:
        _print_quality(out["quality"])
    if "time_sharing" in out:
        _table(["time sharing", "runtime", "speedup", "best value", "time to best", "trials"],
               [[r["time_sharing"], _dur(r["makespan_s"]), _x(r["speedup"]),
                 _num(r["best_value"]), _dur(r["time_to_best_s"]), str(r["trials"])]
                for r in out["time_sharing"]])
    _print_labels(out)
    if out.get("report"):
        print(f"  report              {out['report']}")


def _print_quality(q: dict[str, Any]) -> None:
    seeds = max((r["seeds"] for r in q["rows"]), default=0)
    against = "the optimum" if q["optimum_known"] else "the best value any compared run reached"
    print(f"  search quality: regret of the best config trained to the top fidelity "
          f"(against {against}, {_num(q['optimum'])}), median [q1, q3] over {seeds} seed(s), "
          f"every run cut at {q['budget']:,} fidelity steps")
    _table(["algorithm"] + [f"{100 * f:g}% budget" for f in q["fractions"]],
           [[r["algorithm"]] + [f"{_num(m)} [{_num(lo)}, {_num(hi)}]" for lo, m, hi in r["regret"]]
            for r in q["rows"]])


def _print_run(out: dict[str, Any]) -> None:
    run = out["run"]
    print(f"  policy {run['policy']}, algorithm {run['algorithm']}, {run['trials']} trials "
          f"({', '.join(f'{k} {v}' for k, v in run['states'].items() if v)})")
    print(f"  makespan            {_dur(run['makespan_s'])}")
    if run.get("packs"):
        print(f"  fused packs         {run['packs']} (largest {run['largest_pack']} members)")
    print(f"  mean GPU occupancy  {_pct(run['occupancy'])}   (allocated compute / r x C)")
    print(f"  mean utilization    {_pct(run['utilization'])}   (delivered compute / C)")
    print(f"  time to best trial  {_dur(run['time_to_best_s'])}   (best {_num(run['best_value'])}, "
          f"trial {run['best_trial']})")
    if "baseline" in out:
        print(f"  exclusive baseline  {_dur(out['baseline']['makespan_s'])}   -> speedup "
              f"{_x(out['speedup_vs_exclusive'])}")
    print(f"  simulated {run['simulated_s_per_wall_s']:,.0f} s per wall second ({run['wall_s']:.2f} s)")
    if "timeline" in out:
        t = out["timeline"]
        print(f"  timeline            {t['csv']}" + (f", {t['png']}" if t["png"] else f" ({t['note']})"))


def _print_labels(out: dict[str, Any]) -> None:
    ref = out.get("reference") or {}
    if ref:
        print(f"  paper: {ref.get('source', '')}: " +
              ", ".join(f"{k} {v}" for k, v in ref.items() if k != "source"))
    print(f"  profiles: {out['profiles_source']}")
    print(f"  curves: {out['curves']}")
    if out["calibrated"]:
        print(f"  calibrated: {', '.join(out['calibrated'])}")
    if out["unvalidated"]:
        print(f"  UNVALIDATED model parameters: {', '.join(out['unvalidated'])}")
    if out.get("notes"):
        print(f"  note: {out['notes']}")


def _table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("  " + "  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for r in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)))


def _dur(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def _standalone(argv: list[str] | None = None) -> int:
    """``python -m hypersack.sim.cli SCENARIO ...`` until ``hypersack simulate`` is wired."""
    parser = argparse.ArgumentParser(prog="hypersack")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    return main(parser.parse_args(["simulate", *(argv if argv is not None else sys.argv[1:])]))


if __name__ == "__main__":
    raise SystemExit(_standalone())
