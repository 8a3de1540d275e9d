"""The steps of a plan, each with its exact command and whether it is already done, and the keys that
record (in the state file) which inputs a finished step was done for."""

from __future__ import annotations

import sys
from pathlib import Path

from mw_env.profiles.model import has_local_tag
from mw_env.provision import pin as pinmod
from mw_env.provision import uv as uvmod
from mw_env.provision.choose import exact_requirement, version_fits
from mw_env.provision.model import GiB, Plan, Step, TorchSourceLike
from mw_env.provision.state import State
from mw_env.provision.venvinfo import adopted_site, installed_fingerprint, installed_version, short_hash


def torch_fits(venv: Path, installed: str | None, local_tag: str, version_spec: str) -> bool:
    """Whether the venv's torch (its dist-info version) is the profile's build and range, and the very one
    bootstrap recorded: a torch swapped behind bootstrap's back (`uv pip install --python ...`) is redone."""
    if not installed or not has_local_tag(installed, local_tag) or not version_fits(installed, version_spec):
        return False
    from mw_env.errors import InputError
    from mw_env.provision.record import read_record

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


def _torch_key(torch: TorchSourceLike, local_tag: str, extras: tuple[str, ...] = ()) -> str:
    # The extras (which GPUs' kernels) are part of the install: another GPU's kernels redo the torch step.
    return short_hash(torch.build, torch.version, local_tag, *((",".join(extras),) if extras else ()))


def _torch_key_for(p: Plan) -> str:
    if p.lock is not None:
        return short_hash("lock", p.lock.sha256)
    return short_hash(
        p.build, p.version_spec, p.local_tag, *((",".join(p.torch_extras),) if p.torch_extras else ())
    )


def with_extras(requirement: str, extras: tuple[str, ...]) -> str:
    """`torch==2.14.0+rocm7.14.0` + ("device-gfx1103",) -> `torch[device-gfx1103]==2.14.0+rocm7.14.0`."""
    if not extras or not requirement.startswith("torch"):
        return requirement
    rest = requirement[len("torch") :]
    return f"torch[{','.join(extras)}]{rest}"


def extras_key(p: Plan, torch_version: str) -> str:
    lock = p.lock.sha256 if p.lock is not None else ""
    return short_hash(p.project_args, p.proj_key, torch_version, p.sources.constraints, bool(p.adopted), lock)


def lock_key(p: Plan, torch_version: str | None) -> str:
    return short_hash(extras_key(p, torch_version or ""), p.lock_target, p.profile)


def verify_key(p: Plan, torch_version: str | None) -> str:
    # The installed files' fingerprint: a file lost since the verify (a full disk during an install, an
    # `rm`) makes the next bootstrap verify again rather than call a broken venv complete.
    return short_hash(torch_version, p.build, p.local_tag, installed_fingerprint(p.build_venv))


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


