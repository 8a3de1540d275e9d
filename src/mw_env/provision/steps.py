"""The step handlers: what each bootstrap step does when it is not already done."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mw_env.base.atomic import write_text_atomic as write_atomic
from mw_env.base.errors import MwEnvError, StepFailed
from mw_env.base.textsafe import redact
from mw_env.provision import keys, repair, torchindex
from mw_env.provision import pin as pinmod
from mw_env.provision.events import StepWarning
from mw_env.provision.model import GiB, Plan, Step
from mw_env.provision.state import STATE_FILE, State
from mw_env.sources import uv as uvmod
from mw_env.venv import installtimes, integrity, venvinfo
from mw_env.venv.record import VenvRecord, now, read_record, write_record

if TYPE_CHECKING:
    from mw_env.checks.model import DoctorReport
    from mw_env.provision.events import DoctorHook, Events


@dataclass
class Run:
    plan: Plan
    state: State
    events: Events
    uv: str | None
    doctor: DoctorHook | None
    doctor_report: DoctorReport | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    # The installed files' fingerprint from the extras step's scan, for the verify key (one stat pass less);
    # an install after that scan clears it.
    fingerprint: str | None = None

    def command(
        self,
        step: Step,
        argv: tuple[str, ...],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> uvmod.CommandRun:
        argv = tuple(self.uv if (i == 0 and a == "uv" and self.uv) else a for i, a in enumerate(argv))
        # An install's files are trusted by the integrity scans without a hash (venv/installtimes.py).
        if "install" in argv:
            self.fingerprint = None
        with installtimes.recorded() if "install" in argv else contextlib.nullcontext():
            res = uvmod.run_streaming(
                argv,
                env=uvmod.uv_env(self.plan.env) if env is None else env,
                on_line=lambda line: self.events.step_output(step, line),
                timeout=timeout,
            )
        self.outputs[step.id] = res.output
        return res


def preflight(run: Run, step: Step) -> str:
    p = run.plan
    if p.problem:  # found while planning: the dry run showed it, the run stops here
        raise p.problem.error()
    if run.uv:
        uvmod.check_version(run.uv, p.env)
    if p.torch and p.torch.origin == "wheelhouse" and p.torch.location:
        _check_wheel(p.torch.location)
    free = venvinfo.free_bytes(p.build_venv)
    if free is not None and free < p.disk_need:
        # The source's figure (profiles/disk.py), worded as the doctor's disk check words it.
        needs = (
            p.disk.text if p.disk and p.disk.need_bytes == p.disk_need else f"~{p.disk_need / GiB:.1f} GiB"
        )
        raise StepFailed(
            f"not enough disk space for {p.build_venv}: {free / GiB:.1f} GiB free, the install needs {needs}",
            hint="free space, pass --venv on a bigger disk, or point UV_CACHE_DIR at one (uv's cache holds the "
            "downloaded wheels; `uv cache prune` trims it)",
        )
    cache = Path(p.env.get("UV_CACHE_DIR") or Path(p.env.get("HOME", "~")).expanduser() / ".cache" / "uv")
    cfree = venvinfo.free_bytes(cache)
    if cfree is not None and cfree < min(p.disk_need, 2 * GiB) // 2:
        raise StepFailed(
            f"not enough disk space for uv's cache {cache}: {cfree / GiB:.1f} GiB free",
            hint="free space or set UV_CACHE_DIR to a bigger disk",
        )
    return f"{free / GiB:.1f} GiB free" if free is not None else ""


def _check_wheel(path: str) -> None:
    """The wheelhouse's torch is a whole wheel before anything is installed from it."""
    from mw_env.sources.wheelhouse import wheel_problem

    why = wheel_problem(path)
    if why is not None:
        raise StepFailed(
            f"the wheelhouse's torch {path} is damaged: {why}",
            hint="copy the wheel again from where it came (compare its size or sha256 with the original), or "
            "move it out of the wheelhouse to install torch from the profile's index",
        )


def install_uv(run: Run, step: Step) -> str:
    python = run.plan.python.path if run.plan.python else sys.executable
    run.uv = uvmod.install_uv(python=python, env=run.plan.env)
    return f"installed {run.uv}"


def create_venv(run: Run, step: Step) -> str:
    bv = run.plan.build_venv
    argv = step.command or ()
    if (bv / "pyvenv.cfg").exists() and not (
        (bv / "bin" / "python").exists() and (bv / "bin" / "activate").exists()
    ):
        argv = (*argv[:-1], "--clear", argv[-1])  # our own half-made venv (killed while creating): redo it
    elif bv.is_dir() and not any(bv.iterdir()):
        argv = (*argv[:-1], "--allow-existing", argv[-1])
    res = run.command(step, argv, timeout=300)
    if not res.ok:
        raise StepFailed(f"uv venv failed (exit {res.returncode})", hint=_hint_for(res.output))
    run.state = State.load(bv)
    return ""


