"""Command line: run, resume, status, best, export, list."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from hypersack.errors import HyperSackError
from hypersack.runtime import queries
from hypersack.runtime.storage import DEFAULT_STORAGE, Storage

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hypersack", description="Hyperparameter optimization that packs trials onto GPUs")
    sub = p.add_subparsers(dest="command", required=True)

    def add(name: str, help: str, *, json_flag: bool = False, study: bool = True) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help)
        if study:
            sp.add_argument("name", help="study name")
        sp.add_argument("--storage", default=None, help=f"SQLite file (default: {DEFAULT_STORAGE})")
        if json_flag:
            sp.add_argument("--json", action="store_true", help="machine-readable output")
        return sp

    run = add("run", "run a study from a YAML file", study=False)
    run.add_argument("file", help="study YAML")
    group = run.add_mutually_exclusive_group()
    group.add_argument("--resume", action="store_true", help="continue the study if it already exists")
    group.add_argument("--replace", action="store_true", help="delete an existing study of that name first")
    run.add_argument("--progress", choices=["live", "lines", "none"], default=None)
    resume = add("resume", "continue an interrupted study")
    resume.add_argument("--progress", choices=["live", "lines", "none"], default=None)
    add("status", "trial counts, best trial, failures", json_flag=True)
    add("best", "the best trial", json_flag=True)
    export = add("export", "every trial and result")
    export.add_argument("--format", default="csv", help="csv or json")
    add("list", "studies in the store", json_flag=True, study=False)
    from hypersack.sim import cli as sim_cli
    sim_cli.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except HyperSackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _progress(args: argparse.Namespace) -> Any:
    return {None: None, "live": "live", "lines": "lines", "none": False}[args.progress]


def _finish(run, storage: str) -> int:
    with Storage(storage) as store:
        best = queries.best_trial(store, run.name)
    if run.status == "interrupted":
        print(f"Study {run.name!r} interrupted; continue it with: hypersack resume {run.name}"
              + (f" --storage {storage}" if storage != DEFAULT_STORAGE else ""), file=sys.stderr)
        return EXIT_INTERRUPTED
    _print_best(run.name, best)
    return 0


def _print_best(name: str, best: dict | None) -> None:
    if best is None:
        print(f"Study {name!r}: no complete trial")
        return
    print(f"Best trial of {name!r}: trial {best['trial_id']}, {best['metric']} = {best['value']:.6g}")
    print(f"  config: {json.dumps(best['config'])}")


def cmd_run(args: argparse.Namespace) -> int:
    from hypersack.study import Study
    study = Study.from_yaml(args.file, storage=args.storage)
    if_exists = "resume" if args.resume else "replace" if args.replace else "error"
    run = study.run(if_exists=if_exists, progress=_progress(args))
    return _finish(run, str(study.storage_path))


def cmd_resume(args: argparse.Namespace) -> int:
    from hypersack.study import Study, extend_sys_path
    extend_sys_path(os.getcwd())      # as `python -m`: a module:function in the working directory
    storage = args.storage or DEFAULT_STORAGE
    run = Study.load(args.name, storage).resume(progress=_progress(args))
    return _finish(run, storage)


def cmd_best(args: argparse.Namespace) -> int:
    with Storage(args.storage or DEFAULT_STORAGE) as store:
        best = queries.best_trial(store, args.name)
    if args.json:
        print(json.dumps(best))
    else:
        _print_best(args.name, best)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    with Storage(args.storage or DEFAULT_STORAGE) as store:
        info = queries.status(store, args.name)
    if args.json:
        print(json.dumps(info))
        return 0
    console = Console()
    states = ("complete", "running", "paused", "pending", "pruned", "failed")
    counts = ", ".join(f"{info[s]} {s}" for s in states if s != "paused" or info.get(s))
    console.print(f"[bold]{info['name']}[/bold] ({info['status']}): {info['total']} trials: {counts}")
    table = Table(box=None)
    for column in ("trial", "state", "value", "step", "attempts", "config"):
        table.add_column(column)
    for t in info["trials"]:
        value = "-" if t["value"] is None else f"{t['value']:.4g}"
        table.add_row(str(t["trial_id"]), t["state"], value, str(t["last_step"]), str(t["attempts"]),
                      json.dumps(t["config"]))
    console.print(table)
    for t in info["trials"]:
        if t["state"] == "failed":
            console.print(f"[red]trial {t['trial_id']} failed:[/red] {t['error']}", markup=True)
            if t["traceback"]:
                console.print(t["traceback"], markup=False, highlight=False)
    if info["best"]:
        _print_best(args.name, info["best"])
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    with Storage(args.storage or DEFAULT_STORAGE) as store:
        sys.stdout.write(queries.export(store, args.name, args.format))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with Storage(args.storage or DEFAULT_STORAGE) as store:
        studies = store.list_studies()
    if args.json:
        print(json.dumps(studies))
        return 0
    table = Table(box=None)
    for column in ("study", "status", "complete", "running", "pending", "failed"):
        table.add_column(column)
    for s in studies:
        c = s["counts"]
        table.add_row(s["name"], s["status"], str(c["complete"]), str(c["running"]), str(c["pending"]),
                      str(c["failed"]))
    Console().print(table)
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from hypersack.sim import cli as sim_cli
    return sim_cli.main(args)


_COMMANDS = {"run": cmd_run, "resume": cmd_resume, "status": cmd_status, "best": cmd_best,
             "export": cmd_export, "list": cmd_list, "simulate": cmd_simulate}


if __name__ == "__main__":
    sys.exit(main())
