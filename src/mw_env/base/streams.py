"""The standard streams, whatever state the caller left them in: closed, full, a broken pipe.

`mw-env CMD >&-` starts Python with fd 1 closed: sys.stdout is None (the first print was an AttributeError
traceback), and the next file mw-env opens takes the number 1, so a child (uv, the trainer) would write its
output into that file. `guard()` runs first in the CLI and makes the rules one:

- a closed fd 0, 1 or 2 is opened on /dev/null, so no file can take its number and children inherit
  something harmless; a closed stdin reads as empty;
- stdout is what the user asked for: a write that fails (closed: EBADF, `/dev/full`: ENOSPC, a broken pipe:
  EPIPE, an I/O error) raises `StdoutLost`; the CLI ends with exit 1 and says so on stderr (a reader that
  stopped reading, EPIPE, is not told: it left), and stdout is then pointed at /dev/null so that Python's
  final flush cannot print "Exception ignored" either;
- stderr is for diagnostics: a write that fails there is dropped (there is nowhere left to say it) and the
  exit code still tells.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Iterable, Iterator
from typing import IO, TextIO, cast


class StdoutLost(Exception):
    """A write to stdout failed: `cause` says why (EPIPE: the reader left)."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(f"cannot write to standard output: {cause.strerror or cause}")
        self.cause = cause


class _ClosedStdout:
    """What stdout is when its fd was closed before mw-env started: every write fails as the fd did."""

    encoding = "utf-8"
    errors = "strict"

    def write(self, text: str) -> int:
        raise StdoutLost(OSError(errno.EBADF, "it was closed when mw-env started"))

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return 1

    def close(self) -> None:
        return None


class _GuardedStream:
    """A stream whose failed writes are StdoutLost (stdout) or dropped (stderr); the rest passes through."""

    def __init__(self, stream: IO[str], *, is_stdout: bool) -> None:
        self._stream = stream
        self._is_stdout = is_stdout
        self.failed = False

    def _fail(self, exc: OSError) -> None:
        self.failed = True
        if self._is_stdout:
            raise StdoutLost(exc) from None

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            self._fail(exc)
            return len(text)
        except ValueError:  # "I/O operation on closed file": the same loss
            self._fail(OSError(errno.EBADF, "it is closed"))
            return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            self._fail(exc)
        except ValueError:
            self._fail(OSError(errno.EBADF, "it is closed"))

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def _reopen_closed_fds() -> set[int]:
    closed = set()
    for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            new = os.open(os.devnull, flags)  # the lowest free number: fd itself, as 0..fd-1 are open
            if new != fd:
                os.dup2(new, fd)
                os.close(new)
            # os.open makes a descriptor close-on-exec (PEP 446): without this a child (the trainer,
            # predict) still started with the fd closed, and its first print was a traceback.
            os.set_inheritable(fd, True)
            closed.add(fd)
    return closed


@contextlib.contextmanager
def guard() -> Iterator[None]:
    """The CLI's streams for one command (restored after: the tests call main() in-process)."""
    saved = sys.stdin, sys.stdout, sys.stderr
    closed = _reopen_closed_fds()
    if sys.stdin is None or 0 in closed:
        sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    out: _ClosedStdout | _GuardedStream = (
        _ClosedStdout() if sys.stdout is None or 1 in closed else _GuardedStream(sys.stdout, is_stdout=True)
    )
    sys.stdout = cast(TextIO, out)
    if sys.stderr is None or 2 in closed:
        sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    err = _GuardedStream(sys.stderr, is_stdout=False)
    sys.stderr = cast(TextIO, err)
    try:
        yield
    finally:
        for fd, stream in ((1, out), (2, err)):
            if isinstance(stream, _GuardedStream) and stream.failed:
                _silence(fd, stream)
        sys.stdin, sys.stdout, sys.stderr = saved


def _silence(fd: int, stream: _GuardedStream) -> None:
    """After a failed write: the fd onto /dev/null and the stream's buffer flushed there, so Python's last
    flush at exit has nothing to fail on (it would print "Exception ignored" and make the exit code 120)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    with contextlib.suppress(Exception):
        stream._stream.flush()


def require_stdout() -> None:
    """StdoutLost now when stdout was closed before mw-env started: for a command whose output is written by
    a child (which would get /dev/null in its place and exit 0 with nothing said)."""
    if isinstance(sys.stdout, _ClosedStdout):
        sys.stdout.write("")


def say(text: str) -> None:
    """A line on stderr that cannot raise (stderr may be full or gone too)."""
    with contextlib.suppress(Exception):
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
