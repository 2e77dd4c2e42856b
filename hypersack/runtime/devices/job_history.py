"""The job history (HyperSack Sec. IV-C1, Fig. 6): profiles kept in the study's SQLite file.

One row per :class:`ProfileKey` ``(model signature, batch size, GPU architecture)`` in the table
``profiles`` (created if missing), so a later study, in the same file, profiles only the models it
has not seen. Built on a path, the history opens its own connection (each write commits at once);
built on an open study ``Storage``, it writes through the store's connection, so a profile
written inside the store's ``transaction()`` (the loop's turn) commits with that turn's results,
in the same commit and fsync. The signature hashes the trainable's name and
the config values that define the model's shape (:func:`signature`); other hyperparameters (the
learning rate...) do not change a job's demand and share the profile.

A job that ran out of GPU memory while co-located gets its memory estimate raised with
:meth:`ProfileStore.correct_after_oom` (to the device's memory by default, so the placement puts
it alone); the correction survives later ``put`` calls for the same key.

A profile records how many other trials shared the device while it was measured
(``corunners``): a profile measured alone is never replaced by one measured beside others (whose
utilisation is the whole device's, not the job's). Co-location measurements
(``core.oversubscription.Colocation``: summed demand, slowdown against the alone profile) go to
the table ``colocation``, per GPU architecture and model signature, for ``oversubscription:
auto`` (:meth:`ProfileStore.colocations`).

``execution: auto`` keeps its fusion probes (``core.packs.FusionProbe``: fused against alone
step times) in ``fusion_probes``, per model signature, device kind and pack width, and each
study's choice with its figures in ``fusion_choices`` (``read_fusion_choices``).
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from hypersack.core.demand import DEFAULT_CONTEXT_GB, history_demand, memory_floor_after_oom
from hypersack.errors import ConfigError, StorageError
from hypersack.validation import check_integer
from hypersack.runtime.devices.profiler import Profile

__all__ = ["ProfileKey", "ProfileStore", "signature", "profile_key", "DEFAULT_CONTEXT_GB",
           "read_decisions", "read_fusion_choices"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS profiles (
    signature TEXT NOT NULL,
    batch_size INTEGER NOT NULL,
    arch TEXT NOT NULL,
    profile TEXT,
    memory_floor_gb REAL,
    ooms INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL,
    PRIMARY KEY (signature, batch_size, arch)
);
CREATE TABLE IF NOT EXISTS colocation (
    arch TEXT NOT NULL,
    signature TEXT NOT NULL,
    demand_percent REAL NOT NULL,
    slowdown REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS colocation_arch ON colocation (arch, signature);
CREATE TABLE IF NOT EXISTS decisions (
    study TEXT NOT NULL,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    reason TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (study, kind, subject)
);
CREATE TABLE IF NOT EXISTS fusion_probes (
    signature TEXT NOT NULL,
    arch TEXT NOT NULL,
    width INTEGER NOT NULL,
    probe TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (signature, arch, width)
);
CREATE TABLE IF NOT EXISTS fusion_verdicts (
    task TEXT NOT NULL,
    space TEXT NOT NULL,
    accepted INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (task, space)
);
CREATE TABLE IF NOT EXISTS fusion_choices (
    study TEXT NOT NULL,
    subject TEXT NOT NULL,
    choice TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (study, subject)
);
"""

#: Co-location measurements kept per (architecture, signature): the newest.
KEEP_COLOCATIONS = 64


@dataclass(frozen=True)
class ProfileKey:
    """``batch_size`` 0 means the config names no batch size."""
    signature: str
    batch_size: int
    arch: str


