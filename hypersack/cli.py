"""Command line: run, resume, status, best, export, export-best, list, check, report, dashboard,
simulate.

Exit codes: 0 success; 1 the study ended but no trial completed (``run``/``resume``), or it has
no result yet (``best``); 2 an error (bad study file or option, unknown study, missing
trainable); 3 the study store is damaged (``hypersack check`` says what; ``resume`` and the
exports run SQLite's quick check first); 130 interrupted (Ctrl-C; continue with ``hypersack resume NAME``). A closed output
pipe (``hypersack status NAME | head``) ends the command quietly (exit 1, as rich and the Python
docs do).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import warnings
from typing import Any

from rich.console import Console
from rich.table import Table

from hypersack.errors import (HyperSackError, NoTrialCompletedWarning, StorageCorruptError,
                              StudyExistsError)
from hypersack.runtime.storage import queries
from hypersack.runtime.storage.sqlite import DEFAULT_STORAGE, Storage, check_file

EXIT_NO_RESULT = 1
EXIT_ERROR = 2
EXIT_DAMAGED = 3
EXIT_INTERRUPTED = 130

_EXIT_CODES = ("exit codes: 0 done; 1 no trial completed (run, resume) or no result yet (best); "
               "2 error; 3 the study store is damaged (see: hypersack check); 130 interrupted "
               "(continue with: hypersack resume NAME)")
_PROGRESS_HELP = ("live: a display with a bar per running trial (default on a terminal); lines: "
                  "one line per finished, paused or pruned trial (default when piped); none: quiet")


def _parser() -> argparse.ArgumentParser:
    from hypersack import __version__
    p = argparse.ArgumentParser(prog="hypersack", description="Hyperparameter optimization that packs trials onto GPUs",
                                epilog=_EXIT_CODES)
    p.add_argument("--version", action="version", version=f"hypersack {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def add(name: str, help: str, *, json_flag: bool = False, study: bool = True) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help, epilog=_EXIT_CODES)
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
    run.add_argument("--progress", choices=["live", "lines", "none"], default=None, help=_PROGRESS_HELP)
    resume = add("resume", "continue an interrupted study")
    resume.add_argument("--progress", choices=["live", "lines", "none"], default=None, help=_PROGRESS_HELP)
    add("status", "trial counts, best trial, failures", json_flag=True)
    best = add("best", "the best trial (a multi-objective study: its Pareto front)", json_flag=True)
    best.add_argument("--complete", action="store_true",
                      help="the best trial trained to its end (complete), not one stopped early")
    export = add("export", "every trial and result")
    export.add_argument("--format", default="csv", help="csv, json or parquet (needs pyarrow)")
    export.add_argument("-o", "--output", default=None,
                        help="write to this file (parquet: default NAME.parquet; others: stdout)")
    best = add("export-best", "copy the best trial's checkpoint and best.json into a folder")
    best.add_argument("-o", "--output", required=True, help="the folder (created if needed)")
    add("list", "studies in the store", json_flag=True, study=False)
    check = add("check", "SQLite's full integrity check of the store: what is damaged, if anything",
                json_flag=True, study=False)
    check.add_argument("name", nargs="?", default=None,
                       help="a study whose every row is also read back (default: the file only)")
    report = add("report", "an HTML report of a study, or two side by side (opens offline)",
                 study=False)
    report.add_argument("names", nargs="+", metavar="STUDY", help="one study, or several to compare")
    report.add_argument("-o", "--output", default=None,
                        help="the HTML file (default: STUDY-report.html, or A-vs-B.html)")
    dash = add("dashboard", "a live web page of the store's studies (127.0.0.1 by default)",
               study=False)
    dash.add_argument("name", nargs="?", default=None,
                      help="the one study to serve (default: every study of the store)")
    dash.add_argument("--host", default="127.0.0.1",
                      help="address to listen on (default 127.0.0.1: this machine only; any "
                           "other address requires the token printed in the URL)")
    dash.add_argument("--port", type=int, default=8080, help="port (default 8080; 0: any free port)")
    dash.add_argument("--poll-ms", type=int, default=2000, help="page refresh period (ms)")
    from hypersack.sim import cli as sim_cli
    sim_cli.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            # run/resume say it themselves (``_finish``), with the command that shows why.
            warnings.filterwarnings("ignore", category=NoTrialCompletedWarning)
            return _COMMANDS[args.command](args)
    except StorageCorruptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_DAMAGED
    except HyperSackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:      # Ctrl-C outside a study's loop (set-up, a read command)
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`| head`): no traceback, and none at exit either (Python docs).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """A warning on the command line: its message, not the source line that raised it."""
    print(f"warning: {message}", file=sys.stderr)


def _progress(args: argparse.Namespace) -> Any:
    return {None: None, "live": "live", "lines": "lines", "none": False}[args.progress]


def _finish(run, storage: str) -> int:
    with Storage(storage, readonly=True) as store:
        info = queries.status(store, run.name)
    suffix = f" --storage {storage}" if storage != DEFAULT_STORAGE else ""
    if run.status == "interrupted":
        print(f"Study {run.name!r} interrupted; continue it with: hypersack resume {run.name}{suffix}",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    if "best_trials" in info:                 # multi-objective: its Pareto front
        _print_front(run.name, info["best_trials"], Console().width)
    else:
        _print_best(run.name, info["best"])
        _print_best_complete(run.name, info)
    if not info["complete"]:
        print(f"Study {run.name!r}: no trial completed ({info['failed']} failed, {info['pruned']} "
              f"pruned of {info['total']}); see: hypersack status {run.name}{suffix}", file=sys.stderr)
        return EXIT_NO_RESULT
    return 0


def _print_best(name: str, best: dict | None, width: int | None = None) -> None:
    """The best trial and its config (cut to ``width`` columns when given)."""
    if best is None:
        print(f"Study {name!r}: no result (no trial reported its objective)")
        return
    where = f"trial {best['trial_id']} at step {best['step']}"
    if best.get("state", "complete") != "complete":
        where += f" ({best['state']})"
    print(f"Best trial of {name!r}: {where}, {best['metric']} = {best['value']:.6g}")
    config = f"  config: {json.dumps(best['config'])}"
    print(config if width is None or len(config) <= width else config[:width - 1] + "…")


def _print_front(name: str, front: list[dict], width: int) -> None:
    """A multi-objective study's best trials (its Pareto front) as a table, one row each."""
    if not front:
        print(f"Study {name!r}: no result (no trial completed with every objective reported)")
        return
    print(f"Pareto front of {name!r}: {len(front)} trial{'s' if len(front) != 1 else ''} "
          "no other complete trial beats in every objective")
    metrics = list(front[0]["values"])
    rows = [(str(t["trial_id"]), "-" if t["step"] is None else str(t["step"]),
             *(f"{t['values'][m]:.6g}" for m in metrics),
             ", ".join(f"{k}={_short(v)}" for k, v in t["config"].items())) for t in front]
    heads = ("trial", "step", *metrics)
    fixed = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(heads)]
    table = Table(box=None)
    for head, w in zip(heads, fixed):
        table.add_column(head, no_wrap=True, width=w, justify="right")
    table.add_column("config", no_wrap=True, overflow="ellipsis",
                     width=max(10, width - sum(fixed) - 2 * (len(heads) + 1)))
    for row in rows:
        table.add_row(*row)
    Console(width=width).print(table)


