"""Finding a module:function in the driver without importing the module (issue 12, item 8)."""
from __future__ import annotations

import pytest

from hypersack.errors import ConfigError, TrainableError
from hypersack.runtime.worker.trainable import TrainableRef, _top_level_names


def write(tmp_path, name, text):
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return str(path)


def test_top_level_names_cover_defs_classes_assignments_and_imports(tmp_path):
    origin = write(tmp_path, "m", "import os.path\nfrom x import y as z\nA = 1\n"
                                  "def f(): pass\nclass C: pass\nif True:\n    g = f\n")
    assert {"os", "z", "A", "f", "C", "g"} <= _top_level_names(origin)


@pytest.mark.parametrize("text", ["from torch import *\n", "def __getattr__(name): pass\n",
                                  "def broken(:\n"])
def test_names_that_cannot_be_known_without_running_the_module_are_not_judged(tmp_path, text):
    assert _top_level_names(write(tmp_path, "m", text)) is None


def test_a_missing_function_is_refused_and_a_present_one_accepted(tmp_path, monkeypatch):
    write(tmp_path, "fc_probe", "import torch_is_not_imported_here\ndef train(config, ctx): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert TrainableRef.of("fc_probe:train").reference == "fc_probe:train"   # never imported
    with pytest.raises(TrainableError, match=r"'fc_probe:trian'.*defines no 'trian'"):
        TrainableRef.of("fc_probe:trian")
    with pytest.raises(TrainableError, match="cannot be imported"):
        TrainableRef.of("fc_probe_missing:train")


# ---- what can be checked before the first launch (issue 27) -----------------------------------

@pytest.mark.parametrize("text, words", [
    ("def train(config):\n    pass\n", "takes 1 positional argument, not 2"),
    ("def train():\n    pass\n", "takes 0 positional arguments"),
    ("def train(config, ctx, model):\n    pass\n", "requires 3 positional arguments"),
    ("def train(config, ctx, *, data):\n    pass\n", "keyword argument 'data'"),
    ("train = 5\n", "names a constant at line 2"),
    ("train = {'lr': 1}\n", "names a dict"),
    ("def train(config, ctx):\n    return (\n", "syntax error at"),
])
def test_a_trainable_that_cannot_run_is_refused_before_any_launch(tmp_path, monkeypatch, text,
                                                                  words):
    write(tmp_path, "fp_bad", "import torch_is_not_imported_here\n" + text)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="trainable") as exc:
        TrainableRef.of("fp_bad:train")
    assert words in str(exc.value) and "'fp_bad:train'" in str(exc.value)


@pytest.mark.parametrize("text", ["def train(config, ctx): pass\n",
                                  "def train(config, ctx=None, extra=1): pass\n",
                                  "def train(*args, **kwargs): pass\n",
                                  "class train:\n    def __init__(self, c, x): pass\n",
                                  "import functools\ntrain = functools.partial(print)\n",
                                  "train = 5\ndef train(config, ctx): pass\n"])
def test_trainables_that_may_run_are_accepted(tmp_path, monkeypatch, text):
    write(tmp_path, "fp_ok", text)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert TrainableRef.of("fp_ok:train").reference == "fp_ok:train"


def test_a_callable_with_the_wrong_signature_is_refused():
    def train(config):
        pass
    with pytest.raises(ConfigError, match=r"train\(config\), which cannot be called"):
        TrainableRef.of(train)
    TrainableRef.of(lambda config, ctx: None)


def test_a_module_not_found_names_the_folders_searched(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TrainableError) as exc:
        TrainableRef.of("fp_nowhere:train")
    assert str(tmp_path) in str(exc.value) and "study file's folder" not in str(exc.value)
