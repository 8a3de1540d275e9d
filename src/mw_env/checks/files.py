"""The venv's installed files against their RECORD: a package whose files are missing or changed.

Issue 40: with numpy's files deleted the doctor passed while `import numpy` failed, and a torch file edited in
place (uv links installed files from its cache, so the cache and every venv linked to it changed too) was
explained as a torch to reinstall, which linked the same file again. Cheap by default (every size, the hash
of a file changed since its package was unpacked: venv/integrity.py); `mw-env doctor -v` hashes every file.
"""

from __future__ import annotations

from dataclasses import replace

from mw_env.base.shellquote import sh_join
from mw_env.checks.context import DoctorContext
from mw_env.checks.model import CheckResult, result
from mw_env.venv.integrity import Scan, canonical, scan_venv

AREA = "files"
TITLE = "installed files match their RECORD"


def check_files(ctx: DoctorContext) -> list[CheckResult]:
    if not (ctx.venv / "pyvenv.cfg").is_file():
        return []  # no venv here: the venv area says so
    scan = scan_venv(ctx.venv, full=ctx.hash_files)
    torch = {canonical(n) for n in ("torch", *ctx.selection.torch.companions)}
    kept = [d for d in scan.damaged if d.extended_only and canonical(d.name) not in torch]
    damaged = tuple(d for d in scan.damaged if d not in kept)
    if not damaged:
        extended = (
            f"; kept as changed on purpose: {'; '.join(d.words() for d in kept)} (bootstrap leaves such a "
            "file alone; a reinstall of the package restores its own)"
            if kept
            else ""
        )
        return [result("files.record", TITLE, "pass", _checked(scan, full=ctx.hash_files) + extended)]
    scan = replace(scan, damaged=damaged)
    shared = sorted({d.name for d in scan.damaged if d.shared})
    cache = (
        f" The changed files of {', '.join(shared)} are linked from uv's cache (uv installs by hard links): "
        "the cache holds the change, and every venv installed from it since."
        if shared
        else ""
    )
    if ctx.record is not None:
        cause, fix = ctx.fix(
            "files.damaged",
            venv=ctx.venv,
            problems=scan.words(),
            cache=cache,
            bootstrap=ctx.bootstrap_command(),
        )
    else:
        python = str(ctx.python)
        names = [d.name for d in scan.damaged]
        reinstall = ["uv", "pip", "install", "--python", python, "--no-deps", "--reinstall"]
        steps = [sh_join(["uv", "cache", "clean", *shared])] if shared else []
        steps.append(sh_join([*reinstall, *(d.requirement for d in scan.damaged)]))
        cause, fix = ctx.fix(
            "files.damaged_foreign",
            venv=ctx.venv,
            problems=scan.words(),
            cache=cache,
            commands=" then ".join(f"`{s}`" for s in steps),
            names=", ".join(names),
        )
    return [result("files.record", TITLE, "fail", cause, fix)]


def _checked(scan: Scan, *, full: bool) -> str:
    how = (
        f"every file's sha256 ({scan.hashed_bytes / 1e6:,.0f} MB)"
        if full
        else f"sizes; sha256 of the {scan.hashed} changed since unpacked (`mw-env doctor -v`: every file's)"
    )
    return f"{scan.files:,} files of {scan.packages} packages: {how}"