def _print_best_complete(name: str, info: dict) -> None:
    """The best complete trial, when the best one was stopped early (another trial)."""
    best, full = info.get("best"), info.get("best_complete")
    if best is None or full is None or full["trial_id"] == best["trial_id"]:
        return
    print(f"Best complete trial of {name!r}: trial {full['trial_id']} at step {full['step']}, "
          f"{full['metric']} = {full['value']:.6g}")
    print(f"  config: {json.dumps(full['config'])}")


def cmd_run(args: argparse.Namespace) -> int:
    from hypersack.study import Study
    study = Study.from_yaml(args.file, storage=args.storage)
    if_exists = "resume" if args.resume else "replace" if args.replace else "error"
    try:
        run = study._run_returning(if_exists=if_exists, progress=_progress(args))
    except StudyExistsError as exc:          # name the file the user gave
        raise StudyExistsError(exc.name, exc.path, shlex.quote(args.file)) from None
    return _finish(run, str(study.storage_path))


def cmd_resume(args: argparse.Namespace) -> int:
    from hypersack.study import Study, extend_sys_path
    extend_sys_path(os.getcwd())      # as `python -m`: a module:function in the working directory
    storage = args.storage or DEFAULT_STORAGE
    run = Study.load(args.name, storage)._resume_returning(progress=_progress(args))
    return _finish(run, storage)


