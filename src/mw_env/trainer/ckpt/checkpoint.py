"""Atomic, hashed, validated checkpoints: `checkpoints/step-XXXXXXXXX.pt` + `step-XXXXXXXXX.pt.sha256`.

Write protocol: torch.save to a temporary in the same folder, flush + fsync,
os.replace onto the final name, fsync the folder; then the file's sha256 goes into a `sha256sum`-format
sidecar, written the same way. A kill at any point leaves the old set, or the old set plus a complete new
checkpoint (with or without its sidecar) - never a half-written `step-*.pt`. Old checkpoints are deleted
only after the new one is in place. A full disk is a clean error that keeps every earlier checkpoint.

Reading: weights_only=True (tensors and plain containers only), the sidecar's hash checked when there is
one, then the whole structure (ckpt/schema.py). Any failure is a CheckpointError; `find_latest` turns it
into "unreadable: falling back to the previous checkpoint".
"""

from __future__ import annotations

import errno
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mw_env.base.atomic import atomic_open, write_text_atomic
from mw_env.base.errors import InputError, MwEnvError, StepFailed, os_error_in, os_fault, os_words
from mw_env.rundir.contract import CHECKPOINT_RE, CHECKPOINT_SUFFIX, SIDECAR_SUFFIX, checkpoint_name
from mw_env.rundir.contract import sha256_file as sha256_of  # the one file digest (sidecars, manifest)
from mw_env.trainer.ckpt.schema import (
    CheckpointError,
    first_line,
    unreadable,
    validate_checkpoint,
)

if TYPE_CHECKING:
    from mw_env.trainer.data import Tokenizer
    from mw_env.trainer.network import TaggerNet

Found = tuple[Path, dict[str, Any]]  # a checkpoint's path and its loaded, validated contents


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / checkpoint_name(step)


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def list_checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoints (by name), oldest first; temporaries and sidecars are never listed."""
    try:
        if not directory.is_dir():
            return []
        found = [p for p in directory.iterdir() if CHECKPOINT_RE.fullmatch(p.name)]
    except OSError as exc:  # mode 000, EIO: a sentence naming the folder, never a traceback
        raise _unreadable_folder(directory, exc) from None
    return sorted(found, key=lambda p: p.name)


def _unreadable_folder(directory: Path, exc: OSError) -> MwEnvError:
    err = os_fault(exc, "read the checkpoints folder", directory)
    err.hint = f"{err.hint}; the checkpoints in it are kept, then run the same command again to resume"
    return err


def remove_stale_temporaries(directory: Path) -> list[Path]:
    """Delete `*.tmp-*` left by a process killed mid-write, and sidecars whose checkpoint is gone."""
    removed = []
    try:
        if directory.is_dir():
            for p in directory.iterdir():
                orphan = (
                    p.name.endswith(CHECKPOINT_SUFFIX + SIDECAR_SUFFIX)
                    and not p.with_name(p.name[: -len(SIDECAR_SUFFIX)]).exists()
                )
                if ".pt.tmp-" in p.name or ".pt.sha256.tmp-" in p.name or orphan:
                    p.unlink(missing_ok=True)
                    removed.append(p)
    except OSError as exc:
        raise _unreadable_folder(directory, exc) from None
    return removed


def save_checkpoint(payload: dict[str, Any], directory: Path, *, keep_last: int) -> Path:
    """Write payload atomically as step-<payload['step']>.pt with its sha256 sidecar; keep the newest keep_last.

    A failed write (ENOSPC, EDQUOT, EIO) raises StepFailed naming the folder and the checkpoint that is
    still the newest; nothing already on disk is touched."""
    import torch

    final = checkpoint_path(directory, int(payload["step"]))
    from mw_env.trainer.lifecycle import hold

    hold("checkpoint")  # the fault harness's checkpoint phase
    try:
        directory.mkdir(exist_ok=True)  # never the run folder itself: a deleted one is not recreated
        with atomic_open(final, "wb") as fh:
            torch.save(payload, fh)
        write_text_atomic(sidecar_path(final), f"{sha256_of(final)}  {final.name}\n")
    except (OSError, RuntimeError) as exc:
        cause = os_error_in(exc)  # torch's zip writer wraps the OSError in a RuntimeError
        if cause is None:
            raise
        raise _write_failed(final, cause) from None
    try:
        for old in list_checkpoints(directory)[: -max(keep_last, 2)]:
            old.unlink(missing_ok=True)
            sidecar_path(old).unlink(missing_ok=True)
    except OSError as exc:
        raise _write_failed(final, exc, written=True) from None
    return final


def _write_failed(final: Path, exc: OSError, *, written: bool = False) -> StepFailed:
    try:
        kept = list_checkpoints(final.parent)
    except MwEnvError:
        kept = []
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    what = os_words(exc)
    keeps = (
        f"the checkpoints on disk are kept (newest: {kept[-1].name})"
        if kept
        else "no checkpoint is on disk yet"
    )
    action = f"remove old checkpoints beside {final}" if written else f"write checkpoint {final}"
    return StepFailed(
        f"cannot {action}: {what}; {keeps}",
        hint=(
            f"free space on the disk of {final.parent} (or lower runtime.keep_last), then run the same command "
            "again: training resumes from the newest checkpoint"
            if full
            else f"check {final.parent} (permissions, the filesystem), then run the same command again to resume"
        ),
    )


def _check_hash(path: Path) -> None:
    side = sidecar_path(path)
    if not side.exists():
        return  # written before sidecars existed, or killed between the checkpoint and its sidecar
    from mw_env.base import userfile

    try:
        recorded = userfile.read_text(side, what="checkpoint hash", max_bytes=4096).split()[0].lower()
    except (InputError, IndexError):
        raise unreadable(path, f"its recorded hash {side.name} is unreadable") from None
    if not re.fullmatch(r"[0-9a-f]{64}", recorded):
        raise unreadable(path, f"its recorded hash {side.name} is not a sha256")
    actual = sha256_of(path)
    if actual != recorded:
        raise unreadable(path, f"its sha256 {actual[:12]}… differs from the recorded {recorded[:12]}…")


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read and validate a checkpoint on the CPU (weights_only=True); CheckpointError when it is unreadable,
    incomplete, altered since it was written, or inconsistent with the model its config describes."""
    import torch

    from mw_env.base import userfile

    path = Path(path)
    if not path.exists():
        raise CheckpointError(
            f"checkpoint {path} does not exist",
            hint="name an existing <run>/checkpoints/step-*.pt, or leave out --resume to use the newest one",
        )
    try:
        with userfile.open_regular(path, what="checkpoint"):
            pass  # a FIFO or /dev/zero is refused before torch.load could block on it or read forever
        _check_hash(path)
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except CheckpointError:
        raise
    except InputError as exc:
        raise unreadable(path, exc.message) from None
    except Exception as exc:  # truncated zip, bad pickle, foreign object, 0 bytes: all "unreadable"
        raise unreadable(path, _why_unloadable(exc)) from None
    validate_checkpoint(ckpt, source=path)
    return ckpt


