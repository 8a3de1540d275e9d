"""How a bootstrap run reports: the Events protocol the command layer renders, each step's outcome, and the
doctor hook. A leaf module, so the executor and the step handlers share these types without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mw_env.provision.model import Step


class Events(Protocol):
    def step_started(self, step: Step) -> None: ...
    def step_output(self, step: Step, line: str) -> None: ...
    def step_finished(self, step: Step, outcome: StepOutcome) -> None: ...


class NoEvents:
    def step_started(self, step: Step) -> None:
        pass

    def step_output(self, step: Step, line: str) -> None:
        pass

    def step_finished(self, step: Step, outcome: StepOutcome) -> None:
        pass


@dataclass(frozen=True)
class StepOutcome:
    id: str
    status: str  # "done" | "skipped" (already satisfied) | "failed" | "interrupted" | "warn"
    duration_s: float = 0.0
    detail: str = ""
    output_tail: str = ""


@dataclass(frozen=True)
class StepWarning:
    """What a step handler returns when it finished but the user must hear about it (status "warn").
    A plain string return is the detail of a "done" step."""

    message: str


# Doctor hook: given the finished venv, return (ok, report). The command layer supplies it.
DoctorHook = Callable[[Path], tuple[bool, Any]]
