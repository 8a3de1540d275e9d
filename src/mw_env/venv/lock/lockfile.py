"""Read a lock: PEP 751 `pylock.toml` (written by uv) plus mw-env's `[tool.mw-env]` table.

A lock is user input that tells uv which files to install: it may be malformed, truncated, huge, name a
wheel by a URL with credentials in it, or a local file anywhere on the disk. Every such case is an
InputError naming the file, the entry (`packages[3] (numpy)`) and the value, never a traceback. What is
accepted: `lock-version` 1.x; packages with a PEP 508 name, a PEP 440 version and at least one wheel or
sdist, each with a sha256; http(s) URLs without credentials, and local files (absolute paths or file://
URLs) inside a wheelhouse the caller allows.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from mw_env.base.errors import InputError
from mw_env.base.textsafe import redact, safe

MiB = 1024 * 1024
LOCK_MAX_BYTES = 16 * MiB  # a lock of a full training venv is ~60 KiB; torch's CUDA wheel set adds little
MAX_PACKAGES = 5000
MAX_FILES = 200  # wheels per package (uv writes one per platform it resolved for; --python gives one)
FORMAT = 1  # [tool.mw-env] format this mw-env writes and reads
BUILDS = ("cpu", "rocm", "cuda")
_NAME = re.compile(r"^([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]{0,198}[A-Za-z0-9])$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
HINT = "make a new lock with `mw-env lock --venv VENV --output FILE` (or re-run bootstrap, which writes one)"


@dataclass(frozen=True)
class Artifact:
    """One file of a locked package: where it is (an http(s) URL or a local path) and its sha256."""

    location: str
    sha256: str
    local: Path | None = None  # a local file (path or file:// URL), resolved

    def __str__(self) -> str:
        return redact(self.location)


@dataclass(frozen=True)
class LockedPackage:
    name: str  # normalized (PEP 503)
    version: str
    wheels: tuple[Artifact, ...] = ()
    sdist: Artifact | None = None
    dependencies: tuple[str, ...] = ()  # PEP 751 `dependencies` (names), where the lock holds the graph


@dataclass(frozen=True)
class LockMeta:
    """mw-env's table: the hardware and the torch the lock was made for."""

    profile: str
    build: str  # cpu | rocm | cuda
    torch: str  # the exact torch version, "2.9.1+rocm6.4"
    python: str  # "3.11.7"
    torch_source: str = ""  # the profile's source id ("rocm6.4")
    torch_from: str = ""  # index URL or wheel path torch came from (credentials hidden)
    gpu: str = ""  # "AMD Radeon 780M"; empty on CPU
    arch: str = ""  # the GPU's own arch: "gfx1103", "sm_86"; empty on CPU
    required_arch: str = ""  # the arch the torch build must serve ("gfx1100" under an HSA override)
    driver_floor: str = ""  # NVIDIA: the lowest driver the torch wheel runs on
    platform: str = ""  # "linux-x86_64"
    mw_env_version: str = ""
    created: str = ""
    env: Mapping[str, str] = field(default_factory=dict)  # the runtime environment (HSA_OVERRIDE_GFX_VERSION)

    def hardware(self) -> str:
        """`profile gfx1103 (AMD Radeon 780M, gfx1103)` / `profile cpu (no GPU)`."""
        what = ", ".join(x for x in (self.gpu, self.arch) if x) or "no GPU"
        return f"profile {self.profile} ({what})"


@dataclass(frozen=True)
class Lock:
    source: str  # the file it was read from (for messages)
    text: str
    sha256: str
    requires_python: str
    packages: tuple[LockedPackage, ...]
    meta: LockMeta

    def versions(self) -> dict[str, str]:
        return {p.name: p.version for p in self.packages}

    def package(self, name: str) -> LockedPackage | None:
        return next((p for p in self.packages if p.name == normalize(name)), None)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: str | Path, *, wheelhouses: Sequence[Path] | None = None) -> Lock:
    """The lock in `path`, validated; local wheels must lie inside `wheelhouses` (None: not checked)."""
    from mw_env.base import userfile

    text = userfile.read_text(path, what="lock", max_bytes=LOCK_MAX_BYTES)
    return parse_lock(text, source=f"lock {path}", wheelhouses=wheelhouses)


