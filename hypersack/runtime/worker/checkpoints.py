"""A trial's checkpoint files: written privately and atomically, read safely, owned by one trial.

Contract (the driver side is ``core/controller.py``, the trainable side ``runtime/worker/context.py``):

- Every write makes a new file, ``checkpoint-a<attempt>-<n>.<ext>`` (the n-th write of that
  attempt) in the trial's folder; a file is never overwritten once written. The study store names the *committed* file of each
  trial (``trials.checkpoint``): the one that rode with the trial's last durable report. A
  restore reads that file and no other, so a newer file left by a killed attempt is never
  adopted, and a file that lies in the folder without the store naming it is ignored.
- Folders are created 0700 and files 0600; a folder or file owned by another user, or a
  symbolic link where a folder or file should be, is refused (``UnsafePathError``). This
  module is the one home of that rule for every file of a run folder, whoever opens it (the
  driver or a worker): ``open_private`` (write), ``read_private`` (read: never follows a link,
  never blocks on a FIFO, only a regular file) and ``replace_private`` (atomic rewrite).
- Reading is safe by default: ``.pt`` files through ``torch.load(weights_only=True)`` and
  ``.pkl`` files through an unpickler that builds only plain data (numbers, strings, bytes,
  lists, tuples, dicts, sets, numpy arrays and scalars) plus the types a trainable allowed with
  ``allow_checkpoint_types``. ``unsafe=True`` (a study's ``unsafe_checkpoints: true``) reads
  any pickle: only for checkpoint folders no other user can write.
"""
from __future__ import annotations

import importlib
import io
import os
import pickle
import secrets
import stat
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

from hypersack.errors import CheckpointError, UnsafePathError

__all__ = ["allow_checkpoint_types", "checkpoint_name", "ensure_private_dir", "open_private",
           "read_private", "replace_private", "read_checkpoint", "remove_other_checkpoints",
           "write_checkpoint"]

_PREFIX = "checkpoint-"
_ALLOWED: dict[tuple[str, str], type] = {}

# Globals a plain-data pickle may name (numpy arrays and scalars are rebuilt through these).
_SAFE_GLOBALS = {
    ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "complex"),
    ("builtins", "slice"), ("builtins", "range"), ("builtins", "bytearray"),
    ("collections", "OrderedDict"), ("collections", "defaultdict"),
    ("numpy", "dtype"), ("numpy", "ndarray"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "float64"), ("numpy", "float32"), ("numpy", "int64"), ("numpy", "int32"),
    ("numpy", "bool_"),
}


def allow_checkpoint_types(*types: type) -> None:
    """Let safe restores build instances of ``types`` (your dataclasses, say) from checkpoints.

    Call it at import time of the module that defines your trainable, so every worker runs it.
    """
    for t in types:
        if not isinstance(t, type):
            raise CheckpointError(f"allow_checkpoint_types takes classes, not {t!r}")
        _ALLOWED[(t.__module__, t.__qualname__)] = t
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.serialization.add_safe_globals(list(types))


def checkpoint_name(attempt: int, sequence: int, suffix: str) -> str:
    """The file name of the ``sequence``-th checkpoint written by ``attempt`` of a trial."""
    return f"{_PREFIX}a{int(attempt)}-{int(sequence)}{suffix}"


# ---- private files and folders ------------------------------------------------------------------

def ensure_private_dir(path: Path, root: Path | None = None) -> Path:
    """Create ``path`` (and missing parents) as 0700 folders. Every folder from ``root`` (default:
    ``path``'s parent) down to ``path`` must be a real folder, not a symbolic link, owned by this
    user: otherwise ``UnsafePathError``. Above ``root`` anything goes. Returns ``path``."""
    path = Path(os.path.abspath(path))
    root = Path(os.path.abspath(root)) if root is not None else path.parent
    if root != path and root not in path.parents:
        raise UnsafePathError(path, f"is not inside {str(root)!r}")
    chain = [root] + [p for p in reversed(path.parents) if root in p.parents] + (
        [path] if path != root else [])
    for folder in chain:
        if not _exists_nofollow(folder):
            try:
                os.mkdir(folder, 0o700)
            except FileExistsError:
                pass
        _check_owned_dir(folder)
    return path


