"""Installs are reproducible: every requirement in pyproject.toml is pinned in constraints.txt,
and the Makefile installs with it (``make upgrade-deps`` is the one way to move the pins)."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not name==version"
            pins[canonical(name)] = version
    return pins


def requirements() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        texts += extra
    names = {canonical(re.split(r"[\s\[<>=!~;]", text, maxsplit=1)[0]) for text in texts}
    return names - {"hypersack"}


def test_every_requirement_is_pinned():
    missing = requirements() - set(pinned())
    assert not missing, f"not in constraints.txt (run `make upgrade-deps`): {sorted(missing)}"


def test_torch_is_pinned_to_the_ready_cpu_build():
    assert pinned()["torch"] == "2.13.0"


def test_the_makefile_installs_with_the_constraints():
    makefile = (ROOT / "Makefile").read_text()
    assert "CONSTRAINTS ?= constraints.txt" in makefile
    installs = [line for line in makefile.splitlines() if "$(PIP)" in line and "install" not in line]
    assert installs and all("$(PIN)" in line for line in installs), installs
