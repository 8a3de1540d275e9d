"""What a venv holds, read from its files without starting its interpreter (keeps a no-op re-run fast)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from mw_env.base.errors import InputError
from mw_env.base.shellquote import sh
from mw_env.sources.pythons import read_project_meta

ADOPT_PTH = "_mw_env_adopted_torch.pth"


PYVENV_CFG = "pyvenv.cfg"
PYVENV_MAX_BYTES = 64 * 1024  # a few hundred bytes in any venv


def read_pyvenv_cfg(venv: Path) -> dict[str, str] | None:
    """The one reader of a venv's pyvenv.cfg: its `key = value` lines, or None when there is none.

    Python's own start-up (site.py) reads this file as UTF-8 and dies with a UnicodeDecodeError traceback
    on any other byte, so a file that is not UTF-8 text (or is a FIFO, a folder, huge) is an InputError
    saying the venv's Python cannot start, and how to rebuild it: bootstrap (its plan and its dry run),
    the doctor and `mw-env train` (through the doctor) all read it here."""
    from mw_env.base.userfile import read_bytes

    path = Path(venv) / PYVENV_CFG
    if not os.path.lexists(path):
        return None
    rebuild = f"mw-env bootstrap --recreate --venv {sh(venv)}"
    try:
        data = read_bytes(path, what="venv config", max_bytes=PYVENV_MAX_BYTES)
        text = data.decode("utf-8")
    except InputError as exc:
        raise InputError(
            f"{exc.message}; the venv's Python cannot start without a readable pyvenv.cfg",
            hint=f"rebuild the venv: `{rebuild}` (or remove {path} if {venv} is not a venv)",
        ) from None
    except UnicodeDecodeError as exc:
        raise InputError(
            f"venv config {path}: not UTF-8 text (byte {exc.start}: {data[exc.start : exc.start + 1]!r}); "
            "the venv's Python reads it as UTF-8 and cannot start",
            hint=f"save {path} as UTF-8, or rebuild the venv: `{rebuild}`",
        ) from None
    values = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, v in values}


def venv_python_version(venv: Path) -> str | None:
    """The venv's Python version as pyvenv.cfg says it (InputError when the file is unreadable)."""
    values = read_pyvenv_cfg(venv)
    if values is None:
        return None
    return values.get("version_info") or values.get("version")


def site_packages(venv: Path) -> Path | None:
    found = sorted(Path(venv).glob("lib/python3*/site-packages"))
    return found[0] if found else None


def installed_version(venv: Path, name: str) -> str | None:
    """A distribution's version from its dist-info folder name (no interpreter started: fast)."""
    site = site_packages(venv)
    if site is None:
        return None
    from packaging.utils import canonicalize_name

    norm = canonicalize_name(name)  # "Torch_Audio", "torch.audio" and "torch-audio" are one project
    for d in site.glob("*.dist-info"):
        stem = d.name[: -len(".dist-info")]
        dist, _, version = stem.rpartition("-")
        if canonicalize_name(dist) == norm and (d / "METADATA").exists():
            return version
    return None


def adopted_site(venv: Path) -> str | None:
    site = site_packages(venv)
    if site is None:
        return None
    try:
        return (site / ADOPT_PTH).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def real_venv(venv: Path) -> Path:
    """The venv's own folder: a --venv given as a symbolic link (or through one) is the folder it leads to.

    The venv's identity for the bootstrap lock and the swap (issue 40: locked by the path as typed, an alias
    ran a second bootstrap beside the first; a --recreate renamed the link instead of the venv)."""
    return Path(os.path.realpath(Path(venv).expanduser().absolute()))


def build_path(venv: Path) -> Path:
    """Where --recreate builds the successor: beside the venv's own folder (a link's target), on the same
    filesystem, so that the swap's renames are atomic and a link to the venv leads to the new one."""
    real = real_venv(venv)
    return real.parent / f".{real.name}.mw-env-new"


def old_path(venv: Path) -> Path:
    """Where the swap moves the old venv while the new one takes its place (removed at the end)."""
    real = real_venv(venv)
    return real.parent / f".{real.name}.mw-env-old"


def short_hash(*parts: object) -> str:
    return hashlib.sha256("\x00".join(str(p) for p in parts).encode()).hexdigest()[:16]


def project_args(project: Path | None, extras: tuple[str, ...]) -> tuple[tuple[str, ...], str | None, str]:
    """(uv arguments installing the project with its extras, its requires-python, a key of its metadata)."""
    import mw_env

    suffix = f"[{','.join(extras)}]" if extras else ""
    if project is None:
        repo = Path(mw_env.__file__).resolve().parents[2]
        if (repo / "pyproject.toml").is_file() and read_project_meta(repo / "pyproject.toml")[0] == "mw-env":
            project = repo  # a source checkout: install it editable so the venv runs this very code
        else:
            return (
                (f"mw-env{suffix}=={mw_env.__version__}",),
                ">=3.10",
                short_hash(mw_env.__version__, suffix),
            )
    project = Path(project).expanduser().resolve()
    pyproject = project / "pyproject.toml"
    if not pyproject.is_file() and not (project / "setup.py").is_file():
        raise InputError(
            f"--project {project}: no pyproject.toml or setup.py there",
            hint="pass the folder of a Python project whose extras should be installed",
        )
    _name, requires_python, optional = (
        read_project_meta(pyproject) if pyproject.is_file() else (None, None, None)
    )
    if optional is not None:
        unknown = [e for e in extras if e not in optional]
        if unknown:
            raise InputError(
                f"--extras {','.join(unknown)}: not defined in {pyproject}",
                hint=f"allowed: {', '.join(sorted(optional)) or '(the project defines no extras)'}",
            )
    meta = pyproject.read_bytes() if pyproject.is_file() else b""
    return ("-e", f"{project}{suffix}"), requires_python, short_hash(project, suffix, meta)


def free_bytes(path: Path) -> int | None:
    """Free space on the filesystem that will hold `path` (its nearest existing ancestor)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None
