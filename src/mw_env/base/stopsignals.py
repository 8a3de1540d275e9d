"""A short job in a child process (`train predict`, `train evaluate`, `train export`: each starts the training
venv's python), ended by a signal the way the project ends every command: a sentence and an exit code, no
traceback, no orphan, no partial file.

Both sides are here (stdlib only: mw-env's interpreter runs the one, the venv's the other):

- `run_child` (mw-env's side): the child dies with mw-env whatever kills it (PR_SET_PDEATHSIG from
  base/lifeline.py, set to SIGTERM so even a SIGKILLed mw-env's child cleans up its temporary files); a SIGINT,
  SIGTERM or SIGHUP to mw-env (Ctrl-C, docker stop, systemd, a closed terminal) is passed on to the child as
  it came (a `kill -INT` of mw-env alone reaches the child too; a terminal's Ctrl-C reaches both, and the
  child takes only the first), then mw-env waits for the child's own answer.
- `stop_on_signals` (the child's side): the first SIGINT, SIGTERM or SIGHUP raises `Stopped` where the job is
  (a BaseException: no `except Exception` takes it; the atomic writer's clean-up does run), later ones are
  ignored so that clean-up is not broken into. The job reports it as an error with `exit_code(signum)`.

The exit code of a job ended by a signal is the shell's: 128 + the signal's number (130 for Ctrl-C, the
project's "interrupted"; 143 for SIGTERM, 129 for SIGHUP).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import IO

from mw_env.base.lifeline import preexec

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """A stop signal reached the job (the child's side)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def signal_words(signum: int) -> str:
    """ "SIGINT (Ctrl-C)", "SIGTERM", "signal 64"."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
    return f"{name} (Ctrl-C)" if signum == signal.SIGINT else name


def exit_code(signum: int) -> int:
    return 128 + signum


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """The child's side: the first stop signal raises Stopped inside the block; the handlers are restored after
    (the caller's main thread only; elsewhere, as in tests that run the job in a thread, nothing changes)."""

    def stop(signum: int, _frame: FrameType | None) -> None:
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)  # once: the clean-up below the raise is not broken into
        raise Stopped(signum)

    old = {}
    for s in STOP_SIGNALS:
        with contextlib.suppress(ValueError):  # not the main thread
            old[s] = signal.signal(s, stop)
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def answer(result: Mapping[str, object], *, code: int | None = None) -> int:
    """The child's side, for a job that answers mw-env on its stdout (`train export`'s two formats): the one JSON
    line, and the exit code (`code`, else the result's own). A reader that is gone (mw-env killed: this process,
    told by the kernel, is stopping) is not an error of ours: no traceback for it."""
    import json
    import os

    from mw_env.base.errors import EXIT_FAILED

    try:
        print(json.dumps(dict(result)), flush=True)
    except OSError:  # fd 1 onto /dev/null: the interpreter's last flush must not fail again at exit
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.close(devnull)
    if code is not None:
        return code
    value = result.get("exit_code")
    return value if isinstance(value, int) else EXIT_FAILED


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@dataclass
class ChildEnd:
    """How the child ended: its return code (negative: killed by that signal) and the stop signals mw-env
    received and passed on while it ran."""

    returncode: int
    signals: list[int] = field(default_factory=list)

    @property
    def stopped_by(self) -> int | None:
        return self.signals[0] if self.signals else None


def run_child(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    stdout: int | IO[str] | None = None,
) -> tuple[ChildEnd, str]:
    """Run `argv` to its end under the rules above; (how it ended, its stdout when `stdout` is PIPE, else
    ""). The child's stderr is ours: what it says reaches the user as it says it."""
    signals: list[int] = []
    box: list[subprocess.Popen[str]] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        signals.append(signum)
        if box:
            with contextlib.suppress(ProcessLookupError):
                box[0].send_signal(signum)

    old = {}
    for s in STOP_SIGNALS:
        with contextlib.suppress(ValueError):  # not the main thread (tests): the handlers stay as they are
            old[s] = signal.signal(s, forward)
    try:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdout=stdout,
            text=True if stdout == subprocess.PIPE else None,
            errors="replace" if stdout == subprocess.PIPE else None,
            # SIGINT ignored until the child's own handler is in (stop_on_signals): a Ctrl-C in its first
            # instants is not Python's KeyboardInterrupt traceback from an import.
            preexec_fn=preexec(signal.SIGTERM, then=_ignore_sigint),
        )
        box.append(proc)
        if signals:  # a signal came while the child started: pass it on now
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signals[0])
        out, _ = proc.communicate()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    return ChildEnd(returncode=proc.returncode, signals=signals), out or ""
