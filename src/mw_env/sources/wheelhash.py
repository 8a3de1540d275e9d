"""The sha256 of a local wheel file, started in the background as soon as the caller knows the file.

Why: a lock names every file by its sha256. For a wheel in a local wheelhouse, `uv pip compile` unpacks the
whole archive to hash it, on every call (0.8 s for the 190 MB CPU torch, most of bootstrap's lock step);
hashlib reads it in 0.14 s, and bootstrap starts that read when its run starts (provision/steps.py,
hash_for_the_lock), on the core its planning and first steps leave idle.

The hash runs in a child process under SCHED_IDLE (sched(7): it runs only on a core nothing else wants; nice
19 where that policy is refused): it overlaps uv's install of torch, and at nice 19 it still took a share of
uv's unpacking (the torch step ran ~20 ms longer, measured). A process, not a thread: a thread of this process
at the lowest priority could be starved while holding the GIL and stall the thread that runs the steps (a
priority inversion). The
child dies with this process (base/lifeline.py). Where it cannot start, the digest is computed in-process
when asked for.

A result is kept for the process, keyed by the file's identity (device, inode, size, mtime, ctime): a file
replaced or rewritten in between is hashed again, never answered from the old bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import threading
from pathlib import Path

_CHUNK = 1 << 20
_lock = threading.Lock()
_children: dict[tuple[str, tuple[int, ...]], subprocess.Popen[str]] = {}
_done: dict[tuple[str, tuple[int, ...]], str] = {}

# The child: lowest priority first, then the same loop as _hash (stdlib only, no mw_env import: fast start).
_CHILD = (
    "import hashlib, os, sys\n"
    "try:\n"
    "    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
    "except (OSError, AttributeError):\n"
    "    try:\n"
    "        os.nice(19)\n"
    "    except OSError:\n"
    "        pass\n"
    "h = hashlib.sha256()\n"
    "with open(sys.argv[1], 'rb') as fh:\n"
    f"    while chunk := fh.read({_CHUNK}):\n"
    "        h.update(chunk)\n"
    "print(h.hexdigest())\n"
)


def _identity(path: Path) -> tuple[str, tuple[int, ...]]:
    st = os.stat(path)
    return str(Path(path).resolve()), (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def start(path: Path) -> None:
    """Begin hashing `path` in a child process (a no-op when it is hashed or being hashed already, or is not
    a readable file: `sha256` then says why)."""
    from mw_env.base.lifeline import preexec

    try:
        key = _identity(path)
    except OSError:
        return
    with _lock:
        if key in _children or key in _done:
            return
        with contextlib.suppress(OSError):  # it cannot start: computed here when asked for
            _children[key] = subprocess.Popen(
                [sys.executable, "-I", "-c", _CHILD, key[0]],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                preexec_fn=preexec(),
            )


def _collect(key: tuple[str, tuple[int, ...]]) -> str | None:
    with _lock:
        child = _children.pop(key, None)
        if child is None:
            return _done.get(key)
    out, _ = child.communicate()
    digest = out.strip()
    if child.returncode != 0 or len(digest) != 64:
        return None  # unreadable there, or killed: hashed here, where an OSError reaches the caller
    return digest  # kept by sha256, once the file is known unchanged


def sha256(path: Path) -> str:
    """The file's sha256 (hex): the background result when `start` saw this very file, else computed now.
    OSError when it cannot be read."""
    key = _identity(path)
    digest = _collect(key)
    if digest is None:
        digest = _hash(path)
    if _identity(path) != key:  # rewritten while it was read: the digest may mix old and new bytes
        with _lock:
            _done.pop(key, None)
        return sha256(path)
    with _lock:
        _done[key] = digest
    return digest


def stop() -> None:
    """Kill the children still hashing (a run that ends before its lock step)."""
    with _lock:
        children = list(_children.values())
        _children.clear()
    for child in children:
        if child.poll() is None:
            child.kill()
        child.communicate()
