"""What a bootstrap starts from: the --venv path checked, then the venv already there (its own Python, its torch
while that is still the profile's; refused where it is not ours to change) or a new one (an image's torch to adopt,
else `choose`). provision/plan.py asks here, then turns the answer into steps.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from mw_env.base.errors import InputError, VenvRefused
from mw_env.provision.choose import (
    AdoptCandidate,
    Choice,
    ChoiceRequest,
    Interpreter,
    TorchChoice,
    choose,
    find_image_torch,
    image_pythons,
    version_fits,
)
from mw_env.provision.keys import torch_fits, torch_hash
from mw_env.provision.model import BootstrapOptions, TorchSourceLike
from mw_env.provision.state import State
from mw_env.venv.venvinfo import adopted_site, installed_version, venv_python_version


@dataclass(frozen=True)
class Picked:
    choice: Choice
    warnings: tuple[str, ...] = ()
    adoptable: AdoptCandidate | None = None  # an image torch the caller may offer to reuse
    adopted: AdoptCandidate | None = None
    torch_ok: bool = False  # the venv holds a torch that is the profile's already


def start_from(
    build_venv: Path,
    profile: str,
    torch: TorchSourceLike,
    request: ChoiceRequest,
    state: State,
    options: BootstrapOptions,
    torch_extras: tuple[str, ...],
    damaged: bool = False,
) -> Picked:
    """The interpreter and torch this bootstrap starts from, for the venv at `build_venv` (there or not).
    `damaged`: the files of torch (or of what comes with it) differ from their RECORD (venv/integrity.py): such a
    torch is reinstalled from the profile's source, never kept as "installed"."""
    installed = installed_version(build_venv, "torch")
    torch_ok = torch_fits(build_venv, installed, request.local_tag, torch.version)
    if venv_python_version(build_venv) and (build_venv / "bin" / "python").exists():
        _refuse_other_profile(build_venv, profile, torch, installed, torch_ok)
        kept = (torch_ok, not damaged)
        picked = _choose_in_venv(build_venv, request, state, installed, kept, options, torch_extras)
    else:
        picked = _choose_fresh(request, options)
    return replace(picked, torch_ok=torch_ok)


def _link_loop(path: Path) -> bool:
    """The path (or a folder on its way) is a link loop: `exists()` says False, yet nothing can be made there."""
    import errno

    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def checked_venv(path: Path, *, recreate: bool = False) -> Path:
    from mw_env.base.errors import cwd_gone
    from mw_env.base.shellquote import venv_path_problem

    if (gone := cwd_gone()) is not None:  # uv and the venv's python would start in it
        raise gone
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
        from mw_env.venv.record import not_a_venv

        refused = not_a_venv(venv, recreate=recreate)
        if refused is not None:
            raise refused
    return venv


def _choose_in_venv(
    build_venv: Path,
    request: ChoiceRequest,
    state: State,
    installed: str | None,
    kept: tuple[bool, bool],
    options: BootstrapOptions,
    torch_extras: tuple[str, ...],
) -> Picked:
    """An existing venv: its own interpreter (no discovery, so a no-op re-run stays fast), and its torch when
    that is still the profile's and whole (`kept`: the two)."""
    torch_ok, whole = kept
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
    if torch_ok and whole and state.is_done("torch", key):
        return Picked(Choice(py, TorchChoice(f"torch=={installed}", "installed", str(build_venv))), warnings)
    if adopted_from:
        adopted = _adopted_from_venv(build_venv, installed)
        version = adopted.version if adopted else "?"
        image = TorchChoice(f"torch=={version}", "image", adopted_from, image_version=version)
        return Picked(Choice(py, image), warnings, adopted=adopted)
    # The venv's own interpreter decides which wheels fit.
    in_venv = replace(request, request=py.path, explicit=True)
    return Picked(replace(choose(in_venv), python=py), warnings)


def _choose_fresh(request: ChoiceRequest, options: BootstrapOptions) -> Picked:
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
            return Picked(Choice(cand.python, image), warnings, adopted=cand)
        if cand:
            return Picked(choose(request), adoptable=cand)
    return Picked(choose(request))


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
