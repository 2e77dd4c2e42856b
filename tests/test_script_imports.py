"""Every ``from hypersack... import name`` in benchmarks/, examples/ and tools/ (function-local ones
included) names something that exists: the GPU-only scripts never run in CI, so a moved function
would otherwise break them unnoticed."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from hypersack.errors import MissingDependencyError

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted([*ROOT.glob("benchmarks/**/*.py"), *ROOT.glob("examples/**/*.py"),
                  *ROOT.glob("tools/**/*.py")])


def hypersack_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) of each ``from hypersack.X import name`` in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "hypersack":
            out.extend((node.lineno, node.module, alias.name) for alias in node.names)
    return out


def test_the_scripts_are_found() -> None:
    assert len(SCRIPTS) > 20 and any(p.name == "gpu_checks_device.py" for p in SCRIPTS)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_imported_name_exists(path: Path) -> None:
    missing = []
    for line, module, name in hypersack_imports(path):
        try:
            target = importlib.import_module(module)
        except MissingDependencyError as exc:     # an integration whose extra is not installed
            pytest.skip(str(exc))
        if name != "*" and not hasattr(target, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"line {line}: {module}.{name}")
    assert not missing, f"{path.name} imports what does not exist: {missing}"
