"""Tables that check themselves: each torch source compared with what its index serves today.

`mw-env profiles --check` lists every source's index (or a recorded snapshot of it: a folder laid out like the
index, `<snapshots>/<source id>/`) and prints the rows that went stale: a newer torch than the row knows, no torch
in the row's range any more, local tags that moved, device packages the row lacks or claims, Python tags. An
index that does not answer is "not checked", never a failure: the table stays what it was.

A row's `inferred` facts (sources.yaml) are checked where the index can show them: an arch list by the index's
per-GPU device packages, or by the per-arch library files in the newest bundling wheel's file list (read from the
zip's directory, sources/wheelfiles.py); a version or local tag by the listing. Each is reported as confirmed,
contradicted (a stale row) or not confirmable from here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from mw_env.profiles.model import Profile, TorchSource, has_local_tag


@dataclass(frozen=True)
class SourceCheck:
    profile: str  # the first profile naming the source
    source: str
    index: str
    status: str  # "fresh" | "stale" | "not checked"
    findings: tuple[str, ...] = ()
    versions: tuple[str, ...] = ()  # the torch versions of the row's build the index lists, newest first
    profiles: tuple[str, ...] = ()  # every profile naming it (one catalogue entry, checked once)
    inferred: tuple[str, ...] = ()  # what became of each inferred fact: confirmed, or why it could not be

    def to_dict(self) -> dict[str, object]:
        return {
            "profile": self.profile,
            "profiles": list(self.profiles or (self.profile,)),
            "source": self.source,
            "index": self.index,
            "status": self.status,
            "findings": list(self.findings),
            "versions": list(self.versions),
            "inferred": list(self.inferred),
        }


class _Listing(NamedTuple):
    versions: list[str]  # every torch version listed
    pythons: list[str]
    projects: set[str] | None
    wheels: list[tuple[str, str]]  # (version, url) of each torch wheel, newest first


def public_version(v: str) -> Version | None:
    """ "2.6.0+rocm6.2" as Version("2.6.0"); None for what is no version."""
    try:
        return Version(Version(v).public)
    except InvalidVersion:
        return None


def compare(
    src: TorchSource, torch_versions: Sequence[str], pythons: Sequence[str], projects: set[str] | None
) -> list[str]:
    """What in the row `src` disagrees with an index that lists these torch versions, cp tags and projects."""
    out: list[str] = []
    tagged = [v for v in torch_versions if has_local_tag(v, src.local_tag)]
    if not tagged:
        tags = sorted({v.split("+", 1)[1] for v in torch_versions if "+" in v})
        out.append(
            f"no torch with the local tag {src.local_tag} on the index"
            + (f" (it has {', '.join('+' + t for t in tags[:6])})" if tags else "")
        )
        return out
    try:
        spec = SpecifierSet(src.version)
    except InvalidSpecifier:
        spec = SpecifierSet()
    in_range = [
        v for v in tagged if (p := public_version(v)) is not None and spec.contains(p, prereleases=True)
    ]
    if not in_range:
        out.append(f"no torch in the row's range {src.version} (the index has {', '.join(tagged[:4])})")
    newest = max((p for v in tagged if (p := public_version(v)) is not None), default=None)
    if newest is not None and src.newest_torch:
        known = public_version(src.newest_torch)
        if known is not None and (newest.major, newest.minor) > (known.major, known.minor):
            where = "inside" if spec.contains(newest, prereleases=True) else "outside"
            out.append(
                f"the index has torch {newest}, newer than the row's newest_torch {src.newest_torch} "
                f"({where} its range {src.version})"
            )
    if src.pythons and pythons:
        new = sorted(set(pythons) - set(src.pythons))
        gone = sorted(set(src.pythons) - set(pythons))
        if new:
            out.append(f"the index also has wheels for {', '.join(new)} (row: {', '.join(src.pythons)})")
        if gone:
            out.append(f"the index has no wheels for {', '.join(gone)} any more")
    if projects is not None and src.devices is not None and src.devices.extra:
        names = {src.devices.package_for(g): g for g in src.arch_list}
        missing = sorted(g for n, g in names.items() if n not in projects)
        prefix = src.devices.package_for("")
        # Arch packages only: AMD's family packages (amd-torch-device-gfx11, -gfx12-0) are not a gfx target.
        extra = sorted(
            p[len(prefix) :]
            for p in projects
            if p.startswith(prefix) and p not in names and re.fullmatch(r"gfx[0-9a-f]{3,4}", p[len(prefix) :])
        )
        if missing:
            out.append(
                f"arch_list claims {', '.join(missing)} but the index has no {prefix}<gfx> package for it"
            )
        if extra:
            out.append(f"the index has device packages for {', '.join(extra)}, missing from arch_list")
    return out


def check_profiles(
    profiles: Mapping[str, Profile],
    *,
    snapshots: Path | None = None,
    timeout: float = 8.0,
    names: Sequence[str] = (),
) -> list[SourceCheck]:
    """Every source of the named profiles (all by default), each source checked once (with the profiles naming
    it), each index listed once."""
    from mw_env.sources.indexlist import IndexAnswerError, list_project, list_projects

    cache: dict[str, _Listing | str] = {}

    def listing(src: TorchSource) -> _Listing | str:
        index = str(snapshots / src.id) if snapshots is not None else (src.index_url or "")
        key = index
        if key in cache:
            return cache[key]
        if snapshots is not None and not (snapshots / src.id).is_dir():
            cache[key] = f"no recorded snapshot {snapshots / src.id}"
            return cache[key]
        try:
            torch = list_project(index, "torch", timeout=timeout)
        except IndexAnswerError as exc:
            cache[key] = exc.message
            return cache[key]
        projects: set[str] | None
        try:
            projects = list_projects(index, timeout=timeout) if src.devices is not None else None
        except IndexAnswerError:
            projects = None  # the root page is optional: a per-project listing still checks the versions
        wheels = [(f.version, f.url) for f in torch.matching()]
        cache[key] = _Listing(torch.versions(), torch.pythons(), projects, wheels)
        return cache[key]

    # Each source once (a catalogue entry is named by several profiles), with every profile naming it.
    rows: dict[tuple[str, str], tuple[TorchSource, list[str]]] = {}
    for p in sorted(profiles.values(), key=lambda p: p.name):
        if names and p.name not in names:
            continue
        for src in p.sources:
            if src.index_url:
                rows.setdefault((src.id, src.index_url), (src, []))[1].append(p.name)
    out: list[SourceCheck] = []
    for src, named in rows.values():
        got = listing(src)
        shown = str(src.index_url) if snapshots is None else f"{src.index_url} (snapshot)"
        if isinstance(got, str):
            unread = tuple(
                f"{fact} is inferred, not confirmed: the index was not read" for fact in src.inferred
            )
            out.append(
                SourceCheck(
                    named[0], src.id, shown, "not checked", (got,), profiles=tuple(named), inferred=unread
                )
            )
            continue
        findings = compare(src, got.versions, got.pythons, got.projects)
        tagged = tuple(v for v in got.versions if has_local_tag(v, src.local_tag))
        # A recorded snapshot's wheel links point nowhere: only a wheel inside the snapshot folder is read.
        verdicts, contradicted = confirm_inferred(src, got, timeout=timeout, local_only=snapshots is not None)
        findings += contradicted
        status = "stale" if findings else "fresh"
        out.append(
            SourceCheck(
                named[0], src.id, shown, status, tuple(findings), tagged, tuple(named), tuple(verdicts)
            )
        )
    return out


def confirm_inferred(
    src: TorchSource, got: _Listing, *, timeout: float, local_only: bool = False
) -> tuple[list[str], list[str]]:
    """(what became of each inferred fact, the contradictions among them) against what the index shows."""
    verdicts: list[str] = []
    wrong: list[str] = []
    tagged = [v for v in got.versions if has_local_tag(v, src.local_tag)]
    for fact in src.inferred:
        if fact == "arch_list":
            said, contra = _confirm_archs(src, got, timeout=timeout, local_only=local_only)
            verdicts.append(said)
            wrong += contra
        elif fact in ("version", "local_tag", "newest_torch"):
            if tagged:
                verdicts.append(f"{fact} confirmed by the listing: {', '.join(tagged[:3])}")
            else:
                verdicts.append(
                    f"{fact} is inferred and the listing does not confirm it (no {src.local_tag} torch)"
                )
        else:
            verdicts.append(f"{fact} is inferred: an index listing cannot show it")
    return verdicts, wrong


def _confirm_archs(
    src: TorchSource, got: _Listing, *, timeout: float, local_only: bool
) -> tuple[str, list[str]]:
    from mw_env.sources.wheelfiles import WheelFilesError, archs_in, wheel_names

    listed = set(src.arch_list)
    if src.devices is not None and src.devices.extra and got.projects is not None:
        have = {g for g in listed if src.devices.package_for(g) in got.projects}
        if have == listed:
            return "arch_list confirmed: the index has a device package for every arch", []
        missing = ", ".join(sorted(listed - have))
        return f"arch_list contradicted: no device package for {missing}", [
            f"the inferred arch_list claims {missing}"
        ]
    wheels = [(v, url) for v, url in got.wheels if has_local_tag(v, src.local_tag)]
    if not wheels:
        return "arch_list is inferred and not confirmed: no wheel of the row's tag to read", []
    version, url = wheels[0]
    if local_only and not url.startswith("file://"):
        return (
            "arch_list is inferred and not confirmed: the snapshot holds no wheel to read (only its name)",
            [],
        )
    try:
        found = set(archs_in(wheel_names(url, timeout=timeout)))
    except WheelFilesError as exc:
        return f"arch_list is inferred and not confirmed: {exc}", []
    if not found:
        return (
            f"arch_list is inferred and not confirmed: torch {version}'s wheel carries no per-arch library files "
            "(its kernels are inside libtorch_hip.so; the installed wheel's arch list decides)",
            [],
        )
    if found == listed:
        return f"arch_list confirmed by torch {version}'s own files", []
    diff = []
    if found - listed:
        diff.append(f"the wheel also has {', '.join(sorted(found - listed))}")
    if listed - found:
        diff.append(f"the wheel lacks {', '.join(sorted(listed - found))}")
    said = f"arch_list contradicted by torch {version}'s own files: {'; '.join(diff)}"
    return said, [said]
