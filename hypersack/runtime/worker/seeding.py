"""A trial's seed, in every global generator its trainable may draw from.

``seed_everything(seed)`` seeds Python's ``random`` at once, and numpy's and torch's global
generators the moment they are imported: at once where the trainable's module (or an earlier
trial in this warm worker) imported them already, else when the trial first imports them, even
inside the trainable's body (``import torch`` in ``train``). A worker whose trials need neither
never imports them (numpy alone costs ~0.1 s of CPU per worker start), and a trial draws the
same numbers whether its worker is fresh or has run trials before.

The hook is one finder at the head of ``sys.meta_path``, installed once per process. It answers
only for a module still waiting for its seed, and only to run the seed right after the real
loader has executed the module: the module keeps the spec and loader the other finders gave it.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import random
import sys
from types import ModuleType
from typing import Any, Callable, Sequence

__all__ = ["seed_everything", "SEEDERS"]

Seeder = Callable[[ModuleType, int], Any]

# Module name -> how to seed its global generator with a trial's seed.
SEEDERS: dict[str, Seeder] = {
    "numpy": lambda np, seed: np.random.seed(seed % 2**32),
    "torch": lambda torch, seed: torch.manual_seed(seed),
}


def seed_everything(seed: int, seeders: dict[str, Seeder] | None = None) -> None:
    """Seed ``random`` now and each module of ``seeders`` (default ``SEEDERS``) now if it is
    imported, else when it is (replacing what an earlier trial left waiting)."""
    random.seed(seed)
    _HOOK.waiting.clear()
    for name, seeder in (SEEDERS if seeders is None else seeders).items():
        module = sys.modules.get(name)
        if module is not None:
            seeder(module, seed)
        else:
            _HOOK.waiting[name] = (seeder, seed)
    if _HOOK.waiting and not any(finder is _HOOK for finder in sys.meta_path):
        sys.meta_path.insert(0, _HOOK)


class _SeedOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a module in ``waiting`` it takes the spec the other finders
    give and seeds the module once its loader has run it."""

    def __init__(self) -> None:
        self.waiting: dict[str, tuple[Seeder, int]] = {}

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.waiting:
            return None
        seeder, seed = self.waiting.pop(fullname)
        spec = _spec_from_others(self, fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Seeding(spec.loader, seeder, seed)
        return spec


class _Seeding(importlib.abc.Loader):
    """The real loader, then the seed; the module sees only the real loader."""

    def __init__(self, loader: Any, seeder: Seeder, seed: int) -> None:
        self.loader, self.seeder, self.seed = loader, seeder, seed

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self.loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        module.__loader__ = self.loader
        self.loader.exec_module(module)
        self.seeder(module, self.seed)


def _spec_from_others(hook: object, fullname: str, path: Sequence[str] | None,
                      target: ModuleType | None) -> importlib.machinery.ModuleSpec | None:
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if finder is hook or find is None:
            continue
        spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target)
        if spec is not None:
            return spec
    return None


_HOOK = _SeedOnImport()
