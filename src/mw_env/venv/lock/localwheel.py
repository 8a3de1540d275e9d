"""The lock entry of a wheel bootstrap installed from a local wheelhouse, written without `uv pip compile`.

Why: for a wheel found through `--find-links` uv unpacks the whole archive to hash it on every compile (0.8 s
of the 1.1 s lock step for the CPU torch; a GPU build is ten times larger). Bootstrap knows the very file it
installed and hashes it while the extras install (sources/wheelhash.py), so the entry is written here, in
the form uv writes it (tests/venv compare the two byte for byte), and uv locks everything else.

Only where the entry is certain: the installed distribution carries exactly that file's version and tags,
and no other wheel of that version in the folders uv would search could have been uv's choice (another
Python's or another machine's builds aside). Otherwise uv locks it, as before.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

# What uv leaves as it is in a file URL's path (the url crate's path-segment set: C0 controls, DEL and
# non-ASCII, space, " # % < > ? ` { } are percent-encoded; the rest of printable ASCII is kept).
_KEEP = frozenset(chr(c) for c in range(0x21, 0x7F)) - set('"#%<>?`{}')


def file_url(path: Path) -> str:
    """`file:///…` for an absolute path, percent-encoded the way uv writes it in a pylock.toml."""
    out = []
    for ch in str(path):
        if ch in _KEEP or ch == "/":
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogateescape"))
    return "file://" + "".join(out)


def entry(name: str, version: str, path: Path, sha256: str) -> str:
    """One `[[packages]]` block, as uv writes it for a wheel found in a --find-links folder."""
    url = json.dumps(file_url(path), ensure_ascii=False)
    return (
        f"[[packages]]\nname = {json.dumps(name)}\nversion = {json.dumps(version)}\n"
        f'wheels = [{{ url = {url}, hashes = {{ sha256 = "{sha256}" }} }}]\n'
    )


def installed_from(site: Path | None, path: Path) -> bool:
    """Whether the venv's distribution of that wheel carries exactly its version and tags (its WHEEL file)."""
    if site is None:
        return False
    try:
        name, version, _, tags = parse_wheel_filename(path.name)
    except (InvalidWheelFilename, InvalidVersion):
        return False
    for d in site.glob("*.dist-info"):
        stem, _, found = d.name[: -len(".dist-info")].rpartition("-")
        if canonicalize_name(stem) != name:
            continue
        try:
            same = Version(found) == version
            text = (d / "WHEEL").read_text(encoding="utf-8")
        except (InvalidVersion, OSError, UnicodeDecodeError):
            return False
        listed = {ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Tag:")}
        return same and listed == {str(t) for t in tags}
    return False


def sole_candidate(path: Path, folders: Iterable[str], python: str, machine: str | None = None) -> bool:
    """Whether `path` is the only wheel of its name and version in `folders` (local folders; URLs are not
    read) that this venv's Python (`python`, "3.11.7") and machine could install: then it is the file uv took."""
    try:
        name, version, _, _ = parse_wheel_filename(path.name)
    except (InvalidWheelFilename, InvalidVersion):
        return False
    machine = machine or platform.machine()
    major, minor = python.split(".")[:2]
    seen: set[Path] = set()
    for folder in folders:
        local = _local_folder(folder)
        if local is None:
            if "://" in folder:  # a find-links page on a server: it may list more wheels; let uv decide
                return False
            continue
        try:
            files = [p for p in local.iterdir() if p.name.endswith(".whl")]
        except OSError:
            continue
        for f in files:
            try:
                n, v, _, tags = parse_wheel_filename(f.name)
            except (InvalidWheelFilename, InvalidVersion):
                continue
            if n != name or v != version:
                continue
            if any(_could_fit(t.interpreter, t.platform, major, minor, machine) for t in tags):
                seen.add(f.resolve())
    return seen == {path.resolve()}


def _local_folder(folder: str) -> Path | None:
    if folder.startswith("file:"):
        return Path(unquote(urlsplit(folder).path))
    if "://" in folder:
        return None
    p = Path(folder).expanduser()
    return p if p.is_dir() else None


def _could_fit(interpreter: str, plat: str, major: str, minor: str, machine: str) -> bool:
    """Conservative: False only for another CPython's build or another machine's platform."""
    if interpreter.startswith(("cp", "pp")) and interpreter[2:] not in ("", f"{major}{minor}", major):
        return False
    if plat == "any":
        return True
    return plat.endswith(machine) and plat.startswith(("linux", "manylinux", "musllinux"))


def local_entries(
    pins: Mapping[str, str], wheels: Iterable[Path], *, site: Path | None, folders: Iterable[str], python: str
) -> dict[str, Path]:
    """normalized name -> file, for each of `wheels` whose entry this module may write (see the docstring)."""
    from mw_env.venv.lock.lockfile import normalize

    folders = list(folders)
    out: dict[str, Path] = {}
    for path in wheels:
        try:
            name, version, _, _ = parse_wheel_filename(path.name)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        pinned = pins.get(normalize(str(name)))
        if pinned is None or Version(pinned) != version or not path.is_file():
            continue
        if installed_from(site, path) and sole_candidate(path, [*folders, str(path.parent)], python):
            out[normalize(str(name))] = path
    return out
