"""A set of packages checked whole: every requirement met, every wheel the version and the Python it claims.

Issue 29: a lock without numpy was installed ("111 packages as locked"), the `train` extra's step said ✓
without installing anything (from a lock the project goes in with --no-deps), the doctor was green, and
`mw-env train` died with a ModuleNotFoundError. A lock whose wheel file names another version than its entry,
or whose `[tool.mw-env] python` is not the one its wheels are built for, passed `--dry-run` and failed in uv.

One rule, two callers:
- `bootstrap --lock` (its dry run too: both read the lock through rebuild.load_for_bootstrap) checks the
  lock against the project's requirements for the chosen extras (and the lock's own dependency graph,
  where its entries carry PEP 751 `dependencies`), each wheel's file name against its entry, and each
  wheel's tags against the lock's Python; all before anything is installed.
- the doctor's venv check reads the venv's own requirements (each installed distribution's Requires-Dist,
  the project's with the extras bootstrap installed) against what is installed: `pip check`, without pip.
Markers are evaluated for the lock's (or the venv's) Python on Linux.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from mw_env.venv.lock.lockfile import normalize

if TYPE_CHECKING:
    from packaging.requirements import Requirement

    from mw_env.venv.lock.lockfile import Lock


@dataclass(frozen=True)
class Need:
    """A requirement and who asks for it ("mw-env[train]", "pandas 2.2.0"; `package`, `version`: the asking
    distribution's normalized name and version where it is an installed one)."""

    requirement: Requirement
    by: str
    package: str = ""
    version: str = ""


@dataclass(frozen=True)
class Unmet:
    """A need that what is installed does not meet: the package is missing (`have` None) or has a version
    outside the requirement."""

    name: str  # the required package, normalized
    have: str | None
    need: Need

    def words(self) -> str:
        req = self.need.requirement
        shown = f"{req.name}{'[' + ','.join(sorted(req.extras)) + ']' if req.extras else ''}{req.specifier}"
        if self.have is None:
            return f"{self.name} is missing ({self.need.by} needs {shown})"
        return f"{self.name} {self.have} does not satisfy {shown} ({self.need.by})"


def marker_env(python: str, platform: str = "linux-x86_64") -> dict[str, str]:
    """PEP 508 marker values for CPython `python` ("3.11.7") on `platform` ("linux-x86_64")."""
    from packaging.markers import default_environment

    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    parts = [*python.split("."), "0", "0"][:3]
    env.update(
        python_version=".".join(parts[:2]),
        python_full_version=".".join(parts),
        implementation_name="cpython",
        platform_python_implementation="CPython",
        sys_platform="linux",
        platform_system="Linux",
        os_name="posix",
    )
    machine = platform.partition("-")[2]
    if machine:
        env["platform_machine"] = machine
    return env


def applies(req: Requirement, env: Mapping[str, str], extras: Iterable[str] = ()) -> bool:
    """Whether `req` is wanted here: its marker true for `env` with no extra, or with one of `extras`."""
    if req.marker is None:
        return True
    return any(req.marker.evaluate({**env, "extra": e}) for e in ("", *extras))


def unmet(needs: Iterable[Need], have: Mapping[str, str]) -> list[str]:
    """Each need that `have` (normalized name -> version) does not meet, in words, in a stable order."""
    return [u.words() for u in unmet_needs(needs, have)]


def unmet_needs(needs: Iterable[Need], have: Mapping[str, str]) -> list[Unmet]:
    """`unmet` as records: the missing packages first, then the versions that do not fit, each package once
    (its first need), by name."""
    from packaging.version import InvalidVersion, Version

    out: dict[str, Unmet] = {}
    for need in needs:
        req, name = need.requirement, normalize(need.requirement.name)
        if name not in have:
            out.setdefault(f"0{name}", Unmet(name, None, need))
            continue
        if not req.specifier:
            continue
        try:
            ok = req.specifier.contains(Version(have[name]), prereleases=True)
        except InvalidVersion:
            ok = False
        if not ok:
            out.setdefault(f"1{name}", Unmet(name, have[name], need))
    return [out[k] for k in sorted(out)]


# -- the project's requirements -----------------------------------------------------------------------------


def project_needs(project: Path | None, extras: Sequence[str], env: Mapping[str, str]) -> list[Need]:
    """What the project (None: this mw-env) and its `extras` require, an extra that names the project itself
    (`mw-env[train]` inside another extra) followed; the project is never in a lock (it is installed after
    it, --no-deps)."""
    name, base, optional = _project_meta(project)
    own = normalize(name)
    pending: list[tuple[str, str, str]] = [(line, "", name) for line in base]  # (line, its extra, who)
    todo, done = list(extras), set()
    needs = []
    while pending or todo:
        while todo:
            extra = todo.pop()
            if extra not in done:
                done.add(extra)
                pending += [(line, extra, f"{name}[{extra}]") for line in optional.get(extra, [])]
        if not pending:
            break
        line, extra, by = pending.pop(0)
        req = _req(line)
        if req is None:
            continue  # the project's own metadata: its build tool refuses it long before a lock
        if normalize(req.name) == own:
            todo += sorted(req.extras)
        elif applies(req, env, (extra,) if extra else ()):
            needs.append(Need(req, by))
    return needs


def _project_meta(project: Path | None) -> tuple[str, list[str], dict[str, list[str]]]:
    """(name, dependencies, optional-dependencies) of a pyproject.toml, or of this installed mw-env."""
    import mw_env

    if project is None:
        repo = Path(mw_env.__file__).resolve().parents[2]
        if (repo / "pyproject.toml").is_file():
            project = repo
    if project is not None and (Path(project) / "pyproject.toml").is_file():
        data = _toml(Path(project) / "pyproject.toml").get("project")
        data = data if isinstance(data, dict) else {}
        base, optional = data.get("dependencies"), data.get("optional-dependencies")
        extras = {
            str(k): [str(x) for x in v]
            for k, v in (optional.items() if isinstance(optional, dict) else ())
            if isinstance(v, list)
        }
        return (
            str(data.get("name") or project),
            [str(x) for x in base] if isinstance(base, list) else [],
            extras,
        )
    if project is not None:
        return str(project), [], {}  # a setup.py project: its requirements are not read without running it
    from importlib.metadata import PackageNotFoundError, requires

    try:
        lines = requires("mw-env") or []
    except PackageNotFoundError:
        return "mw-env", [], {}
    base, optional = [], {}
    for line in lines:
        m = re.search(r";.*\bextra\s*==\s*['\"]([^'\"]+)['\"]", line)
        if m:
            optional.setdefault(m.group(1), []).append(line)
        else:
            base.append(line)
    return "mw-env", base, optional


def _toml(path: Path) -> dict[str, object]:
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib
    try:
        return dict(tomllib.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


# -- a lock's files -----------------------------------------------------------------------------------------


def file_problems(lock: Lock) -> list[str]:
    """Wheels whose file name says another project or version than their entry, or whose tags the lock's
    Python cannot install (uv would refuse them, after the dry run said yes)."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import Version

    pairs = _python_pairs(lock.meta.python)
    out = []
    for pkg in lock.packages:
        for wheel in pkg.wheels:
            filename = Path(unquote(urlsplit(wheel.location).path)).name
            try:
                name, version, _build, tags = parse_wheel_filename(filename)
            except InvalidWheelFilename:
                out.append(f"{pkg.name}: {filename} is not a wheel's file name")
                continue
            if normalize(name) != pkg.name or version != Version(pkg.version):
                out.append(f"{pkg.name} {pkg.version}: its wheel {filename} is {name} {version}")
            elif pairs is not None and not any((t.interpreter, t.abi) in pairs for t in tags):
                got = ", ".join(sorted({f"{t.interpreter}-{t.abi}" for t in tags}))
                out.append(f"{pkg.name} {pkg.version}: its wheel is for {got}, not Python {lock.meta.python}")
    return out


def _python_pairs(python: str) -> set[tuple[str, str]] | None:
    """The (interpreter, abi) tag pairs CPython `python` installs, as packaging (pip's and uv's rule) lists
    them, whatever the platform; None for a Python this cannot read."""
    from packaging import tags

    m = re.match(r"(\d+)\.(\d+)", python)
    if not m:
        return None
    version = (int(m.group(1)), int(m.group(2)))
    interp = f"cp{version[0]}{version[1]}"
    found = [
        *tags.cpython_tags(version, platforms=["x"]),
        *tags.compatible_tags(version, interpreter=interp, platforms=["x"]),
    ]
    return {(t.interpreter, t.abi) for t in found}


def lock_problems(lock: Lock, needs: Sequence[Need]) -> list[str]:
    """Everything wrong with `lock` as a whole: requirements it lacks or breaks (the project's `needs` and
    its own graph, where its entries hold PEP 751 dependencies) and wheels that disagree with it."""
    graph = [
        Need(req, f"{pkg.name} {pkg.version}")
        for pkg in lock.packages
        for req in map(_req, pkg.dependencies)
        if req is not None
    ]
    return unmet([*needs, *graph], lock.versions()) + file_problems(lock)


def _req(name: str) -> Requirement | None:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return Requirement(name)
    except InvalidRequirement:
        return None


# -- a venv's own requirements --------------------------------------------------------------------------------


def venv_needs(site: Path, env: Mapping[str, str], project_extras: Mapping[str, Sequence[str]]) -> list[Need]:
    """Each installed distribution's Requires-Dist (its METADATA headers), markers evaluated for `env`, with
    the extras it was installed with where known (`project_extras`: the project's, from bootstrap's record)."""
    from packaging.requirements import InvalidRequirement, Requirement

    needs = []
    for meta in sorted(site.glob("*.dist-info/METADATA")):
        name, version, lines = _headers(meta)
        if not name:
            continue
        extras = project_extras.get(normalize(name), ())
        for line in lines:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if applies(req, env, extras):
                by = f"{normalize(name)} {version}" + (f"[{','.join(extras)}]" if extras else "")
                needs.append(Need(req, by, package=normalize(name), version=version))
    return needs


@dataclass(frozen=True)
class VenvRequirements:
    """A venv's installed distributions and what they require (`pip check`, without pip)."""

    have: dict[str, str]  # normalized name -> version, the venv's own site last (its versions win)
    project: frozenset[str]  # the distributions installed from a folder (the project), and mw-env
    needs: tuple[Need, ...]

    def unmet(self) -> list[Unmet]:
        return unmet_needs(self.needs, self.have)

    def project_unmet(self) -> list[Unmet]:
        """What the project and its extras need and lack: what bootstrap's extras step installs."""
        return [u for u in self.unmet() if u.need.package in self.project]


def read_requirements(
    site: Path, python: str, extras: Sequence[str], visible: Sequence[Path] = ()
) -> VenvRequirements:
    """The distributions of `site` (and of the `visible` folders the venv also imports from) and the
    requirements of those in `site`, markers evaluated for `python`; the project (installed from a
    folder) with `extras`."""
    from mw_env.venv.lock.drift import from_folder

    have: dict[str, str] = {}
    project = ["mw-env"]
    for where in (*visible, site):
        for d in where.glob("*.dist-info"):
            name, _, version = d.name[: -len(".dist-info")].rpartition("-")
            if name and (d / "METADATA").is_file():
                have[normalize(name)] = version
                if where == site and from_folder(d):
                    project.append(normalize(name))
    needs = venv_needs(site, marker_env(python), dict.fromkeys(project, tuple(extras)))
    return VenvRequirements(have, frozenset(project), tuple(needs))


def _headers(path: Path) -> tuple[str, str, list[str]]:
    """(Name, Version, [Requires-Dist]) from a METADATA file's header block (its body can be megabytes)."""
    name = version = ""
    reqs: list[str] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                if key == "Name":
                    name = value.strip()
                elif key == "Version":
                    version = value.strip()
                elif key == "Requires-Dist":
                    reqs.append(value.strip())
    except OSError:
        pass
    return name, version, reqs


__all__ = [
    "Need",
    "Unmet",
    "VenvRequirements",
    "applies",
    "file_problems",
    "lock_problems",
    "marker_env",
    "project_needs",
    "read_requirements",
    "unmet",
    "unmet_needs",
    "venv_needs",
]
