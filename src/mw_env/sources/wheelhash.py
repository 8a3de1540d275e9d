"""The sha256 of a local wheel file, started in the background as soon as the caller knows the file.

Why: a lock names every file by its sha256. For a wheel in a local wheelhouse, `uv pip compile` unpacks the
whole archive to hash it, on every call (0.8 s for the 190 MB CPU torch, most of bootstrap's lock step);
hashlib reads it in 0.14 s, and bootstrap starts that read right after the torch step, so it runs while the
extras install (the file is in the page cache then: uv has just read it).

A result is kept for the process, keyed by the file's identity (device, inode, size, mtime, ctime): a file
replaced or rewritten in between is hashed again, never answered from the old bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from concurrent.futures import Future
from pathlib import Path

_CHUNK = 1 << 20
_lock = threading.Lock()
_futures: dict[tuple[str, tuple[int, ...]], Future[str]] = {}


def _identity(path: Path) -> tuple[str, tuple[int, ...]]:
    st = os.stat(path)
    return str(Path(path).resolve()), (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:  # hashlib releases the GIL for large updates: the caller's thread runs on
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _run(path: Path, fut: Future[str]) -> None:
    # The lowest CPU priority, for this thread alone (Linux schedules threads by their own nice value): the
    # hash takes a core only while nothing else wants it, never a share of uv's unpacking. Whoever needs the
    # digest waits for it, and then nothing else competes.
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    try:
        fut.set_result(_hash(path))
    except BaseException as exc:  # handed to whoever asks for the result, in their thread
        fut.set_exception(exc)


def start(path: Path) -> None:
    """Begin hashing `path` in a daemon thread (a no-op when it is already hashed or being hashed, or is not
    a readable file: `sha256` then says why)."""
    try:
        key = _identity(path)
    except OSError:
        return
    with _lock:
        if key in _futures:
            return
        fut: Future[str] = Future()
        _futures[key] = fut
    threading.Thread(target=_run, args=(Path(path), fut), name="mw-env-wheelhash", daemon=True).start()


def sha256(path: Path) -> str:
    """The file's sha256 (hex): the background result when `start` saw this very file, else computed now.
    OSError when it cannot be read."""
    key = _identity(path)
    with _lock:
        fut = _futures.get(key)
    if fut is None:
        start(path)
        with _lock:
            fut = _futures.get(key)
    if fut is None:  # the file changed between the two stats: hash what is there now, keep nothing
        return _hash(path)
    digest = fut.result()
    if _identity(path) != key:  # rewritten while it was read: the digest may mix old and new bytes
        with _lock:
            _futures.pop(key, None)
        return sha256(path)
    return digest
