"""Naming and shipping the user's trainable to worker processes.

A trainable is ``train(config, ctx)``. It is named by a built-in name (``digits_mlp``), a
``module:function`` reference, or passed as a Python callable, which is shipped with cloudpickle
(by reference when its module is importable, by value for scripts, notebooks and closures).
"""
from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import inspect
from dataclasses import dataclass
from typing import Any, Callable

import cloudpickle

from hypersack.errors import ConfigError, TrainableError
from hypersack.workloads import BUILTINS

__all__ = ["TrainableRef", "resolve_reference", "check_callable_signature"]


def resolve_reference(reference: str, adapt: Callable[[Any], Any] | None = None
                      ) -> Callable[..., Any]:
    """Import ``module:function`` (dots allowed after the colon) or a built-in workload name.
    ``adapt(obj)`` may turn what is not callable into a trainable (None: it cannot): workers
    run a ``FusableTask`` named so as a plain trial, a pack of one."""
    target = BUILTINS.get(reference.removeprefix("builtin:"), reference)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise TrainableError(
            f"The value of trainable is {reference!r}, but must be 'module:function' or one of "
            f"the built-in workloads {sorted(BUILTINS)}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise TrainableError(f"The value of trainable is {reference!r}, but its module cannot be "
                             f"imported: {exc}") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise TrainableError(f"The value of trainable is {reference!r}, but {module_name!r} "
                                 f"has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        adapted = adapt(obj) if adapt is not None else None
        if adapted is not None:
            return adapted
        raise TrainableError(f"The value of trainable is {reference!r}, but it is not callable")
    return obj


def _check_module_exists(reference: str) -> None:
    """Fail in the driver, before anything runs, when a reference cannot resolve: its module
    must be on sys.path and, when its source can be read, define the name at top level. The
    module itself is imported only by the workers (it may import torch: seconds in the driver)."""
    target = BUILTINS.get(reference.removeprefix("builtin:"), reference)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        resolve_reference(reference)   # raises the explanatory error
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise TrainableError(
            f"The value of trainable is {reference!r}, but its module {module_name!r} cannot be "
            f"imported: it is in none of the folders searched ({_searched()}); run from its "
            "folder, or add that folder to PYTHONPATH")
    tree = _source_tree(reference, spec.origin)
    names = _top_level_names(tree)
    first = attr.split(".")[0]
    if names is not None and first not in names:
        raise TrainableError(
            f"The value of trainable is {reference!r}, but module {module_name!r} "
            f"({spec.origin}) defines no {first!r} at top level")
    if tree is not None and first == attr:
        _check_binding(reference, tree, attr)


def _source_tree(reference: str, origin: str | None) -> ast.Module | None:
    """The parsed source of a trainable's module (None: no readable .py source); ConfigError
    naming the file and line when it does not compile, as every trial would fail on it."""
    if not origin or not origin.endswith(".py"):
        return None
    try:
        with open(origin, "rb") as f:
            return ast.parse(f.read(), filename=origin)
    except SyntaxError as exc:
        raise ConfigError("trainable", reference, f"its module has a syntax error at "
                          f"{origin}:{exc.lineno}: {exc.msg}") from None
    except (OSError, ValueError):
        return None


def _check_binding(reference: str, tree: ast.Module, name: str) -> None:
    """ConfigError when the module's last top-level binding of ``name`` is plainly not a
    ``train(config, ctx)``: a literal, or a function that cannot take (config, ctx). Any other
    binding (a class, a call's result, an import) is left to run time."""
    binding: ast.AST | None = None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            binding = node
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            binding = node.value
    if isinstance(binding, (ast.Constant, ast.List, ast.Dict, ast.Tuple, ast.Set)):
        raise ConfigError("trainable", reference, f"names a {type(binding).__name__.lower()} "
                          f"at line {binding.lineno}, not a function train(config, ctx)")
    if isinstance(binding, (ast.FunctionDef, ast.AsyncFunctionDef)):
        why = _signature_problem(binding.args)
        if why is not None:
            raise ConfigError("trainable", reference, f"is def {name}({ast.unparse(binding.args)}) "
                              f"at line {binding.lineno}, which {why}; a trainable is "
                              "train(config, ctx)")


def _signature_problem(args: ast.arguments) -> str | None:
    """Why a function with ``args`` cannot be called as ``f(config, ctx)``, or None."""
    positional = len(args.posonlyargs) + len(args.args)
    required = positional - len(args.defaults)
    if positional < 2 and args.vararg is None:
        return f"takes {positional} positional argument{'s' if positional != 1 else ''}, not 2"
    if required > 2:
        return f"requires {required} positional arguments, not 2"
    missing = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    if missing:
        return f"requires the keyword argument {missing[0]!r}"
    return None


def check_callable_signature(trainable: Callable[..., Any]) -> None:
    """ConfigError when the callable ``trainable`` cannot be called as ``f(config, ctx)``
    (a signature that cannot be read is left to run time)."""
    try:
        signature = inspect.signature(trainable)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None, None)
    except TypeError as exc:
        name = getattr(trainable, "__qualname__", type(trainable).__name__)
        raise ConfigError("trainable", trainable, f"is {name}{signature}, which cannot be "
                          f"called as train(config, ctx) ({exc})") from None