def install_torch(run: Run, step: Step) -> str:
    p = run.plan
    if p.adopted:
        site = venvinfo.site_packages(p.build_venv)
        if site is None:
            raise StepFailed(f"{p.build_venv} has no site-packages folder", hint="re-run with --recreate")
        write_atomic(site / venvinfo.ADOPT_PTH, p.adopted.site + "\n")
        run.state.mark(step.id, "done", keys.torch_key(p))
        return f"reusing torch {p.adopted.version} from {p.adopted.site}"
    run.state.mark(step.id, "started")
    # A re-run's repair: what is damaged now; a file changed in place is changed in uv's cache too (repair.py).
    family = repair.torch_family(p)
    before = integrity.scan_venv(p.build_venv, only=family).damaged
    if any(d.shared for d in before):
        repair.clean_cache(lambda argv: run.command(step, argv, timeout=600), p, [d.name for d in before])
    if p.lock is not None:
        from mw_env.provision.lockstep import install_lock

        installed = install_lock(run, step)
        return _torch_checked(run, step, installed, before, uvmod.uv_env(p.env))
    # The step's own uv configuration: each index the way it answers (torchindex.py); written 0600, as an
    # index URL may carry credentials.
    write_atomic(
        p.build_venv / torchindex.CONFIG_FILE, torchindex.config_text(p.torch_indexes, p.torch_uv), mode=0o600
    )
    env = torchindex.step_env(uvmod.uv_env(p.env))
    res = run.command(step, step.command or (), timeout=3600, env=env)
    if not res.ok:
        from mw_env.provision import uvfail  # only when the install failed

        cause = uvfail.index_failure(res.output, p.torch_indexes)
        if cause is not None:
            raise StepFailed(
                f"installing torch failed (exit {res.returncode}): {cause.message}", hint=cause.hint
            )
        raise StepFailed(
            f"installing torch failed (exit {res.returncode}): {_last_error(res.output)}",
            hint=_hint_for(res.output),
        )
    # Where torch came from is kept with the step: a run killed before the env step writes the record
    # resumes with torch "installed" and must still record the wheelhouse or index it came from.
    run.state.mark(
        step.id,
        "done",
        keys.torch_key(p),
        location=redact(p.torch.location or "") if p.torch else "",
    )
    return _torch_checked(run, step, venvinfo.installed_version(p.build_venv, "torch") or "", before, env)


def _torch_checked(
    run: Run, step: Step, installed: str, before: tuple[integrity.Damaged, ...], env: Mapping[str, str]
) -> str:
    """What the torch step installed is what its RECORD says: a NEW venv linked to a torch file edited in uv's
    cache is found here, the cache entry cleaned and torch installed again (repair.after_install). Its detail."""
    p = run.plan
    repaired = repair.after_install(
        step,
        p,
        repair.torch_family(p),
        run_command=lambda argv: run.command(step, argv, timeout=600),
        reinstall=lambda names: run.command(
            step, repair.with_reinstall(step.command or (), names), timeout=3600, env=env
        ),
        before=before,
        cleaned=any(d.shared for d in before),
    )
    said = [f"{'; '.join(d.words() for d in before)}: reinstalled"] if before else []
    said += [repaired] if repaired else []
    return f"{installed} ({'; '.join(said)})" if said else installed


def hash_for_the_lock(plan: Plan) -> None:
    """The lock names torch's wheelhouse file by its sha256: read it from the start of the run, on the core
    that planning and the first steps leave idle (they are single-threaded), instead of during the extras
    install, where it would compete with uv's unpacking (sources/wheelhash.py; the lock step collects it)."""
    from mw_env.provision.lockstep import wheelhouse_torch

    wheel = wheelhouse_torch(plan)
    if wheel is not None:
        from mw_env.sources import wheelhash

        wheelhash.start(wheel)


def write_lock(run: Run, step: Step) -> str | StepWarning:
    from mw_env.provision.lockstep import lock_step

    return lock_step(run, step)


