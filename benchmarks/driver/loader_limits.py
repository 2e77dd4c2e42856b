"""How long the study-file loader takes to accept a valid file and to refuse the bad inputs of
issue 10 (alias bomb, deep nesting, huge grid...), with libyaml and with the pure-Python fallback.

    python benchmarks/driver/loader_limits.py [--repeat 50] [--json PATH]

Each row is the median of ``--repeat`` runs; the two loaders alternate (A, B, A, B) so load on
the machine hits both alike. Refusals must all be HyperSack errors (the script fails otherwise).
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from hypersack import config, yaml_input
from hypersack.errors import HyperSackError

ROOT = Path(__file__).resolve().parents[2]
DIGITS = (ROOT / "examples" / "digits.yaml").read_text()
ASHA = "algorithm: {type: asha, min_t: 1, max_t: 12, reduction_factor: 3, num_samples: 32, mode: stop}"


def bomb() -> str:
    lines = ["l0: &l0 [" + ", ".join(["lol"] * 10) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 10)]
    return "\n".join(lines) + "\n"


CASES: dict[str, str] = {
    "valid examples/digits.yaml": DIGITS,
    "alias bomb (10**10 values, <1 KB)": bomb(),
    "5,000 nested brackets": "name: x\nspace: " + "[" * 5000 + "]" * 5000 + "\n",
    "self-referencing alias": "name: x\nspace: &s\n  a: *s\n",
    "grid points_per_axis 1000 over 6 axes": DIGITS.replace(ASHA, "algorithm: {type: grid, points_per_axis: 1000}"),
    "executor.workers 10**9": DIGITS.replace("  max_retries: 2", "  workers: 1000000000\n  max_retries: 2"),
    "pack.max_members 10**400": DIGITS + "pack: {max_members: 1" + "0" * 400 + "}\n",
}


def load_and_build(path: Path) -> str:
    """'accepted' or the error class: the file loaded, the spec and the algorithm built."""
    try:
        config.load_study_file(path)
        return "accepted"
    except HyperSackError as exc:
        return type(exc).__name__


def timed(fn: Callable[[], str]) -> tuple[float, str]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    loaders = {"libyaml": yaml_input._Loader, "python": yaml_input._PyLoader}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in CASES.items():
            path = Path(tmp) / "study.yaml"
            path.write_text(text)
            times: dict[str, list[float]] = {k: [] for k in loaders}
            outcome = ""
            for _ in range(args.repeat):
                for kind, loader in loaders.items():       # A, B, A, B
                    yaml_input._Loader = loader
                    seconds, outcome = timed(lambda: load_and_build(path))
                    times[kind].append(seconds)
            yaml_input._Loader = loaders["libyaml"]
            row = {"case": name, "outcome": outcome,
                   **{f"{k}_ms": round(statistics.median(v) * 1000, 2) for k, v in times.items()}}
            rows.append(row)
            print(f"{name:42s} {outcome:12s} libyaml {row['libyaml_ms']:8.2f} ms   "
                  f"python {row['python_ms']:8.2f} ms")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
