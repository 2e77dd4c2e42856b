"""A study's driver must survive another process reading its store every few milliseconds.

    python benchmarks/driver/concurrent_reader.py --runs 10 --trials 300 --poll-ms 3
    python benchmarks/driver/concurrent_reader.py --runs 1 --no-reader      # the same, unread

Each run: a fresh folder; an ASHA study of ``--trials`` short trials (``synthetic_chain``, 9
steps, no sleep, no checkpoint; ``--workers`` workers) run through the real CLI
(``python -m hypersack run``) in one process, while a second process (this script with
``--reader``) polls every public read path of the same store in turn, each time opening the
store afresh as a user's command does: ``hypersack status --json``, ``hypersack list --json``,
the dashboard's JSON API over HTTP (``/api/studies``, ``/api/study?name=``; the dashboard runs in
the reader process) and ``Study.load(...).trials_dataframe()``, sleeping ``--poll-ms`` between
two reads. A run passes when the driver exits 0 with no "Fatal Python error" and no traceback,
every trial ended (complete or stopped by ASHA: none running or pending), and every trial's
stored steps are exactly 1..last_step, each once, each value what ``chain_values`` computes for
its config and seed. Prints one JSON line per run and a summary; exit 1 when any run fails.
(issue 37: before the fix the driver died with SIGBUS near the end of 14 of 14 such runs.)
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

STEPS = 9


def _study_yaml(name: str, trials: int, workers: int, durability: str) -> str:
    return f"""name: {name}
trainable: synthetic_chain
space:
  lr: {{type: float, low: 0.05, high: 1.0}}
  steps: {STEPS}
  sleep_s: 0
  checkpoint_every: 1000
objective: {{metric: loss, mode: min}}
budget: {{trials: {trials}}}
algorithm: {{type: asha, min_t: 1, max_t: {STEPS}, reduction_factor: 3}}
seed: 7
durability: {durability}
executor: {{workers: {workers}}}
"""


# ---- the reader process ---------------------------------------------------------------------

def reader(db: Path, name: str, poll_s: float, out: Path) -> int:
    """Poll every read path until SIGTERM; write the counts of reads and errors to ``out``."""
    from hypersack import cli
    from hypersack.report.dashboard import Dashboard
    from hypersack.study import Study

    import hypersack.report.frame  # noqa: F401 (pandas: imported before the study starts)

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    board = Dashboard(db, study=name, port=0).start()
    base = board.url.rstrip("/")
    print("ready", flush=True)                      # the driver starts now

    def http(path: str) -> None:
        try:
            with urllib.request.urlopen(base + path, timeout=30) as r:
                r.read()
        except urllib.error.HTTPError as exc:       # 404 before the study is stored
            if exc.code != 404:
                raise RuntimeError(f"{path}: HTTP {exc.code} {exc.read()[:300]!r}") from None

    def command(*argv: str) -> None:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            code = cli.main([*argv, "--storage", str(db), "--json"])
        if code != 0 and not _not_yet(err.getvalue()):
            raise RuntimeError(f"hypersack {argv[0]}: exit {code}: {err.getvalue()[-300:]}")

    def frame() -> None:
        try:
            Study.load(name, db).trials_dataframe()
        except Exception as exc:                    # noqa: BLE001 (counted below)
            if not _not_yet(str(exc)):
                raise

    paths = {"status": lambda: command("status", name), "list": lambda: command("list"),
             "api_studies": lambda: http("/api/studies"),
             "api_study": lambda: http(f"/api/study?name={name}"), "trials_dataframe": frame}
    reads = {k: 0 for k in paths}
    errors: dict[str, int] = {}
    samples: list[str] = []
    while not stop:
        for key, read in paths.items():
            if stop:
                break
            try:
                read()
                reads[key] += 1
            except Exception as exc:                # noqa: BLE001 (a reader's error is counted)
                errors[key] = errors.get(key, 0) + 1
                if len(samples) < 5:
                    samples.append(f"{key}: {type(exc).__name__}: {str(exc)[:300]}")
            time.sleep(poll_s)
    board.close()
    out.write_text(json.dumps({"reads": reads, "errors": errors, "error_samples": samples}))
    return 0


def _not_yet(message: str) -> bool:
    """The error of a read before the driver stored the study (not counted as an error)."""
    return any(s in message for s in ("No study named", "No study store", "no such table"))


# ---- one run --------------------------------------------------------------------------------

def _check(db: Path) -> dict:
    """Every trial ended; its steps 1..last_step stored once each, with the chain's values."""
    from hypersack.workloads.chain import chain_values
    con = sqlite3.connect(db)
    try:
        trials = con.execute("SELECT trial_id, state, config, seed, last_step FROM trials").fetchall()
        out = {"trials": len(trials), "steps_stored": 0, "steps_lost": 0, "steps_duplicated": 0,
               "steps_beyond_last": 0, "wrong_values": 0, "not_ended": 0}
        for trial_id, state, config, seed, last in trials:
            if state not in ("complete", "pruned"):
                out["not_ended"] += 1
            expected = chain_values(json.loads(config), seed)
            rows = con.execute("SELECT step, metrics FROM results WHERE trial_id = ? ORDER BY step",
                               (trial_id,)).fetchall()
            steps = [s for s, _ in rows]
            out["steps_stored"] += len(steps)
            out["steps_lost"] += len(set(range(1, (last or 0) + 1)) - set(steps))
            out["steps_duplicated"] += len(steps) - len(set(steps))
            out["steps_beyond_last"] += sum(1 for s in steps if last is None or s > last)
            out["wrong_values"] += sum(1 for s, m in rows
                                       if not 1 <= s <= len(expected) or json.loads(m) != expected[s - 1])
        return out
    finally:
        con.close()


