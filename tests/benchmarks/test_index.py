"""benchmarks/README.md is the index of the benchmarks: every script in it, and every benchmark
path that the docs, the Makefile and RESULTS.md's recorded commands name still exists."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
PATH = re.compile(r"(?<![\w/.-])benchmarks/[\w/.-]+\.(?:py|json)")   # not tests/benchmarks/...


def test_every_script_is_in_a_group_and_in_the_index() -> None:
    assert not list(BENCH.glob("*.py")), "a script at benchmarks/ itself: put it in a group folder"
    index = (BENCH / "README.md").read_text()
    scripts = sorted(BENCH.glob("*/*.py"))
    assert len(scripts) > 30
    missing = [str(p.relative_to(BENCH)) for p in scripts
               if f"`{p.relative_to(BENCH)}`" not in index and f"`{p.name}`" not in index]
    assert not missing, f"not in benchmarks/README.md: {missing}"


def test_every_named_benchmark_path_exists() -> None:
    texts = [ROOT / "README.md", ROOT / "Makefile", BENCH / "README.md", BENCH / "RESULTS.md",
             *(ROOT / "hypersack").rglob("*.py"), *BENCH.glob("*/*.py"), *(ROOT / "examples").rglob("*.*")]
    gone = {f"{p.relative_to(ROOT)}: {m}" for p in texts if p.is_file() and p.suffix != ".npy"
            for m in PATH.findall(p.read_text(errors="replace")) if not (ROOT / m).exists()}
    assert not gone, sorted(gone)
