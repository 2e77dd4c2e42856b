"""Where the suite's CPU goes, per test: a pytest plugin and its summary (benchmarks/RESULTS.md,
section "suite-speed"). Wall times on a shared machine say little; CPU does.

Record (each test: its set-up, call and tear-down; CPU of the test process and of the child
processes it reaped in that time, so a worker reaped late is charged to a later test; Ray's
daemons and Chromium are not reaped per test and are not counted)::

    PYTHONPATH=tests CPU_PROFILE_OUT=/tmp/cp python -m pytest -p cpu_profile -n 2 --dist loadfile

Summarise, per file or per test::

    python tests/cpu_profile.py /tmp/cp files 40
    python tests/cpu_profile.py /tmp/cp tests 40
"""
from __future__ import annotations

import collections
import glob
import json
import os
import resource
import sys
import time

import pytest


def _cpu() -> tuple[float, float]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    own, children = _cpu()
    start = time.perf_counter()
    yield
    own_after, children_after = _cpu()
    out = os.environ.get("CPU_PROFILE_OUT", "/tmp/cpu-profile")
    with open(f"{out}-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl", "a") as f:
        f.write(json.dumps({"id": item.nodeid, "self": own_after - own,
                            "child": children_after - children,
                            "wall": time.perf_counter() - start, "t": start}) + "\n")


def summary(prefix: str, by: str = "files", top: int = 40) -> list[str]:
    """The ``top`` files (or tests) by CPU, from the records written under ``prefix``."""
    rows = [json.loads(line) for name in glob.glob(prefix + "-*.jsonl") for line in open(name)]
    if by == "files":
        files: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0])
        for r in rows:
            f = files[r["id"].split("::")[0]]
            f[0], f[1], f[2], f[3] = f[0] + r["self"], f[1] + r["child"], f[2] + r["wall"], f[3] + 1
        rows = [{"id": k, "self": v[0], "child": v[1], "wall": v[2], "n": v[3]} for k, v in files.items()]
    rows.sort(key=lambda r: -(r["self"] + r["child"]))
    return [f"{r['self'] + r['child']:7.1f} s CPU ({r['self']:6.1f} own + {r['child']:6.1f} children) "
            f"{r['wall']:7.1f} s wall  {r['id']}" for r in rows[:top]]


if __name__ == "__main__":
    print("\n".join(summary(sys.argv[1], *(sys.argv[2:3] or ["files"]),
                            *[int(a) for a in sys.argv[3:4]])))
