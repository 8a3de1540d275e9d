"""How busy the machine is, so that a check that ran out of time is told apart from one that hung.

A hung device (a GPU fault leaves a process spinning) and an overloaded machine (a load average of 16 on
2 CPUs: every process waits its turn) both end in a timeout. The difference is known: /proc/loadavg against
the CPUs this machine has, and how far the probe got (the stages it printed before the deadline).
"""

from __future__ import annotations

from dataclasses import dataclass

from mw_env.hardware.machine import Machine

# Runnable processes per CPU above which a timeout says "overloaded" first: at 2 per CPU every process gets
# half a CPU or less, and a probe budgeted for an idle machine needs twice its time or more.
OVERLOADED_PER_CPU = 2.0


@dataclass(frozen=True)
class Load:
    load1: float  # the 1-minute load average
    cpus: int

    @property
    def per_cpu(self) -> float:
        return self.load1 / max(self.cpus, 1)

    @property
    def overloaded(self) -> bool:
        return self.per_cpu >= OVERLOADED_PER_CPU

    def describe(self) -> str:
        return f"load average {self.load1:.1f} on {self.cpus} CPU{'s' if self.cpus != 1 else ''}"


def read_load(machine: Machine, cpus: int) -> Load | None:
    """The machine's 1-minute load average (None where /proc/loadavg is missing or odd, e.g. a fake root)."""
    text = machine.read("proc/loadavg") or ""
    try:
        return Load(load1=float(text.split()[0]), cpus=cpus)
    except (IndexError, ValueError):
        return None


def timeout_verdict(limit: float, load: Load | None, progress: str | None) -> tuple[str, str]:
    """(detail, fix) for a check that did not finish within `limit` seconds."""
    reached = f"; {progress}" if progress else ""
    if load is not None and load.overloaded:
        return (
            f"check did not finish within {limit:.0f}s on an overloaded machine ({load.describe()}, "
            f"{load.per_cpu:.1f} per CPU){reached}",
            "The machine is busy, which alone explains a timeout: re-run when the load is lower, or with a "
            "longer `--timeout` (e.g. `--timeout 180`). A hung device is likely only if it times out again on "
            "an idle machine.",
        )
    idle = f" ({load.describe()}: not a busy machine)" if load is not None else ""
    return (
        f"check did not finish within {limit:.0f}s{idle}{reached}",
        "Re-run with -v; on a machine that is not busy, a hanging check usually means a hung device or "
        "network call.",
    )