def signature(trainable_name: str, config: Mapping[str, Any], keys: Iterable[str]) -> str:
    """A 16-hex-digit hash of the trainable's name and ``config[k]`` for each model-shape key.

    The order of ``keys`` does not matter; a key missing from ``config`` is a ConfigError.
    """
    model = {}
    for key in sorted(set(keys)):
        if key not in config:
            raise ConfigError("profiling.model_keys", key,
                              f"is not a key of the trial's config (keys: {sorted(config)})")
        model[key] = config[key]
    text = json.dumps({"trainable": trainable_name, "model": model}, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def profile_key(trainable_name: str, config: Mapping[str, Any], model_keys: Iterable[str],
                arch: str, batch_key: str = "batch_size") -> ProfileKey:
    """The history key of one trial's config on one architecture."""
    batch = config.get(batch_key, 0)
    check_integer(f"config.{batch_key}", batch, low=0, hint="(it keys the profiles)")
    return ProfileKey(signature(trainable_name, config, model_keys), batch, arch)


class ProfileStore:
    """Profiles in a SQLite file (usually the study store's): ``source`` is its path, or an open
    ``Storage`` whose connection it shares (see the module docstring). Use from one thread."""

    def __init__(self, source: Any):
        shared = getattr(source, "connection", None)
        self.path = Path(source.path) if shared is not None else Path(source)
        self._owns = shared is None
        self._stored: dict[ProfileKey, dict[str, Any] | None] = {}
        try:
            if shared is not None:
                self._db = shared
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    self._db.execute(statement)
            else:
                self._db = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"Cannot open the profile history in {str(self.path)!r}: {exc}") from None

    def close(self) -> None:
        """Close the history's own connection (a shared one is the store's to close)."""
        if self._owns:
            self._db.close()

    def __enter__(self) -> "ProfileStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, key: ProfileKey) -> Profile | None:
        """The profile of ``key`` with any OOM correction applied, or None if never profiled."""
        profile = self._measured(key)
        floor = self.memory_floor(key)
        if profile is not None and floor is not None and floor > profile.peak_memory_gb:
            profile = replace(profile, peak_memory_gb=floor)
        return profile

    def _measured(self, key: ProfileKey) -> Profile | None:
        row = self._row(key)
        return None if row is None or row[0] is None else Profile.from_dict(json.loads(row[0]))

    def put(self, key: ProfileKey, profile: Profile, corunners: int = 0) -> bool:
        """Store the measured profile of ``key``, measured beside ``corunners`` other trials;
        keeps its OOM correction. A stored profile measured with fewer co-runners is kept
        (returns False), so a shared measurement never replaces one taken alone."""
        stored = self.corunners(key)
        if stored is not None and stored < corunners:
            return False
        data = {**profile.to_dict(), "corunners": int(corunners)}
        self._db.execute(
            "INSERT INTO profiles (signature, batch_size, arch, profile, updated_at) "
            "VALUES (?,?,?,?,?) ON CONFLICT (signature, batch_size, arch) DO UPDATE SET "
            "profile = excluded.profile, updated_at = excluded.updated_at",
            (key.signature, key.batch_size, key.arch, json.dumps(data), time.time()))
        self._stored[key] = data
        return True

    def corunners(self, key: ProfileKey) -> int | None:
        """Other trials on the device while ``key``'s stored profile was measured (0: alone;
        profiles written before this was recorded count as alone), None without a profile."""
        data = self._stored_profile(key)
        return None if data is None else int(data.get("corunners", 0))

    def alone(self, key: ProfileKey) -> Profile | None:
        """``key``'s stored profile if it was measured alone on its device, else None."""
        data = self._stored_profile(key)
        return Profile.from_dict(data) if data is not None and data.get("corunners", 0) == 0 \
            else None

    def _stored_profile(self, key: ProfileKey) -> dict[str, Any] | None:
        """The stored profile's JSON (with ``corunners``), read once per key and then kept as
        this store writes it (a study's driver is the history's one writer while it runs)."""
        if key not in self._stored:
            row = self._row(key)
            self._stored[key] = None if row is None or row[0] is None else json.loads(row[0])
        return self._stored[key]

    def record_colocation(self, arch: str, signature_: str, measurement: Any) -> None:
        """Append one ``Colocation`` measurement for ``(arch, signature_)`` (one insert: the
        oldest beyond ``KEEP_COLOCATIONS`` go when :meth:`colocations` reads them)."""
        self._db.execute("INSERT INTO colocation (arch, signature, demand_percent, slowdown, "
                         "updated_at) VALUES (?,?,?,?,?)",
                         (arch, signature_, float(measurement.demand_percent),
                          float(measurement.slowdown), time.time()))

    def colocations(self, arch: str, signatures: Iterable[str] | None = None) -> list[Any]:
        """The newest ``KEEP_COLOCATIONS`` ``Colocation`` measurements per model on ``arch``,
        oldest first: of ``signatures`` when given and any was measured, else of every model
        measured on ``arch``. Drops the older ones from the history."""
        from hypersack.core.oversubscription import Colocation
        self._db.execute(
            "DELETE FROM colocation WHERE arch = ? AND rowid NOT IN (SELECT rowid FROM (SELECT "
            "rowid, ROW_NUMBER() OVER (PARTITION BY signature ORDER BY rowid DESC) AS age FROM "
            "colocation WHERE arch = ?) WHERE age <= ?)", (arch, arch, KEEP_COLOCATIONS))
        rows = self._db.execute("SELECT signature, demand_percent, slowdown FROM colocation "
                                "WHERE arch = ? ORDER BY rowid", (arch,)).fetchall()
        wanted = set(signatures) if signatures is not None else set()
        mine = [r for r in rows if r[0] in wanted]
        return [Colocation(float(r[1]), float(r[2])) for r in (mine or rows)]

    def keys(self) -> list[ProfileKey]:
        """Every key with a stored profile."""
        rows = self._db.execute("SELECT signature, batch_size, arch FROM profiles "
                                "WHERE profile IS NOT NULL ORDER BY signature, batch_size, arch")
        return [ProfileKey(*r) for r in rows.fetchall()]

    def missing(self, keys: Iterable[ProfileKey]) -> list[ProfileKey]:
        """The keys (deduplicated, in order) that have no profile yet: what to profile."""
        out: list[ProfileKey] = []
        for key in keys:
            if key not in out and self.get(key) is None:
                out.append(key)
        return out

    def correct_after_oom(self, key: ProfileKey, device_memory_gb: float) -> float:
        """Raise ``key``'s memory estimate to at least ``device_memory_gb`` (GiB) after an
        out-of-memory while co-located; returns the new estimate. Works before any profile."""
        floor = memory_floor_after_oom(self.memory_floor(key), device_memory_gb)
        self._db.execute(
            "INSERT INTO profiles (signature, batch_size, arch, memory_floor_gb, ooms, updated_at) "
            "VALUES (?,?,?,?,1,?) ON CONFLICT (signature, batch_size, arch) DO UPDATE SET "
            "memory_floor_gb = MAX(COALESCE(memory_floor_gb, 0), excluded.memory_floor_gb), "
            "ooms = ooms + 1, updated_at = excluded.updated_at",
            (key.signature, key.batch_size, key.arch, floor, time.time()))
        row = self._row(key)
        return float(row[1]) if row is not None else floor

    def memory_floor(self, key: ProfileKey) -> float | None:
        """The OOM-corrected memory floor of ``key`` in GiB, None if it never ran out of memory."""
        row = self._row(key)
        return None if row is None else row[1]

    def demand_for(self, config: Mapping[str, Any], arch: str, *, trainable: str,
                   model_keys: Iterable[str], batch_key: str = "batch_size",
                   iterations: int | None = None,
                   context_gb: float | None = None) -> tuple[float, float, float] | None:
        """``(compute percent, memory GiB, runtime)`` of a trial's config on ``arch`` from the
        history, or None when it was never profiled (nor corrected after an OOM).

        compute: the profiled GPU utilisation, at least 1 (100 where none was measured: CPU, no
        NVML); memory: the profiled peak plus ``context_gb``, the per-process CUDA context that
        ``torch.cuda.max_memory_allocated`` does not count (default 0.5 GiB; 0 on "cpu");
        runtime: seconds for ``iterations`` iterations, or seconds per iteration when None (the
        decreasing policies only compare runtimes). After an OOM correction the memory is at
        least the floor (the floor itself when the profile was below it: a job sized to the device
        still fits an empty device). A corrected OOM with no profile gives
        ``(100, floor, 1.0)``: the job is then placed alone.
        """
        key = profile_key(trainable, config, model_keys, arch, batch_key)
        return history_demand(self._measured(key), self.memory_floor(key), arch,
                              iterations=iterations, context_gb=context_gb)

    def note(self, study: str, kind: str, subject: str, reason: str) -> None:
        """Keep the one-line ``reason`` of the study's latest ``kind`` decision ("oversubscription",
        "execution") about ``subject`` (a GPU architecture, a model): the report shows them."""
        self._db.execute(
            "INSERT INTO decisions (study, kind, subject, reason, updated_at) VALUES (?,?,?,?,?) "
            "ON CONFLICT (study, kind, subject) DO UPDATE SET reason = excluded.reason, "
            "updated_at = excluded.updated_at", (study, kind, subject, reason, time.time()))

    def fusion_probe(self, signature_: str, arch: str, width: int) -> Any:
        """The stored ``FusionProbe`` of a model signature on ``arch`` at ``width``, or None."""
        from hypersack.core.packs import FusionProbe
        row = self._db.execute("SELECT probe FROM fusion_probes WHERE signature = ? AND arch = ? "
                               "AND width = ?", (signature_, arch, int(width))).fetchone()
        return None if row is None else FusionProbe.from_dict(json.loads(row[0]))

    def put_fusion_probe(self, signature_: str, probe: Any, width: int | None = None) -> None:
        """Keep ``probe`` (a ``FusionProbe``) for its signature, device kind and ``width``
        (the planned pack width it stands for; None: the probe's own)."""
        self._db.execute(
            "INSERT INTO fusion_probes (signature, arch, width, probe, updated_at) "
            "VALUES (?,?,?,?,?) ON CONFLICT (signature, arch, width) DO UPDATE SET "
            "probe = excluded.probe, updated_at = excluded.updated_at",
            (signature_, probe.device, int(probe.width if width is None else width),
             json.dumps(probe.to_dict()),
             time.time()))

    def put_space_verdict(self, task: str, space: str, accepted: bool) -> None:
        """Keep whether the fusable ``task`` (its reference's key) accepts every config of the
        space hashed as ``space`` (``fusion_probe.space_verdict``)."""
        self._db.execute(
            "INSERT INTO fusion_verdicts (task, space, accepted, updated_at) VALUES (?,?,?,?) "
            "ON CONFLICT (task, space) DO UPDATE SET accepted = excluded.accepted, "
            "updated_at = excluded.updated_at", (task, space, int(bool(accepted)), time.time()))

    def space_verdict(self, task: str, space: str) -> bool | None:
        """The kept ``put_space_verdict``, or None."""
        row = self._db.execute("SELECT accepted FROM fusion_verdicts WHERE task = ? AND "
                               "space = ?", (task, space)).fetchone()
        return None if row is None else bool(row[0])

    def record_fusion_choice(self, study: str, subject: str, choice: Mapping[str, Any]) -> None:
        """Keep the study's ``execution: auto`` choice about ``subject`` and its figures
        (``FusionChoice.to_dict``): ``hypersack status`` and the report show them."""
        self._db.execute(
            "INSERT INTO fusion_choices (study, subject, choice, updated_at) VALUES (?,?,?,?) "
            "ON CONFLICT (study, subject) DO UPDATE SET choice = excluded.choice, "
            "updated_at = excluded.updated_at", (study, subject, json.dumps(dict(choice)),
                                                 time.time()))

    def _row(self, key: ProfileKey) -> tuple | None:
        return self._db.execute(
            "SELECT profile, memory_floor_gb FROM profiles WHERE signature = ? AND batch_size = ? "
            "AND arch = ?", (key.signature, key.batch_size, key.arch)).fetchone()


def read_decisions(db: sqlite3.Connection, study: str) -> list[dict[str, str]]:
    """``{"kind", "subject", "reason"}`` of every decision noted for ``study`` (by kind and
    subject), read through any connection to the file; [] where none was ever noted."""
    try:
        rows = db.execute("SELECT kind, subject, reason FROM decisions WHERE study = ? "
                          "ORDER BY kind, subject", (study,)).fetchall()
    except sqlite3.OperationalError:        # a file from before the table existed
        return []
    return [{"kind": k, "subject": s, "reason": r} for k, s, r in rows]


def read_fusion_choices(db: sqlite3.Connection, study: str) -> list[dict[str, Any]]:
    """The study's ``execution: auto`` choices with their figures (``FusionChoice.to_dict``),
    by subject, through any connection to the file; [] where none was made."""
    try:
        rows = db.execute("SELECT choice FROM fusion_choices WHERE study = ? ORDER BY subject",
                          (study,)).fetchall()
    except sqlite3.OperationalError:        # a file from before the table existed
        return []
    return [json.loads(r[0]) for r in rows]
