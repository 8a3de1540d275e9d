"""The one atomic writer: a file is replaced only once its successor is completely on disk.

The successor is written to a temporary file in the same folder (`.NAME.tmp-PID-XXXX`: hidden, and matched by
the stale-temporary sweeps of checkpoints and manifests), flushed and fsynced, renamed onto the final name with
os.replace (atomic on POSIX), and then the folder is fsynced so the rename itself survives a power cut. On any
failure, Ctrl-C included, the temporary file is removed and the old file is untouched. A path that names
anything but a regular file (a device, a FIFO, a socket, a folder) is refused before anything is written
(`refuse_special`): the rename would replace the node itself. Stdlib only: both
mw-env's own interpreter and the trainer in the venv use it.

Being the one writer makes it the one fault seam: `MW_ENV_FAULTS` (tests only, like a full disk that the
test machine cannot make) fails chosen writes with a chosen errno, e.g. `ENOSPC:report.html` or
`EIO:step-*.pt#2` (from the 2nd matching write on, as a disk that filled up stays full). The fault is
raised from inside the write, after some bytes went out, so the caller sees what a real disk does: torch's
zip writer wraps it in its RuntimeError, a text writer gets the OSError mid-file.
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import fnmatch
import json
import os
import shutil
import stat
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, TextIO, cast

from mw_env.base.userfile import kind_of  # the one list of a path's kinds, in words (readers and writers)

_in_open = threading.local()


FAULTS_ENV = "MW_ENV_FAULTS"
_fault_counts: dict[str, int] = {}


def fault_for(path: str | Path) -> OSError | None:
    """The OSError `MW_ENV_FAULTS` arms for a write of `path` (matched on its name), or None."""
    spec = os.environ.get(FAULTS_ENV)
    if not spec:
        return None
    name = Path(path).name
    for entry in spec.split(","):
        code, _, rest = entry.strip().partition(":")
        pattern, _, nth = rest.partition("#")
        if not pattern or not fnmatch.fnmatchcase(name, pattern):
            continue
        _fault_counts[entry] = _fault_counts.get(entry, 0) + 1
        if _fault_counts[entry] >= int(nth or 1):
            num = getattr(errno_mod, code.upper(), errno_mod.EIO)
            return OSError(num, os.strerror(num), str(path))
    return None


def check_faults(paths: Iterable[str | Path]) -> None:
    """The seam for files written under temporary names and committed together (an export's model, variants
    and metadata): each one's armed fault is raised before any is committed, as a real full disk fails the
    writes, not the renames after them."""
    for path in paths:
        fault = fault_for(path)
        if fault is not None:
            raise fault


class _FailingWriter:
    """A file object that writes `allow` bytes, then raises `fault`: a disk that fills during the write."""

    def __init__(self, fh: IO[Any], fault: OSError, allow: int = 4096) -> None:
        self._fh, self._fault, self._left = fh, fault, allow

    def write(self, data: str | bytes) -> int:
        if len(data) > self._left:
            if self._left:
                self._fh.write(data[: self._left])
                self._left = 0
            raise self._fault
        self._left -= len(data)
        return self._fh.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)


def temporary_name(path: Path, suffix: str = "") -> Path:
    """A fresh temporary name beside `path` (same filesystem, so the rename is atomic)."""
    return path.with_name(
        f".{path.name}.tmp-{os.getpid()}-{os.urandom(3).hex()}{suffix}"
    )  # secrets.token_hex(3), without importing secrets


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


def node_kind(path: str | Path) -> str | None:
    """What `path` names when that is not a regular file ("a character device", ...), or None: a regular
    file, or nothing (a missing path or a dangling link is a file this writer may create). A link is
    followed, as a write through it would be."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return None  # unreadable here (EACCES, ELOOP): the write itself says what is wrong
    if stat.S_ISREG(mode):
        return None
    return kind_of(mode)


def refuse_special(path: str | Path) -> None:
    """Refuse to write over anything but a regular file or nothing: renaming a temporary file over a
    device, a FIFO or a socket would replace the node itself (as root, `--output /dev/full` replaced the
    machine's own device), and a directory is never a file's name. InputError, exit 2; stdlib-only, so
    the trainer's writes share it."""
    kind = node_kind(path)
    if kind is not None:
        raise _refusal(path, kind)


def _refusal(path: str | Path, kind: str) -> Exception:
    from mw_env.base.errors import InputError

    return InputError(
        f"{path} is {kind}, not a regular file: mw-env writes only a new file or over a regular file, "
        "and leaves the node as it is",
        hint="name a file path that does not exist yet or is a regular file",
    )


def open_regular(
    path: str | Path, flags: int = os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode: int = 0o666
) -> int:
    """`os.open` for the files written in place (a log appended to, a lock file): the same refusal as
    `refuse_special`, and without the hang a FIFO would give (opened O_NONBLOCK, checked with fstat, then
    set back to blocking). Returns the descriptor (close-on-exec)."""
    refuse_special(path)
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        # ENXIO: a FIFO or a socket with no reader; EISDIR: a folder. Made at the path since the check.
        kind = node_kind(path) if exc.errno in (errno_mod.ENXIO, errno_mod.EISDIR) else None
        if kind is not None:
            raise _refusal(path, kind) from None
        raise
    st_mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(st_mode):
        os.close(fd)
        raise _refusal(path, kind_of(st_mode))
    os.set_blocking(fd, True)
    return fd