def _exists_nofollow(path: Path) -> bool:
    try:
        os.lstat(path)
        return True
    except FileNotFoundError:
        return False


def _check_owned_dir(path: Path) -> None:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(path, "is a symbolic link; HyperSack does not follow links in its "
                              "run folders")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(path, "is not a folder")
    if st.st_uid != os.getuid():
        raise UnsafePathError(path, f"belongs to another user (uid {st.st_uid}); a study's "
                              "folders must be its own user's")


def open_private(path: Path, *, append: bool = False) -> int:
    """Open ``path`` for writing as a 0600 file without following a symbolic link; a new file
    unless ``append``. Returns the file descriptor. Refuses a file owned by another user."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    flags |= os.O_APPEND if append else os.O_EXCL
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if _is_link(path):
            raise UnsafePathError(path, "is a symbolic link; HyperSack does not follow it") from None
        raise exc
    st = os.fstat(fd)
    if st.st_uid != os.getuid():
        os.close(fd)
        raise UnsafePathError(path, f"belongs to another user (uid {st.st_uid})")
    return fd


def read_private(path: Path, limit: int | None = None) -> bytes:
    """The bytes of ``path``, opened without following a symbolic link and without blocking
    (a FIFO planted there never stalls the reader). It must be a regular file owned by this
    user, of at most ``limit`` bytes (None: any size): otherwise ``UnsafePathError``.
    FileNotFoundError when there is no such file."""
    flags = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
             | getattr(os, "O_CLOEXEC", 0))
    try:
        fd = os.open(path, flags)
    except OSError:
        if _is_link(path):
            raise UnsafePathError(path, "is a symbolic link; HyperSack does not follow it") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafePathError(path, "is not a regular file (a FIFO, device or folder); "
                              "HyperSack does not read it")
    with os.fdopen(fd, "rb") as f:
        if st.st_uid != os.getuid():
            raise UnsafePathError(path, f"belongs to another user (uid {st.st_uid}); refusing "
                                  "to read it")
        if limit is not None and st.st_size > limit:
            raise UnsafePathError(path, f"holds {st.st_size} bytes, more than the {limit} "
                                  "HyperSack reads from it")
        return f.read() if limit is None else f.read(limit + 1)[:limit]


def replace_private(path: Path, data: bytes) -> None:
    """Make ``data`` the content of ``path`` atomically: written into a new private file beside
    it (``open_private``: exclusive, never through a link, a name no other write uses), then
    renamed over ``path`` (a symbolic link planted at ``path`` is replaced, never followed)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    _write_and_rename(tmp, path, lambda f: f.write(data))


def _write_and_rename(tmp: Path, path: Path, write: Callable[[Any], Any], *,
                      durable: bool = False) -> None:
    """``write(file)`` into ``tmp``, a new private file (``open_private``), then rename it over
    ``path``; ``durable``: the file is fsynced before the rename. ``tmp`` is removed on any
    failure, and the failure raised."""
    fd = open_private(tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


# ---- writing --------------------------------------------------------------------------------------

def write_checkpoint(trial_dir: Path, state: Any, *, attempt: int, sequence: int) -> str:
    """Write ``state`` as a new checkpoint file of this attempt; returns its file name.

    Durable (fsync of the file and its folder) before it returns. torch.save when torch is
    loaded, else pickle. Callers number their writes (``sequence``) so names never repeat.
    """
    trial_dir = ensure_private_dir(trial_dir)    # normally made already by the worker
    save, suffix = _serializer()
    name = checkpoint_name(attempt, sequence, suffix)
    tmp = trial_dir / f".{name}.{os.getpid()}.tmp"
    if _exists_nofollow(tmp):
        os.unlink(tmp)
    _write_and_rename(tmp, trial_dir / name, lambda f: save(state, f), durable=True)
    _fsync_dir(trial_dir)
    return name


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_other_checkpoints(trial_dir: Path, keep: Iterable[str | None]) -> None:
    """Delete this trial's checkpoint files except ``keep`` (the committed one and a pending
    one). Only the trial's own running attempt calls this: one driver runs a study at a time."""
    kept = {k for k in keep if k}
    try:
        names = os.listdir(trial_dir)
    except FileNotFoundError:
        return
    for name in names:
        is_ours = name.startswith(_PREFIX) or (name.startswith(f".{_PREFIX}") and name.endswith(".tmp"))
        if is_ours and name not in kept:
            try:
                os.unlink(trial_dir / name)
            except OSError:
                pass


def _serializer() -> tuple[Callable[[Any, Any], None], str]:
    if "torch" in sys.modules:
        import torch
        return torch.save, ".pt"
    return (lambda obj, f: pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)), ".pkl"