def cmd_best(args: argparse.Namespace) -> int:
    with Storage(args.storage or DEFAULT_STORAGE, readonly=True) as store:
        if queries.objective_of(store, args.name).is_multi:   # its best trials: the front
            front = queries.best_trials(store, args.name)
            if args.json:
                print(json.dumps(front))
            else:
                _print_front(args.name, front, Console().width)
            return 0 if front else EXIT_NO_RESULT
        best = queries.best_trial(store, args.name, complete=args.complete)
    if args.json:
        print(json.dumps(best))
    else:
        _print_best(args.name, best)
    return 0 if best is not None else EXIT_NO_RESULT


def cmd_status(args: argparse.Namespace) -> int:
    with Storage(args.storage or DEFAULT_STORAGE, readonly=True) as store:
        info = queries.status(store, args.name)
        info.update(_decisions(store, args.name))
    if args.json:
        print(json.dumps(info))
        return 0
    console = Console()
    states = ("complete", "running", "paused", "pending", "pruned", "failed")
    counts = ", ".join(f"{info[s]} {s}" for s in states if s == "complete" or info.get(s))
    console.print(f"[bold]{info['name']}[/bold] ({info['status']}): {info['total']} trials: {counts}",
                  no_wrap=True, overflow="ellipsis")
    if info["status"] == "interrupted":
        console.print(_shown("interrupted", info["name"], args), markup=False, highlight=False,
                      soft_wrap=True)
    console.print(_trials_table(info["trials"], console.width))
    for d in info.get("decisions", []):
        console.print(f"{d['kind']} auto: {d['reason']}", markup=False, highlight=False,
                      soft_wrap=True)
    for t in info["trials"]:
        if t["state"] == "failed":
            console.print(f"[red]trial {t['trial_id']} failed:[/red] {t['error']}", markup=True)
            if t["traceback"]:
                console.print(t["traceback"], markup=False, highlight=False)
    if info["best"]:
        _print_best(args.name, info["best"], console.width)
        _print_best_complete(args.name, info)
    if info.get("best_trials"):
        _print_front(args.name, info["best_trials"], console.width)
    return 0


def _decisions(store: Storage, name: str) -> dict[str, Any]:
    """``decisions``: what ``oversubscription: auto`` and ``execution: auto`` chose and why
    (one line each); ``execution_auto``: the fused-or-separate choices with their figures."""
    from hypersack.runtime.devices.job_history import read_decisions, read_fusion_choices
    return {"decisions": read_decisions(store.connection, name),
            "execution_auto": read_fusion_choices(store.connection, name)}


def _shown(status: str, name: str, args: argparse.Namespace) -> str:
    """A study's status for people: an interrupted one says how to go on."""
    if status != "interrupted":
        return status
    storage = args.storage or DEFAULT_STORAGE
    suffix = f" --storage {storage}" if storage != DEFAULT_STORAGE else ""
    return f"interrupted (resume with: hypersack resume {name}{suffix})"


