"""Truth from the index, before installing: the exact torch the chosen index serves for this Python and platform,
within the profile's range, and the download it states.

A profile's range (">=2.12,<2.15") or pin ("==2.9.1") is what the project was tested with; the index is what
exists today. The newest listed version of the source's build inside the range is installed, pinned exactly,
so the plan shows it and uv cannot pick another. A pin the index no longer has is said plainly, with the
nearest versions it does have.
"""

from __future__ import annotations

import platform as _platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from mw_env.profiles.model import has_local_tag
from mw_env.sources.freshness import public_version

if TYPE_CHECKING:  # the listing itself is imported where an index is asked (not for a wheelhouse's torch)
    from mw_env.sources.indexlist import IndexFile, Listing


@dataclass(frozen=True)
class IndexPick:
    version: str | None  # the exact torch version to install, e.g. "2.14.0+rocm7.14.0"
    listed: tuple[str, ...] = ()  # the source's build on the index for this Python/platform, newest first
    download_bytes: int | None = None  # torch + the device packages, when the index states every size
    sizes_stated: bool = False
    note: str = ""
    problem: str | None = None
    hint: str | None = None
    reason: str = ""  # an IndexAnswerError's reason when the listing failed


def machine_platform() -> str:
    return _platform.machine().lower()


def _nearest(candidates: Sequence[str], spec: SpecifierSet) -> list[str]:
    """Listed versions closest to what `spec` asks for (by release distance), best first."""
    want = [Version(s.version.rstrip(".*")) for s in spec if s.operator in ("==", ">=", "~=", "<=")]
    if not want:
        return list(candidates[:3])

    def distance(v: str) -> tuple[int, ...]:
        p = public_version(v)
        if p is None:
            return (1 << 30,)
        return tuple(
            abs(a - b) for a, b in zip((*p.release, 0, 0)[:3], (*want[0].release, 0, 0)[:3], strict=True)
        )

    return sorted(candidates, key=distance)[:3]


def pick_from_listing(
    listing: Listing,
    *,
    version_spec: str,
    local_tag: str,
    python: str | None,
    platform: str | None = None,
) -> IndexPick:
    """The newest listed torch of the source's build (local tag) inside `version_spec` for this interpreter."""
    platform = platform or machine_platform()
    files = listing.matching(python, platform)
    build = [f for f in files if has_local_tag(f.version, local_tag)]
    listed = tuple(dict.fromkeys(f.version for f in build))
    try:
        spec = SpecifierSet(version_spec or "")
    except InvalidSpecifier:
        spec = SpecifierSet()
    fitting = [
        v for v in listed if (p := public_version(v)) is not None and spec.contains(p, prereleases=True)
    ]
    where = f"{listing.index} for Python {python or '?'} on {platform}"
    if fitting:
        chosen = fitting[0]
        size = next((f.size for f in build if f.version == chosen), None)
        others = f"; it also lists {', '.join(fitting[1:3])}" if len(fitting) > 1 else ""
        return IndexPick(
            chosen,
            listed,
            size,
            size is not None,
            note=f"torch {chosen}: the newest {local_tag or 'build'} release in {version_spec or 'any version'} "
            f"on {listing.index} (Python {python or '?'}, {platform}){others}",
        )
    if listed:
        near = _nearest(listed, spec)
        return IndexPick(
            None,
            listed,
            problem=f"{where} has no torch {version_spec}{local_tag}: it lists {', '.join(near)}"
            + (f" (and {len(listed) - len(near)} more)" if len(listed) > len(near) else ""),
            hint=f"the nearest the index has is {near[0]}; if it is acceptable, pass --source with another of "
            "the profile's sources, or a user profile with that version (`mw-env profiles --check` shows what "
            "changed)",
        )
    pythons = ", ".join(listing.pythons()) or "none"
    other = sorted({f.version for f in listing.files if has_local_tag(f.version, local_tag)})
    return IndexPick(
        None,
        (),
        problem=f"{where} lists no torch{local_tag} wheel"
        + (f" (its {local_tag} wheels are for {pythons}; versions {', '.join(other[-3:])})" if other else ""),
        hint="pass --python with a version the index has wheels for, or another --source",
    )


def pick_from_index(
    index: str,
    *,
    version_spec: str,
    local_tag: str,
    python: str | None,
    device_packages: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> IndexPick:
    """pick_from_listing on the live index, plus the device packages' download when the index states it."""
    from mw_env.sources.indexlist import IndexAnswerError, list_project

    try:
        listing = list_project(index, "torch", env=env, timeout=timeout)
    except IndexAnswerError as exc:
        if exc.reason == "auth":
            # Credentials uv has (its own configuration, keyring) but this listing does not: uv resolves the range.
            return IndexPick(
                None, note=f"{exc.message}: uv resolves {version_spec} itself", reason=exc.reason
            )
        return IndexPick(None, problem=exc.message, hint=exc.hint, reason=exc.reason)
    pick = pick_from_listing(listing, version_spec=version_spec, local_tag=local_tag, python=python)
    if pick.version is None or not device_packages:
        return pick
    total = pick.download_bytes
    for name in device_packages:
        try:
            files: list[IndexFile] = list_project(index, name, env=env, timeout=timeout).matching(python)
        except IndexAnswerError as exc:
            return IndexPick(
                None,
                pick.listed,
                problem=f"the torch index has no {name}, the GPU's kernel package: {exc.message}",
                hint="the GPU's arch may be missing from this index: `mw-env profiles --check`, or "
                "--all-devices, or another --source",
                reason=exc.reason,
            )
        same = [f for f in files if f.version == pick.version] or files
        size = same[0].size if same else None
        total = None if total is None or size is None else total + size
    return IndexPick(pick.version, pick.listed, total, total is not None, pick.note)
