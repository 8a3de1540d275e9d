"""The bootstrap plan: named, ordered steps from (profile, options), each knowing if it is already done.

    preflight -> uv -> venv -> torch -> verify-torch -> pin-torch -> extras -> env -> lock -> [swap] -> doctor

(the steps themselves: provision/table.py)

torch is installed FIRST from the profile's source (or a wheelhouse holding that build), verified, then
pinned, so that the project's extras resolve against the installed torch and can never swap it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mw_env.base.errors import InputError, VenvRefused
from mw_env.base.textsafe import redact
from mw_env.profiles.disk import disk_need
from mw_env.provision.archtruth import NO_KERNELS, GpuKernels, env_with, judge
from mw_env.provision.choose import (
    AdoptCandidate,
    Choice,
    ChoiceRequest,
    Interpreter,
    Problem,
    TorchChoice,
    choose,
    find_image_torch,
    image_pythons,
    supported,
    version_fits,
)
from mw_env.provision.keys import (
    current_torch,
    doctor_key,
    env_key,
    env_text,
    extras_key,
    torch_fits,
    torch_hash,
    verify_key,
)
from mw_env.provision.model import BootstrapOptions, GiB, Plan, Step, TorchSourceLike
from mw_env.provision.state import State
from mw_env.provision.table import build_steps
from mw_env.provision.torchindex import plan_fields as torch_step_fields
from mw_env.provision.torchpick import IndexPick, pick_from_index
from mw_env.sources import uv as uvmod
from mw_env.sources.wheelhouse import Sources, discover, local_dir
from mw_env.venv.venvinfo import (
    ADOPT_PTH,
    adopted_site,
    build_path,
    free_bytes,
    installed_version,
    project_args,
    site_packages,
    venv_python_version,
)

__all__ = [
    "ADOPT_PTH",
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
    kernels: GpuKernels = NO_KERNELS,
) -> Plan:
    """The ordered steps for this bootstrap; nothing is changed on disk. Bad input raises InputError; any
    other problem found while planning is the plan's typed `problem` (the preflight step stops on it)."""
    env = dict(os.environ if env is None else env)
    venv = _checked_venv(options.venv)
    build_venv = build_path(venv) if options.recreate else venv
    request, proj_args, proj_key = _request(options, torch, env)
    state = State.load(build_venv)
    installed = installed_version(build_venv, "torch")
    torch_ok = torch_fits(build_venv, installed, request.local_tag, torch.version)
    if venv_python_version(build_venv) and (build_venv / "bin" / "python").exists():
        _refuse_other_profile(build_venv, profile, torch, installed, torch_ok)
        picked = _choose_in_venv(build_venv, request, state, installed, torch_ok, options, kernels.extras)
    else:
        picked = _choose_fresh(request, options)
    choice = _for_lock(picked.choice, options)
    if choice.problem and choice.problem.input:
        raise choice.problem.error()
    choice, truth = _truth(choice, torch, request, kernels, build_venv, torch_ok and installed, runtime_env)
    warnings = [*picked.warnings, *choice.warnings, *_index_not_contacted(options, choice, request.sources)]
    plan_ = Plan(
        profile=profile,
        venv=venv,
        build_venv=build_venv,
        steps=(),
        build=torch.build,
        local_tag=request.local_tag,
        version_spec=torch.version,
        python=choice.python,
        torch=choice.torch,
        uv=request.uv,
        sources=request.sources,
        runtime_env=dict(truth.pop("runtime_env", runtime_env)),
        project_args=proj_args,
        companions=companions,
        **truth,
        # Messages only (the steps keep the real URL): an index URL's credentials never reach a terminal.
        warnings=tuple(redact(w) for w in warnings),
        notes=tuple(redact(n) for n in choice.notes),
        problem=_redacted(choice.problem),
        torch_index=request.index_url,
        torch_source=getattr(torch, "id", None),
        adoptable=picked.adoptable,
        adopted=picked.adopted,
        options=options,
        proj_key=proj_key,
        env=env,
    )
    plan_ = _with_disk(plan_, torch, kernels, torch_ok)
    plan_ = replace(plan_, **torch_step_fields(choice.torch, request, torch, plan_.notes))
    return replace(plan_, steps=tuple(build_steps(plan_, state)))


