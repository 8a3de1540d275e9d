"""The training venv: it exists, its python runs, it was made by bootstrap, its env file is in place."""

from __future__ import annotations

import os
from pathlib import Path

from mw_env.base.errors import InputError
from mw_env.base.shellquote import sh
from mw_env.checks.context import DoctorContext
from mw_env.checks.model import CheckResult, result
from mw_env.checks.probe import ProbeResult
from mw_env.venv.venvinfo import read_pyvenv_cfg

AREA = "venv"


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError as exc:
        return f"unreadable: {exc.strerror}"


def check_venv(ctx: DoctorContext) -> list[CheckResult]:
    venv = ctx.venv
    if venv.exists() and not venv.is_dir():
        cause, fix = ctx.fix("venv.not_a_folder", venv=venv, bootstrap=ctx.bootstrap_command())
        return [result("venv.exists", AREA, "venv exists", "fail", cause, fix)]
    if not venv.is_dir() and os.path.lexists(venv):  # a link to nowhere: a loop, or a target that is gone
        cause, fix = ctx.fix("venv.broken_link", venv=venv, target=_link_target(venv))
        return [result("venv.exists", AREA, "venv exists", "fail", cause, fix)]
    if not venv.is_dir():
        cause, fix = ctx.fix("venv.missing", venv=venv, bootstrap=ctx.bootstrap_command())
        return [result("venv.exists", AREA, "venv exists", "fail", cause, fix)]
    py = ctx.python
    if not (venv / "pyvenv.cfg").exists() and not py.exists() and not py.is_symlink():
        from mw_env.venv.record import create_command

        # A command bootstrap accepts: it refuses to build in a folder it did not make (issue 30).
        cause, fix = ctx.fix("venv.not_a_venv", venv=venv, bootstrap=create_command(venv))
        return [result("venv.exists", AREA, "venv exists", "fail", cause, fix)]
    out = [result("venv.exists", AREA, "venv exists", "pass", str(venv))]
    try:
        read_pyvenv_cfg(venv)  # not UTF-8: the python dies in site.py; say why, not its traceback's last line
    except InputError as exc:
        cause, fix = ctx.fix(
            "venv.python_broken", python=py, error=exc.message, bootstrap=ctx.bootstrap_command(recreate=True)
        )
        out.append(result("venv.python", AREA, "venv python runs", "fail", cause, fix))
        return out
    static = ctx.static()
    if static is None or static.error or static.timed_out or static.stage("static") is None:
        cause, fix = ctx.fix(
            "venv.python_broken",
            python=py,
            error=_python_error(py, static),
            bootstrap=ctx.bootstrap_command(recreate=True),
        )
        out.append(result("venv.python", AREA, "venv python runs", "fail", cause, fix))
        return out
    st = static.stage("static") or {}
    out.append(result("venv.python", AREA, "venv python runs", "pass", f"Python {st.get('python')} ({py})"))
    out.append(_record(ctx))
    requirements = _requirements(ctx)
    if requirements is not None:
        out.append(requirements)
    lock_check = _lock(ctx)
    if lock_check is not None:
        out.append(lock_check)
    env_check = _env_file(ctx)
    if env_check is not None:
        out.append(env_check)
    return out


def _python_error(py: Path, static: ProbeResult | None) -> str:
    """Why the venv's python did not answer, in the words a user can act on."""
    if static is None:
        if py.is_symlink():
            # The usual way a venv dies: the interpreter it links to was upgraded or removed (pyenv, apt).
            return (
                f"bin/python is a broken link to {os.readlink(py)} (that interpreter was removed or upgraded)"
            )
        return "no bin/python"
    if static.error:
        return static.error
    if static.timed_out:
        return "it did not answer within 30s"
    return (static.stderr.strip().splitlines() or [f"exit {static.returncode}, no output"])[-1]


def _record(ctx: DoctorContext) -> CheckResult:
    title = "bootstrap record"
    if ctx.record_error:
        return result(
            "venv.record",
            AREA,
            title,
            "fail",
            ctx.record_error,
            f"{ctx.bootstrap_command()} rewrites it",
        )
    rec = ctx.record
    if rec is None:
        cause, fix = ctx.fix("venv.no_record", venv=ctx.venv)
        return result("venv.record", AREA, title, "warn", cause, fix)
    name = ctx.profile.name
    if rec.profile != name:
        how = (
            "chosen with --profile"
            if getattr(ctx.selection, "explicit", False)
            else "detected for this machine"
        )
        cause, fix = ctx.fix(
            "venv.record_profile",
            recorded=rec.profile,
            profile=name,
            how=how,
            bootstrap=ctx.bootstrap_command(recreate=True),
        )
        return result("venv.record", AREA, title, "warn", cause, fix)
    return result("venv.record", AREA, title, "pass", f"profile {rec.profile}, {rec.torch_requirement}")


