"""Free disk where the venv (and its torch) lives."""

from __future__ import annotations

import os

from mw_env.checks.context import GIB, DoctorContext, human_bytes
from mw_env.checks.model import CheckResult, result
from mw_env.profiles.disk import disk_need

AREA = "disk"
CRITICAL = 1 * GIB


def check_disk(ctx: DoctorContext) -> list[CheckResult]:
    title = "free disk"
    path = ctx.venv
    while not path.exists() and path != path.parent:
        path = path.parent
    # On a fake machine root the venv is a real folder but the root's meta file describes the disks.
    du = ctx.machine.disk_usage(str(path)) if ctx.machine.is_real else ctx.machine.disk_usage("/")
    if du is None:
        return [result("disk.free", title, "skip", f"cannot stat {path}")]
    installed = ctx.python.exists() and os.path.isdir(ctx.venv / "lib")
    # The same figure bootstrap's preflight quotes for this source (profiles/disk.py); with torch installed,
    # room for checkpoints and caches.
    fresh = disk_need(ctx.selection.torch)
    need = CRITICAL * 2 if installed else fresh.need_bytes
    needs = f"~{need / GIB:.1f} GiB for checkpoints and caches" if installed else fresh.text
    detail = f"{human_bytes(du.free)} free of {human_bytes(du.total)} at {path}; a torch install needs {fresh.text}"
    if du.free < need:
        cause, fix = ctx.fix("disk.low", path=path, free=human_bytes(du.free), need=needs)
        return [result("disk.free", title, "fail" if du.free < min(need, CRITICAL) else "warn", cause, fix)]
    return [result("disk.free", title, "pass", detail)]
