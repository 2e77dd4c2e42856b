"""``time_sharing`` in study files and the Python API: parsed, stored, resumable, and bad values
are errors naming the field, its value and (in a file) its line."""
from __future__ import annotations

from pathlib import Path

import pytest

import hypersack
from hypersack.config import load_study_file
from hypersack.core.spec import StudySpec, check_resumable
from hypersack.core.timesharing import TimeSharing
from hypersack.errors import ConfigError

EXAMPLE = Path(__file__).parents[2] / "examples" / "digits_hermes.yaml"
BASE = {"name": "s", "space": {"x": [1, 2]}, "objective": {"metric": "loss", "mode": "min"},
        "budget": {"trials": 2}}


def test_the_example_study_file_loads_with_its_time_sharing():
    spec = StudySpec.from_dict(load_study_file(EXAMPLE))
    assert spec.time_sharing == TimeSharing("hermes", quantum_s=1.0, growth=1.5, max_quantum_s=8.0,
                                            max_jobs_per_device=4, metric="loss")


def test_a_policy_name_is_enough_and_round_trips():
    spec = StudySpec.from_dict({**BASE, "time_sharing": "rr"})
    assert spec.time_sharing == TimeSharing("rr")
    again = StudySpec.from_dict(spec.to_dict())
    assert again.time_sharing == spec.time_sharing
    assert "time_sharing" not in StudySpec.from_dict(BASE).to_dict()   # old stored specs unchanged


def test_time_sharing_may_change_on_resume():
    old = StudySpec.from_dict(BASE).to_dict()
    new = StudySpec.from_dict({**BASE, "time_sharing": {"policy": "hermes"}}).to_dict()
    check_resumable(old, new)


@pytest.mark.parametrize("line, field", [
    ("  policy: lottery", "time_sharing.policy"),
    ("  quantum_s: -1", "time_sharing.quantum_s"),
    ("  max_jobs_per_device: 0", "time_sharing.max_jobs_per_device"),
    ("  growth: 0.9", "time_sharing.growth"),
    ("  quantum: 3", "time_sharing.quantum"),
])
def test_a_bad_value_in_a_file_names_field_value_and_line(tmp_path, line, field):
    text = EXAMPLE.read_text()
    key = line.split(":")[0].strip()
    lines = [x for x in text.splitlines() if not x.startswith(f"  {key}:")]
    at = lines.index("time_sharing:") + 1
    lines.insert(at, line)
    path = tmp_path / "bad.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as err:
        load_study_file(path)
    assert err.value.field == field
    assert line.split(":", 1)[1].strip() in str(err.value)
    assert f"bad.yaml:{at + 1}" in str(err.value)


def test_python_api_takes_a_name_or_a_mapping(tmp_path):
    study = hypersack.Study({"x": [1, 2]}, ("loss", "min"), n_trials=2, storage=tmp_path / "s.db",
                            time_sharing="slaq")
    assert study.spec.time_sharing == TimeSharing("slaq")
    study = hypersack.Study({"x": [1, 2]}, ("loss", "min"), n_trials=2, storage=tmp_path / "s.db",
                            time_sharing={"policy": "hermes", "quantum_s": 5})
    assert study.spec.time_sharing.quantum_s == 5.0
    with pytest.raises(ConfigError, match="time_sharing.policy"):
        hypersack.Study({"x": [1, 2]}, ("loss", "min"), n_trials=2, storage=tmp_path / "s.db",
                        time_sharing="gandiva")
