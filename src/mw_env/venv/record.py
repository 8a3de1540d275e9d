"""What bootstrap leaves in a venv: `<venv>/mw-env.json` (the record) and `<venv>/mw-env.env` (exports).

The doctor, the trainer and `mw-env env` read these; bootstrap writes them. Both are plain files so a
user can read them, and the env file is what the venv's activate script sources.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mw_env.base.atomic import write_text_atomic as write_atomic
from mw_env.base.errors import InputError
from mw_env.base.shellquote import sh
from mw_env.base.textsafe import redact

RECORD_FILE = "mw-env.json"
# bootstrap's step state (provision/state.py), in the venv beside the record
STATE_FILE = ".mw-env-state.json"
ENV_FILE = "mw-env.env"
RECORD_VERSION = 1


STATE_DIR_ENV = "MW_ENV_STATE_DIR"  # where bootstrap remembers the venv it built last (tests point it away)
LAST_VENV_FILE = "last-venv"


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or str(Path.home()))


def last_venv_file(env: Mapping[str, str] | None = None) -> Path:
    """`$MW_ENV_STATE_DIR/last-venv`, else `$XDG_STATE_HOME/mw-env/last-venv` (~/.local/state by default)."""
    env = os.environ if env is None else env
    if env.get(STATE_DIR_ENV):
        return Path(env[STATE_DIR_ENV]).expanduser() / LAST_VENV_FILE
    state = Path(env.get("XDG_STATE_HOME") or _home(env) / ".local" / "state").expanduser()
    return state / "mw-env" / LAST_VENV_FILE


def remember_venv(venv: Path, env: Mapping[str, str] | None = None) -> Path | None:
    """Record `venv` as the one bootstrap built last, so commands without --venv use it (and say so).

    Best effort: a read-only home only loses the convenience (None), never a finished bootstrap."""
    path = last_venv_file(env)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, str(Path(venv).expanduser().absolute()) + "\n")
    except OSError:
        return None
    return path


def chosen_venv(env: Mapping[str, str] | None = None) -> tuple[Path, str]:
    """(the venv a command without --venv uses, why): `$MW_ENV_VENV` (an activated venv), else the venv
    bootstrap built last while it still exists, else `~/training-venv`. `why` is "" for the plain default."""
    env = os.environ if env is None else env
    chosen = env.get("MW_ENV_VENV")
    if chosen:
        return Path(chosen).expanduser(), "$MW_ENV_VENV (an activated venv)"
    default = _home(env) / "training-venv"
    pointer = last_venv_file(env)
    try:
        text = pointer.read_text(encoding="utf-8").strip() if pointer.is_file() else ""
    except (OSError, UnicodeDecodeError):
        text = ""
    last = Path(text) if text and Path(text).is_absolute() else None
    if last is not None and last != default and (last / RECORD_FILE).is_file():
        return last, f"the venv `mw-env bootstrap` built last (recorded in {pointer}; --venv picks another)"
    return default, ""


def default_venv(env: Mapping[str, str] | None = None) -> Path:
    """`$MW_ENV_VENV`, else the venv bootstrap built last (while it exists), else `~/training-venv`."""
    return chosen_venv(env)[0]


def venv_note(env: Mapping[str, str] | None = None) -> str | None:
    """`using VENV: why`, for a command that took its venv from bootstrap's record rather than the default: a
    command never checks another venv in silence."""
    venv, why = chosen_venv(env)
    if not why or why.startswith("$MW_ENV_VENV"):
        return None
    return f"using {venv}, {why}"


def made_by_mw_env(venv: Path) -> bool:
    """Whether bootstrap made this folder: its record or its step state is there (a venv whose pyvenv.cfg was
    lost is still ours to rebuild with --recreate)."""
    return any(os.path.lexists(Path(venv) / name) for name in (RECORD_FILE, STATE_FILE))


def not_a_venv(venv: Path, *, recreate: bool) -> InputError | None:
    """Why bootstrap refuses a non-empty folder without a pyvenv.cfg (None: it rebuilds it). A folder it did not
    make is never its to delete; one it made (its record is there) is rebuilt with --recreate (issue 40: that
    was refused too, with no way forward)."""
    if not made_by_mw_env(venv):
        return InputError(
            f"--venv {venv} is a non-empty folder that is not a virtual environment",
            hint="pass another --venv path; bootstrap never deletes a folder it did not make",
        )
    if recreate:
        return None
    return InputError(
        f"--venv {venv} was made by mw-env (its record is there) but is no longer a virtual environment: its "
        "pyvenv.cfg is gone",
        hint=f"rebuild it: `mw-env bootstrap --recreate --venv {sh(venv)}` (the new venv replaces it only when "
        "complete)",
    )


def create_command(venv: Path) -> str:
    """`mw-env bootstrap --venv P`, as a hint: a command bootstrap then accepts.

    Bootstrap refuses a non-empty folder that is not a venv (and a file): it never takes over what it did not
    make. For such a path the hint names a new venv inside the folder (or beside the file) instead.
    """
    path = Path(venv).expanduser().absolute()
    target = path
    try:
        taken = path.exists() and not (path / "pyvenv.cfg").exists()
        if taken and path.is_dir() and not any(path.iterdir()):
            taken = False  # an empty folder: bootstrap builds in it
    except OSError:
        taken = True
    if taken and path.is_dir() and made_by_mw_env(path):
        return f"`mw-env bootstrap --recreate --venv {sh(path)}` (bootstrap made it: its record is there)"
    if taken:
        base = path / "venv" if path.is_dir() else path.with_name(path.name + "-venv")
        target = base
        n = 2
        while target.exists():
            target = base.with_name(f"{base.name}-{n}")
            n += 1
        return (
            f"`mw-env bootstrap --venv {sh(target)}` (a new venv: bootstrap never takes over "
            f"{path}, which it did not make)"
        )
    return f"`mw-env bootstrap --venv {sh(target)}`"


@dataclass(frozen=True)
class VenvRecord:
    """What a finished bootstrap knows about its venv."""

    profile: str
    torch_requirement: str  # exact pin, e.g. "torch==2.9.1+rocm6.4"
    torch_version: str  # what the venv's torch reported, e.g. "2.9.1+rocm6.4"
    torch_build: str  # "rocm" | "cuda" | "cpu"
    torch_index: str | None  # where it came from (index URL, wheel path, or "system" when adopted)
    python: str  # "3.11.7"
    env: dict[str, str] = field(default_factory=dict)
    venv: str = ""
    adopted: bool = False  # torch reused from the base image's site-packages
    project: str | None = None
    extras: tuple[str, ...] = ()
    constraints_file: str | None = None
    created: float = 0.0
    updated: float = 0.0
    mw_env_version: str = ""
    version: int = RECORD_VERSION
    # The profile's torch source id ("rocm6.4", "therock-gfx110x"): doctor and train select the same one.
    torch_source: str | None = None
    # Truth from the wheel (AMD): the GPU archs the installed torch carries, how they were read, and the
    # override decision bootstrap took from them (the wheel wins over the profile's table).
    wheel_archs: tuple[str, ...] = ()
    wheel_archs_how: str = ""
    arch_decision: str = ""
    device_packages: tuple[
        str, ...
    ] = ()  # the per-GPU kernel packages installed ("amd-torch-device-gfx1103")

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        for key in ("extras", "wheel_archs", "device_packages"):
            data[key] = list(data[key])
        return data


def record_path(venv: Path) -> Path:
    return Path(venv) / RECORD_FILE


def env_path(venv: Path) -> Path:
    return Path(venv) / ENV_FILE


def record_reads(venv: Path) -> bool:
    """mw-env.json is there and whole: a torn one is rewritten by bootstrap's env step (the doctor's fix for it
    is that bootstrap; issue 40 found it refused with "re-run bootstrap" once every step was done)."""
    try:
        return read_record(venv) is not None
    except InputError:
        return False


def read_record(venv: Path) -> VenvRecord | None:
    """The record of a bootstrapped venv, None when there is none; InputError when it is corrupt."""
    from mw_env.base import userfile, userjson

    path = record_path(venv)
    if not os.path.lexists(path):
        return None
    text = userfile.read_text(path, what="venv record")  # bounded, non-blocking, UTF-8 checked
    data = userjson.load_json(text, source=str(path), hint="re-run `mw-env bootstrap` to rewrite it")
    if not isinstance(data, dict):
        raise InputError(f"{path} must hold a JSON object", hint="re-run `mw-env bootstrap` to rewrite it")
    required = ("profile", "torch_requirement", "torch_version", "torch_build", "python")
    missing = [k for k in required if not isinstance(data.get(k), str)]
    if missing:
        raise InputError(
            f"{path} lacks {', '.join(missing)} (or they are not strings)",
            hint="re-run `mw-env bootstrap` to rewrite it",
        )
    env = data.get("env") or {}
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise InputError(f"{path}: 'env' must map names to strings", hint="re-run `mw-env bootstrap`")
    known = {f for f in VenvRecord.__dataclass_fields__}
    kwargs = {k: v for k, v in data.items() if k in known}
    kwargs["env"] = dict(env)
    for key in ("extras", "wheel_archs", "device_packages"):
        value = data.get(key) or ()
        kwargs[key] = tuple(str(v) for v in value) if isinstance(value, list) else ()
    for key in ("wheel_archs_how", "arch_decision"):
        if not isinstance(kwargs.get(key, ""), str):
            kwargs.pop(key)
    return VenvRecord(**kwargs)


def write_record(venv: Path, record: VenvRecord) -> Path:
    """Write the record atomically (a reader never sees half a file)."""
    path = record_path(venv)
    data = record.to_dict()
    if data.get("torch_index"):
        data["torch_index"] = redact(str(data["torch_index"]))  # the record is world-readable: no credentials
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def export_lines(env: Mapping[str, str]) -> str:
    """`export K=V` lines, shell-quoted, for `eval "$(mw-env env)"` and the activate script."""
    return "".join(f"export {k}={sh(v)}\n" for k, v in env.items())


def env_file_text(env: Mapping[str, str]) -> str:
    header = (
        "# Written by mw-env bootstrap: the runtime environment of this venv's profile.\n"
        "# Sourced by bin/activate; also printed by `mw-env env`. Re-run bootstrap to change it.\n"
    )
    names = " ".join(env)
    # _MW_ENV_VARS lets the patched deactivate() unset exactly what this file set.
    return header + export_lines(env) + f"export _MW_ENV_VARS={sh(names)}\n"


def now() -> float:
    return round(time.time(), 3)
