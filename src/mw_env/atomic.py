"""The one atomic writer: a file is replaced only once its successor is completely on disk.

The successor is written to a temporary file in the same folder (`.NAME.tmp-PID-XXXX`: hidden, and matched by
the stale-temporary sweeps of checkpoints and manifests), flushed and fsynced, renamed onto the final name with
os.replace (atomic on POSIX), and then the folder is fsynced so the rename itself survives a power cut. On any
failure, Ctrl-C included, the temporary file is removed and the old file is untouched. Stdlib only: both
mw-env's own interpreter and the trainer in the venv use it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def temporary_name(path: Path, suffix: str = "") -> Path:
    """A fresh temporary name beside `path` (same filesystem, so the rename is atomic)."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(3)}{suffix}")


def fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable; a filesystem that cannot open folders is left as it is."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | Path, *, mode: int | None = None, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path to write (by any library: torch.save, an ONNX exporter); commit it on exit.

    The caller's writer may close the file itself; the commit fsyncs it again by name before the rename.
    `suffix` keeps an extension some writers insist on (".onnx").
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(final, suffix)
    try:
        yield tmp
        _fsync_file(tmp)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(final.parent)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", *, file_mode: int | None = None) -> Iterator[IO[Any]]:
    """`open()` for writing, atomically: text ("w", UTF-8) or binary ("wb")."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode must be 'w' or 'wb', not {mode!r}")
    with atomic_path(path, mode=file_mode) as tmp:
        kwargs: dict[str, Any] = {"encoding": "utf-8"} if mode == "w" else {}
        # O_EXCL: a leftover temporary of the same name is never written through.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if file_mode is not None else 0o666)
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())


def write_text_atomic(path: str | Path, text: str, *, mode: int | None = None) -> None:
    with atomic_open(path, "w", file_mode=mode) as fh:
        fh.write(text)


def write_bytes_atomic(path: str | Path, data: bytes, *, mode: int | None = None) -> None:
    with atomic_open(path, "wb", file_mode=mode) as fh:
        fh.write(data)


def write_json_atomic(path: str | Path, data: Any, *, indent: int | None = 2, **dumps: Any) -> None:
    """JSON plus a final newline; `dumps` passes sort_keys, default, ... to json.dumps."""
    write_text_atomic(path, json.dumps(data, indent=indent, **dumps) + "\n")
