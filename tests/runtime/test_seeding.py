"""A trial's seed reaches random, numpy and torch whether the trainable imports them at its
module's top, inside its body, or finds them imported by an earlier trial of its worker; a
worker never imports them for a trial that does not."""
from __future__ import annotations

import importlib
import random
import sys
import uuid

import pytest

import hypersack
from hypersack.runtime.worker import seeding


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A fresh importable package ``name`` (with a submodule ``part``) whose ``seed`` a seeder
    sets, and the seeders for it."""
    name = f"seedme_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / name
    folder.mkdir()
    (folder / "__init__.py").write_text("seed = None\nloader_when_run = __loader__\n")
    (folder / "part.py").write_text("value = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def seeder(module, seed):
        seen.append(seed)
        module.seed = seed
    yield name, {name: seeder}, seen
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]
    seeding._HOOK.waiting.clear()


def test_random_is_seeded_at_once():
    seeding.seed_everything(1234, {})
    assert random.random() == random.Random(1234).random()


def test_a_module_imported_already_is_seeded_at_once(package):
    name, seeders, seen = package
    module = importlib.import_module(name)
    seeding.seed_everything(7, seeders)
    assert module.seed == 7 and seen == [7]


def test_a_module_not_imported_is_not_imported_but_seeded_when_it_is(package):
    name, seeders, seen = package
    seeding.seed_everything(7, seeders)
    assert name not in sys.modules and seen == []
    seeding.seed_everything(8, seeders)          # the next trial's seed replaces the waiting one
    module = importlib.import_module(f"{name}.part")  # the package comes first, then its part
    package_module = sys.modules[name]
    assert package_module.seed == 8 and seen == [8] and module.value == 1
    # The module ran under, and keeps, the loader the other finders gave it.
    assert type(package_module.loader_when_run).__name__ == "SourceFileLoader"
    assert package_module.__loader__ is package_module.__spec__.loader is package_module.loader_when_run
    importlib.reload(package_module)              # seeded once: a reload is not a first import
    assert seen == [8] and package_module.seed is None


def test_a_missing_module_still_fails_to_import(package):
    _, _, seen = package
    missing = f"not_there_{uuid.uuid4().hex[:8]}"
    seeding.seed_everything(3, {missing: lambda module, seed: seen.append(seed)})
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(missing)
    assert seen == [] and missing not in seeding._HOOK.waiting


@pytest.mark.parametrize("name", ["numpy", "torch"])
def test_the_seeders_seed_numpy_and_torch_global_generators(name):
    module = pytest.importorskip(name)
    draw = (lambda: module.random.rand()) if name == "numpy" else (lambda: module.rand(1).item())
    seeding.seed_everything(2**40 + 5)           # numpy's seed is taken modulo 2**32
    first = draw()
    seeding.seed_everything(2**40 + 5)
    assert draw() == first
    seeding.seed_everything(6)
    assert draw() != first


def _drift(config, ctx):
    """Imports numpy in its body: reports whether numpy was imported before the trial began,
    and how far numpy's next number is from the one its seed gives (0: seeded)."""
    before = "numpy" in sys.modules
    import numpy as np
    expected = np.random.RandomState(ctx.seed % 2**32).rand()
    ctx.report(1, score=float(np.random.rand() - expected), numpy_before=float(before))


@pytest.mark.slow
def test_a_trial_that_imports_numpy_in_its_body_draws_from_its_seed_in_a_fresh_and_a_warm_worker(
        store_path):
    study = hypersack.Study(name="seeded", space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
                            objective=("score", "max"), n_trials=3, storage=store_path, workers=1)
    study.run(_drift, progress=False)
    results = sorted(study.results(), key=lambda r: r["trial_id"])
    assert [r["score"] for r in results] == [0.0, 0.0, 0.0]
    assert results[0]["numpy_before"] == 0.0          # the fresh worker had not imported numpy
    assert results[-1]["numpy_before"] == 1.0         # the warm one had, for an earlier trial