def open_append(path: str | Path) -> TextIO:
    """`open(path, "a")` through `open_regular`: a run's log or metrics, never a node's.
    (Bytes: `os.fdopen(open_regular(path), "ab")`.)"""
    return os.fdopen(open_regular(path), "a", encoding="utf-8", errors="replace")


@contextlib.contextmanager
def atomic_path(
    path: str | Path,
    *,
    mode: int | None = None,
    suffix: str = "",
    durable: bool = True,
) -> Iterator[Path]:
    """Yield a temporary path to write (by any library: torch.save, an ONNX exporter); commit it on exit.

    The caller's writer may close the file itself; the commit fsyncs it again by name before the rename.
    `suffix` keeps an extension some writers insist on (".onnx"). `durable=False`: still atomic (never torn
    while the machine runs), without the fsyncs, for a file whose loss in a power cut costs only redone
    work and whose reader accepts an old or empty copy (bootstrap's step state): an fsync right after an
    install of gigabytes can wait for that install's writeback.
    """
    final = Path(path)
    refuse_special(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(final, suffix)
    try:
        yield tmp
        if durable:
            _fsync_file(tmp)
        if mode is not None:
            os.chmod(tmp, mode)
        refuse_special(final)  # again at the commit: a node made at the path while the file was written
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if durable:
        fsync_dir(final.parent)


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temporary folder to fill (by any writer: safetensors, json, a copy); on exit it becomes `path`
    whole: every file and the folder fsynced, then renamed onto the final name. A kill before the rename
    leaves only the hidden temporary (`.NAME.tmp-PID-XXXX`, swept by `sweep_stale_dirs`), never a partial
    `path`. An existing `path` is renamed aside first and removed after: a kill between the two renames
    leaves `path` absent (and the old copy hidden), never half of each. `MW_ENV_FAULTS` is matched on each
    file's name before the commit, as a full disk fails the writes, not the rename."""
    final = Path(path)
    if final.exists() and not final.is_dir():
        raise _refusal(final, node_kind(final) or "a file")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(final)
    tmp.mkdir()
    try:
        yield tmp
        files = sorted(p for p in tmp.rglob("*") if p.is_file())
        check_faults(final / p.relative_to(tmp) for p in files)
        for p in files:
            _fsync_file(p)
        fsync_dir(tmp)
        old = None
        if final.exists():
            old = temporary_name(final, ".old")
            os.replace(final, old)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def sweep_stale_dirs(directory: Path) -> list[Path]:
    """Remove the temporaries `atomic_dir` left in `directory` when its writer was killed (its pid is gone);
    a live writer's (another process exporting into the same folder) is left alone."""
    removed: list[Path] = []
    try:
        entries = list(Path(directory).iterdir())
    except OSError:
        return removed
    for p in entries:
        if not (p.name.startswith(".") and ".tmp-" in p.name and p.is_dir()):
            continue
        pid = p.name.rpartition(".tmp-")[2].split("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and _alive(int(pid)):
            continue
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # EPERM: someone else's live process
    return True


@contextlib.contextmanager
def atomic_open(
    path: str | Path, mode: str = "w", *, file_mode: int | None = None, durable: bool = True
) -> Iterator[IO[Any]]:
    """`open()` for writing, atomically: text ("w", UTF-8) or binary ("wb"); `durable` as atomic_path's."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode must be 'w' or 'wb', not {mode!r}")
    fault = fault_for(path)
    with atomic_path(path, mode=file_mode, durable=False) as tmp:
        kwargs: dict[str, Any] = {"encoding": "utf-8"} if mode == "w" else {}
        # O_EXCL: a leftover temporary of the same name is never written through.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if file_mode is not None else 0o666)
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh if fault is None else cast(IO[Any], _FailingWriter(fh, fault))
            if fault is not None:  # a writer that wrote less than `allow` bytes still meets the full disk
                raise fault
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
    if durable:  # after the rename (atomic_path, told not to: the file is synced above, while still open)
        fsync_dir(Path(path).parent)


def write_text_atomic(path: str | Path, text: str, *, mode: int | None = None, durable: bool = True) -> None:
    with atomic_open(path, "w", file_mode=mode, durable=durable) as fh:
        fh.write(text)


def write_bytes_atomic(path: str | Path, data: bytes, *, mode: int | None = None) -> None:
    with atomic_open(path, "wb", file_mode=mode) as fh:
        fh.write(data)


def write_json_atomic(path: str | Path, data: object, *, indent: int | None = 2, **dumps: Any) -> None:
    """JSON plus a final newline; `dumps` passes sort_keys, default, ... to json.dumps."""
    write_text_atomic(path, json.dumps(data, indent=indent, **dumps) + "\n")