def _requirements(ctx: DoctorContext) -> CheckResult | None:
    """Every installed package has what it requires (its Requires-Dist; the project's with the extras
    bootstrap installed, from the record): a lock that lacked numpy matched the venv exactly, and the run
    died on `import numpy`. The venv's own requirements, not the lock's list (envlock.requires)."""
    from mw_env.venv.lock.drift import from_folder
    from mw_env.venv.lock.requires import marker_env, normalize, unmet, venv_needs
    from mw_env.venv.venvinfo import read_pyvenv_cfg, site_packages

    site = site_packages(ctx.venv)
    if site is None:
        return None
    try:
        cfg = read_pyvenv_cfg(ctx.venv) or {}
    except InputError:
        return None  # said by the venv.python check
    python = cfg.get("version_info") or cfg.get("version") or "3"
    have: dict[str, str] = {}
    project: list[str] = ["mw-env"]
    for where in (*_visible_sites(ctx.venv, cfg, python), site):  # the venv's own last: its versions win
        for d in where.glob("*.dist-info"):
            name, _, version = d.name[: -len(".dist-info")].rpartition("-")
            if name and (d / "METADATA").is_file():
                have[normalize(name)] = version
                if where == site and from_folder(d):
                    project.append(normalize(name))  # the project, installed from its folder (-e or not)
    extras = tuple(ctx.record.extras) if ctx.record is not None else ()
    needs = venv_needs(site, marker_env(python), dict.fromkeys(project, extras))
    problems = unmet(needs, have)
    title = "packages have what they require"
    if problems:
        shown = "; ".join(problems[:6]) + (f" (and {len(problems) - 6} more)" if len(problems) > 6 else "")
        cause, fix = ctx.fix(
            "venv.requirements_unmet", venv=ctx.venv, problems=shown, bootstrap=ctx.bootstrap_command()
        )
        return result("venv.requirements", AREA, title, "fail", cause, fix)
    return result(
        "venv.requirements", AREA, title, "pass", f"{len(have)} packages, {len(needs)} requirements met"
    )


def _visible_sites(venv: Path, cfg: dict[str, str], python: str) -> list[Path]:
    """The other folders the venv's python imports packages from: an adopted torch's site (bootstrap's .pth:
    a base image's torch), and the base interpreter's when pyvenv.cfg includes the system site-packages."""
    from mw_env.venv.venvinfo import adopted_site

    out = [Path(line.strip()) for line in (adopted_site(venv) or "").splitlines() if line.strip()]
    if cfg.get("include-system-site-packages", "").lower() == "true" and cfg.get("home"):
        major_minor = ".".join(python.split(".")[:2])
        base = Path(cfg["home"]).parent / "lib" / f"python{major_minor}"
        out += [base / "site-packages", base / "dist-packages", Path("/usr/lib/python3/dist-packages")]
    return [p for p in out if p.is_dir()]


def _lock(ctx: DoctorContext) -> CheckResult | None:
    """The venv still holds what its lock says: a later `pip install` that added, removed or changed a
    package is drift, named with both versions."""
    if ctx.record is None:
        return None
    from mw_env.base.errors import InputError
    from mw_env.venv.lock import LOCK_FILE
    from mw_env.venv.lock.drift import compare, installed
    from mw_env.venv.lock.lockfile import read_lock

    title = "venv matches its lock"
    path = ctx.venv / LOCK_FILE
    if not os.path.lexists(path):
        return result(
            "venv.lock",
            AREA,
            title,
            "skip",
            f"no {LOCK_FILE} (made before locks, or by hand); `mw-env lock --venv {sh(ctx.venv)}` writes one",
        )
    try:
        lock = read_lock(path)
    except InputError as exc:
        cause, fix = ctx.fix("venv.lock_invalid", lock=path, error=exc.message, venv=ctx.venv)
        return result("venv.lock", AREA, title, "warn", cause, fix)
    drift = compare(lock, installed(ctx.venv))
    if drift.any:
        cause, fix = ctx.fix(
            "venv.lock_drift",
            lock=path,
            changes="; ".join(drift.lines()),
            venv=ctx.venv,
        )
        return result("venv.lock", AREA, title, "warn", cause, fix)
    return result(
        "venv.lock",
        AREA,
        title,
        "pass",
        f"{len(lock.packages)} packages as locked (sha256 {lock.sha256[:12]}, {lock.meta.hardware()})",
    )


def _env_file(ctx: DoctorContext) -> CheckResult | None:
    """The venv's env file exists, holds the recorded env, and the activate script sources it."""
    rec = ctx.record
    if rec is None or not rec.env:
        return None
    title = "runtime env file"
    env_file = ctx.venv / "mw-env.env"
    from mw_env.base import userfile
    from mw_env.base.errors import InputError

    try:
        text = userfile.read_text(env_file, what="env file")
    except InputError:
        # Missing, not a regular file, too big or not UTF-8: reported as not holding the variables.
        text = None
    absent = [k for k in rec.env if text is None or f"export {k}=" not in text]
    if absent:
        return result(
            "venv.env",
            AREA,
            title,
            "warn",
            f"{env_file} lacks {', '.join(absent)} (recorded in mw-env.json)",
            f"Re-run {ctx.bootstrap_command()} to rewrite the env file.",
        )
    unset = [k for k, v in rec.env.items() if ctx.machine.env.get(k) != v]
    pairs = ", ".join(f"{k}={v}" for k, v in rec.env.items())
    if unset:
        cause, fix = ctx.fix(
            "venv.env_not_applied", missing=", ".join(unset), env_file=env_file, venv=ctx.venv
        )
        # Informational: mw-env train applies the file itself; only the user's own scripts need it.
        return result(
            "venv.env", AREA, title, "pass", f"{pairs} (applied by mw-env train)", info=(cause, fix)
        )
    return result("venv.env", AREA, title, "pass", f"{pairs} (set in this shell)")
