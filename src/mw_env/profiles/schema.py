"""Profile YAML -> Profile: the sections of a profile file and their rules (docs/profiles.md, "Writing your own").

The field types (profiles/model.py) are the schema, checked by mw_env.base.typed; this module adds what a type
cannot say: the per-field rules (patterns, ranges: RULES) and the rules that span fields (a source's tag and
archs against its build, unique source ids). Every failure reads `profile FILE: dotted.key: problem` +
`hint: allowed: ...` (`Ctx`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

from mw_env.base.errors import InputError
from mw_env.base.typed import Issue, Policy, Reader, Rule
from mw_env.profiles.model import (
    ArchOverride,
    DeviceSpec,
    DoctorExpectations,
    Dtype,
    Match,
    Profile,
    TorchSource,
)

# Variables a profile may not set in `env`: select() derives them from data (the GPU vs the chosen wheel).
DERIVED_ENV = ("HSA_OVERRIDE_GFX_VERSION", "HIP_VISIBLE_DEVICES")

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_GFX_RE = re.compile(r"^gfx[0-9]{1,2}[0-9a-f]{2,3}$")
_SM_RE = re.compile(r"^sm_[0-9]{2,3}a?$")
_OVERRIDE_RE = re.compile(r"^[0-9]{1,2}\.[0-9]{1,2}\.[0-9]{1,2}$")
_DOTTED_RE = re.compile(r"^[0-9]+(\.[0-9]+){0,3}$")
_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_URL_RE = re.compile(r"^(https?|file)://[^\s]+$")
# Clauses of an operator and a release number (">=2.9,<2.15", "==2.9.1"): valid PEP 440 specifiers by their
# form, so they need not import packaging (with packaging.tags, platform and logging: ~10 ms of every
# command's start-up). Anything else, and every refusal, is packaging's verdict.
_PLAIN_CLAUSE = r"(?:==|!=|>=|<=|<|>)[0-9]+(?:\.[0-9]+)*|~=[0-9]+(?:\.[0-9]+)+"
_PLAIN_SPEC_RE = re.compile(rf"^(?:{_PLAIN_CLAUSE})(?:,(?:{_PLAIN_CLAUSE}))*$")

# YAML reads `min_hip: 6.2` as a float and a bare `key:` as null: a profile means the text and the default.
POLICY = Policy(numbers_as_text=True, null_is_default=True)
SKIP: dict[type, tuple[str, ...]] = {Profile: ("path", "shipped")}  # set by the loader, never by the file


class Ctx:
    """Where we are in which file, for error messages."""

    def __init__(self, path: Path, what: str = "profile") -> None:
        self.path = path
        self.what = what  # "profile", or "source catalogue" (sources.yaml)

    def fail(self, key: str, problem: str, allowed: str | None = None) -> InputError:
        msg = f"{self.what} {self.path}: {key or '(top level)'}: {problem}"
        hint = f"allowed: {allowed}" if allowed else "see docs/profiles.md for the profile format"
        return InputError(msg, hint=hint)

    def render(self, issue: Issue) -> InputError:
        allowed = issue.allowed
        if issue.kind == "unknown" and issue.suggestions:
            allowed = f"{allowed} (did you mean {', '.join(issue.suggestions)}?)"
        return self.fail(issue.key, issue.problem, allowed)


def _positive(value: Any) -> str | None:
    return None if value > 0 else f"must be a positive number, got {value!r}"


def _gfx_or_star(value: str) -> str | None:
    return None if value == "*" or _GFX_RE.fullmatch(value) else f"invalid value {value!r}"


def _url(value: str) -> str | None:
    return None if _URL_RE.fullmatch(value) else f"invalid URL {value!r}"


def _arch(value: str) -> str | None:
    return None if _GFX_RE.fullmatch(value) or _SM_RE.fullmatch(value) else f"invalid value {value!r}"


def _specifier(text: str) -> str | None:
    if _PLAIN_SPEC_RE.fullmatch(text):
        return None
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        SpecifierSet(text)
    except InvalidSpecifier:
        return f"invalid version specifier {text!r}"
    if not re.match(r"^\s*(==|>=|<=|~=|<|>|!=)", text):
        return f"{text!r} must start with an operator"
    return None


def _urls(value: Mapping[str, tuple[str, ...]]) -> str | None:
    for fact, urls in value.items():
        if not urls:
            return f"{fact}: at least one URL"
        bad = [u for u in urls if not re.fullmatch(r"https?://\S+", u)]
        if bad:
            return f"{fact}: {bad[0]!r} is not an http(s) URL"
    return None


def _reasons(value: Mapping[str, str]) -> str | None:
    empty = [fact for fact, why in value.items() if not why.strip()]
    return f"{empty[0]}: say why it is inferred" if empty else None


def _sources(value: tuple[TorchSource, ...]) -> str | None:
    return None if value else "at least one torch source is required"


_URL_ALLOWED = "an http(s):// or file:// URL, or null"
_OVERRIDE_ALLOWED = 'major.minor.stepping, e.g. "10.3.0"'

RULES: dict[tuple[type, str], Rule] = {
    (Profile, "name"): Rule.pattern(_NAME_RE, "lower-case letters, digits, '.', '_', '-' (e.g. gfx1103)"),
    (Profile, "sources"): Rule(
        _sources, "at least one torch source: ids from the source catalogue (sources.yaml), or mappings"
    ),
    (Profile, "hsa_override_when_missing"): Rule.pattern(_OVERRIDE_RE, 'major.minor.stepping, e.g. "11.0.0"'),
    (Profile, "aliases"): Rule.pattern(_NAME_RE, "lower-case names", each=True),
    (Match, "vendor"): Rule(lambda _: None, "amd, nvidia, null (no GPU: the cpu profile)"),
    (Match, "gfx"): Rule(_gfx_or_star, 'a gfx target such as "gfx1103", or "*" for any', each=True),
    (Match, "exclude"): Rule.pattern(_GFX_RE, 'gfx targets, e.g. "gfx1033"', each=True),
    (Match, "pci_ids"): Rule.pattern(
        r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{4}$", 'vendor:device in hex, e.g. "1002:15bf"', each=True
    ),
    (TorchSource, "id"): Rule.pattern(_NAME_RE, "lower-case letters, digits, '.', '_', '-'"),
    (TorchSource, "index_url"): Rule(_url, _URL_ALLOWED),
    (TorchSource, "extra_index_urls"): Rule(_url, _URL_ALLOWED, each=True),
    (TorchSource, "version"): Rule(_specifier, 'a PEP 440 specifier such as "==2.9.1" or ">=2.11,<2.14"'),
    (TorchSource, "runtime_version"): Rule.pattern(_DOTTED_RE, 'e.g. "6.4"'),
    (TorchSource, "min_driver"): Rule.pattern(_DOTTED_RE, 'e.g. "525.60.13"'),
    (TorchSource, "newest_torch"): Rule.pattern(_DOTTED_RE, '"2.14"'),
    (TorchSource, "download_gb"): Rule(_positive, "the stated download in GB, e.g. 1.1"),
    (TorchSource, "installed_gb"): Rule(_positive, "the stated installed size in GB, e.g. 5.7"),
    (TorchSource, "serves"): Rule.pattern(
        r"^[a-z0-9*][a-z0-9._*-]*$", 'project names, "*" a wildcard, e.g. "amd-torch-device-*"', each=True
    ),
    (TorchSource, "replaced_by"): Rule.pattern(_NAME_RE, "the id of another source of this profile"),
    (TorchSource, "pythons"): Rule.pattern(r"^cp3[0-9]{1,2}t?$", 'CPython tags, e.g. "cp312"', each=True),
    (TorchSource, "evidence"): Rule(
        _urls, "a mapping of a fact (arch_list, version, local_tag, ...) to the http(s) URLs that show it"
    ),
    (TorchSource, "inferred"): Rule(
        _reasons,
        "a mapping of a fact (arch_list, version, ...) to why it is inferred and what would confirm it",
    ),
    (DeviceSpec, "extra"): Rule.pattern(
        r"^$|^[a-z0-9-]*\{gfx\}[a-z0-9-]*$", 'e.g. "device-{gfx}", or "" (none)'
    ),
    (DeviceSpec, "all_extra"): Rule.pattern(r"^[a-z0-9][a-z0-9-]*$", 'e.g. "device-all"'),
    (DeviceSpec, "kernels"): Rule.pattern(
        r"^[a-z0-9][a-z0-9-]*\{gfx\}[a-z0-9-]*$", 'a package name with {gfx}, e.g. "amd-torch-device-{gfx}"'
    ),
    (DoctorExpectations, "device_nodes"): Rule.pattern(
        r"^/dev/\S+$", 'absolute /dev paths or globs, e.g. "/dev/kfd", "/dev/dri/renderD*"', each=True
    ),
    (DoctorExpectations, "min_hip"): Rule.pattern(_DOTTED_RE, 'e.g. "6.2"'),
    (DoctorExpectations, "min_cuda"): Rule.pattern(_DOTTED_RE, 'e.g. "12.6"'),
    (DoctorExpectations, "arch"): Rule(_arch, 'a gfx target or sm_XX, e.g. "gfx1103", or null'),
    (DoctorExpectations, "expected_tflops"): Rule(
        _positive, f"{{dtype: TFLOP/s}}, dtypes {', '.join(get_args(Dtype))}", each=True
    ),
    (DoctorExpectations, "expected_tflops_by_gpu"): Rule(
        _positive, "a mapping of GPU-name substring to {dtype: TFLOP/s}", each=True
    ),
    (DoctorExpectations, "probe_timeout_s"): Rule(_positive),
    (DoctorExpectations, "catalogue"): Rule(
        lambda _: None, "id, pattern, severity, title, cause, fix, source (docs/troubleshooting.md)"
    ),
    (ArchOverride, "gfx"): Rule.pattern(_GFX_RE, 'e.g. "gfx1031"'),
    (ArchOverride, "hsa_override"): Rule.pattern(_OVERRIDE_RE, _OVERRIDE_ALLOWED),
}


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
