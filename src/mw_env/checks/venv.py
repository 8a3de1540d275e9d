"""The training venv: it exists, its python runs, it was made by bootstrap, its env file is in place."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from mw_env.base.errors import InputError
from mw_env.base.shellquote import sh, sh_join
from mw_env.checks.context import DoctorContext
from mw_env.checks.model import CheckResult, result
from mw_env.checks.probe import ProbeResult
from mw_env.venv.venvinfo import read_pyvenv_cfg

if TYPE_CHECKING:
    from mw_env.venv.lock.requires import Unmet

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
        return [result("venv.exists", "venv exists", "fail", cause, fix)]
    if not venv.is_dir() and os.path.lexists(venv):  # a link to nowhere: a loop, or a target that is gone
        cause, fix = ctx.fix("venv.broken_link", venv=venv, target=_link_target(venv))
        return [result("venv.exists", "venv exists", "fail", cause, fix)]
    if not venv.is_dir():
        cause, fix = ctx.fix("venv.missing", venv=venv, bootstrap=ctx.bootstrap_command())
        return [result("venv.exists", "venv exists", "fail", cause, fix)]
    py = ctx.python
    if not (venv / "pyvenv.cfg").exists() and not py.exists() and not py.is_symlink():
        from mw_env.venv.record import create_command

        # A command bootstrap accepts: it refuses to build in a folder it did not make (issue 30).
        cause, fix = ctx.fix("venv.not_a_venv", venv=venv, bootstrap=create_command(venv))
        return [result("venv.exists", "venv exists", "fail", cause, fix)]
    out = [result("venv.exists", "venv exists", "pass", str(venv))]
    try:
        read_pyvenv_cfg(venv)  # not UTF-8: the python dies in site.py; say why, not its traceback's last line
    except InputError as exc:
        cause, fix = ctx.fix(
            "venv.python_broken", python=py, error=exc.message, bootstrap=ctx.bootstrap_command(recreate=True)
        )
        out.append(result("venv.python", "venv python runs", "fail", cause, fix))
        return out
    static = ctx.static()
    if static is None or static.error or static.timed_out or static.stage("static") is None:
        cause, fix = ctx.fix(
            "venv.python_broken",
            python=py,
            error=_python_error(py, static),
            bootstrap=ctx.bootstrap_command(recreate=True),
        )
        out.append(result("venv.python", "venv python runs", "fail", cause, fix))
        return out
    st = static.stage("static") or {}
    out.append(result("venv.python", "venv python runs", "pass", f"Python {st.get('python')} ({py})"))
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
            "venv.record", title, "fail", ctx.record_error, f"{ctx.bootstrap_command()} rewrites it"
        )
    rec = ctx.record
    if rec is None:
        cause, fix = ctx.fix("venv.no_record", venv=ctx.venv)
        return result("venv.record", title, "warn", cause, fix)
    name = ctx.profile.name
    if rec.profile != name:
        how = "chosen with --profile" if ctx.selection.explicit else "detected for this machine"
        cause, fix = ctx.fix(
            "venv.record_profile",
            recorded=rec.profile,
            profile=name,
            how=how,
            bootstrap=ctx.bootstrap_command(recreate=True),
        )
        return result("venv.record", title, "warn", cause, fix)
    return result("venv.record", title, "pass", f"profile {rec.profile}, {rec.torch_requirement}")


def _requirements(ctx: DoctorContext) -> CheckResult | None:
    """Every installed package has what it requires (its Requires-Dist; the project's with the extras
    bootstrap installed, from the record): a lock that lacked numpy matched the venv exactly, and the run
    died on `import numpy`. The venv's own requirements, not the lock's list (envlock.requires)."""
    from mw_env.venv.lock.requires import read_requirements
    from mw_env.venv.venvinfo import site_packages

    site = site_packages(ctx.venv)
    if site is None:
        return None
    try:
        cfg = read_pyvenv_cfg(ctx.venv) or {}
    except InputError:
        return None  # said by the venv.python check
    python = cfg.get("version_info") or cfg.get("version") or "3"
    extras = tuple(ctx.record.extras) if ctx.record is not None else ()
    reqs = read_requirements(site, python, extras, _visible_sites(ctx.venv, cfg, python))
    found, have, needs = reqs.unmet(), reqs.have, reqs.needs
    title = "packages have what they require"
    if found:
        cause, fix = _unmet_finding(ctx, found, set(reqs.project))
        return result("venv.requirements", title, "fail", cause, fix)
    return result("venv.requirements", title, "pass", f"{len(have)} packages, {len(needs)} requirements met")


def _unmet_finding(ctx: DoctorContext, found: list[Unmet], project: set[str]) -> tuple[str, str]:
    """The cause and fix for unmet requirements, by who can meet them (issue 40: the fix had been the
    bootstrap that had just run, for a package that needs a newer torch than the pin allows):
    - against the pin (torch, its companions): nothing installs both; the package goes, or an older one;
    - the project's own (its extras): bootstrap's extras step installs them;
    - another package's: bootstrap never installs those; uv does, under the pin."""
    pinned = _pinned(ctx)
    against = [u for u in found if u.have is not None and u.name in pinned]
    own = [u for u in found if u not in against and (u.need.package in project or not u.need.package)]
    other = [u for u in found if u not in against and u not in own]
    python, constraints = ctx.python, _constraints_file(ctx)
    pin_args = ["--constraint", str(constraints)] if constraints is not None else []
    parts: list[tuple[str, str]] = []
    if against:
        askers = list(dict.fromkeys(u.need.package for u in against))
        parts.append(
            ctx.fix(
                "venv.requirements_pinned",
                venv=ctx.venv,
                problems="; ".join(f"{u.need.by} requires {u.need.requirement}" for u in against),
                pinned=", ".join(f"{u.name}=={pinned[u.name]}" for u in against),
                constraints=constraints,
                uninstall=sh_join(["uv", "pip", "uninstall", "--python", python, *askers]),
                older=sh_join(
                    [
                        "uv",
                        "pip",
                        "install",
                        "--python",
                        python,
                        *pin_args,
                        *dict.fromkeys(f"{u.need.package}<{u.need.version}" for u in against),
                    ]
                ),
            )
        )
    if own:
        missing_only = all(u.have is None for u in own)
        parts.append(
            ctx.fix(
                "venv.requirements_unmet",
                venv=ctx.venv,
                problems=_shown(own),
                effect="An import of them fails at the start of a run (ModuleNotFoundError)"
                if missing_only
                else "A run imports versions its packages were not made for",
                bootstrap=ctx.bootstrap_command(),
            )
        )
    if other:
        wanted = [f"{u.need.requirement.name}{u.need.requirement.specifier}" for u in other]
        parts.append(
            ctx.fix(
                "venv.requirements_other",
                venv=ctx.venv,
                problems=_shown(other),
                install=sh_join(
                    ["uv", "pip", "install", "--python", python, *pin_args, *dict.fromkeys(wanted)]
                ),
            )
        )
    return " ".join(c for c, _ in parts), " ".join(f for _, f in parts)