def read_wheel_archs(run: Run, step: Step) -> str | StepWarning:
    """Judge the installed wheel's own GPU archs; the wheel's decision replaces the table's in the env file."""
    from mw_env.provision.archtruth import env_with, judge
    from mw_env.venv.wheelarch import read_wheel_archs as read

    p = run.plan
    assert p.arch_policy is not None  # the step applies only to a plan with a policy (table.WHEEL_ARCHS)
    verdict = judge(p.arch_policy, read(p.build_venv))
    run.plan = dataclasses.replace(p, wheel=verdict, runtime_env=env_with(p.runtime_env, verdict.override))
    shown = f"{', '.join(verdict.archs) or 'unknown'} ({verdict.how}); {verdict.decision}"
    if verdict.warnings:
        return StepWarning(f"{shown}. " + " ".join(verdict.warnings))
    return shown


def pin_torch(run: Run, step: Step) -> str:
    p = run.plan
    version = keys.current_torch(p)
    if not version:
        raise StepFailed(
            "torch is not installed in the venv, nothing to pin", hint="re-run `mw-env bootstrap`"
        )
    files = keys.expected_pins(p, version)
    pinmod.write_files(files)
    return f"torch=={version}"


def install_extras(run: Run, step: Step) -> str:
    p = run.plan
    before = keys.current_torch(p)
    res = run.command(step, step.command or (), timeout=3600)
    if not res.ok:
        raise StepFailed(
            f"installing the project's extras failed (exit {res.returncode}): {_last_error(res.output)}",
            hint=_hint_for(res.output, extras=True),
        )
    after = keys.current_torch(p)
    if after != before:
        raise StepFailed(
            f"installing the extras changed torch from {before} to {after}",
            hint="a constraint file was ignored; report this with the uv output above",
        )
    repaired = _check_installed(run, step)  # a package linked from a damaged cache entry: repaired here
    run.state.mark(step.id, "done", keys.extras_key(p, after or ""))
    return repaired


def repair_files(run: Run, step: Step) -> str:
    """The packages (torch's aside: its own step's) whose installed files differ from their RECORD, reinstalled
    exactly (provision/repair.py)."""
    return _check_installed(run, step) or "nothing damaged"


def _check_installed(run: Run, step: Step) -> str:
    p = run.plan
    family = repair.torch_family(p)
    scan = integrity.scan_venv(p.build_venv)
    run.fingerprint = scan.fingerprint
    damaged = repair.other_damage(scan, p)
    if not damaged:
        return ""
    known = {integrity.canonical(d.name): d for d in damaged}
    return repair.after_install(
        step,
        p,
        [d.name for d in damaged if integrity.canonical(d.name) not in family],
        run_command=lambda argv: run.command(step, argv, timeout=600),
        reinstall=lambda names: run.command(
            step, repair.repair_command(p, tuple(known[integrity.canonical(n)] for n in names)), timeout=3600
        ),
    )


def write_env(run: Run, step: Step) -> str:
    p = run.plan
    bv = p.build_venv
    write_atomic(bv / "mw-env.env", keys.env_text(p))
    pinmod.patch_activate(bv, p.venv)
    version = keys.current_torch(p) or "?"
    old = None
    try:
        old = read_record(bv)
    except MwEnvError:
        old = None  # a corrupt record is rewritten
    import mw_env

    record = VenvRecord(
        profile=p.profile,
        torch_requirement=f"torch=={version}",
        torch_version=version,
        torch_build=p.build,
        torch_index=_torch_origin(run, old),
        python=venvinfo.venv_python_version(bv) or "?",
        env=dict(p.runtime_env),
        venv=str(p.venv),
        adopted=bool(p.adopted),
        project=" ".join(p.project_args),
        extras=p.options.extras if p.options else (),
        constraints_file=str(p.venv / (pinmod.OVERRIDES_FILE if p.adopted else pinmod.CONSTRAINTS_FILE)),
        created=old.created if old else now(),
        updated=now(),
        mw_env_version=mw_env.__version__,
        torch_source=(p.lock.meta.torch_source or p.torch_source) if p.lock is not None else p.torch_source,
        wheel_archs=p.wheel.archs if p.wheel else (),
        wheel_archs_how=p.wheel.how if p.wheel else "",
        arch_decision=p.wheel.decision if p.wheel else "",
        device_packages=tuple(d for d in p.device_packages if venvinfo.installed_version(bv, d)),
    )
    write_record(bv, record)
    run.state.mark(step.id, "done", keys.env_key(p, version))
    return f"{len(p.runtime_env)} variable(s): {', '.join(p.runtime_env) or 'none'}"


