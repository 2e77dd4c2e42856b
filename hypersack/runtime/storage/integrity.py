"""Is the study store's file intact? SQLite's own checks, and what they say in HyperSack's words.

Contract: ``problems(db, full)`` runs ``PRAGMA quick_check`` (``full=False``: every page and
B-tree is well formed, O(file size), no index cross-check) or ``PRAGMA integrity_check``
(``full=True``: also every index against its table) and, where it finds damage, reads every
table through to say which cannot be read, returning one line per problem naming the table (by its name, from the schema's root pages) or the page,
and [] for an intact file. It never raises for damage (a check that SQLite aborts with "database
disk image is malformed" is itself a problem line); it reads only. The store calls the quick
check before a study is resumed or exported (``Storage.verify_integrity``, which raises
``StorageCorruptError`` naming the file) and ``hypersack check`` the full one, so a damaged
store is an error, never a wrong answer (an export of the trials would not read the
``results`` table at all, and ``count(*)`` answers from an index).
"""
from __future__ import annotations

import re
import sqlite3

__all__ = ["problems"]

_MAX_LINES = 100      # SQLite's integrity_check stops after this many errors (its default)


def problems(db: sqlite3.Connection, full: bool = False) -> list[str]:
    """Each problem the check finds in the file, naming the table hit; [] when it is intact."""
    roots = _roots(db)
    out: list[str] = []
    try:
        rows = db.execute(f"PRAGMA {'integrity_check' if full else 'quick_check'}"
                          f"({_MAX_LINES})").fetchall()
        out += [_named(str(r[0]), roots) for r in rows if r and r[0] != "ok"]
    except sqlite3.DatabaseError as exc:
        out.append(f"the {'integrity' if full else 'quick'} check stopped: {exc}")
    if out:                       # which tables cannot be read through (the intact path skips it)
        out += _unreadable_tables(db, [name for name, kind in roots.values() if kind == "table"])
    return out


def _roots(db: sqlite3.Connection) -> dict[int, tuple[str, str]]:
    """Root page -> (name, "table" | "index") of every B-tree in the schema ({} when the
    schema itself cannot be read: the check then says so)."""
    try:
        rows = db.execute("SELECT rootpage, name, type FROM sqlite_master "
                          "WHERE rootpage > 0").fetchall()
    except sqlite3.DatabaseError:
        return {}
    return {int(page): (str(name), str(kind)) for page, name, kind in rows}


def _named(line: str, roots: dict[int, tuple[str, str]]) -> str:
    """SQLite's line with the table its ``Tree N`` / ``Page N`` is the root of, where known."""
    found = re.search(r"\b(?:Tree|Page) (\d+)\b", line)
    if found is not None and int(found.group(1)) in roots:
        name, kind = roots[int(found.group(1))]
        return f"{kind} {name!r}: {line}"
    return line


def _unreadable_tables(db: sqlite3.Connection, tables: list[str]) -> list[str]:
    """A line for each table whose rows cannot all be read (every row, every column)."""
    out = []
    for table in sorted(tables):
        quoted = '"' + table.replace('"', '""') + '"'
        try:
            for _ in db.execute(f"SELECT * FROM {quoted}"):
                pass
        except sqlite3.DatabaseError as exc:
            out.append(f"table {table!r}: its rows cannot be read ({exc})")
    return out
