"""hypersack.core and hypersack.placement stay pure: no torch, ray, processes, wall clock or global
RNG (placement's two tools, the kernels' warm-up and the benchmarks' instance generator, aside)."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hypersack.core
import hypersack.placement

CORE = Path(hypersack.core.__file__).resolve().parent
PLACEMENT = Path(hypersack.placement.__file__).resolve().parent
#: Tools, not decisions: ``python -m hypersack.placement.warm`` times itself, and the tight
#: instances are drawn from a seeded ``random.Random``.
PLACEMENT_TOOLS = {"warm.py", "instances.py"}
CORE_FILES = sorted(CORE.rglob("*.py")) + sorted(
    p for p in PLACEMENT.rglob("*.py") if p.name not in PLACEMENT_TOOLS)


def file_id(path: Path) -> str:
    return path.relative_to(CORE.parent).as_posix()

# Never imported anywhere in core.
FORBIDDEN_ANYWHERE = {"torch", "ray", "subprocess", "multiprocessing", "time", "random", "threading",
                      "socket", "datetime"}
FORBIDDEN_CALLS = [
    r"\btime\.(time|monotonic|perf_counter|sleep)\b",
    r"\bdatetime\.(now|utcnow|today)\b",
    r"(?<![\w.])random\.(random|seed|randint|choice|shuffle|uniform)\(",
    # numpy's global RNG: only np.random.default_rng / Generator are allowed.
    r"\b(np|numpy)\.random\.(?!default_rng\b|Generator\b)\w+",
]


def imported_roots(source: str, top_level_only: bool) -> dict[str, int]:
    """Root package of every import -> line; ``top_level_only``: outside functions and classes."""
    tree = ast.parse(source)
    found: dict[str, int] = {}

    def visit(node, in_def):
        for child in ast.iter_child_nodes(node):
            inside = in_def or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                                  ast.Lambda))
            if isinstance(child, ast.Import) and not (top_level_only and in_def):
                for alias in child.names:
                    found.setdefault(alias.name.split(".")[0], child.lineno)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module \
                    and not (top_level_only and in_def):
                found.setdefault(child.module.split(".")[0], child.lineno)
            visit(child, inside)

    visit(tree, False)
    return found


def forbidden_calls(source: str) -> list[str]:
    code = "\n".join(line.split("#", 1)[0] for line in source.splitlines())   # ignore comments
    return [m.group(0) for pattern in FORBIDDEN_CALLS for m in re.finditer(pattern, code)]


# ---- the checkers themselves catch what they are meant to -------------------------------------

def test_checkers_catch_violations():
    src = textwrap.dedent("""
        import numpy as np
        import torch.nn
        from subprocess import run
        try:
            import ray
        except ImportError:
            pass
        def f():
            import time
            return time.time() + np.random.rand() + np.random.default_rng(0).random()
        np.random.seed(0)
    """)
    top = imported_roots(src, top_level_only=True)
    assert {"torch", "subprocess", "ray", "numpy"} <= set(top) and "time" not in top
    assert "time" in imported_roots(src, top_level_only=False)
    assert sorted(forbidden_calls(src)) == ["np.random.rand", "np.random.seed", "time.time"]
    assert forbidden_calls("rng = np.random.default_rng(seed)  # not np.random.seed\n") == []
    assert forbidden_calls("x = random.random()\n") == ["random.random("]


# ---- the real package -------------------------------------------------------------------------

def test_core_files_are_found():
    names = {file_id(p) for p in CORE_FILES}
    assert {"core/space.py", "core/controller.py", "core/spec.py", "core/trial.py",
            "core/objective.py", "core/algorithms/tpe.py", "core/algorithms/random_search.py",
            "placement/fill.py", "placement/api.py", "placement/jit.py"} <= names
    assert "placement/warm.py" not in names


@pytest.mark.parametrize("path", CORE_FILES, ids=file_id)
def test_no_forbidden_imports(path):
    roots = imported_roots(path.read_text(), top_level_only=False)
    bad = {name: line for name, line in roots.items() if name in FORBIDDEN_ANYWHERE}
    assert not bad, f"{path.name} imports {bad}"
    top = imported_roots(path.read_text(), top_level_only=True)
    assert "optuna" not in top, f"{path.name} imports optuna at module level (it is optional)"


@pytest.mark.parametrize("path", CORE_FILES, ids=file_id)
def test_no_clock_or_global_rng(path):
    assert forbidden_calls(path.read_text()) == []


BLOCKED_IMPORT = textwrap.dedent("""
    import importlib.abc, sys

    BLOCKED = {"torch", "ray", "optuna"}

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"blocked: {name}")
            return None

    sys.meta_path.insert(0, Block())
    for name in list(sys.modules):
        if name.split(".")[0] in BLOCKED:
            del sys.modules[name]

    import hypersack.core.space, hypersack.core.controller, hypersack.core.algorithms
    import hypersack.core.spec, hypersack.core.trial, hypersack.core.objective
    import hypersack.placement
    import hypersack.core.packs, hypersack.core.devices
    from hypersack.core.algorithms import make_algorithm
    from hypersack.core.objective import Objective
    from hypersack.core.space import SearchSpace
    from hypersack.errors import MissingDependencyError

    leaked = sorted(n for n in sys.modules if n.split(".")[0] in BLOCKED)
    assert not leaked, leaked
    space = SearchSpace({"x": [1, 2]})
    assert make_algorithm("random", space, Objective("y", "max")).suggest(0).config["x"] in (1, 2)
    try:
        make_algorithm("tpe", space, Objective("y", "max"))
    except MissingDependencyError as exc:
        assert "pip install 'hypersack[tpe]'" in str(exc), exc
    else:
        raise AssertionError("TPE built without optuna")
    print("CORE-OK")
""")


def test_core_imports_without_torch_ray_or_optuna():
    proc = subprocess.run([sys.executable, "-c", BLOCKED_IMPORT], capture_output=True, text=True,
                          timeout=60, cwd=str(CORE.parent.parent))
    assert proc.returncode == 0, proc.stderr
    assert "CORE-OK" in proc.stdout


def test_the_blocker_really_blocks():
    code = BLOCKED_IMPORT.split("import hypersack.core.space")[0] + "import optuna\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "blocked: optuna" in proc.stderr