def _shown(found: list[Unmet]) -> str:
    words = [u.words() for u in found]
    return "; ".join(words[:6]) + (f" (and {len(words) - 6} more)" if len(words) > 6 else "")


def _constraints_file(ctx: DoctorContext) -> Path | None:
    """The venv's pin file (torch and its companions, `name==version`) as bootstrap recorded it."""
    recorded = ctx.record.constraints_file if ctx.record is not None else None
    if not recorded or not recorded.endswith(".txt") or "constraints" not in Path(recorded).name:
        return None  # an adopted torch's overrides file pins nothing by version
    return Path(recorded)


def _pinned(ctx: DoctorContext) -> dict[str, str]:
    """name -> the version the venv's pin file holds it at."""
    from mw_env.base import userfile
    from mw_env.venv.lock.lockfile import normalize

    path = _constraints_file(ctx)
    if path is None:
        return {}
    try:
        text = userfile.read_text(path, what="constraints file")
    except InputError:
        return {}
    out = {}
    for line in text.splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and name and not name.startswith("#"):
            out[normalize(name)] = version.strip()
    return out


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
    from mw_env.venv.lock import LOCK_FILE
    from mw_env.venv.lock.drift import compare, installed
    from mw_env.venv.lock.lockfile import read_lock

    title = "venv matches its lock"
    path = ctx.venv / LOCK_FILE
    if not os.path.lexists(path):
        from mw_env.venv.lock import STALE_LOCK

        why = (
            f"the last bootstrap could not write one (the lock before it is kept as {STALE_LOCK})"
            if os.path.lexists(ctx.venv / STALE_LOCK)
            else "made before locks, or by hand"
        )
        return result(
            "venv.lock",
            title,
            "skip",
            f"no {LOCK_FILE} ({why}); `mw-env lock --venv {sh(ctx.venv)}` writes one or says why it cannot",
        )
    try:
        lock = read_lock(path)
    except InputError as exc:
        cause, fix = ctx.fix("venv.lock_invalid", lock=path, error=exc.message, venv=ctx.venv)
        return result("venv.lock", title, "warn", cause, fix)
    drift = compare(lock, installed(ctx.venv))
    if drift.any:
        cause, fix = ctx.fix(
            "venv.lock_drift",
            lock=path,
            changes="; ".join(drift.lines()),
            venv=ctx.venv,
        )
        return result("venv.lock", title, "warn", cause, fix)
    return result(
        "venv.lock",
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

    try:
        text = userfile.read_text(env_file, what="env file")
    except InputError:
        # Missing, not a regular file, too big or not UTF-8: reported as not holding the variables.
        text = None
    absent = [k for k in rec.env if text is None or f"export {k}=" not in text]
    if absent:
        return result(
            "venv.env",
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
        return result("venv.env", title, "pass", f"{pairs} (applied by mw-env train)", info=(cause, fix))
    return result("venv.env", title, "pass", f"{pairs} (set in this shell)")
