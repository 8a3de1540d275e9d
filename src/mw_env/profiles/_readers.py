"""The per-field rules of profile YAML that a type cannot say (patterns, ranges), and how a failure reads.

The types in profiles/model.py are the schema (mw_env.base.typed checks them); this module adds the patterns and
renders every Issue as `profile FILE: dotted.key: problem` + `hint: allowed: ...`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

from mw_env.base.errors import InputError
from mw_env.base.typed import Issue, Policy, Rule
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