def one_run(index: int, args: argparse.Namespace, env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="hs-reader-") as tmp:
        folder = Path(tmp)
        name = f"reader-{index}"
        (folder / "study.yaml").write_text(_study_yaml(name, args.trials, args.workers,
                                                       args.durability))
        db, counts = folder / "hypersack.db", folder / "reader.json"
        poller = None
        if not args.no_reader:
            poller = subprocess.Popen([sys.executable, __file__, "--reader", str(db), name,
                                       str(counts), "--poll-ms", str(args.poll_ms)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            assert poller.stdout is not None
            poller.stdout.readline()                # "ready": its imports are done
        start = time.monotonic()
        driver = subprocess.Popen([sys.executable, "-m", "hypersack", "run", "study.yaml",
                                   "--progress", "none"], cwd=folder, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _, err = driver.communicate(timeout=args.timeout_s)
        except subprocess.TimeoutExpired:
            driver.kill()
            _, err = driver.communicate()
        wall = time.monotonic() - start
        read = {}
        if poller is not None:
            poller.send_signal(signal.SIGTERM)
            _, perr = poller.communicate(timeout=120)
            read = json.loads(counts.read_text()) if counts.exists() else {
                "reader_failed": perr.decode(errors="replace")[-1500:]}
        text = err.decode(errors="replace")
        result = {"run": index, "driver_exit": driver.returncode, "wall_s": round(wall, 1),
                  "fatal": "Fatal Python error" in text, "traceback": "Traceback" in text,
                  **_check(db), **read}
        if driver.returncode != 0 or result["fatal"] or result["traceback"]:
            result["driver_stderr"] = text[-1500:]
        result["ok"] = (driver.returncode == 0 and not result["fatal"] and not result["traceback"]
                        and result["trials"] == args.trials and not result["not_ended"]
                        and not result["steps_lost"] and not result["steps_duplicated"]
                        and not result["steps_beyond_last"] and not result["wrong_values"]
                        and "reader_failed" not in result)
        return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--trials", type=int, default=300)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--poll-ms", type=float, default=3.0, help="the reader's sleep between reads")
    p.add_argument("--durability", choices=("power", "process"), default="power")
    p.add_argument("--no-reader", action="store_true", help="run the studies unread (control)")
    p.add_argument("--timeout-s", type=float, default=900.0, help="per study")
    p.add_argument("--json", default=None, help="write the runs' results to this file")
    p.add_argument("--reader", nargs=3, metavar=("DB", "STUDY", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.reader:
        return reader(Path(args.reader[0]), args.reader[1], args.poll_ms / 1000, Path(args.reader[2]))
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(q for q in (root, env.get("PYTHONPATH", "")) if q)
    results = []
    for i in range(args.runs):
        results.append(one_run(i, args, env))
        print(json.dumps(results[-1]), flush=True)
    failed = [r["run"] for r in results if not r["ok"]]
    crashes = sum(1 for r in results if r["driver_exit"] != 0 or r["fatal"])
    reads = sum(sum(r.get("reads", {}).values()) for r in results)
    summary = {"runs": len(results), "failed": failed, "driver_crashes": crashes,
               "reads": reads, "reader_errors": sum(sum(r.get("errors", {}).values()) for r in results),
               "steps_stored": sum(r["steps_stored"] for r in results)}
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "runs": results}, indent=1))
    print("PASS" if not failed else "FAIL")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
