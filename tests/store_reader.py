"""A reader of a study store in its own process, as a user's commands are: run as
``python tests/store_reader.py DB STUDY [--dashboard]``, it reads the store through the public
read paths in a tight loop, each read opening the store afresh (``hypersack list``'s
``list_studies``, ``hypersack status``'s ``queries.status``, ``trials_dataframe`` every 8th
round, the dashboard's JSON API over HTTP with ``--dashboard``), prints ``ready`` once its
imports are done, and on SIGTERM reads every path once more (``final``: 1 for each that
succeeded) and prints the reads it made and the errors it met as JSON (a read before the study
is stored is neither). Used by tests/runtime/test_storage_readers.py."""
from __future__ import annotations

import json
import signal
import sys
import urllib.error
import urllib.request
from pathlib import Path

from hypersack.errors import StorageError, StudyNotFoundError
from hypersack.report.frame import trials_dataframe
from hypersack.runtime.storage import queries
from hypersack.runtime.storage.sqlite import Storage


def _not_yet(exc: Exception) -> bool:
    return isinstance(exc, StudyNotFoundError) or (
        isinstance(exc, StorageError) and ("no such table" in str(exc) or "No study store" in str(exc)))


def main(db: Path, name: str, dashboard: bool) -> None:
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    board = None
    if dashboard:
        from hypersack.report.dashboard import Dashboard
        board = Dashboard(db, study=name, port=0).start()

    def store_read(fn):
        def read() -> None:
            with Storage(db, readonly=True) as store:
                fn(store)
        return read

    def http(path: str):
        def read() -> None:
            try:
                with urllib.request.urlopen(board.url.rstrip("/") + path, timeout=30) as r:
                    r.read()
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    raise RuntimeError(f"{path}: HTTP {exc.code}") from None
        return read

    paths = {"list": store_read(lambda s: s.list_studies()),
             "status": store_read(lambda s: queries.status(s, name))}
    if board is not None:
        paths.update({"api_studies": http("/api/studies"), "api_study": http(f"/api/study?name={name}")})
    reads = {key: 0 for key in [*paths, "trials_dataframe"]}
    errors: list[str] = []
    print("ready", flush=True)
    rounds = 0
    while not stop:
        rounds += 1
        chosen = dict(paths)
        if rounds % 8 == 0:
            chosen["trials_dataframe"] = store_read(lambda s: trials_dataframe(s, name))
        for key, read in chosen.items():
            try:
                read()
                reads[key] += 1
            except Exception as exc:        # noqa: BLE001 (reported to the test)
                if not _not_yet(exc):
                    errors.append(f"{key}: {type(exc).__name__}: {exc}")
    final = {}                               # one more read of every path, once told to stop
    for key, read in {**paths, "trials_dataframe": store_read(
            lambda s: trials_dataframe(s, name))}.items():
        try:
            read()
            final[key] = 1
        except Exception as exc:            # noqa: BLE001 (reported to the test)
            final[key] = 0
            if not _not_yet(exc):
                errors.append(f"final {key}: {type(exc).__name__}: {exc}")
    if board is not None:
        board.close()
    print(json.dumps({"reads": reads, "final": final, "errors": errors[:10]}), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], "--dashboard" in sys.argv[3:])
