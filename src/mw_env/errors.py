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


class NothingToDo(MwEnvError):
    """What was asked is already done (a finished run started again): said as `note:`, exit 0."""

    exit_code = EXIT_OK


class StepFailed(MwEnvError):
    """A provisioning step or a training run failed. Exit code 1."""

    exit_code = EXIT_FAILED