def _for_lock(choice: Choice, options: BootstrapOptions) -> Choice:
    """From a lock (`--lock`), which names every file, the profile's torch source is not consulted: neither its
    torch choice nor its problems (an unreachable index, no wheel in the wheelhouse) are this bootstrap's."""
    if options.lock is None or choice.python is None or (choice.problem and choice.problem.input):
        return choice
    return replace(choice, torch=None, problem=None, warnings=())


def _truth(
    choice: Choice,
    torch: TorchSourceLike,
    request: ChoiceRequest,
    kernels: GpuKernels,
    build_venv: Path,
    installed: str | bool | None,  # the venv's torch, when it is already the profile's
    runtime_env: Mapping[str, str],
) -> tuple[Choice, dict[str, Any]]:
    """The index's and the wheel's word (issue 17): the exact torch the index lists, and, on a re-run, the
    installed wheel's own override decision (as when it was installed). The Plan fields they fill."""
    choice, pick = _pick_from_index(choice, torch, request.local_tag, kernels.packages, request.env)
    fields: dict[str, Any] = {
        "torch_extras": kernels.extras,
        "device_packages": kernels.packages,
        "arch_policy": kernels.policy,
        "index_pick": pick,
    }
    if (
        kernels.policy is not None and installed
    ):  # an AMD GPU's torch: its wheel's archs (a CPU plan never asks)
        from mw_env.venv.wheelarch import read_wheel_archs

        verdict = judge(kernels.policy, read_wheel_archs(build_venv))
        fields["wheel"] = verdict
        fields["runtime_env"] = env_with(runtime_env, verdict.override)
    return choice, fields


def _pick_from_index(
    choice: Choice,
    torch: TorchSourceLike,
    local_tag: str,
    device_packages: tuple[str, ...],
    env: Mapping[str, str],
) -> tuple[Choice, IndexPick | None]:
    """Truth from the index: the exact torch it serves in the profile's range (and the download it states);
    an index that lists none, or answers garbage, is the plan's problem, said before anything is built."""
    t = choice.torch
    if t is None or t.origin != "index" or not t.location or choice.problem:
        return choice, None
    pick = pick_from_index(
        t.location,
        version_spec=torch.version,
        local_tag=local_tag,
        python=choice.python.minor if choice.python else None,
        device_packages=device_packages,
        env=env,
    )
    if (
        pick.version is None and pick.problem is None
    ):  # not listable here (credentials): uv resolves the range
        return replace(choice, notes=(*choice.notes, pick.note)), pick
    if pick.version is None:
        return replace(choice, problem=Problem(pick.problem or "no torch listed", pick.hint)), pick
    notes = (*choice.notes, pick.note) if pick.note else choice.notes
    return replace(choice, torch=replace(t, requirement=f"torch=={pick.version}"), notes=notes), pick


def _request(
    options: BootstrapOptions, torch: TorchSourceLike, env: dict[str, str]
) -> tuple[ChoiceRequest, tuple[str, ...], str]:
    """What `choose` is asked (with the project's install arguments and key). An explicit --python the
    project cannot use is refused here, before any lookup."""
    proj_args, requires_python, proj_key = project_args(options.project, options.extras)
    if options.python_explicit:
        _check_python_request(options.python, requires_python)
    sources = discover(env=env, find_links=options.find_links)
    request = ChoiceRequest(
        uv=uvmod.find_uv(env),
        env=env,
        request=options.python,
        explicit=options.python_explicit,
        build=torch.build,
        version_spec=torch.version,
        local_tag=torch.local_tag or "",
        index_url=options.torch_index or torch.index_url,
        sources=sources,
        offline=options.offline or sources.no_index,
        requires_python=requires_python,
    )
    return request, proj_args, proj_key