def parse_lock(text: str, *, source: str, wheelhouses: Sequence[Path] | None = None) -> Lock:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: tomli is the same parser, and a declared dependency there
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{source}: not valid TOML ({exc})", hint=f"a cut or edited lock? {HINT}") from None
    except RecursionError:  # nesting deep enough to exhaust the parser's stack
        raise InputError(f"{source}: nested too deeply to be a lock", hint=HINT) from None
    version = data.get("lock-version")
    if not isinstance(version, str) or not re.fullmatch(r"1(\.\d+)?", version):
        raise InputError(
            f"{source}: lock-version = {safe(repr(version), limit=40)}; this mw-env reads PEP 751 locks "
            "of version 1.x",
            hint=f"is this a pylock.toml? {HINT}",
        )
    rp = data.get("requires-python", "")
    if not isinstance(rp, str):
        raise InputError(f"{source}: requires-python must be a string", hint=HINT)
    raw = data.get("packages")
    if not isinstance(raw, list) or not raw:
        raise InputError(f"{source}: no [[packages]] entries (a truncated lock?)", hint=HINT)
    if len(raw) > MAX_PACKAGES:
        raise InputError(f"{source}: {len(raw)} packages; at most {MAX_PACKAGES} are read", hint=HINT)
    roots = [Path(w).expanduser().absolute() for w in wheelhouses] if wheelhouses is not None else None
    packages: list[LockedPackage] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(raw):
        pkg = _package(entry, f"{source}: packages[{i}]", roots)
        if pkg.name in seen:
            raise InputError(
                f"{source}: packages[{i}] ({pkg.name}) is locked twice (also packages[{seen[pkg.name]}]); "
                "an mw-env lock holds one version of each package, for one machine",
                hint=HINT,
            )
        seen[pkg.name] = i
        packages.append(pkg)
    meta = _meta(data.get("tool"), source)
    torch = next((p for p in packages if p.name == "torch"), None)
    if torch is None:
        raise InputError(f"{source}: no torch among the packages; a training lock always holds it", hint=HINT)
    if torch.version != meta.torch:
        raise InputError(
            f"{source}: [tool.mw-env] torch = {safe(meta.torch, limit=80)} but the locked torch is "
            f"{safe(torch.version, limit=80)}",
            hint=f"the lock was edited by hand? {HINT}",
        )
    return Lock(
        source=source,
        text=text,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        requires_python=rp,
        packages=tuple(packages),
        meta=meta,
    )


def _package(entry: Any, where: str, roots: list[Path] | None) -> LockedPackage:
    if not isinstance(entry, dict):
        raise InputError(f"{where} must be a table, got {type(entry).__name__}", hint=HINT)
    name, version = entry.get("name"), entry.get("version")
    if not isinstance(name, str) or not _NAME.match(name):
        raise InputError(f"{where}: name = {safe(repr(name), limit=80)} is not a package name", hint=HINT)
    where = f"{where} ({normalize(name)})"
    from packaging.version import InvalidVersion, Version

    try:
        if not isinstance(version, str) or len(version) > 100:
            raise InvalidVersion
        Version(version)
    except InvalidVersion:
        raise InputError(
            f"{where}: version = {safe(repr(version), limit=80)} is not a PEP 440 version "
            "(an mw-env lock pins every package exactly)",
            hint=HINT,
        ) from None
    for key in ("vcs", "directory"):
        if key in entry:
            raise InputError(
                f"{where}: a {key} source has no file hash to check, so it cannot be rebuilt exactly",
                hint="lock an installed wheel instead (the project itself is never locked); " + HINT,
            )
    wheels_raw = entry.get("wheels", [])
    if not isinstance(wheels_raw, list) or len(wheels_raw) > MAX_FILES:
        raise InputError(f"{where}: wheels must be a list of at most {MAX_FILES} tables", hint=HINT)
    wheels = tuple(_artifact(w, f"{where} wheels[{j}]", roots) for j, w in enumerate(wheels_raw))
    sdist = _artifact(entry["sdist"], f"{where} sdist", roots) if "sdist" in entry else None
    if "archive" in entry:
        wheels = (*wheels, _artifact(entry["archive"], f"{where} archive", roots))
    if not wheels and sdist is None:
        raise InputError(f"{where}: no wheel or sdist to install", hint=f"a truncated lock? {HINT}")
    deps = entry.get("dependencies", [])
    if not isinstance(deps, list) or not all(
        isinstance(d, dict) and isinstance(d.get("name"), str) for d in deps
    ):
        raise InputError(f"{where}: dependencies must be a list of tables with a name", hint=HINT)
    names = tuple(normalize(d["name"]) for d in deps if _NAME.match(d["name"]))
    return LockedPackage(
        name=normalize(name), version=version, wheels=wheels, sdist=sdist, dependencies=names
    )


