"""A run is bound to its folder: a trainer whose run folder is deleted or replaced stops within seconds.

A live detached run whose folder was deleted trained on unseen: it recreated `checkpoints/` and its report in
a new folder of the same name, and `train status`/`stop` found nothing there. Rank 0 now notes the folder's
identity (device, inode) when the run starts, and a daemon thread compares it with what the path names every
second. When the folder is gone (deleted, or moved away) or another folder took its name, the trainer says so
(`error:`/`hint:`) and ends at once, exit 1, writing nothing more: a checkpoint, a report or a state record
written now would recreate the folder, or land in someone else's. What it wrote before stays where it was
(in the moved folder, if it was moved). Checkpoints and the report never create the run folder's parents
(checkpoint.py, report.py): the window before the thread notices cannot recreate it either.

The same look keeps the folder's lock file (rundir/runlock.py `RunLock.keep`): one deleted under the run is
made and locked again, and said once as a warning, so a second trainer meets the flock as before.

The end is `os._exit` from the thread: the main thread may be inside a long step or held (the fault harness),
and a stop that waits for the step's end would then write the stop checkpoint. Data workers end when their
pipe closes; under torchrun the other ranks are ended by torchrun when rank 0 exits.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from mw_env.base.errors import EXIT_FAILED

if TYPE_CHECKING:
    from mw_env.rundir.runlock import RunLock

INTERVAL_S = 1.0


def identity(folder: Path) -> tuple[int, int]:
    st = os.stat(folder)
    return st.st_dev, st.st_ino


def lost(folder: Path, ident: tuple[int, int]) -> str | None:
    """What happened to the folder (a sentence), or None while it is the one the run started in."""
    try:
        now = identity(folder)
    except FileNotFoundError:
        return "was deleted or moved away"
    except NotADirectoryError:
        return "was replaced by a file"
    except OSError:
        return None  # unreadable for a moment (EIO, EACCES on a parent): the writes will say what is wrong
    if now != ident:
        return f"was replaced by another folder (inode {ident[1]} -> {now[1]})"
    return None


def message(folder: Path, what: str) -> str:
    return (
        f"error: the run folder {folder} {what} while the run was training; the trainer stops and writes "
        "nothing more there (the folder is not recreated)\n"
        f"hint: what was written before stays where it was; to train on, restore the folder and run the same "
        f"command, or start a new run (--fresh, or another runtime.out_dir)\n"
    )


def end(folder: Path, what: str) -> None:
    sys.stderr.write(message(folder, what))
    sys.stderr.flush()
    os._exit(EXIT_FAILED)


def watch(
    folder: Path,
    *,
    interval: float = INTERVAL_S,
    on_lost: Callable[[Path, str], None] = end,
    keep: RunLock | None = None,
) -> threading.Event:
    """Start the watcher; set the returned event to end it (the run's end: the report may move files)."""
    folder = Path(folder)
    ident = identity(folder)
    done = threading.Event()
    said: set[str] = set()

    def run() -> None:
        while not done.wait(interval):
            what = lost(folder, ident)
            if what is not None:
                on_lost(folder, what)
                return
            news = keep.keep() if keep is not None else None
            if news is not None and news not in said:
                said.add(news)
                sys.stderr.write(f"warning: {news}\n")
                sys.stderr.flush()

    threading.Thread(target=run, name="mw-env-folder-watch", daemon=True).start()
    return done


@contextlib.contextmanager
def watching(folder: Path, *, enabled: bool = True, keep: RunLock | None = None) -> Iterator[None]:
    """Watch `folder` (and keep its lock file) for the block (rank 0: `enabled`); the watcher ends with it."""
    done = watch(folder, keep=keep) if enabled else None
    try:
        yield
    finally:
        if done is not None:
            done.set()


__all__ = ["end", "identity", "lost", "message", "watch", "watching"]
