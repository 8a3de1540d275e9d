"""Profile YAML -> Profile: the sections of a profile file and their rules (docs/profiles.md, "Writing your own").

The field types (profiles/model.py) and the per-field rules (_readers.py) are checked by mw_env.base.typed; what
is left here are the rules that span fields (a source's tag and archs against its build, unique source ids).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mw_env.base.typed import Reader
from mw_env.profiles._readers import (
    _ENV_KEY_RE,
    _GFX_RE,
    _SM_RE,
    DERIVED_ENV,
    POLICY,
    RULES,
    SKIP,
    Ctx,
)
from mw_env.profiles.model import Match, Profile, TorchSource


def _check_match(ctx: Ctx, match: Match) -> Match:
    if match.vendor is None and (match.gfx or match.pci_ids):
        raise ctx.fail("match", "gfx/pci_ids need a vendor", "vendor: amd or nvidia")
    return dataclasses.replace(match, pci_ids=tuple(p.lower() for p in match.pci_ids))


def _check_source(ctx: Ctx, s: TorchSource, key: str) -> None:
    prefix = {"rocm": "+rocm", "cuda": "+cu", "cpu": "+cpu"}[s.build]
    if not s.local_tag.startswith(prefix):
        raise ctx.fail(
            f"{key}.local_tag",
            f"{s.local_tag!r} does not fit build {s.build!r}",
            f"a tag starting with {prefix!r}",
        )
    arch_re, arch_allowed = (_SM_RE, 'e.g. "sm_86"') if s.build == "cuda" else (_GFX_RE, 'e.g. "gfx1100"')
    for i, arch in enumerate(s.arch_list):
        if not arch_re.fullmatch(arch):
            raise ctx.fail(f"{key}.arch_list[{i}]", f"invalid value {arch!r}", arch_allowed)
    if s.build == "cpu" and s.arch_list:
        raise ctx.fail(f"{key}.arch_list", "a cpu build has no GPU archs", "an empty list")
    if s.build != "cpu" and not s.arch_list:
        raise ctx.fail(
            f"{key}.arch_list", "is required for a GPU build (it decides the override and the match)"
        )
    if s.devices is not None and s.build != "rocm":
        raise ctx.fail(f"{key}.devices", "per-GPU device packages exist only for rocm builds", "remove it")
    if s.replaced_by is not None and not s.retired:
        raise ctx.fail(
            f"{key}.replaced_by", "only a retired source is replaced", "retired: <why>, or no replaced_by"
        )
    if s.build == "cuda" and s.min_driver is None:
        raise ctx.fail(f"{key}.min_driver", "is required for a cuda build", 'e.g. "525.60.13"')
    for fact in s.inferred:
        if fact == "arch_list" and not s.arch_list:
            raise ctx.fail(
                f"{key}.inferred.{fact}", "marks a fact the source does not state", "a stated fact"
            )


def _check_sources(ctx: Ctx, sources: tuple[TorchSource, ...]) -> None:
    for i, source in enumerate(sources):
        _check_source(ctx, source, f"sources[{i}]")
    ids = [s.id for s in sources]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ctx.fail("sources", f"duplicate source id(s): {', '.join(dupes)}", "unique ids")
    if sum(s.default for s in sources) > 1:
        raise ctx.fail("sources", "more than one source has default: true", "at most one default")
    for i, s in enumerate(sources):
        if s.replaced_by is not None and s.replaced_by not in ids:
            raise ctx.fail(
                f"sources[{i}].replaced_by", f"no source {s.replaced_by!r}", f"one of {', '.join(ids)}"
            )
        if s.default and (s.retired or s.channel == "nightly"):
            raise ctx.fail(
                f"sources[{i}].default",
                "a retired or nightly source cannot be the default",
                "a stable source",
            )
        deciding = sorted({"arch_list", "version", "local_tag"} & set(s.inferred))
        if s.default and deciding:
            raise ctx.fail(
                f"sources[{i}].default",
                f"an inferred fact never decides a default, and {s.id}'s {', '.join(deciding)} is inferred",
                "a source whose arch list, version and local tag a public source shows",
            )


def _check_env(ctx: Ctx, env: Mapping[str, str]) -> None:
    for k in env:
        if not _ENV_KEY_RE.fullmatch(k):
            raise ctx.fail(
                f"env.{k}", "invalid variable name", "letters, digits and '_', not starting with a digit"
            )
        if k in DERIVED_ENV:
            raise ctx.fail(
                f"env.{k}",
                "is derived by mw-env from the GPU and the chosen wheel, never set by a profile",
                "hsa_override_when_missing / arch_overrides (docs/profiles.md)",
            )


def _check_catalogue(ctx: Ctx, entries: tuple[Mapping[str, Any], ...]) -> None:
    # Shape only: mw_env.checks.catalogue checks the entries in full when the doctor loads them.
    for i, entry in enumerate(entries):
        if not entry:
            raise ctx.fail(
                f"doctor.catalogue[{i}]",
                "must be a mapping",
                "id, pattern, severity, title, cause, fix, source (docs/troubleshooting.md)",
            )


def check_source_entry(entry: Mapping[str, object], *, path: Path, key: str) -> TorchSource:
    """One source catalogue entry (sources.yaml) read and checked as a profile's source is."""
    ctx = Ctx(path, "source catalogue")
    source: TorchSource = Reader(ctx.render, policy=POLICY, rules=RULES, skip=SKIP).read(
        TorchSource, entry, key
    )
    _check_source(ctx, source, key)
    return source


def parse_profile(data: Any, *, path: Path, shipped: bool = False) -> Profile:
    """Build a Profile from parsed YAML, raising InputError naming `path`, the key and the allowed values.
    Its sources are whole by now: the loader put the source catalogue's entries in place of the ids
    (torchsources.expand)."""
    ctx = Ctx(path)
    reader = Reader(ctx.render, policy=POLICY, rules=RULES, skip=SKIP)
    if data is None or (isinstance(data, Mapping) and not data):
        raise ctx.fail("(top level)", "empty profile", f"keys {', '.join(reader.names(Profile))}")
    if isinstance(data, Mapping):
        # Optional in a file though the dataclass has no default: the name stands in for a missing description,
        # and no `match:` matches nothing (a profile chosen only by --profile).
        data = dict(data)
        if data.get("match") is None:
            data["match"] = {}
        if data.get("description") in (None, ""):
            data["description"] = data.get("name")
    profile: Profile = reader.read(Profile, data, path=path, shipped=shipped)
    match = _check_match(ctx, profile.match)
    _check_sources(ctx, profile.sources)
    if (profile.hsa_override_when_missing or profile.arch_overrides) and {
        s.build for s in profile.sources
    } != {"rocm"}:
        raise ctx.fail(
            "hsa_override_when_missing", "overrides only apply to profiles whose sources are all rocm"
        )
    _check_env(ctx, profile.env)
    _check_catalogue(ctx, profile.doctor.catalogue)
    return dataclasses.replace(profile, match=match)
