"""The doctor's results: one `CheckResult` per check, gathered in a `DoctorReport`.

`DoctorReport.to_dict()` is the `mw-env doctor --json` contract (design.md, "Contracts").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

CheckStatus = Literal["pass", "warn", "fail", "skip"]


@dataclass(frozen=True)
class CheckResult:
    """One finding: what was checked, how it went, and (for warn/fail) how to fix it."""

    id: str  # "devices.kfd", "torch.build", "probe.matmul.bf16"
    area: str  # an area's key (checks/runner.py AREAS)
    title: str
    status: CheckStatus
    detail: str = ""
    fix: str = ""
    duration_s: float = 0.0
    info: tuple[str, ...] = ()  # extra lines shown with -v (harmless messages, figures)

    def with_duration(self, seconds: float) -> CheckResult:
        return replace(self, duration_s=round(seconds, 4))

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "info": list(self.info)}


@dataclass(frozen=True)
class DoctorReport:
    profile: str
    checks: tuple[CheckResult, ...]
    duration_s: float = 0.0
    venv: str = ""
    facts: dict[str, Any] = field(default_factory=dict)  # probe figures (TFLOP/s, device), for --json

    @property
    def ok(self) -> bool:
        return not any(c.status == "fail" for c in self.checks)

    @property
    def failed(self) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.checks if c.status == "fail")

    @property
    def warned(self) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.checks if c.status == "warn")

    def get(self, check_id: str) -> CheckResult | None:
        return next((c for c in self.checks if c.id == check_id), None)

    def to_dict(self) -> dict[str, object]:
        return {
            "profile": self.profile,
            "ok": self.ok,
            "venv": self.venv,
            "duration_s": round(self.duration_s, 3),
            "checks": [c.to_dict() for c in self.checks],
            "facts": self.facts,
        }


def result(
    id: str, title: str, status: CheckStatus, detail: str = "", fix: str = "", info: tuple[str, ...] = ()
) -> CheckResult:
    """A check module's finding; its area is the head of its id ("devices" of "devices.kfd")."""
    area = id.partition(".")[0]
    return CheckResult(id=id, area=area, title=title, status=status, detail=detail, fix=fix, info=tuple(info))


def doctor_warnings(report: object) -> list[str]:
    """`id: title - detail` of each warning in a doctor's JSON report (a run's console line, report and card
    say them: a venv that drifted from its lock is not "ok")."""
    checks = report.get("checks") if isinstance(report, dict) else None
    return [
        f"{c.get('id')}: {c.get('title')} - {c.get('detail')}"
        for c in checks or ()
        if isinstance(c, dict) and c.get("status") == "warn"
    ]