def _searched(shown: int = 3) -> str:
    """The first folders of sys.path, as a module is searched for (the working directory as
    '.'), then how many more."""
    import os
    import sys
    cwd = os.getcwd()
    folders = [("." if (p or cwd) == cwd else p) for p in sys.path[:shown]]
    more = len(sys.path) - shown
    return ", ".join(folders) + (f" and {more} more" if more > 0 else "")


def _top_level_names(tree: ast.Module | str | None) -> set[str] | None:
    """Names a source file (parsed, or its path) binds at top level (def, class, assignment,
    import), or None when that cannot be known without running it (no source, a syntax error,
    ``import *``, a module ``__getattr__``)."""
    if isinstance(tree, str):
        try:
            tree = _source_tree(tree, tree)
        except ConfigError:
            return None
    if tree is None:
        return None
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Global):
            names.update(node.names)
    return None if "__getattr__" in names else names


@dataclass(frozen=True)
class TrainableRef:
    """What a worker needs to get the trainable: a reference to import, or a cloudpickle payload.
    ``key`` identifies it so a worker loads it once however many trials it runs."""
    key: str
    reference: str | None = None
    payload: bytes | None = None

    @classmethod
    def of(cls, trainable: str | Callable[..., Any]) -> "TrainableRef":
        if isinstance(trainable, str):
            _check_module_exists(trainable)
            return cls(key=f"ref:{trainable}", reference=trainable)
        if not callable(trainable):
            raise TrainableError(f"The value of trainable is {trainable!r}, but must be a callable "
                                 "train(config, ctx) or a 'module:function' string")
        check_callable_signature(trainable)
        try:
            payload = cloudpickle.dumps(trainable)
        except Exception as exc:
            raise TrainableError(f"The trainable {trainable!r} cannot be pickled for the worker "
                                 f"processes: {exc}") from exc
        return cls(key="pickle:" + hashlib.sha1(payload).hexdigest(), payload=payload)

    @staticmethod
    def storable_name(trainable: str | Callable[..., Any]) -> str | None:
        """A reference that a later ``hypersack resume`` can import, or None."""
        if isinstance(trainable, str):
            return trainable
        module = getattr(trainable, "__module__", None)
        qualname = getattr(trainable, "__qualname__", "")
        if not module or module == "__main__" or "<" in qualname:
            return None
        return f"{module}:{qualname}"

    def load(self, adapt: Callable[[Any], Any] | None = None) -> Callable[..., Any]:
        """The trainable (``adapt``: see ``resolve_reference``)."""
        if self.payload is not None:
            return cloudpickle.loads(self.payload)
        if self.reference is None:
            raise TrainableError(f"The trainable {self.key!r} was not sent to this worker (no "
                                 "reference and no payload)")
        return resolve_reference(self.reference, adapt)


# Worker side: what the driver sent of each trainable this worker has not loaded yet, by key.
_RECEIVED: dict[str, tuple[str | None, bytes | None]] = {}


def receive(spec: tuple) -> bool:
    """Keep what a task carries of its trainable (``(key, reference, payload)``; both None once
    the driver has sent them to this worker), whether or not the task gets to load it: the
    driver sends them once per worker, so a trial that fails before loading (an unsafe log
    file, say) must not leave the next one without them. Every plain trial and pack calls this
    first. Returns whether something is kept for ``key`` now."""
    key, reference, payload = spec
    if reference is not None or payload is not None:
        _RECEIVED.setdefault(key, (reference, payload))
    return key in _RECEIVED


def received(key: str) -> TrainableRef:
    """The trainable ``key`` as this worker received it (what is kept is handed over once:
    the caller caches what it loads); a ref with neither reference nor payload if none came."""
    reference, payload = _RECEIVED.pop(key, (None, None))
    return TrainableRef(key, reference, payload)