def _index_not_contacted(options: BootstrapOptions, choice: Choice, sources: Sources) -> list[str]:
    if not (
        options.torch_index and choice.torch and choice.torch.origin == "wheelhouse" and choice.reach is None
    ):
        return []
    return [
        f"--torch-index {options.torch_index} is not contacted: {_wheelhouse_of(choice.torch, sources)} "
        f"already holds {choice.torch.requirement} (wheelhouse first); remove it from the find-links to "
        "install from the index"
    ]


@dataclass(frozen=True)
class _Picked:
    choice: Choice
    warnings: tuple[str, ...] = ()
    adoptable: AdoptCandidate | None = None  # an image torch the caller may offer to reuse
    adopted: AdoptCandidate | None = None


def _redacted(problem: Problem | None) -> Problem | None:
    if problem is None:
        return None
    return Problem(redact(problem.message), redact(problem.hint) if problem.hint else None, problem.input)


def _link_loop(path: Path) -> bool:
    """The path (or a folder on its way) is a link loop: `exists()` says False, yet nothing can be made there."""
    import errno

    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def _checked_venv(path: Path) -> Path:
    from mw_env.base.shellquote import venv_path_problem

    venv = Path(path).expanduser().absolute()
    if (problem := venv_path_problem(venv)) is not None:
        raise InputError(f"--venv {str(venv)!r}: {problem}", hint="pass a --venv path without it")
    if _link_loop(venv):
        raise InputError(
            f"--venv {venv}: a symbolic link loop", hint="fix or remove the link, or pass another --venv path"
        )
    if venv.exists() and not venv.is_dir():
        raise InputError(f"--venv {venv} exists and is not a folder", hint="pass another --venv path")
    if venv.is_dir() and any(venv.iterdir()) and not (venv / "pyvenv.cfg").exists():
        raise InputError(
            f"--venv {venv} is a non-empty folder that is not a virtual environment",
            hint="pass another --venv path; bootstrap never deletes a folder it did not make",
        )
    return venv


def _choose_in_venv(
    build_venv: Path,
    request: ChoiceRequest,
    state: State,
    installed: str | None,
    torch_ok: bool,
    options: BootstrapOptions,
    torch_extras: tuple[str, ...],
) -> _Picked:
    """An existing venv: its own interpreter (no discovery, so a no-op re-run stays fast), and its torch when
    that is still the profile's."""
    adopted_from = adopted_site(build_venv)
    foreign = not state.steps and not (build_venv / "mw-env.json").exists() and not adopted_from
    if installed and not torch_ok and foreign:
        # A venv mw-env never touched, holding someone's torch of another build: not ours to replace.
        tag = request.local_tag
        raise VenvRefused(
            f"{build_venv} is a venv mw-env did not make, and its torch {installed} is not the profile's "
            f"build ({request.build}{', ' + tag if tag else ''}); installing in place would replace it",
            hint="pass --recreate (a new venv is built beside it and replaces it only when complete), or "
            "another --venv",
        )
    py = Interpreter(path=str(build_venv / "bin" / "python"), version=venv_python_version(build_venv) or "?")
    warnings: tuple[str, ...] = ()
    if options.python_explicit and not _same_python(
        options.python, py.version, build_venv / "bin" / "python"
    ):
        warnings = (
            f"{build_venv} has Python {py.version}, not {options.python}: keeping it "
            "(--recreate builds a new venv with the requested one)",
        )
    key = torch_hash(request.build, request.version_spec, request.local_tag, torch_extras)
    if torch_ok and state.is_done("torch", key):
        return _Picked(Choice(py, TorchChoice(f"torch=={installed}", "installed", str(build_venv))), warnings)
    if adopted_from:
        adopted = _adopted_from_venv(build_venv, installed)
        version = adopted.version if adopted else "?"
        image = TorchChoice(f"torch=={version}", "image", adopted_from, image_version=version)
        return _Picked(Choice(py, image), warnings, adopted=adopted)
    # The venv's own interpreter decides which wheels fit.
    in_venv = replace(request, request=py.path, explicit=True)
    return _Picked(replace(choose(in_venv), python=py), warnings)


