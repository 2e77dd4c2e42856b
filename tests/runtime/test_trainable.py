"""Finding a module:function in the driver without importing the module (issue 12, item 8)."""
from __future__ import annotations

import pytest

from hypersack.errors import TrainableError
from hypersack.runtime.trainable import TrainableRef, _top_level_names


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
