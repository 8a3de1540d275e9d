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
from collections.abc import Iterable, Mapping
from pathlib import Path

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


def sole_candidate(path: Path, folders: Iterable[str], python: str) -> bool:
    """Whether `path` is the only wheel of its name and version in `folders` that this venv's Python (`python`,
    "3.11.7") could install, as the wheelhouse reader lists them (other machines' builds skipped): then it is
    the file uv took. A find-links page on a server may list more: then False, and uv decides."""
    from mw_env.sources.wheelhouse import local_dir, wheels_in

    try:
        name, version, _, _ = parse_wheel_filename(path.name)
    except (InvalidWheelFilename, InvalidVersion):
        return False
    folders = list(folders)
    if any(local_dir(f) is None for f in folders):
        return False
    major, minor = python.split(".")[:2]
    seen = {
        w.path.resolve()
        for w in wheels_in(folders, str(name))
        if Version(w.version) == version and _fits_python(w.path, major, minor)
    }
    return seen == {path.resolve()}


def _fits_python(wheel: Path, major: str, minor: str) -> bool:
    """Conservative: False only for a build for another CPython (an abi3 build fits every later one)."""
    for tag in parse_wheel_filename(wheel.name)[3]:
        if tag.abi == "abi3" or not tag.interpreter.startswith(("cp", "pp")):
            return True
        if tag.interpreter[2:] in (f"{major}{minor}", major):
            return True
    return False


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
