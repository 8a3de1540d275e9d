"""Free disk where the venv (and its torch) lives."""

from __future__ import annotations

import os

from mw_env.checks.context import GIB, DoctorContext, human_bytes
from mw_env.checks.model import CheckResult, result

AREA = "disk"
# A ROCm torch is ~6 GB installed, CUDA ~5 GB; a CPU one ~1 GB. Checkpoints come on top.
NEED = {"rocm": 10 * GIB, "cuda": 10 * GIB, "cpu": 3 * GIB}
CRITICAL = 1 * GIB


def check_disk(ctx: DoctorContext) -> list[CheckResult]:
    title = "free disk"
    path = ctx.venv
    while not path.exists() and path != path.parent:
        path = path.parent
    # On a fake machine root the venv is a real folder but the root's meta file describes the disks.
    du = ctx.machine.disk_usage(str(path)) if ctx.machine.is_real else ctx.machine.disk_usage("/")
    if du is None:
        return [result("disk.free", AREA, title, "skip", f"cannot stat {path}")]
    installed = ctx.python.exists() and os.path.isdir(ctx.venv / "lib")
    need = CRITICAL * 2 if installed else NEED.get(ctx.selection.torch.build, 3 * GIB)
    detail = f"{human_bytes(du.free)} free of {human_bytes(du.total)} at {path}"
    if du.free < min(need, CRITICAL):
        cause, fix = ctx.fix("disk.low", path=path, free=human_bytes(du.free))
        return [result("disk.free", AREA, title, "fail", cause, fix)]
    if du.free < need:
        cause, fix = ctx.fix("disk.low", path=path, free=human_bytes(du.free))
        return [result("disk.free", AREA, title, "warn", cause, fix)]
    return [result("disk.free", AREA, title, "pass", detail)]
