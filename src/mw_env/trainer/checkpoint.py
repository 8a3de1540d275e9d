"""Atomic checkpoints: `checkpoints/step-XXXXXXXXX.pt`, newest valid one found on resume.

Write protocol (trainer-anchors.md part 4): torch.save to `<name>.tmp-<pid>` in the same folder,
flush + fsync, os.replace onto the final name, fsync the folder. A kill at any point leaves either
the old set of checkpoints or the old set plus a complete new one - never a half-written `step-*.pt`.
Old checkpoints are deleted only after the new one is in place. Loads use weights_only=True, so a
checkpoint holds only tensors and plain containers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mw_env.atomic import atomic_open
from mw_env.errors import InputError

FORMAT_VERSION = 1
CKPT_RE = re.compile(r"^step-(\d{9})\.pt$")
REQUIRED_KEYS = ("format_version", "step", "model", "optimizer", "scheduler", "config", "tokenizer", "labels")


class CheckpointError(InputError):
    """A checkpoint that cannot be read or is incomplete."""


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"step-{step:09d}.pt"


def list_checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoints (by name), oldest first; temporary files are never listed."""
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir() if CKPT_RE.match(p.name)]
    return sorted(found, key=lambda p: p.name)


def remove_stale_temporaries(directory: Path) -> list[Path]:
    """Delete `*.tmp-*` left by a process killed mid-write (they were never complete)."""
    removed = []
    if directory.is_dir():
        for p in directory.iterdir():
            if ".pt.tmp-" in p.name:
                p.unlink(missing_ok=True)
                removed.append(p)
    return removed


def save_checkpoint(payload: dict[str, Any], directory: Path, *, keep_last: int) -> Path:
    """Write payload atomically as step-<payload['step']>.pt; then keep only the newest keep_last."""
    import torch

    directory.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(directory, int(payload["step"]))
    with atomic_open(final, "wb") as fh:
        torch.save(payload, fh)
    for old in list_checkpoints(directory)[: -max(keep_last, 2)]:
        old.unlink(missing_ok=True)
    return final


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint on the CPU with weights_only=True; CheckpointError when unreadable/incomplete."""
    import torch

    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(
            f"checkpoint {path} does not exist",
            hint="name an existing <run>/checkpoints/step-*.pt, or leave out --resume to use the newest one",
        ) from None
    except Exception as exc:  # truncated zip, bad pickle, foreign object: all "unreadable"
        raise CheckpointError(
            f"checkpoint {path} is unreadable ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})",
            hint="it may be truncated or not an mw-env checkpoint; name an older step-*.pt "
            "(training: --resume PATH, or --fresh to start over)",
        ) from None
    if not isinstance(ckpt, dict):
        raise CheckpointError(
            f"checkpoint {path} is not an mw-env checkpoint (top level is not a dict)",
            hint="name a step-*.pt file written by mw-env train",
        )
    missing = [k for k in REQUIRED_KEYS if k not in ckpt]
    if missing:
        raise CheckpointError(
            f"checkpoint {path} is incomplete: missing {', '.join(missing)}",
            hint="name a step-*.pt file written by mw-env train, or an older one with --resume",
        )
    if ckpt["format_version"] != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format {ckpt['format_version']}, this mw-env reads {FORMAT_VERSION}",
            hint="use the mw-env version that wrote it, or start over with --fresh",
        )
    m = CKPT_RE.match(path.name)
    if m and int(m.group(1)) != int(ckpt["step"]):
        raise CheckpointError(
            f"checkpoint {path} says step {ckpt['step']}, its name says {int(m.group(1))}",
            hint="a renamed file is not resumed; give it its step-XXXXXXXXX.pt name back or use another one",
        )
    return ckpt


def find_latest(
    directory: Path, *, warn: Callable[[str], None] | None = None
) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint that loads, with its contents; unreadable newer ones are warned about."""
    for path in reversed(list_checkpoints(directory)):
        try:
            return path, load_checkpoint(path)
        except CheckpointError as exc:
            if warn:
                warn(f"warning: {exc.message}; falling back to the previous checkpoint")
    return None


def latest_valid_checkpoint(directory: Path, *, warn: Callable[[str], None] | None = None) -> Path | None:
    """The path of the newest checkpoint that loads (None when there is none)."""
    found = find_latest(Path(directory), warn=warn)
    return found[0] if found else None
