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
from dataclasses import dataclass
from typing import Any, Callable

import cloudpickle

from hypersack.errors import TrainableError
from hypersack.workloads import BUILTINS

__all__ = ["TrainableRef", "resolve_reference"]


def resolve_reference(reference: str) -> Callable[..., Any]:
    """Import ``module:function`` (dots allowed after the colon) or a built-in workload name."""
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
            "imported (not found on sys.path; the study file's folder and the working directory "
            "are searched, then PYTHONPATH)")
    names = _top_level_names(spec.origin)
    first = attr.split(".")[0]
    if names is not None and first not in names:
        raise TrainableError(
            f"The value of trainable is {reference!r}, but module {module_name!r} "
            f"({spec.origin}) defines no {first!r} at top level")


def _top_level_names(origin: str | None) -> set[str] | None:
    """Names a Python source file binds at top level (def, class, assignment, import), or None
    when that cannot be known without running it (no source, syntax error, ``import *``,
    a module ``__getattr__``)."""
    if not origin or not origin.endswith(".py"):
        return None
    try:
        with open(origin, "rb") as f:
            tree = ast.parse(f.read(), filename=origin)
    except (OSError, SyntaxError, ValueError):
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

    def load(self) -> Callable[..., Any]:
        if self.payload is not None:
            return cloudpickle.loads(self.payload)
        assert self.reference is not None
        return resolve_reference(self.reference)