def _choose_fresh(request: ChoiceRequest, options: BootstrapOptions) -> _Picked:
    """A new venv: an image's torch of the profile's build when asked to adopt it, else `choose`."""
    if options.adopt is not False:
        cands = [
            c for c in find_image_torch(image_pythons(request.env), request.env) if c.build == request.build
        ]
        cand = cands[0] if cands else None
        if cand and options.adopt:
            warnings = (
                ()
                if version_fits(cand.version, request.version_spec)
                else (f"the image's torch {cand.version} is outside the profile's {request.version_spec}",)
            )
            image = TorchChoice(f"torch=={cand.version}", "image", cand.site, image_version=cand.version)
            return _Picked(Choice(cand.python, image), warnings, adopted=cand)
        if cand:
            return _Picked(choose(request), adoptable=cand)
    return _Picked(choose(request))


def _refuse_other_profile(
    venv: Path, profile: str, torch: TorchSourceLike, installed: str | None, torch_ok: bool
) -> None:
    """A finished venv of another profile/build/source is never rebuilt in place: that would swap a working
    torch (and a failed install would leave no working one)."""
    from mw_env.venv.record import read_record

    try:
        rec = read_record(venv)
    except InputError:
        return  # a corrupt record: the env step rewrites it
    source = getattr(torch, "id", None)
    same_source = not (rec and rec.torch_source and source) or rec.torch_source == source
    if rec is None or torch_ok or (rec.profile == profile and rec.torch_build == torch.build and same_source):
        return
    was = f"profile {rec.profile}" + (f", source {rec.torch_source}" if rec.torch_source else "")
    now = f"profile {profile}" + (f", source {source}" if source else "")
    raise VenvRefused(
        f"{venv} was bootstrapped for {was} (torch {rec.torch_version}, {rec.torch_build}); "
        f"building {now} ({torch.build}) in place would replace its working torch",
        hint="pass --recreate (the new venv is built beside it and replaces it only when complete), "
        "or another --venv",
    )


def _wheelhouse_of(torch: TorchChoice, sources: Sources) -> str:
    """`the wheelhouse /opt/wheels (from PIP_FIND_LINKS)` for the folder that holds the chosen wheel."""
    folder = Path(torch.location or "").parent
    for link in sources.find_links:
        local = local_dir(link)
        if local is not None and local.expanduser().absolute() == folder.absolute():
            return f"the wheelhouse {link} (from {sources.origins.get(link, 'the configuration')})"
    return f"the wheelhouse {folder}"


def _check_python_request(request: str, requires_python: str | None) -> None:
    """An explicit `--python 2.7` for a project that needs >=3.10 is bad input, refused before any lookup."""
    if os.sep in request or not re.fullmatch(r"\d+\.\d+(\.\d+)?", request.strip()):
        return  # a path or an implementation request ("pypy3.11"): checked once it is found
    if not supported(request.strip(), requires_python):
        raise InputError(
            f"--python {request}: the project needs Python {requires_python}",
            hint="pass a supported version (e.g. --python 3.12), or omit --python to use an available one",
        )


def _same_python(request: str, version: str, venv_python: Path | None = None) -> bool:
    """Whether the venv's interpreter is the one `--python` asks for: a version prefix, or a path that resolves
    to the same executable as the venv's bin/python (a path never equals a version string)."""
    if os.sep in request:
        return venv_python is not None and os.path.realpath(request) == os.path.realpath(venv_python)
    return version.startswith(request.rstrip(".") + ".") or version == request


def _adopted_from_venv(venv: Path, installed: str | None) -> AdoptCandidate | None:
    site = adopted_site(venv)
    if not site:
        return None
    from mw_env.venv.record import read_record

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


def _with_disk(p: Plan, torch: TorchSourceLike, kernels: GpuKernels, torch_ok: bool) -> Plan:
    """What the source installs (profiles/disk.py, the doctor's figure too) and the preflight's need: that,
    unless torch is already there."""
    disk = disk_need(torch, all_devices=bool(kernels.extras) and not kernels.packages)
    there = torch_ok or (p.torch and p.torch.origin in ("image", "installed"))
    return replace(p, disk=disk, disk_need=512 * 1024**2 if there else disk.need_bytes)
