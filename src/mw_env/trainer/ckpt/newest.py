"""The checkpoint a reader of a run uses (`train predict`, `train evaluate`, `train export`), loaded once, while the
run may still be training and writing checkpoints beside it.

A run writes `step-N.pt` under a temporary name, renames it, then writes its sidecar, and rotates the oldest
away (runtime.keep_last): a file listed, validated, then loaded again could be gone or replaced in between.
So the newest checkpoint that loads is read once; one that changed while it was read is passed over for the
newest complete one, and when none was complete at that moment the folder is looked at again, a few times.

A checkpoint newer than its sidecar whose hash does not match is the run writing it again only while a
trainer is in the folder (rundir/runlock.py `in_use`). With none, nothing will ever write that sidecar: the file
is damaged, named as such, and passed over for the previous one like any other that does not load.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from mw_env.base.errors import InputError
from mw_env.rundir.contract import CHECKPOINTS_DIR, SIDECAR_SUFFIX
from mw_env.rundir.runlock import in_use
from mw_env.trainer.ckpt.checkpoint import Found, list_checkpoints, load_checkpoint
from mw_env.trainer.ckpt.schema import CheckpointError

LOOKS = 5  # passes over the folder while every checkpoint in it is being written (each a moment apart)
PAUSE_S = 0.2


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def newest_checkpoint(
    target: Path, *, warn: Callable[[str], None], other: str = "name another step-*.pt"
) -> Found:
    """A checkpoint file as given (no fallback: its error is the answer, with `other` as the way out), or the
    newest complete one of a run folder or its checkpoints folder; InputError when there is none."""
    path = Path(target).expanduser().resolve()
    if path.is_file():
        try:
            return path, load_checkpoint(path)
        except CheckpointError as exc:
            raise CheckpointError(
                exc.message, hint=f"{other}, or the run folder (its newest valid checkpoint)"
            ) from None
    if not path.is_dir():
        raise InputError(f"checkpoint {path} does not exist", hint="name a step-*.pt file or a run folder")
    folder = path / CHECKPOINTS_DIR if (path / CHECKPOINTS_DIR).is_dir() else path
    run_dir = folder.parent if folder.name == CHECKPOINTS_DIR else folder
    warned: set[Path] = set()
    writing: Path | None = None
    for look in range(LOOKS):
        writing = None
        trainer: bool | None = None  # a trainer in the run folder: asked once a look, only when it matters
        for candidate in reversed(list_checkpoints(folder)):
            before = _stamp(candidate)
            try:
                return candidate, load_checkpoint(candidate)
            except CheckpointError as exc:
                moving = before is None or _stamp(candidate) != before
                ahead = not moving and _ahead_of_sidecar(candidate)
                if ahead:
                    trainer = in_use(run_dir) if trainer is None else trainer
                    moving = trainer
                if moving and writing is None:
                    writing = candidate
                if candidate not in warned and (not moving or _stamp(candidate) is not None):
                    warned.add(candidate)
                    why = "is being written (it changed while read, or its sidecar is older than it)"
                    damaged = (
                        f" (newer than its sidecar, with no trainer in {run_dir}: damaged, not being written)"
                        if ahead
                        else ""
                    )
                    warn(
                        f"warning: checkpoint {candidate} {why}; using the previous one"
                        if moving
                        else f"warning: {exc.message}{damaged}; falling back to the previous checkpoint"
                    )
        if writing is None:
            break
        if look < LOOKS - 1:
            time.sleep(PAUSE_S)  # no complete one yet: the run finishes the file it is writing
    if writing is not None:
        raise InputError(
            f"no complete checkpoint in {folder}: the only one, {writing.name}, is being written",
            hint="run the same command again in a moment",
        )
    raise InputError(f"no valid checkpoint in {folder}", hint="train first, or name a step-*.pt file")


def _ahead_of_sidecar(path: Path) -> bool:
    """The checkpoint is newer than its sidecar: written again (a stop checkpoint at the same step) and its new
    hash not written yet, when a trainer is in the folder; damaged when none is. (A checkpoint without a
    sidecar is checked by structure alone: not this.)"""
    try:
        return path.stat().st_mtime_ns > path.with_name(path.name + SIDECAR_SUFFIX).stat().st_mtime_ns
    except OSError:
        return False


__all__ = ["newest_checkpoint"]
