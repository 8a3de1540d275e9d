"""How a bootstrap run reports: the Events protocol the command layer renders, each step's outcome, and the
doctor hook. A leaf module, so the executor and the step handlers share these types without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from mw_env.provision.model import Step

if TYPE_CHECKING:
    from mw_env.checks.model import DoctorReport


class Events(Protocol):
    def step_started(self, step: Step) -> None: ...
    def step_output(self, step: Step, line: str) -> None: ...
    def step_finished(self, step: Step, outcome: StepResult) -> None: ...


class NoEvents:
    def step_started(self, step: Step) -> None:
        pass

    def step_output(self, step: Step, line: str) -> None:
        pass

    def step_finished(self, step: Step, outcome: StepResult) -> None:
        pass


class Status(str, Enum):
    """How a step ended. A str, so the JSON output and `outcome.status == "done"` read as before."""

    DONE = "done"
    SKIPPED = "skipped"  # already satisfied
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    WARN = "warn"  # finished, with something the user must hear

    __hash__ = str.__hash__  # a dict keyed by the plain strings finds the member too

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class StepResult:
    id: str
    status: Status
    duration_s: float = 0.0
    detail: str = ""
    output_tail: str = ""


@dataclass(frozen=True)
class StepWarning:
    """What a step handler returns when it finished but the user must hear about it (status "warn").
    A plain string return is the detail of a "done" step."""

    message: str


# Doctor hook: given the finished venv, return (ok, report). The command layer supplies it.
DoctorHook = Callable[[Path], "tuple[bool, DoctorReport | None]"]
