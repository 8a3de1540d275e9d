"""The bootstrap plan: named, ordered steps from (profile, options), each knowing if it is already done.

    preflight -> uv -> venv -> torch -> verify-torch -> pin-torch -> extras -> env -> [swap] -> doctor

torch is installed FIRST from the profile's source (or a wheelhouse holding that build), verified, then
pinned, so that the project's extras resolve against the installed torch and can never swap it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from mw_env.errors import InputError
from mw_env.provision import uv as uvmod
from mw_env.provision.choose import (
    AdoptCandidate,
    Choice,
    Interpreter,
    TorchChoice,
    choose,
    find_image_torch,
    image_pythons,
    version_fits,
)
from mw_env.provision.model import DISK_NEED, BootstrapOptions, GiB, Plan, Step, TorchSourceLike
from mw_env.provision.state import State
from mw_env.provision.stepdefs import (
    _torch_key,
    build_steps,
    current_torch,
    doctor_key,
    env_key,
    env_text,
    extras_key,
    verify_key,
)
from mw_env.provision.venvinfo import (
    ADOPT_PTH,
    adopted_site,
    build_path,
    free_bytes,
    installed_version,
    project_args,
    site_packages,
    venv_python_version,
)
from mw_env.provision.wheelhouse import discover

__all__ = [
    "ADOPT_PTH",
    "DISK_NEED",
    "BootstrapOptions",
    "GiB",
    "Plan",
    "Step",
    "build_path",
    "current_torch",
    "doctor_key",
    "env_key",
    "env_text",
    "extras_key",
    "free_bytes",
    "installed_version",
    "plan",
    "replace",
    "site_packages",
    "venv_python_version",
    "verify_key",
]


# -- the plan --------------------------------------------------------------------------------------------


def plan(
    *,
    profile: str,
    torch: TorchSourceLike,
    runtime_env: Mapping[str, str],
    options: BootstrapOptions,
    env: Mapping[str, str] | None = None,
    companions: tuple[str, ...] = (),
) -> Plan:
    """The ordered steps for this bootstrap; nothing is changed on disk."""
    env = dict(os.environ if env is None else env)
    venv = Path(options.venv).expanduser().absolute()
    if venv.exists() and not venv.is_dir():
        raise InputError(f"--venv {venv} exists and is not a folder", hint="pass another --venv path")
    if venv.is_dir() and any(venv.iterdir()) and not (venv / "pyvenv.cfg").exists():
        raise InputError(
            f"--venv {venv} is a non-empty folder that is not a virtual environment",
            hint="pass another --venv path; bootstrap never deletes a folder it did not make",
        )
    build_venv = build_path(venv) if options.recreate else venv
    sources = discover(env=env, find_links=options.find_links)
    uv = uvmod.find_uv(env)
    proj_args, requires_python, proj_key = project_args(options.project, options.extras)
    index_url = options.torch_index or torch.index_url
    local_tag = torch.local_tag or ""
    state = State.load(build_venv)
    warnings: list[str] = []

    # An existing venv keeps its interpreter: no discovery, so a no-op re-run stays fast.
    existing = venv_python_version(build_venv)
    installed = installed_version(build_venv, "torch")
    adopted_from = adopted_site(build_venv)
    adoptable: AdoptCandidate | None = None
    adopted: AdoptCandidate | None = None
    choice: Choice
    torch_ok = bool(installed) and installed.endswith(local_tag) and version_fits(installed, torch.version)
    if existing and (build_venv / "bin" / "python").exists():
        _refuse_other_profile(build_venv, profile, torch.build, installed, torch_ok)
        py = Interpreter(path=str(build_venv / "bin" / "python"), version=existing)
        if options.python_explicit and not _same_python(options.python, existing):
            warnings.append(
                f"{build_venv} has Python {existing}, not {options.python}: keeping it "
                "(--recreate builds a new venv with the requested one)"
            )
        if torch_ok and state.is_done("torch", _torch_key(torch, local_tag)):
            choice = Choice(py, TorchChoice(f"torch=={installed}", "installed", str(build_venv)))
        elif adopted_from:
            adopted = _adopted_from_venv(build_venv, installed)
            version = adopted.version if adopted else "?"
            choice = Choice(
                py, TorchChoice(f"torch=={version}", "image", adopted_from, image_version=version)
            )
        else:
            choice = choose(
                uv=uv,
                env=env,
                request=py.path,  # the venv's own interpreter: it decides which wheels fit
                explicit=True,
                build=torch.build,
                version_spec=torch.version,
                local_tag=local_tag,
                index_url=index_url,
                sources=sources,
                offline=options.offline or sources.no_index,
                requires_python=requires_python,
            )
            choice = replace(choice, python=py)
    else:
        if options.adopt is not False:
            cands = [c for c in find_image_torch(image_pythons(env), env) if c.build == torch.build]
            cand = cands[0] if cands else None
            if cand and options.adopt:
                adopted = cand
                if not version_fits(cand.version, torch.version):
                    warnings.append(
                        f"the image's torch {cand.version} is outside the profile's {torch.version}"
                    )
            elif cand:
                adoptable = cand
        if adopted:
            choice = Choice(
                adopted.python,
                TorchChoice(
                    f"torch=={adopted.version}", "image", adopted.site, image_version=adopted.version
                ),
            )
        else:
            choice = choose(
                uv=uv,
                env=env,
                request=options.python,
                explicit=options.python_explicit,
                build=torch.build,
                version_spec=torch.version,
                local_tag=local_tag,
                index_url=index_url,
                sources=sources,
                offline=options.offline or sources.no_index,
                requires_python=requires_python,
            )
    warnings += choice.warnings
    plan_ = Plan(
        profile=profile,
        venv=venv,
        build_venv=build_venv,
        steps=(),
        build=torch.build,
        local_tag=local_tag,
        version_spec=torch.version,
        python=choice.python,
        torch=choice.torch,
        uv=uv,
        sources=sources,
        runtime_env=dict(runtime_env),
        project_args=proj_args,
        companions=companions,
        warnings=tuple(warnings),
        problem=choice.problem,
        problem_hint=choice.problem_hint,
        adoptable=adoptable,
        adopted=adopted,
        options=options,
        proj_key=proj_key,
        env=env,
    )
    plan_ = replace(plan_, disk_need=_disk_need(plan_, torch_ok))
    return replace(plan_, steps=tuple(build_steps(plan_, state, torch)))


def _refuse_other_profile(
    venv: Path, profile: str, build: str, installed: str | None, torch_ok: bool
) -> None:
    """A finished venv of another profile/build is never rebuilt in place: that would swap a working torch."""
    from mw_env.provision.record import read_record

    try:
        rec = read_record(venv)
    except InputError:
        return  # a corrupt record: the env step rewrites it
    if rec is None or (rec.profile == profile and rec.torch_build == build) or torch_ok:
        return
    raise InputError(
        f"{venv} was bootstrapped for profile {rec.profile} (torch {rec.torch_version}, {rec.torch_build}); "
        f"building profile {profile} ({build}) in place would replace its working torch",
        hint="pass --recreate (the new venv is built beside it and replaces it only when complete), "
        "or another --venv",
    )


def _same_python(request: str, version: str) -> bool:
    return (os.sep not in request and version.startswith(request.rstrip(".") + ".")) or version == request


def _adopted_from_venv(venv: Path, installed: str | None) -> AdoptCandidate | None:
    site = adopted_site(venv)
    if not site:
        return None
    from mw_env.provision.record import read_record

    try:
        rec = read_record(venv)
    except InputError:
        rec = None
    version = installed or (rec.torch_version if rec else None) or "?"
    return AdoptCandidate(
        python=Interpreter(str(venv / "bin" / "python"), venv_python_version(venv) or "?"),
        version=version,
        site=site,
        hip=None,
        cuda=None,
    )


def _disk_need(p: Plan, torch_ok: bool) -> int:
    if torch_ok or (p.torch and p.torch.origin in ("image", "installed")):
        return 512 * 1024**2
    if p.torch and p.torch.wheel is not None:
        return 3 * p.torch.wheel.path.stat().st_size + 512 * 1024**2
    return DISK_NEED.get(p.build, 4 * GiB)