def _why_unloadable(exc: Exception) -> str:
    """torch's reason in mw-env's words. A weights-only refusal is not cut into torch's advice to re-run
    with weights_only=False (whose "only if you trust the source" half got lost): mw-env never does."""
    text = str(exc)
    if "Weights only load failed" in text:
        found = re.search(
            r"(Unsupported global: GLOBAL [^\s]+|Unsupported operand \d+|[A-Za-z_.]+ is not an allowed global)",
            text,
        )
        what = f" ({found.group(1)})" if found else ""
        return (
            f"it holds objects other than tensors and plain values{what}; mw-env loads checkpoints with "
            "weights_only=True and never runs code from one"
        )
    return first_line(exc)


def find_latest(
    directory: Path,
    *,
    warn: Callable[[str], None] | None = None,
    check: Callable[[Path, dict[str, Any]], None] | None = None,
) -> Found | None:
    """The newest checkpoint that loads and passes `check`, with its contents; each unreadable newer one is
    warned about and skipped (the previous one is tried)."""
    for path in reversed(list_checkpoints(directory)):
        try:
            ckpt = load_checkpoint(path)
            if check is not None:
                check(path, ckpt)
            return path, ckpt
        except CheckpointError as exc:
            if warn:
                warn(f"warning: {exc.message}; falling back to the previous checkpoint")
    return None


def latest_valid_checkpoint(directory: Path, *, warn: Callable[[str], None] | None = None) -> Path | None:
    """The path of the newest checkpoint that loads (None when there is none)."""
    found = find_latest(Path(directory), warn=warn)
    return found[0] if found else None


def model_from_checkpoint(ckpt: Mapping[str, Any] | str | Path) -> tuple[TaggerNet, Tokenizer, list[str]]:
    """(model in eval mode on CPU, tokenizer, label names) from a checkpoint dict or path."""
    from mw_env.trainer.data import tokenizer_from_state
    from mw_env.trainer.model import net_init
    from mw_env.trainer.network import TaggerNet
    from mw_env.trainspec.config import config_from_dict

    if not isinstance(ckpt, Mapping):
        ckpt = load_checkpoint(Path(ckpt))
    config = config_from_dict(ckpt["config"])
    tokenizer = tokenizer_from_state(ckpt["tokenizer"])
    labels = list(ckpt["labels"])
    model = TaggerNet(config.model, **net_init(config, vocab_size=tokenizer.vocab_size, n_labels=len(labels)))
    model.load_state_dict(ckpt["model"])
    model.eval()
    return model, tokenizer, labels
