"""The bootstrap steps of locks: install a venv from a lock (`--lock`), and write (or check) the venv's lock.

`run` is a provision.steps.Run, seen through the StepRun protocol (steps imports this module, and the layout
allows no cycle).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from mw_env.base.atomic import write_text_atomic as write_atomic
from mw_env.base.errors import MwEnvError, StepFailed
from mw_env.base.shellquote import sh
from mw_env.provision import keys
from mw_env.provision.events import StepWarning
from mw_env.venv import venvinfo

if TYPE_CHECKING:
    from mw_env.provision.model import Plan, Step
    from mw_env.provision.state import State
    from mw_env.sources.uv import CommandRun


class StepRun(Protocol):
    """What the lock steps need of provision.steps.Run."""

    plan: Plan
    state: State
    uv: str | None

    def command(self, step: Step, argv: tuple[str, ...], *, timeout: float | None = None) -> CommandRun: ...


def install_lock(run: StepRun, step: Step) -> str:
    """`bootstrap --lock`: the validated lock's text (never the file again: it may have changed since it was
    checked) goes into the venv, and uv installs exactly that."""
    from mw_env.venv.lock import LOCK_FILE
    from mw_env.venv.lock.rebuild import install_failure

    p = run.plan
    assert p.lock is not None  # called only for `bootstrap --lock` (steps.install_torch)
    write_atomic(p.build_venv / LOCK_FILE, p.lock.text)
    res = run.command(step, step.command or (), timeout=3600)
    if not res.ok:
        raise install_failure(res.output, p.lock, returncode=res.returncode)
    run.state.mark(step.id, "done", keys.torch_key(p), location=p.lock.meta.torch_from)
    return venvinfo.installed_version(p.build_venv, "torch") or ""


def lock_step(run: StepRun, step: Step) -> str | StepWarning:
    """Every finished venv gets its lock (or, rebuilt from one, is checked against it)."""
    from mw_env.venv.lock import LOCK_FILE
    from mw_env.venv.lock.drift import compare, installed

    p = run.plan
    bv = p.build_venv
    version = keys.current_torch(p)
    if p.lock is not None:
        drift = compare(p.lock, installed(bv))
        if drift.any:
            raise StepFailed(
                "the venv differs from the lock after installing it: " + "; ".join(drift.lines()),
                hint="the project's own install changed a package (it runs with --no-deps); report this",
            )
        run.state.mark(step.id, "done", keys.lock_key(p, version))
        return f"{len(p.lock.packages)} packages as locked"
    if p.adopted:
        run.state.mark(step.id, "done", keys.lock_key(p, version))
        return "no lock: torch lives in the base image, outside the venv (the image's Dockerfile pins it)"
    from mw_env.venv.lock.make import lock_venv

    torch_index = p.torch.location if p.torch and p.torch.origin == "index" else None
    try:
        lock = lock_venv(
            venv=bv,
            selection=None,
            env=p.env,
            uv=run.uv,
            offline=bool(p.options and p.options.offline),
            torch_index=torch_index,
            target=p.lock_target,
            companions=(*p.companions, *p.device_packages),  # from the torch index, like torch
            source_args=p.sources.uv_args(),
            wheels=tuple(w for w in [wheelhouse_torch(p)] if w is not None),
        )
    except MwEnvError as exc:
        # The venv works; only its lock is missing. One line (uv's whole cause is `mw-env lock`'s to say), and
        # the lock of what the venv held before is set aside: left in place it would be drift to the doctor,
        # offered for a `--recreate` that removes what this run installed (issue 40). A re-run does not
        # retry: `mw-env lock` does, once the cause is fixed.
        run.state.mark(step.id, "done", keys.lock_key(p, version))
        first = exc.message.split(": ", 1)[0]
        aside = set_aside_stale_lock(bv)
        note = f"; the previous lock is kept as {aside.name}" if aside is not None else ""
        return StepWarning(
            f"no lock written: {first}{note} (`mw-env lock --venv {sh(p.venv)}` says why and what to run)"
        )
    write_atomic(bv / LOCK_FILE, lock.text)
    run.state.mark(step.id, "done", keys.lock_key(p, version))
    return f"{len(lock.packages)} packages, sha256 {lock.sha256[:12]}"


def wheelhouse_torch(p: Plan) -> Path | None:
    """The wheelhouse file a plan installs torch from, whose lock entry mw-env writes (venv/lock/localwheel.py)
    from a hash begun when the run starts (steps.hash_for_the_lock); None for an index, an image or a lock."""
    if p.lock is not None or p.torch is None or p.torch.origin != "wheelhouse" or p.torch.wheel is None:
        return None
    return p.torch.wheel.path


def set_aside_stale_lock(venv: Path) -> Path | None:
    """Move the venv's lock to STALE_LOCK (it describes what the venv held before); None without one."""
    from mw_env.venv.lock import LOCK_FILE, STALE_LOCK

    lock = venv / LOCK_FILE
    try:
        text = lock.read_text(encoding="utf-8")
    except OSError:
        return None
    aside = venv / STALE_LOCK
    write_atomic(aside, text)
    lock.unlink(missing_ok=True)
    return aside
