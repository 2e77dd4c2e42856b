"""The package's import graph: no cycles (function-local imports included, ``if TYPE_CHECKING``
imports excluded), and core/ depends on nothing but core/ and leaf helpers (errors, validation,
the YAML loader)."""
from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import hypersack

ROOT = Path(hypersack.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                skip.update(id(n) for n in ast.walk(stmt))
    return skip


@cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the hypersack modules it imports anywhere (``from pkg import mod`` counts mod).
    Parsed once per test process (the tests below only read it)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text())
        skip = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                target = _resolve(name, modules) if name.startswith("hypersack") else None
                if target and target != module:
                    graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycles_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_cycle():
    assert cycles(import_graph()) == []


LEAVES = ("hypersack.errors", "hypersack.validation", "hypersack.yaml_input")


def outside(package: str, allowed: tuple[str, ...]) -> set[tuple[str, str]]:
    return {(module, target) for module, targets in import_graph().items()
            if module.startswith(package) for target in targets
            if not target.startswith(allowed) and target != "hypersack"}


def test_core_imports_only_core_placement_errors_and_validation():
    # yaml_input: the bounded YAML loader (a leaf: it imports only errors), for SearchSpace.from_yaml
    assert outside("hypersack.core", ("hypersack.core", "hypersack.placement") + LEAVES) == set()


def test_placement_imports_only_itself_and_the_leaves():
    """Placement is its own package below core: it never reaches back into the study's decisions."""
    assert outside("hypersack.placement", ("hypersack.placement",) + LEAVES) == set()


def test_executors_import_decisions_only_from_core():
    """Executors are transport: what they import from hypersack is core (decisions), runtime
    transport modules, errors and validation; never the simulator, the CLI or the study API."""
    forbidden = ("hypersack.sim", "hypersack.cli", "hypersack.study", "hypersack.config")
    bad = {(module, target) for module, targets in import_graph().items()
           if module.startswith("hypersack.runtime.executors") for target in targets
           if target.startswith(forbidden)}
    assert bad == set()


#: The pack decisions (``core.packs``) only the controller takes: executors obey its Launch.
_ROUTING = {"choose_pack", "PackBook", "PackSeats", "group_key", "pack_cap", "member_cap"}


def _names_from(path: Path, prefix: str) -> set[str]:
    """Names imported (``from X import name``, anywhere in the file) from modules under ``prefix``."""
    tree = ast.parse(path.read_text())
    return {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            and node.module and node.module.startswith(prefix) for alias in node.names}


def test_executors_do_not_route_members_the_controller_seats_them():
    """No executor asks which pack or seat, nor a pack's cap: the controller's Launch says."""
    executors = [p for p in (ROOT / "runtime" / "executors").glob("*.py")]
    executors += [ROOT / "sim" / "executor.py", ROOT / "sim" / "packs.py"]
    bad = {(p.name, name) for p in executors for name in _names_from(p, "hypersack.core.packs")
           if name in _ROUTING}
    assert bad == set()


def test_packs_have_one_home_in_core_and_a_seam_between_driver_and_worker():
    modules = import_graph()
    for gone in ("hypersack.core.fusing", "hypersack.core.routing", "hypersack.core.packing",
                 "hypersack.runtime.pack_worker"):
        assert gone not in modules
    assert "hypersack.core.packs.seating" in modules and "hypersack.core.packs.grouping" in modules
    # the pack process (worker side) knows the pipe protocol, never the executor (driver side)
    worker = modules["hypersack.runtime.worker.pack"]
    assert not {t for t in worker if t.startswith("hypersack.runtime.executors")}


def _room_imports(room: str) -> set[tuple[str, str]]:
    prefix = f"hypersack.runtime.{room}"
    return {(module, target) for module, targets in import_graph().items()
            if module.startswith(prefix) for target in targets
            if target.startswith("hypersack.runtime.") and not target.startswith(prefix)}


def test_runtime_rooms_import_only_the_rooms_they_stand_on():
    """runtime/ is five rooms (ARCHITECTURE.md): the worker side never reaches the driver's loop
    or executors; storage stands on nothing but the worker's checkpoint files; the loop drives
    executors only through its own protocol; executors use the loop's protocol module only (the
    loop is run by the one assembly, ``runtime.loop.assemble``, never by an executor)."""
    rooms = {"loop", "worker", "devices", "storage", "executors"}
    modules = import_graph()
    assert {m.split(".")[2] for m in modules if m.startswith("hypersack.runtime.")} <= rooms
    assert {t for _, t in _room_imports("worker")} <= {"hypersack.runtime.devices.profiler",
                                                       "hypersack.runtime.storage.user_attrs"}
    assert {t for _, t in _room_imports("storage")} <= {"hypersack.runtime.worker.checkpoints"}
    assert not {t for _, t in _room_imports("loop") if not t.startswith("hypersack.runtime.storage")}
    loop_users = {(m, t) for m, t in _room_imports("executors") if t.startswith("hypersack.runtime.loop")}
    assert loop_users <= {(m, "hypersack.runtime.loop.executor") for m, _ in loop_users}


def test_executors_never_import_the_loop_nor_call_back_into_the_controller():
    """The loop decides what to acknowledge (``runtime.loop.run.acknowledgements``); executors
    carry the acks: none imports the loop's driving modules or the controller, and none is
    handed a controller callback (``decision_step``) to decide with."""
    executors = [m for m in import_graph() if m.startswith("hypersack.runtime.executors")]
    executors += ["hypersack.sim.executor", "hypersack.sim.packs"]
    graph = import_graph()
    bad = {(m, t) for m in executors for t in graph[m]
           if t == "hypersack.core.controller"
           or (t.startswith("hypersack.runtime.loop") and t != "hypersack.runtime.loop.executor")}
    assert bad == set()
    modules = _modules()
    callbacks = {m for m in executors if "decision_step" in modules[m].read_text()}
    assert callbacks == set()