def build_steps(p: Plan, state: State, torch: TorchSourceLike) -> list[Step]:
    bv, py = p.build_venv, str(p.venv_python)
    uv = p.uv or "uv"
    offline = ["--offline"] if p.options and p.options.offline else []
    installed = p.adopted.version if p.adopted else installed_version(bv, "torch")
    venv_ok = all((bv / f).exists() for f in ("pyvenv.cfg", "bin/python", "bin/activate"))
    steps: list[Step] = []

    # torch
    tkey = _torch_key(torch, p.local_tag, p.torch_extras) if p.lock is None else _torch_key_for(p)
    if p.lock is not None:
        from mw_env.envlock import LOCK_FILE
        from mw_env.envlock.rebuild import describe, install_command

        # The whole lock in one uv transaction: every file's sha256 is checked before any is installed.
        torch_cmd = install_command(uv, py, bv / LOCK_FILE, offline=bool(offline))
        torch_done = installed == p.lock.meta.torch and state.is_done("torch", tkey)
        torch_detail = f"{describe(p.lock)} from {p.lock.source}"
    elif p.adopted:
        torch_cmd = None
        torch_done = venv_ok and adopted_site(bv) == p.adopted.site
        torch_detail = f"reuse the image's torch {p.adopted.version} from {p.adopted.site}"
    else:
        # Without a usable source (preflight will stop on the problem) the plan still shows the command that
        # WOULD run: the profile's index and exact build, never a bare `torch` the default index would answer.
        req = p.torch.requirement if p.torch else exact_requirement(p.version_spec, p.local_tag)
        index = (
            p.torch.location
            if p.torch and p.torch.origin == "index"
            else p.torch_index
            if p.torch is None
            else None
        )
        args = [uv, "pip", "install", "--python", py, *offline]
        if index:
            # first-index (uv's default, restated so a UV_INDEX_STRATEGY=unsafe-best-match cannot apply): torch
            # comes from the torch index even when another index lists a newer (CUDA) torch in the range.
            args += ["--index", index, "--index-strategy", "first-index"]
        args += p.sources.uv_args()
        if state.was_started("torch") or (
            installed and not torch_fits(bv, installed, p.local_tag, p.version_spec)
        ):
            # A killed install may have left torch half-written; a swapped one may still satisfy a range
            # requirement, which uv would then leave in place.
            args += ["--reinstall-package", "torch"]
        torch_cmd = (*args, with_extras(req, p.torch_extras), *p.companions)
        # The state says the step finished; the dist-info says the build is still the profile's.
        fits = torch_fits(bv, installed, p.local_tag, p.version_spec)
        torch_done = fits and state.is_done("torch", tkey)
        torch_detail = f"{req} from {p.torch.origin} {p.torch.location}" if p.torch else req

    version_now = installed if installed else (p.torch.wheel.version if p.torch and p.torch.wheel else None)
    user_cons = p.sources.constraints
    pin_done = bool(installed) and pinmod.files_match(expected_pins(p, version_now or "?"))
    ekey = extras_key(p, installed or "")
    locked = ("--no-deps",) if p.lock is not None else ()  # the lock installed every dependency, exactly
    pin_flag = (
        ["--override", str(bv / pinmod.OVERRIDES_FILE)]
        if p.adopted
        else ["--constraint", str(bv / pinmod.CONSTRAINTS_FILE)]
    )
    extras_cmd = (
        uv,
        "pip",
        "install",
        "--python",
        py,
        *offline,
        *pin_flag,
        *(x for c in user_cons for x in ("--constraint", c)),
        *p.sources.uv_args(),
        *locked,
        *p.project_args,
        *(() if p.lock is not None else ("pip",)),
    )
    env_done = (
        pinmod.files_match({bv / "mw-env.env": env_text(p)})
        and (bv / "mw-env.json").is_file()
        and pinmod.activate_is_patched(bv, p.venv)
        and state.is_done("env", env_key(p, installed))
    )
    all_done = venv_ok and torch_done and pin_done and state.is_done("extras", ekey) and env_done
    steps.append(
        Step(
            "preflight",
            "Check disk, uv, Python and the torch source",
            None,
            all_done,
            p.problem or f"needs ~{p.disk_need / GiB:.1f} GiB free",
        )
    )
    uv_cmd = (
        None
        if p.uv
        else tuple(uvmod.uv_install_commands(p.python.path if p.python else sys.executable, p.env)[0])
    )
    steps.append(
        Step("uv", "Install uv from PyPI" if not p.uv else "uv is present", uv_cmd, bool(p.uv), p.uv or "")
    )
    venv_cmd = (
        uv,
        "venv",
        "--python",
        p.python.path if p.python else (p.options.python if p.options else "3.12"),
        "--relocatable",
        str(bv),
    )
    steps.append(Step("venv", f"Create the venv {bv}", venv_cmd, venv_ok))
    torch_title = (
        f"Install the lock's packages exactly, torch {p.lock.meta.torch} among them (hashes checked)"
        if p.lock is not None
        else f"Install torch ({p.build}{', ' + p.local_tag if p.local_tag else ''}) first"
    )
    steps.append(
        Step(
            "torch",
            torch_title,
            torch_cmd,
            torch_done,
            torch_detail,
        )
    )
    from mw_env.provision.verify import verify_command

    steps.append(
        Step(
            "verify-torch",
            f"Verify torch reports the {p.build} build",
            # The doctor step imports torch itself: then the verify reads the build without importing it.
            verify_command(py, import_torch=not (p.options.doctor if p.options else True)),
            bool(installed) and state.is_done("verify-torch", verify_key(p, installed)),
        )
    )
    steps.append(Step("pin-torch", "Pin torch for pip and uv in this venv", None, pin_done))
    steps.append(
        Step(
            "extras",
            "Install the project's extras with torch pinned",
            extras_cmd,
            venv_ok and state.is_done("extras", ekey),
        )
    )
    steps.append(
        Step("env", "Persist the runtime environment (activate, mw-env.env, mw-env.json)", None, env_done)
    )
    from mw_env.envlock import LOCK_FILE as LOCK_NAME

    steps.append(
        Step(
            "lock",
            f"Check the venv against its lock ({LOCK_NAME})"
            if p.lock is not None
            else f"Write the venv's lock ({LOCK_NAME}, by uv)",
            None,
            # An adopted torch lives outside the venv: no lock is written for it (the step says so once).
            venv_ok
            and ((bv / LOCK_NAME).is_file() or bool(p.adopted))
            and state.is_done("lock", lock_key(p, installed)),
        )
    )
    if p.options and p.options.recreate:
        steps.append(Step("swap", f"Replace {p.venv} with the new venv", None, False))
    if not p.options or p.options.doctor:
        steps.append(
            Step(
                "doctor",
                "Run the doctor",
                None,
                all_done and state.is_done("doctor", doctor_key(p, installed)),
            )
        )
    return steps
