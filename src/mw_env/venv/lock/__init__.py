"""Locks per hardware: a PEP 751 `pylock.toml` written by uv for a venv, plus mw-env's `[tool.mw-env]` table.

- lockfile: read and validate a lock (hostile input: size, syntax, names, hashes, URLs, local paths)
- make: write the lock of an existing venv with uv (what `uv pip freeze` lists -> `uv pip compile --format pylock.toml`)
- match: whether a lock was made for this machine's hardware (profile, GPU arch, driver floor)
- drift: what changed in a venv since its lock was written (the doctor's check)

Torch-free and small: the trainer (inside the venv) uses LOCK_FILE and `carry` to keep a run's lock.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

# The lock bootstrap writes into every venv it finishes (and a run copies into its folder). PEP 751 names:
# `pylock.<name>.toml`, so uv accepts the file as it is.
LOCK_FILE = "pylock.mw-env.toml"
# The lock of what a venv held before a bootstrap whose own lock failed (provision/lockstep.py): kept, but no
# longer the venv's lock (the doctor would call the new packages drift and offer a --recreate from it).
STALE_LOCK = LOCK_FILE + ".stale"


def carry(venv: Path, run_dir: Path) -> tuple[Path, str] | None:
    """Copy the venv's lock into the run folder (once: a resumed run keeps the lock it started with) and
    return (the copy, its sha256); None when the venv has no lock."""
    src = Path(venv) / LOCK_FILE
    dst = Path(run_dir) / LOCK_FILE
    if not dst.is_file():
        if not src.is_file():
            return None
        from mw_env.base.atomic import write_bytes_atomic

        write_bytes_atomic(dst, src.read_bytes())
    return dst, hashlib.sha256(dst.read_bytes()).hexdigest()
