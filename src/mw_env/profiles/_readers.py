"""Strict typed readers for profile YAML: every failure names the file, the dotted key and what is allowed."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from mw_env.errors import InputError

BUILDS = ("rocm", "cuda", "cpu")
VENDORS = ("amd", "nvidia")
PRECISIONS = ("fp32", "bf16", "fp16")
SDPA_BACKENDS = ("math", "flash", "efficient", "auto")
DEVICES = ("cuda", "cpu")
HOST_KINDS = ("amd", "nvidia", "none")
DTYPES = ("fp32", "tf32", "bf16", "fp16")
# Variables a profile may not set in `env`: select() derives them from data (the GPU vs the chosen wheel).
DERIVED_ENV = ("HSA_OVERRIDE_GFX_VERSION", "HIP_VISIBLE_DEVICES")

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_GFX_RE = re.compile(r"^gfx[0-9]{1,2}[0-9a-f]{2,3}$")
_SM_RE = re.compile(r"^sm_[0-9]{2,3}a?$")
_PCI_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{4}$")
_OVERRIDE_RE = re.compile(r"^[0-9]{1,2}\.[0-9]{1,2}\.[0-9]{1,2}$")
_DOTTED_RE = re.compile(r"^[0-9]+(\.[0-9]+){0,3}$")
_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

T = TypeVar("T")

_TOP_KEYS = {
    "name": "profile name",
    "description": "one line",
    "aliases": "other names",
    "match": "which hardware",
    "sources": "torch sources",
    "env": "runtime env",
    "doctor": "doctor expectations",
    "trainer": "trainer defaults",
    "host": "host passthrough",
    "arch_overrides": "archs run with an override",
    "hsa_override_when_missing": "override when the wheel lacks the arch",
    "notes": "notes",
    "refs": "sources of the facts",
}
_MATCH_KEYS = ("vendor", "gfx", "pci_ids", "priority")
_SOURCE_KEYS = (
    "id",
    "build",
    "index_url",
    "version",
    "local_tag",
    "runtime_version",
    "arch_list",
    "min_driver",
    "newest_torch",
    "ptx",
    "companions",
    "extra_index_urls",
    "default",
    "note",
    "refs",
)
_DOCTOR_KEYS = (
    "device_nodes",
    "min_hip",
    "min_cuda",
    "arch",
    "harmless_messages",
    "expected_tflops",
    "expected_tflops_by_gpu",
    "probe_timeout_s",
    "notes",
    "catalogue",
)
_TRAINER_KEYS = ("device", "precision", "sdpa_backend", "compile", "notes")
_HOST_KEYS = ("kind", "notes")
_OVERRIDE_KEYS = ("gfx", "hsa_override", "note")


class Ctx:
    """Where we are in which file, for error messages."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, problem: str, allowed: str | None = None) -> InputError:
        msg = f"profile {self.path}: {key or '(top level)'}: {problem}"
        hint = f"allowed: {allowed}" if allowed else "see docs/profiles.md for the profile format"
        return InputError(msg, hint=hint)


# -- small typed readers -----------------------------------------------------------------------------


def _mapping(ctx: Ctx, value: Any, key: str, allowed_keys: Sequence[str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ctx.fail(
            key, f"must be a mapping, got {type(value).__name__}", f"keys {', '.join(allowed_keys)}"
        )
    for k in value:
        if k not in allowed_keys:
            raise ctx.fail(f"{key}.{k}" if key else str(k), "unknown key", ", ".join(allowed_keys))
    return value


def _str(
    ctx: Ctx,
    value: Any,
    key: str,
    *,
    required: bool = False,
    pattern: re.Pattern[str] | None = None,
    allowed: str | None = None,
) -> str | None:
    if value is None:
        if required:
            raise ctx.fail(key, "is required", allowed)
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ctx.fail(key, f"must be a string, got {type(value).__name__}", allowed)
    text = str(value).strip()
    if required and not text:
        raise ctx.fail(key, "must not be empty", allowed)
    if pattern is not None and not pattern.fullmatch(text):
        raise ctx.fail(key, f"invalid value {text!r}", allowed)
    return text


def _choice(ctx: Ctx, value: Any, key: str, choices: Sequence[str], default: str | None = None) -> str | None:
    if value is None:
        return default
    if value not in choices:
        raise ctx.fail(key, f"invalid value {value!r}", ", ".join(choices))
    return str(value)


def _list(ctx: Ctx, value: Any, key: str, item: Callable[[Any, str], T]) -> tuple[T, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ctx.fail(key, f"must be a list, got {type(value).__name__}")
    return tuple(item(v, f"{key}[{i}]") for i, v in enumerate(value))


def _str_list(
    ctx: Ctx, value: Any, key: str, pattern: re.Pattern[str] | None = None, allowed: str | None = None
) -> tuple[str, ...]:
    return _list(
        ctx, value, key, lambda v, k: _str(ctx, v, k, required=True, pattern=pattern, allowed=allowed)
    )  # type: ignore[return-value]


def _bool(ctx: Ctx, value: Any, key: str, default: bool = False) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ctx.fail(key, f"must be true or false, got {value!r}", "true, false")
    return value


def _number(ctx: Ctx, value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ctx.fail(key, f"must be a positive number, got {value!r}")
    return float(value)


def _tflops(ctx: Ctx, value: Any, key: str) -> dict[str, float]:
    table = _mapping(ctx, value, key, DTYPES)
    return {dtype: _number(ctx, v, f"{key}.{dtype}") for dtype, v in table.items()}


def _url(ctx: Ctx, value: Any, key: str) -> str | None:
    text = _str(ctx, value, key)
    if text is None:
        return None
    if not re.fullmatch(r"(https?|file)://[^\s]+", text):
        raise ctx.fail(key, f"invalid URL {text!r}", "an http(s):// or file:// URL, or null")
    return text


def _specifier(ctx: Ctx, value: Any, key: str) -> str:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    text = _str(
        ctx, value, key, required=True, allowed='a PEP 440 specifier such as "==2.9.1" or ">=2.11,<2.14"'
    )
    assert text is not None
    try:
        SpecifierSet(text)
    except InvalidSpecifier:
        raise ctx.fail(
            key, f"invalid version specifier {text!r}", 'PEP 440, e.g. "==2.9.1", ">=2.11,<2.14"'
        ) from None
    if not re.match(r"^\s*(==|>=|<=|~=|<|>|!=)", text):
        raise ctx.fail(key, f"{text!r} must start with an operator", '"==2.9.1", ">=2.11,<2.14"')
    return text
