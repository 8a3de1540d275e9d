"""The one error family. Library code raises these; only cli.py catches and prints them."""

from __future__ import annotations

# Exit codes shared by every command (documented in `mw-env --help` and the README).
EXIT_OK = 0
EXIT_FAILED = 1  # a check or a step failed
EXIT_USAGE = 2  # usage or bad input, or the tool itself could not run
EXIT_INTERRUPTED = 130


class MwEnvError(Exception):
    """An error the user can act on: `message` says what happened, `hint` what to do about it."""

    exit_code: int = EXIT_FAILED

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class InputError(MwEnvError):
    """Bad input: a malformed file, an unknown key or value. Exit code 2."""

    exit_code = EXIT_USAGE


class VenvRefused(InputError):
    """Bootstrap will not build in this venv (it would replace a working torch): exit 2 for a real run; a dry
    run shows it as a warning, since it changes nothing."""


class NothingToDo(MwEnvError):
    """What was asked is already done (a finished run started again): said as `note:`, exit 0."""

    exit_code = EXIT_OK


class StepFailed(MwEnvError):
    """A provisioning step or a training run failed. Exit code 1."""

    exit_code = EXIT_FAILED


# errno -> (what it means in words, what to do, exit code). A fault of the machine (a full disk, an I/O
# error) is a failed run, exit 1; a path the user named that cannot work (too long, a link loop) is bad
# input, exit 2. Stdlib errno only: the trainer in the venv uses this too.
def _os_words() -> dict[int, tuple[str, str, int]]:
    import errno

    full = (
        "the disk is full",
        "free space on that filesystem, then run the same command again",
    )
    return {
        errno.ENOSPC: (*full, EXIT_FAILED),
        errno.EDQUOT: ("the disk quota is exceeded", full[1], EXIT_FAILED),
        errno.EIO: (
            "an I/O error (the disk or the filesystem failed)",
            "check the disk (dmesg, smartctl), then run the same command again",
            EXIT_FAILED,
        ),
        errno.EROFS: ("the filesystem is read-only", "choose a writable folder", EXIT_FAILED),
        errno.EACCES: ("permission denied", "check the owner and mode of the path (ls -ld)", EXIT_USAGE),
        errno.EPERM: ("operation not permitted", "check the owner and mode of the path (ls -ld)", EXIT_USAGE),
        errno.ENAMETOOLONG: (
            "a name in the path is too long",
            "use a path whose names are at most 255 bytes each (4095 bytes in all)",
            EXIT_USAGE,
        ),
        errno.ELOOP: (
            "a symbolic link loop",
            "fix the links so they lead to a real file or folder",
            EXIT_USAGE,
        ),
        errno.ENOENT: ("no such file or folder", "check the path", EXIT_USAGE),
        errno.ENOTDIR: ("a part of the path is not a folder", "check the path", EXIT_USAGE),
        errno.EISDIR: ("it is a folder", "name a file", EXIT_USAGE),
    }


def os_fault(exc: OSError, action: str, path: object = None) -> MwEnvError:
    """`exc` as one sentence: `cannot ACTION PATH: the disk is full` with a hint and the documented code."""
    where = path if path is not None else (exc.filename if exc.filename is not None else "")
    shown = f" {where}" if where != "" else ""
    words = _os_words().get(exc.errno or 0)
    if words is None:
        return MwEnvError(
            f"cannot {action}{shown}: {exc.strerror or type(exc).__name__}",
            hint="check the path and the disk, then run the same command again",
            exit_code=EXIT_FAILED,
        )
    what, hint, code = words
    cls = InputError if code == EXIT_USAGE else MwEnvError
    return cls(f"cannot {action}{shown}: {what}", hint=hint, exit_code=code)


def os_error_in(exc: BaseException) -> OSError | None:
    """The OSError behind `exc`: itself, or one in its cause/context chain. torch's zip writer turns an
    ENOSPC from its write callback into `RuntimeError: [enforce fail at inline_container.cc] unexpected pos`
    with the OSError as its context; the OSError is the fault to name."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, OSError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def os_words(exc: OSError) -> str:
    """What an OSError means, in words ("the disk is full", "an I/O error (…)")."""
    words = _os_words().get(exc.errno or 0)
    return words[0] if words else (exc.strerror or type(exc).__name__)


def cwd_gone(exc: OSError | None = None) -> MwEnvError | None:
    """The working folder deleted under the shell, as one sentence with its path (the shell's PWD still holds
    it), or None where it exists. `exc`: an OSError to judge (a file-less ENOENT is what os.getcwd raises).
    Issue 40: "cannot use: no such file or folder" named nothing; uv, started there, failed as well."""
    import errno
    import os

    if exc is not None and (exc.errno != errno.ENOENT or exc.filename is not None):
        return None
    try:
        os.getcwd()
        return None
    except OSError:
        pass
    where = os.environ.get("PWD")
    return MwEnvError(
        f"the current folder{' ' + where if where else ''} no longer exists (deleted or moved while this shell "
        "was in it): relative paths, and the tools mw-env runs, start there",
        hint="cd to a folder that exists (`cd ~`), then run the same command again",
        exit_code=EXIT_USAGE,
    )