def _artifact(raw: Any, where: str, roots: list[Path] | None) -> Artifact:
    if not isinstance(raw, dict):
        raise InputError(f"{where} must be a table", hint=HINT)
    hashes = raw.get("hashes")
    digest = hashes.get("sha256") if isinstance(hashes, dict) else None
    if not isinstance(digest, str) or not _SHA256.match(digest):
        raise InputError(
            f"{where}: needs hashes.sha256 (64 lowercase hex digits), got {safe(repr(digest), limit=80)}",
            hint=f"every file of a lock is checked by its sha256; {HINT}",
        )
    url, path = raw.get("url"), raw.get("path")
    if url is None and path is None:
        raise InputError(f"{where}: neither url nor path says where the file is", hint=HINT)
    if url is not None:
        if not isinstance(url, str) or len(url) > 4096 or re.search(r"[\s\x00-\x1f\x7f]", url):
            raise InputError(f"{where}: url = {safe(repr(url), limit=120)} is not a URL", hint=HINT)
        parts = urlsplit(url)
        if parts.username is not None or parts.password is not None:
            raise InputError(
                f"{where}: the URL {safe(redact(url), limit=200)} carries credentials; a lock is copied into "
                "run folders and reports, so it must never hold a secret",
                hint="remove the user/token from the URL and give uv the credentials another way "
                "(UV_INDEX_<NAME>_USERNAME/PASSWORD, a keyring or ~/.netrc)",
            )
        if parts.scheme == "file":
            return Artifact(url, digest, _local(Path(unquote(parts.path)), where, roots, url))
        if parts.scheme not in ("https", "http") or not parts.netloc:
            raise InputError(
                f"{where}: url {safe(redact(url), limit=200)}: only https://, http:// and file:// are accepted",
                hint=HINT,
            )
        return Artifact(url, digest)
    if not isinstance(path, str) or not path or "\x00" in path or len(path) > 4096:
        raise InputError(f"{where}: path = {safe(repr(path), limit=120)} is not a path", hint=HINT)
    if not Path(path).is_absolute():
        raise InputError(
            f"{where}: path = {safe(path, limit=200)} is relative; mw-env installs a lock from a copy, so a "
            "local wheel is named by its absolute path or a file:// URL",
            hint=HINT,
        )
    return Artifact(path, digest, _local(Path(path), where, roots, path))


def _local(path: Path, where: str, roots: list[Path] | None, shown: str) -> Path:
    import os

    resolved = Path(os.path.normpath(path))  # `..` cannot walk out of a wheelhouse
    if roots is not None and not any(resolved.is_relative_to(r) for r in roots):
        inside = ", ".join(str(r) for r in roots) or "none is configured"
        raise InputError(
            f"{where}: the local file {safe(shown, limit=200)} is outside the wheelhouse ({inside})",
            hint="put the wheel into a wheelhouse and pass it with --find-links DIR (or PIP_FIND_LINKS), "
            "or make the lock on this machine",
        )
    return resolved


def _meta(tool: Any, source: str) -> LockMeta:
    table = tool.get("mw-env") if isinstance(tool, dict) else None
    if not isinstance(table, dict):
        raise InputError(
            f"{source}: no [tool.mw-env] table, so the hardware it was made for is unknown",
            hint=f"a plain uv lock can be installed with `uv pip install -r`; for bootstrap, {HINT}",
        )
    where = f"{source}: [tool.mw-env]"
    fmt = table.get("format", FORMAT)
    if fmt != FORMAT or isinstance(fmt, bool):
        raise InputError(
            f"{where} format = {safe(repr(fmt), limit=40)}; this mw-env reads format {FORMAT}",
            hint="use the mw-env version that wrote the lock, or " + HINT,
        )
    values: dict[str, Any] = {}
    keys = {f.replace("_", "-"): f for f in LockMeta.__dataclass_fields__ if f != "env"}
    for key, attr in keys.items():
        value = table.get(key, "")
        if not isinstance(value, str) or len(value) > 1000 or "\x00" in value:
            raise InputError(f"{where} {key} must be a string, got {safe(repr(value), limit=80)}", hint=HINT)
        values[attr] = value
    for key in ("profile", "build", "torch", "python"):
        if not values[key]:
            raise InputError(f"{where} lacks {key}", hint=HINT)
    if values["build"] not in BUILDS:
        raise InputError(
            f"{where} build = {safe(values['build'], limit=40)}", hint=f"allowed: {', '.join(BUILDS)}"
        )
    env = table.get("env", {})
    if not isinstance(env, dict) or len(env) > 200:
        raise InputError(f"{where} env must be a table of at most 200 variables", hint=HINT)
    for k, v in env.items():
        if not _VAR.match(k) or not isinstance(v, str) or "\x00" in v or len(v) > 4096:
            raise InputError(
                f'{where} env: {safe(k, limit=80)} = {safe(repr(v), limit=80)} is not NAME = "text"',
                hint=HINT,
            )
    return LockMeta(**values, env=dict(env))
