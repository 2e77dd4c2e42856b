"""Callbacks a study file names as ``callbacks_helper:NAME`` (tests/ is on the workers' path)."""
from __future__ import annotations

import json
import os

import hypersack


class FileLog(hypersack.Callback):
    """Appends one JSON line per hook to $HYPERSACK_TEST_CALLBACK_LOG."""

    def _write(self, *item):
        with open(os.environ["HYPERSACK_TEST_CALLBACK_LOG"], "a") as f:
            f.write(json.dumps(item) + "\n")

    def on_trial_start(self, study, trial):
        self._write("start", trial.trial_id)

    def on_trial_complete(self, study, trial):
        self._write("complete", trial.trial_id, trial.state)


CALLBACK = FileLog()