def _trials_table(trials: list[dict], width: int) -> Table:
    """One row per trial in ``width`` columns (the console's: 80 when piped); the config is cut
    with an ellipsis, never wrapped (``hypersack export`` has it whole)."""
    from hypersack.runtime.loop.progress import not_responding, shared_view
    shared = any(t.get("time_sharing") for t in trials)    # time-shared: priority column
    rows = []
    for t in trials:
        value = "-" if t["value"] is None else f"{t['value']:.4g}"
        step = "-" if t["last_step"] is None else str(t["last_step"])
        config = ", ".join(f"{k}={_short(v)}" for k, v in t["config"].items())
        state, priority = shared_view(t["state"], t.get("time_sharing"))
        state = not_responding(state, t) and "not responding" or state
        extra = (priority,) if shared else ()
        rows.append((str(t["trial_id"]), state, value, step, str(t["attempts"]),
                     str(t.get("resumes", 0)), *extra, config))
    heads = ("trial", "state", "value", "step", "tries", "resumes") + (("priority",) if shared else ())
    fixed = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(heads)]
    padding = 2 * (len(heads) + 1)                     # box-less table: one space each side
    table = Table(box=None)
    for head, w in zip(heads, fixed):
        table.add_column(head, no_wrap=True, width=w)
    table.add_column("config", no_wrap=True, overflow="ellipsis",
                     width=max(10, width - sum(fixed) - padding))
    for row in rows:
        table.add_row(*row)
    return table


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def cmd_export(args: argparse.Namespace) -> int:
    with Storage(args.storage or DEFAULT_STORAGE, readonly=True) as store:
        if args.format == "parquet":
            from hypersack.report.frame import write_parquet
            path = args.output or f"{args.name}.parquet"
            write_parquet(store, args.name, path)
            print(os.path.abspath(path))
            return 0
        text = queries.export(store, args.name, args.format)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_export_best(args: argparse.Namespace) -> int:
    from hypersack.runtime.storage.best_checkpoint import export_best
    with Storage(args.storage or DEFAULT_STORAGE, readonly=True) as store:
        print(export_best(store, args.name, args.output))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from hypersack.report import build_report
    out = args.output or ("-vs-".join(args.names) + ".html" if len(args.names) > 1
                          else f"{args.names[0]}-report.html")
    path = build_report(args.storage or DEFAULT_STORAGE, args.names, out)
    print(f"report written to {path}")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    from hypersack.report.dashboard import Dashboard
    storage = args.storage or DEFAULT_STORAGE
    board = Dashboard(storage, study=args.name, host=args.host, port=args.port, poll_ms=args.poll_ms)
    if not board.loopback:
        print(f"warning: listening on {args.host}, not this machine's loopback: anyone who can "
              "reach this port and has the URL below (its token) can read the store",
              file=sys.stderr, flush=True)
    board.serve_until_interrupted(ready=lambda: print(
        f"HyperSack dashboard of {os.path.abspath(storage)} at {board.url} (Ctrl-C stops it); "
        f"it serves {board.scope()}", flush=True))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with Storage(args.storage or DEFAULT_STORAGE, readonly=True) as store:
        studies = store.list_studies()
    if args.json:
        print(json.dumps(studies))
        return 0
    table = Table(box=None)
    columns = ("complete", "running", "paused", "pending", "pruned", "failed")
    for column in ("study", "status", *columns):
        table.add_column(column)
    for s in studies:
        c = s["counts"]
        table.add_row(s["name"], s["status"], *(str(c.get(k, 0)) for k in columns))
    console = Console()
    console.print(table)
    for s in studies:
        if s["status"] == "interrupted":
            console.print(f"{s['name']}: {_shown('interrupted', s['name'], args)}", markup=False,
                          highlight=False, soft_wrap=True)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """The full integrity check of the file (``check_file``), then, with a study, every row of
    that study read back; exit 0 intact, 3 damaged (each problem on its own line)."""
    storage = args.storage or DEFAULT_STORAGE
    found = check_file(storage, full=True)
    read: dict[str, int] = {}
    if args.name is not None:
        read, more = _read_study(storage, args.name)
        found += more
    if args.json:
        print(json.dumps({"storage": os.path.abspath(storage), "intact": not found,
                          "problems": found, "rows_read": read}))
    elif found:
        print(f"{storage}: damaged ({len(found)} problem{'s' if len(found) != 1 else ''}):")
        for line in found:
            print(f"  {line}")
        print(f"Recover what it holds with: sqlite3 {storage} .recover | sqlite3 recovered.db")
    else:
        rows = ", ".join(f"{n} {what}" for what, n in read.items())
        print(f"{storage}: intact (SQLite's integrity check found no problem"
              + (f"; study {args.name!r}: {rows} read)" if read else ")"))
    return EXIT_DAMAGED if found else 0


def _read_study(storage: str, name: str) -> tuple[dict[str, int], list[str]]:
    """Read every row of study ``name`` back: (rows read by kind, a line per kind that could
    not be). A missing study is StudyNotFoundError (exit 2)."""
    read: dict[str, int] = {}
    found: list[str] = []
    try:
        store = Storage(storage, readonly=True)
    except StorageCorruptError as exc:
        return read, [f"study {name!r}: the store cannot be opened ({exc})"]
    with store:
        try:
            study_id = store.get_study(name).study_id
        except StorageCorruptError as exc:
            return read, [f"study {name!r}: its row cannot be read ({exc})"]
        for what, load in (("trials", store.load_trials), ("results", store.load_results),
                           ("stays", store.load_stays), ("samples", store.load_samples)):
            try:
                read[what] = len(load(study_id))
            except StorageCorruptError:
                found.append(f"study {name!r}: its {what} cannot be read")
    return read, found


def cmd_simulate(args: argparse.Namespace) -> int:
    from hypersack.sim import cli as sim_cli
    return sim_cli.main(args)


_COMMANDS = {"run": cmd_run, "resume": cmd_resume, "status": cmd_status, "best": cmd_best,
             "export": cmd_export, "list": cmd_list, "simulate": cmd_simulate,
             "report": cmd_report, "dashboard": cmd_dashboard, "export-best": cmd_export_best,
             "check": cmd_check}


if __name__ == "__main__":
    sys.exit(main())
