"""What the steps' done-checks compare: the keys that record (in the state file) which inputs a finished
step was done for, the files the pin and env steps write, and the torch the venv holds now."""

from __future__ import annotations

from pathlib import Path

from mw_env.profiles.model import has_local_tag
from mw_env.provision import pin as pinmod
from mw_env.provision.choose import version_fits
from mw_env.provision.model import Plan
from mw_env.venv.integrity import installed_fingerprint
from mw_env.venv.venvinfo import installed_version, short_hash


def torch_fits(venv: Path, installed: str | None, local_tag: str, version_spec: str) -> bool:
    """Whether the venv's torch (its dist-info version) is the profile's build and range, and the very one
    bootstrap recorded: a torch swapped behind bootstrap's back (`uv pip install --python ...`) is redone."""
    if not installed or not has_local_tag(installed, local_tag) or not version_fits(installed, version_spec):
        return False
    from mw_env.base.errors import InputError
    from mw_env.venv.record import read_record

    try:
        rec = read_record(venv)
    except InputError:
        return True  # a corrupt record: the env step rewrites it
    if rec is None or rec.adopted or not rec.torch_version:
        return True
    from packaging.version import InvalidVersion, Version

    try:
        return Version(installed) == Version(rec.torch_version)
    except InvalidVersion:
        return installed == rec.torch_version


def project_whole(p: Plan) -> bool:
    """Every package the project's extras need is installed (torch aside: its own steps'): a package
    removed since (`uv pip uninstall numpy`) is installed again by the extras step, which the doctor's
    fix for it names (issue 40: the step said done, and the doctor asked for the same bootstrap)."""
    if p.lock is not None:
        return True  # --no-deps from the lock: the lock's completeness is checked when it is read
    from mw_env.venv.lock.requires import read_requirements
    from mw_env.venv.venvinfo import adopted_site, site_packages, venv_python_version

    site = site_packages(p.build_venv)
    if site is None:
        return False
    extras = p.options.extras if p.options else ()
    visible = [Path(line) for line in (adopted_site(p.build_venv) or "").splitlines() if line.strip()]
    reqs = read_requirements(site, venv_python_version(p.build_venv) or "3", extras, visible)
    return not [u for u in reqs.project_unmet() if u.name != "torch"]


def torch_hash(build: str, version_spec: str, local_tag: str, extras: tuple[str, ...] = ()) -> str:
    # The extras (which GPUs' kernels) are part of the install: another GPU's kernels redo the torch step.
    return short_hash(build, version_spec, local_tag, *((",".join(extras),) if extras else ()))


def torch_key(p: Plan, torch_version: str | None = None) -> str:
    """The profile's torch (build, range, local tag, GPU extras): the installed version is not part of it.
    From a lock (`--lock`): the lock's text, whose every package the step installs."""
    if p.lock is not None:
        return short_hash("lock", p.lock.sha256)
    return torch_hash(p.build, p.version_spec, p.local_tag, p.torch_extras)


def with_extras(requirement: str, extras: tuple[str, ...]) -> str:
    """`torch==2.14.0+rocm7.14.0` + ("device-gfx1103",) -> `torch[device-gfx1103]==2.14.0+rocm7.14.0`."""
    if not extras or not requirement.startswith("torch"):
        return requirement
    rest = requirement[len("torch") :]
    return f"torch[{','.join(extras)}]{rest}"


def extras_key(p: Plan, torch_version: str | None) -> str:
    lock = p.lock.sha256 if p.lock is not None else ""
    return short_hash(p.project_args, p.proj_key, torch_version, p.sources.constraints, bool(p.adopted), lock)


def lock_key(p: Plan, torch_version: str | None) -> str:
    """The venv's lock was written (or checked) for these extras, torch and hardware."""
    return short_hash(extras_key(p, torch_version or ""), sorted(p.lock_target.items()), p.profile)


def verify_key(p: Plan, torch_version: str | None, *, fingerprint: str | None = None) -> str:
    # The installed files' fingerprint: a file lost since the verify (a full disk during an install, an
    # `rm`) makes the next bootstrap verify again rather than call a broken venv complete. `fingerprint`: the
    # digest as the plan's scan of the files read it (venv/integrity.py: one pass over the files per plan).
    if fingerprint is None:
        fingerprint = installed_fingerprint(p.build_venv)
    return short_hash(torch_version, p.build, p.local_tag, fingerprint)


def env_text(p: Plan) -> str:
    pins = pinmod.pin_env(
        p.venv,
        user_constraints=p.sources.constraints,
        uv_constraints=p.sources.uv_constraints,
        adopted=bool(p.adopted),
    )
    # MW_ENV_VENV: in a shell where this venv is activated, `mw-env train` / `mw-env doctor` use it (not the
    # default ~/training-venv); deactivate unsets it with the rest.
    return pinmod.env_file_content(p.runtime_env, {**pins, "MW_ENV_VENV": str(p.venv)})


def env_key(p: Plan, torch_version: str | None) -> str:
    # project_args carry the extras: the record (mw-env.json) must be rewritten when they change.
    return short_hash(env_text(p), torch_version, p.profile, p.project_args)


def doctor_key(p: Plan, torch_version: str | None) -> str:
    return short_hash(torch_version, env_text(p))


def expected_pins(p: Plan, torch_version: str) -> dict:
    """The pin files for this venv now (companions such as pytorch-triton-rocm pinned as installed)."""
    companions = {
        c: v for c in (*p.companions, *p.device_packages) if (v := installed_version(p.build_venv, c))
    }
    return pinmod.pin_files(
        p.build_venv,
        final_venv=p.venv,
        torch_version=torch_version,
        user_constraints=p.sources.constraints,
        adopted=bool(p.adopted),
        companions=companions,
    )


def current_torch(p: Plan) -> str | None:
    """The torch version the build venv holds now (an adopted one lives in the image's site-packages)."""
    if p.adopted:
        from mw_env.provision.choose import find_image_torch

        found = find_image_torch([str(p.venv_python)], p.env)
        return found[0].version if found else None
    return installed_version(p.build_venv, "torch")
