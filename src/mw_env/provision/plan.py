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
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from mw_env.base.errors import InputError, VenvRefused
from mw_env.base.textsafe import redact
from mw_env.profiles.disk import disk_need
from mw_env.provision.archtruth import NO_KERNELS, GpuKernels, WheelVerdict, env_with, judge, policy_for
from mw_env.provision.choose import Choice, ChoiceRequest, Problem, TorchChoice, supported
from mw_env.provision.model import BootstrapOptions, Plan, TorchSourceLike
from mw_env.provision.repair import family_names
from mw_env.provision.state import State
from mw_env.provision.table import build_steps
from mw_env.provision.torchindex import config_notes, step_config
from mw_env.provision.torchpick import IndexPick, pick_from_index
from mw_env.provision.venvchoice import checked_venv, start_from
from mw_env.sources import uv as uvmod
from mw_env.sources.wheelhouse import Sources, discover, local_dir
from mw_env.venv.integrity import scan_venv
from mw_env.venv.venvinfo import build_path, installed_version, project_args

if TYPE_CHECKING:
    from mw_env.profiles.model import Selection

# What tests and callers import from here besides the two planners.
__all__ = ["BootstrapOptions", "Plan", "build_path", "installed_version", "plan", "plan_for"]


# -- the plan --------------------------------------------------------------------------------------------


def plan_for(
    *,
    selection: Selection,
    options: BootstrapOptions,
    env: Mapping[str, str],
    all_devices: bool = False,
    refused_as_warning: bool = False,
) -> Plan:
    """The one way a command gets a bootstrap plan: for the profile `selection` chose (the torch a lock names
    when `options.lock` is set), its GPU kernels (every GPU's with `all_devices`), its warnings leading the
    plan's and its reason. `refused_as_warning` (a dry run, which changes nothing): a venv a real run would
    refuse is planned as `--recreate` would build it, the refusal the first warning."""
    torch: TorchSourceLike = selection.torch
    if options.lock is not None:
        from mw_env.venv.lock.rebuild import torch_source_for

        torch = torch_source_for(options.lock, selection.torch)
    kernels = GpuKernels(
        extras=selection.torch_extras(all_devices=all_devices),
        packages=() if all_devices else selection.device_packages,
        policy=policy_for(selection),
    )

    def planned(opts: BootstrapOptions, first: tuple[str, ...] = ()) -> Plan:
        return plan(
            profile=selection.profile.name,
            torch=torch,
            runtime_env=dict(selection.env),
            options=opts,
            env=env,
            companions=selection.torch.companions,
            kernels=kernels,
            reason=redact(selection.reason),
            leading_warnings=(*first, *selection.warnings),
        )

    try:
        return planned(options)
    except VenvRefused as exc:
        if not refused_as_warning:
            raise
        refused = (
            f"a real run would refuse: {exc.message} (hint: {exc.hint}); below: what --recreate would do"
        )
        return planned(replace(options, recreate=True), (refused,))


def plan(
    *,
    profile: str,
    torch: TorchSourceLike,
    runtime_env: Mapping[str, str],
    options: BootstrapOptions,
    env: Mapping[str, str] | None = None,
    companions: tuple[str, ...] = (),
    kernels: GpuKernels = NO_KERNELS,
    reason: str = "",
    leading_warnings: tuple[str, ...] = (),
) -> Plan:
    """The ordered steps for this bootstrap; nothing is changed on disk. Bad input raises InputError; any
    other problem found while planning is the plan's typed `problem` (the preflight step stops on it)."""
    env = dict(os.environ if env is None else env)
    venv = checked_venv(options.venv, recreate=options.recreate)
    build_venv = build_path(venv) if options.recreate else venv
    request, proj_args, proj_key = _request(options, torch, env)
    state = State.load(build_venv)
    scan = scan_venv(build_venv)  # the installed files, read once per plan (venv/integrity.py)
    damaged = bool(scan.of(family_names(companions, kernels.packages)))
    picked = start_from(build_venv, profile, torch, request, state, options, kernels.extras, damaged)
    choice = _for_lock(picked.choice, options)
    if choice.problem and choice.problem.input:
        raise choice.problem.error()
    # The index's word (issue 17): the exact torch it lists; and on a re-run the installed wheel's own
    # override decision (as when it was installed).
    choice, index_pick = _pick_from_index(choice, torch, request.local_tag, kernels.packages, request.env)
    wheel = _installed_wheel(kernels, build_venv) if picked.torch_ok else None
    warnings = [*picked.warnings, *choice.warnings, *_index_not_contacted(options, choice, request.sources)]
    torch_indexes, torch_uv = step_config(choice.torch, request, torch)
    disk = disk_need(torch, all_devices=bool(kernels.extras) and not kernels.packages)
    there = picked.torch_ok or (choice.torch and choice.torch.origin in ("image", "installed"))
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
        runtime_env=env_with(runtime_env, wheel.override) if wheel else dict(runtime_env),
        project_args=proj_args,
        companions=companions,
        torch_extras=kernels.extras,
        device_packages=kernels.packages,
        arch_policy=kernels.policy,
        wheel=wheel,
        index_pick=index_pick,
        reason=reason,
        # Messages only (the steps keep the real URL): an index URL's credentials never reach a terminal.
        warnings=tuple(dict.fromkeys((*leading_warnings, *(redact(w) for w in warnings)))),
        notes=tuple(redact(n) for n in (*choice.notes, *config_notes(torch_uv))),
        problem=_redacted(choice.problem),
        torch_index=request.index_url,
        torch_source=getattr(torch, "id", None),
        torch_indexes=torch_indexes,
        torch_uv=torch_uv,
        adoptable=picked.adoptable,
        adopted=picked.adopted,
        # What the source installs (profiles/disk.py, the doctor's figure too); the preflight's need is that,
        # unless torch is already there.
        disk=disk,
        disk_need=512 * 1024**2 if there else disk.need_bytes,
        options=options,
        proj_key=proj_key,
        env=env,
    )
    return replace(plan_, steps=tuple(build_steps(plan_, state, scan)))


def _for_lock(choice: Choice, options: BootstrapOptions) -> Choice:
    """From a lock (`--lock`), which names every file, the profile's torch source is not consulted: neither its
    torch choice nor its problems (an unreachable index, no wheel in the wheelhouse) are this bootstrap's."""
    if options.lock is None or choice.python is None or (choice.problem and choice.problem.input):
        return choice
    return replace(choice, torch=None, problem=None, warnings=())


def _installed_wheel(kernels: GpuKernels, build_venv: Path) -> WheelVerdict | None:
    """An AMD GPU's installed torch judged by its wheel's own archs (a CPU or NVIDIA plan never asks)."""
    if kernels.policy is None:
        return None
    from mw_env.venv.wheelarch import read_wheel_archs

    return judge(kernels.policy, read_wheel_archs(build_venv))


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


def _redacted(problem: Problem | None) -> Problem | None:
    if problem is None:
        return None
    return Problem(redact(problem.message), redact(problem.hint) if problem.hint else None, problem.input)


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