def _torch_origin(run: Run, old: VenvRecord | None) -> str | None:
    """The wheel path or index URL torch was installed from (for the record and the doctor's network check)."""
    p = run.plan
    if p.lock is not None:
        return p.lock.meta.torch_from or None
    if p.torch and p.torch.origin != "installed":
        return p.torch.location
    if old and old.torch_index:
        return old.torch_index
    # Installed by an earlier, interrupted run that never reached this step: the torch step recorded it.
    return (run.state.steps.get("torch") or {}).get("location") or None


def swap_venv(run: Run, step: Step) -> str:
    """Two renames in the venv's own folder (a symbolic link's target: the link is left as it is and leads to
    the new venv), then the old copy removed."""
    p = run.plan
    real, old = venvinfo.real_venv(p.venv), venvinfo.old_path(p.venv)
    _remove(old)
    if os.path.lexists(real):
        os.rename(real, old)
    os.rename(p.build_venv, real)  # same folder: atomic
    _remove(old)
    run.plan = dataclasses.replace(p, build_venv=p.venv)
    run.state = State.load(p.venv)
    return f"{p.venv} replaced" + (f" (its folder {real})" if real != p.venv.absolute() else "")


def _remove(path: Path) -> None:
    """A folder removed, or a symbolic link in its place unlinked (rmtree refuses a link: issue 40's second
    --recreate of a symlinked venv failed forever with "Cannot call rmtree on a symbolic link")."""
    if os.path.islink(path):
        os.unlink(path)
    elif os.path.lexists(path):
        shutil.rmtree(path, ignore_errors=True)


def run_doctor(run: Run, step: Step) -> str | StepWarning:
    p = run.plan
    if run.doctor is None:
        return StepWarning("the doctor is not available in this installation; run `mw-env doctor` later")
    ok, report = run.doctor(p.venv)
    run.doctor_report = report
    if not ok:
        raise StepFailed(
            "the doctor found problems (see its report)",
            hint="fix what it names, then `mw-env doctor`; the venv itself is complete",
        )
    run.state.mark(step.id, "done", keys.doctor_key(p, keys.current_torch(p)))
    return ""


def recover_swap(venv: Path) -> None:
    """Finish or undo a swap that was killed between its two renames (the old venv is never lost), and clear
    what an earlier mw-env's swap of a symlinked venv left beside the link (it renamed the link itself)."""
    real, old = venvinfo.real_venv(venv), venvinfo.old_path(venv)
    if os.path.lexists(old) and not os.path.lexists(real):
        new = venvinfo.build_path(venv)
        if new.exists() and (new / "mw-env.json").exists():
            os.rename(new, real)
            _remove(old)
        else:
            os.rename(old, real)
    elif os.path.lexists(old):
        _remove(old)
    link = Path(venv).expanduser().absolute()
    if link != real:  # the names an older swap used beside the link: a link to the old venv, a 1 GB build
        stale_old = link.parent / f".{link.name}.mw-env-old"
        if os.path.islink(stale_old):
            os.unlink(stale_old)
        stale_new = link.parent / f".{link.name}.mw-env-new"
        if stale_new.is_dir() and not stale_new.is_symlink() and (stale_new / STATE_FILE).exists():
            shutil.rmtree(stale_new, ignore_errors=True)


def _last_error(output: str) -> str:
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith(("error:", "ERROR:")):
            return ln.split(":", 1)[1].strip()
    return lines[-1] if lines else "no output"


def _hint_for(output: str, *, extras: bool = False) -> str:
    low = output.lower()
    if "invalid package format" in low or "failed to read from zip file" in low:
        return (
            "a wheel file is damaged (truncated, or not a zip): uv's lines above name it; copy it again from "
            "where it came, or remove it from the wheelhouse"
        )
    if "no space left" in low:
        return "the disk is full: free space or use --venv / UV_CACHE_DIR on a bigger disk; re-run to resume"
    if "dns error" in low or "failed to lookup address" in low or "name or service not known" in low:
        return (
            "DNS failed: check the container's network and firewall (OpenSnitch, proxies: HTTPS_PROXY), or "
            "install from a wheelhouse with --find-links DIR [--offline]; re-run to resume"
        )
    if "connection refused" in low or "timed out" in low or "operation timed out" in low:
        return "the connection was blocked or timed out: check firewalls/proxies, or use --find-links DIR --offline"
    if "no solution found" in low or "unsatisfiable" in low:
        return (
            "the requirements cannot be met with torch pinned: a package needs another torch than this "
            "profile's. Relax that package, or choose another profile/source; re-run to resume"
            if extras
            else "no torch of this build matches: check --torch-index/--find-links"
        )
    return "see the output above; fix the cause and re-run `mw-env bootstrap` (finished steps are kept)"
