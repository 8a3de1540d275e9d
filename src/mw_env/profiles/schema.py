"""Profile YAML -> Profile: the sections of a profile file and their rules (docs/profiles.md, "Writing your own")."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mw_env.profiles._readers import (
    _DOCTOR_KEYS,
    _DOTTED_RE,
    _ENV_KEY_RE,
    _GFX_RE,
    _HOST_KEYS,
    _MATCH_KEYS,
    _NAME_RE,
    _OVERRIDE_KEYS,
    _OVERRIDE_RE,
    _SM_RE,
    _SOURCE_KEYS,
    _TOP_KEYS,
    _TRAINER_KEYS,
    BUILDS,
    DERIVED_ENV,
    DEVICES,
    HOST_KINDS,
    PRECISIONS,
    SDPA_BACKENDS,
    VENDORS,
    Ctx,
    _bool,
    _choice,
    _list,
    _mapping,
    _number,
    _specifier,
    _str,
    _str_list,
    _tflops,
    _url,
)
from mw_env.profiles.model import (
    ArchOverride,
    DoctorExpectations,
    HostSpec,
    Match,
    Profile,
    TorchSource,
    TrainerDefaults,
)

# -- sections ------------------------------------------------------------------------------------------


def _match(ctx: Ctx, raw: Any) -> Match:
    m = _mapping(ctx, raw, "match", _MATCH_KEYS)
    vendor = m.get("vendor")
    if vendor is not None and vendor not in VENDORS:
        raise ctx.fail(
            "match.vendor", f"invalid value {vendor!r}", "amd, nvidia, null (no GPU: the cpu profile)"
        )
    gfx = _list(ctx, m.get("gfx"), "match.gfx", lambda v, k: _gfx_or_star(ctx, v, k))
    pci = tuple(
        p.lower()
        for p in _str_list(
            ctx,
            m.get("pci_ids"),
            "match.pci_ids",
            re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{4}$"),
            'vendor:device in hex, e.g. "1002:15bf"',
        )
    )
    priority = m.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ctx.fail("match.priority", f"must be an integer, got {priority!r}")
    if vendor is None and (gfx or pci):
        raise ctx.fail("match", "gfx/pci_ids need a vendor", "vendor: amd or nvidia")
    return Match(vendor=vendor, gfx=gfx, pci_ids=pci, priority=priority)


def _gfx_or_star(ctx: Ctx, value: Any, key: str) -> str:
    text = _str(ctx, value, key, required=True)
    assert text is not None
    if text != "*" and not _GFX_RE.fullmatch(text):
        raise ctx.fail(key, f"invalid value {text!r}", 'a gfx target such as "gfx1103", or "*" for any')
    return text


def _source(ctx: Ctx, raw: Any, key: str) -> TorchSource:
    s = _mapping(ctx, raw, key, _SOURCE_KEYS)
    if not s:
        raise ctx.fail(key, "must be a non-empty mapping", f"keys {', '.join(_SOURCE_KEYS)}")
    sid = _str(
        ctx,
        s.get("id"),
        f"{key}.id",
        required=True,
        pattern=_NAME_RE,
        allowed="lower-case letters, digits, '.', '_', '-'",
    )
    build = _choice(ctx, s.get("build"), f"{key}.build", BUILDS)
    if build is None:
        raise ctx.fail(f"{key}.build", "is required", ", ".join(BUILDS))
    tag = _str(ctx, s.get("local_tag"), f"{key}.local_tag", required=True)
    assert tag is not None and sid is not None
    prefix = {"rocm": "+rocm", "cuda": "+cu", "cpu": "+cpu"}[build]
    if not tag.startswith(prefix):
        raise ctx.fail(
            f"{key}.local_tag", f"{tag!r} does not fit build {build!r}", f"a tag starting with {prefix!r}"
        )
    arch_re, arch_allowed = (_SM_RE, 'e.g. "sm_86"') if build == "cuda" else (_GFX_RE, 'e.g. "gfx1100"')
    arch_list = _str_list(ctx, s.get("arch_list"), f"{key}.arch_list", arch_re, arch_allowed)
    if build == "cpu" and arch_list:
        raise ctx.fail(f"{key}.arch_list", "a cpu build has no GPU archs", "an empty list")
    if build != "cpu" and not arch_list:
        raise ctx.fail(
            f"{key}.arch_list", "is required for a GPU build (it decides the override and the match)"
        )
    min_driver = _str(
        ctx, s.get("min_driver"), f"{key}.min_driver", pattern=_DOTTED_RE, allowed='e.g. "525.60.13"'
    )
    if build == "cuda" and min_driver is None:
        raise ctx.fail(f"{key}.min_driver", "is required for a cuda build", 'e.g. "525.60.13"')
    return TorchSource(
        id=sid,
        build=build,  # type: ignore[arg-type]
        index_url=_url(ctx, s.get("index_url"), f"{key}.index_url"),
        version=_specifier(ctx, s.get("version"), f"{key}.version"),
        local_tag=tag,
        runtime_version=_str(
            ctx, s.get("runtime_version"), f"{key}.runtime_version", pattern=_DOTTED_RE, allowed='e.g. "6.4"'
        ),
        arch_list=arch_list,
        min_driver=min_driver,
        newest_torch=_str(
            ctx, s.get("newest_torch"), f"{key}.newest_torch", pattern=_DOTTED_RE, allowed='"2.14"'
        ),
        ptx=_bool(ctx, s.get("ptx"), f"{key}.ptx"),
        companions=_str_list(ctx, s.get("companions"), f"{key}.companions"),
        extra_index_urls=tuple(
            u
            for u in _list(
                ctx, s.get("extra_index_urls"), f"{key}.extra_index_urls", lambda v, k: _url(ctx, v, k)
            )
            if u
        ),
        default=_bool(ctx, s.get("default"), f"{key}.default"),
        note=_str(ctx, s.get("note"), f"{key}.note") or "",
        refs=_str_list(ctx, s.get("refs"), f"{key}.refs"),
    )


def _doctor(ctx: Ctx, raw: Any) -> DoctorExpectations:
    d = _mapping(ctx, raw, "doctor", _DOCTOR_KEYS)
    nodes = _str_list(
        ctx,
        d.get("device_nodes"),
        "doctor.device_nodes",
        re.compile(r"^/dev/\S+$"),
        'absolute /dev paths or globs, e.g. "/dev/kfd", "/dev/dri/renderD*"',
    )
    by_gpu_raw = d.get("expected_tflops_by_gpu")
    if by_gpu_raw is not None and not isinstance(by_gpu_raw, dict):
        raise ctx.fail(
            "doctor.expected_tflops_by_gpu", "must be a mapping of GPU-name substring to {dtype: TFLOP/s}"
        )
    by_gpu = {
        str(name): _tflops(ctx, row, f"doctor.expected_tflops_by_gpu.{name}")
        for name, row in (by_gpu_raw or {}).items()
    }
    arch = d.get("arch")
    if arch is not None and not (
        isinstance(arch, str) and (_GFX_RE.fullmatch(arch) or _SM_RE.fullmatch(arch))
    ):
        raise ctx.fail(
            "doctor.arch", f"invalid value {arch!r}", 'a gfx target or sm_XX, e.g. "gfx1103", or null'
        )
    timeout = d.get("probe_timeout_s", 60.0)
    return DoctorExpectations(
        device_nodes=nodes,
        min_hip=_str(ctx, d.get("min_hip"), "doctor.min_hip", pattern=_DOTTED_RE, allowed='e.g. "6.2"'),
        min_cuda=_str(ctx, d.get("min_cuda"), "doctor.min_cuda", pattern=_DOTTED_RE, allowed='e.g. "12.6"'),
        arch=arch,
        harmless_messages=_str_list(ctx, d.get("harmless_messages"), "doctor.harmless_messages"),
        expected_tflops=_tflops(ctx, d.get("expected_tflops"), "doctor.expected_tflops"),
        expected_tflops_by_gpu=by_gpu,
        probe_timeout_s=_number(ctx, timeout, "doctor.probe_timeout_s"),
        notes=_str_list(ctx, d.get("notes"), "doctor.notes"),
        catalogue=_list(
            ctx, d.get("catalogue"), "doctor.catalogue", lambda v, k: _catalogue_entry(ctx, v, k)
        ),
    )


def _catalogue_entry(ctx: Ctx, value: Any, key: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not value or not all(isinstance(k, str) for k in value):
        raise ctx.fail(
            key,
            "must be a mapping",
            "id, pattern, severity, title, cause, fix, source (docs/troubleshooting.md)",
        )
    return dict(value)


def _trainer(ctx: Ctx, raw: Any) -> TrainerDefaults:
    t = _mapping(ctx, raw, "trainer", _TRAINER_KEYS)
    return TrainerDefaults(
        device=_choice(ctx, t.get("device"), "trainer.device", DEVICES, "cuda"),  # type: ignore[arg-type]
        precision=_choice(ctx, t.get("precision"), "trainer.precision", PRECISIONS, "fp32"),  # type: ignore[arg-type]
        sdpa_backend=_choice(ctx, t.get("sdpa_backend"), "trainer.sdpa_backend", SDPA_BACKENDS, "auto"),  # type: ignore[arg-type]
        compile=_bool(ctx, t.get("compile"), "trainer.compile"),
        notes=_str_list(ctx, t.get("notes"), "trainer.notes"),
    )


def _env(ctx: Ctx, raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ctx.fail("env", f"must be a mapping of NAME: value, got {type(raw).__name__}")
    out: dict[str, str] = {}
    for k, v in raw.items():
        if not isinstance(k, str) or not _ENV_KEY_RE.fullmatch(k):
            raise ctx.fail(
                f"env.{k}", "invalid variable name", "letters, digits and '_', not starting with a digit"
            )
        if k in DERIVED_ENV:
            raise ctx.fail(
                f"env.{k}",
                "is derived by mw-env from the GPU and the chosen wheel, never set by a profile",
                "hsa_override_when_missing / arch_overrides (docs/profiles.md)",
            )
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise ctx.fail(f"env.{k}", f"must be a string, got {type(v).__name__}")
        out[k] = str(v)
    return out


def _arch_override(ctx: Ctx, raw: Any, key: str) -> ArchOverride:
    o = _mapping(ctx, raw, key, _OVERRIDE_KEYS)
    gfx = _str(ctx, o.get("gfx"), f"{key}.gfx", required=True, pattern=_GFX_RE, allowed='e.g. "gfx1031"')
    ver = _str(
        ctx,
        o.get("hsa_override"),
        f"{key}.hsa_override",
        required=True,
        pattern=_OVERRIDE_RE,
        allowed='major.minor.stepping, e.g. "10.3.0"',
    )
    assert gfx is not None and ver is not None
    return ArchOverride(gfx=gfx, hsa_override=ver, note=_str(ctx, o.get("note"), f"{key}.note") or "")


def parse_profile(data: Any, *, path: Path, shipped: bool = False) -> Profile:
    """Build a Profile from parsed YAML, raising InputError naming `path`, the key and the allowed values."""
    ctx = Ctx(path)
    top = _mapping(ctx, data, "", tuple(_TOP_KEYS))
    if not top:
        raise ctx.fail("(top level)", "empty profile", f"keys {', '.join(_TOP_KEYS)}")
    name = _str(
        ctx,
        top.get("name"),
        "name",
        required=True,
        pattern=_NAME_RE,
        allowed="lower-case letters, digits, '.', '_', '-' (e.g. gfx1103)",
    )
    assert name is not None
    match = _match(ctx, top.get("match"))
    sources = _list(ctx, top.get("sources"), "sources", lambda v, k: _source(ctx, v, k))
    if not sources:
        raise ctx.fail("sources", "at least one torch source is required")
    ids = [s.id for s in sources]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ctx.fail("sources", f"duplicate source id(s): {', '.join(dupes)}", "unique ids")
    if sum(s.default for s in sources) > 1:
        raise ctx.fail("sources", "more than one source has default: true", "at most one default")
    override = _str(
        ctx,
        top.get("hsa_override_when_missing"),
        "hsa_override_when_missing",
        pattern=_OVERRIDE_RE,
        allowed='major.minor.stepping, e.g. "11.0.0"',
    )
    builds = {s.build for s in sources}
    if (override or top.get("arch_overrides")) and builds != {"rocm"}:
        raise ctx.fail(
            "hsa_override_when_missing", "overrides only apply to profiles whose sources are all rocm"
        )
    return Profile(
        name=name,
        description=_str(ctx, top.get("description"), "description") or name,
        match=match,
        sources=sources,
        env=_env(ctx, top.get("env")),
        doctor=_doctor(ctx, top.get("doctor")),
        trainer=_trainer(ctx, top.get("trainer")),
        host=HostSpec(
            kind=_choice(
                ctx,
                _mapping(ctx, top.get("host"), "host", _HOST_KEYS).get("kind"),
                "host.kind",  # type: ignore[arg-type]
                HOST_KINDS,
                "none",
            ),
            notes=_str_list(ctx, (top.get("host") or {}).get("notes"), "host.notes"),
        ),
        arch_overrides=_list(
            ctx, top.get("arch_overrides"), "arch_overrides", lambda v, k: _arch_override(ctx, v, k)
        ),
        hsa_override_when_missing=override,
        aliases=_str_list(ctx, top.get("aliases"), "aliases", _NAME_RE, "lower-case names"),
        notes=_str_list(ctx, top.get("notes"), "notes"),
        refs=_str_list(ctx, top.get("refs"), "refs"),
        path=path,
        shipped=shipped,
    )
