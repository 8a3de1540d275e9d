"""`mw-env doctor`: every check with its cause and fix, a real matmul probe, container-aware host hints.

`run_doctor(...) -> DoctorReport` is the library entry point (design.md, "Module contracts"); the
commands layer renders it. Probes run inside the venv's python (probe_script.py, stdlib + torch only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mw_env.checks.model import CheckResult, DoctorReport

if TYPE_CHECKING:
    from mw_env.checks.runner import AREAS, run_doctor

__all__ = ["AREAS", "CheckResult", "DoctorReport", "run_doctor"]


def __getattr__(name: str) -> Any:
    # The runner imports every check module; load it only when a doctor actually runs.
    if name in ("run_doctor", "AREAS"):
        from mw_env.checks import runner

        return getattr(runner, name)
    raise AttributeError(name)