# ---- reading --------------------------------------------------------------------------------------

# A trial checkpoint ``{key: bytes}`` holding a framework's own checkpoint file (the
# Lightning integration's), and the suffix that file takes when exported (``export_best``).
LIGHTNING_KEY = "lightning_checkpoint"
FRAMEWORK_FILES = {LIGHTNING_KEY: ".ckpt"}


def framework_file(state: Any) -> tuple[str, bytes] | None:
    """``(suffix, bytes)`` of the framework checkpoint file ``state`` wraps (FRAMEWORK_FILES),
    else None."""
    if isinstance(state, dict):
        for key, suffix in FRAMEWORK_FILES.items():
            if isinstance(state.get(key), bytes):
                return suffix, state[key]
    return None


def read_checkpoint(trial_dir: Path, name: str | None, *, unsafe: bool = False) -> Any:
    """The state in ``trial_dir/name`` (the committed checkpoint the store names), or None when
    ``name`` is None. Refuses names with a folder part, symbolic links and files of other users."""
    if name is None:
        return None
    if os.sep in name or name.startswith(".") or not name.startswith(_PREFIX):
        raise CheckpointError(f"the stored checkpoint name {name!r} is not a checkpoint file name")
    path = Path(trial_dir) / name
    try:
        data = read_private(path)
    except FileNotFoundError:
        raise CheckpointError(f"the checkpoint {str(path)!r} named by the study store is missing; "
                              "was the run folder moved or cleaned?") from None
    return _load(data, name, unsafe)


def _load(data: bytes, name: str, unsafe: bool) -> Any:
    if name.endswith(".pt"):
        import torch
        try:
            with torch.serialization.safe_globals(_numpy_globals()):
                return torch.load(io.BytesIO(data), map_location="cpu", weights_only=not unsafe)
        except pickle.UnpicklingError as exc:
            raise CheckpointError(
                f"checkpoint {name!r} holds objects a safe load refuses ({_first_line(exc)}); "
                "register your classes with hypersack.allow_checkpoint_types(...), or set "
                "unsafe_checkpoints: true if no one else can write the run folder") from None
    if unsafe:
        return pickle.loads(data)
    try:
        return _SafeUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as exc:
        raise CheckpointError(f"checkpoint {name!r}: {exc}") from None


def _numpy_globals() -> list[Any]:
    """The numpy functions and classes that rebuild arrays and scalars (plain data), for
    ``torch.load(weights_only=True)``; empty without numpy."""
    try:
        import numpy as np
    except ImportError:
        return []
    found: list[Any] = [np.ndarray, np.dtype]
    for module, name in _SAFE_GLOBALS:
        if module.startswith("numpy.") and module.count(".") == 2:
            try:
                found.append(getattr(importlib.import_module(module), name))
            except (ImportError, AttributeError):
                pass
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:
        found += [getattr(dtypes, n) for n in dir(dtypes) if n.endswith("DType")]
    return found


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class _SafeUnpickler(pickle.Unpickler):
    """Builds plain data only: any other global is refused before it is imported."""

    def find_class(self, module: str, name: str) -> Any:
        allowed = _ALLOWED.get((module, name))
        if allowed is not None:
            return allowed
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"refusing to load {module}.{name}: a safe restore builds plain data only; register "
            "the class with hypersack.allow_checkpoint_types(...), or set unsafe_checkpoints: true "
            "if no one else can write the run folder")
