"""What changed in a venv since its lock was written: packages added, removed, or at another version.

Read from the venv's dist-info folders (no interpreter started, so the doctor stays fast). The project
itself, installed from a folder (editable or not), is never in a lock and is left out here too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mw_env.venv.lock.lockfile import Lock, normalize


@dataclass(frozen=True)
class Drift:
    added: tuple[tuple[str, str], ...] = ()  # (name, version now)
    removed: tuple[tuple[str, str], ...] = ()  # (name, version locked)
    changed: tuple[tuple[str, str, str], ...] = ()  # (name, version locked, version now)

    @property
    def any(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def lines(self) -> list[str]:
        out = [f"{n} {locked} -> {now} (changed)" for n, locked, now in self.changed]
        out += [f"{n} {v} (added, not in the lock)" for n, v in self.added]
        out += [f"{n} {v} (removed, the lock has it)" for n, v in self.removed]
        return out


def installed(venv: Path) -> dict[str, str]:
    """name -> version of every distribution in the venv's site-packages, the project's folder install aside."""
    from mw_env.venv.venvinfo import site_packages

    site = site_packages(Path(venv))
    found: dict[str, str] = {}
    if site is None:
        return found
    for d in sorted(site.glob("*.dist-info")):
        if not (d / "METADATA").is_file() or from_folder(d):
            continue
        stem = d.name[: -len(".dist-info")]
        name, _, version = stem.rpartition("-")
        if name:
            found[normalize(name)] = version
    return found


def from_folder(dist_info: Path) -> bool:
    """Installed from a local folder (`-e /src/mw-env`, `mw-env @ file:///src/mw-env`): the project."""
    try:
        data = json.loads((dist_info / "direct_url.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "dir_info" in data


def compare(lock: Lock, now: dict[str, str]) -> Drift:
    from packaging.version import InvalidVersion, Version

    def same(a: str, b: str) -> bool:
        try:
            return Version(a) == Version(b)
        except InvalidVersion:
            return a == b

    locked = lock.versions()
    return Drift(
        added=tuple((n, v) for n, v in sorted(now.items()) if n not in locked),
        removed=tuple((n, v) for n, v in sorted(locked.items()) if n not in now),
        changed=tuple((n, v, now[n]) for n, v in sorted(locked.items()) if n in now and not same(v, now[n])),
    )
