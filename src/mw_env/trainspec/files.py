"""The shard file list: one expansion of `data.train_files`/`data.val_files` for the host's preflight and
the trainer, so a glob means the same thing (and fails with the same sentence) on both sides."""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from mw_env.base.errors import InputError


def expand_files(patterns: Sequence[str], key: str, base: Path | None = None) -> list[Path]:
    """Each pattern's matches, sorted; a relative pattern is taken from `base` (the trainer's working folder
    when None). A pattern that matches nothing, a link that loops or leads nowhere, or a match that is not a
    regular .jsonl/.parquet file is bad input naming the key."""
    out: list[Path] = []
    for pattern in patterns:
        full = Path(pattern).expanduser()
        if base is not None and not full.is_absolute():
            full = base / full
        matches = sorted(glob.glob(str(full)))
        if not matches:
            where = f" (in {base})" if base is not None and not Path(pattern).is_absolute() else ""
            raise InputError(
                f"{key}: no file matches {pattern!r}{where}",
                hint="check the path (globs are allowed; a relative path is relative to the current folder)",
            )
        for m in matches:
            path, st = _resolve(m, key)
            if stat.S_ISDIR(st.st_mode):
                raise _folder(key, pattern, path)
            if path.suffix not in (".jsonl", ".parquet"):
                raise InputError(
                    f"{key}: {path} is neither .jsonl nor .parquet", hint="data files are .jsonl or .parquet"
                )
            # A FIFO or a device named as a shard would block the footer read forever (or stream /dev/zero):
            # only regular files are shards.
            if not stat.S_ISREG(st.st_mode):
                raise InputError(
                    f"{key}: {path} is not a regular file (a FIFO, device or folder)",
                    hint="data files are regular .jsonl or .parquet files",
                )
            out.append(path)
    return out


def _resolve(match: str, key: str) -> tuple[Path, os.stat_result]:
    """A glob match's real path and its stat. Strict: a link loop (or a self-link) or a link to nothing is a
    fault of the file list, said as one (Python 3.11 raises RuntimeError for a loop, later versions ELOOP)."""
    try:
        path = Path(match).resolve(strict=True)
        return path, path.stat()
    except (OSError, RuntimeError) as exc:
        reason = getattr(exc, "strerror", None) or (
            "a symbolic link loop" if isinstance(exc, RuntimeError) else str(exc)
        )
        raise InputError(
            f"{key}: cannot read {match}: {reason}",
            hint="point the glob at real .jsonl/.parquet files (a link must lead to one)",
        ) from None


def _folder(key: str, pattern: str, path: Path) -> InputError:
    """A folder named where files are: the glob of its shards, to paste."""
    try:
        found = sorted({p.suffix for p in path.iterdir() if p.suffix in (".jsonl", ".parquet")})
    except OSError:
        found = []
    globs = [f"{pattern.rstrip('/')}/*{ext}" for ext in found or (".parquet",)]
    paste = ", ".join(globs)
    where = (
        f"--set '{key}=[{paste}]'" if key in ("data.train_files", "data.val_files") else f"{key}: [{paste}]"
    )
    what = f"its {' and '.join(found)} files" if found else "no .jsonl or .parquet files"
    return InputError(
        f"{key}: {path} is a folder (not a regular file), holding {what}",
        hint=f"name the files in it with a glob: {where}",
    )
