"""GPU architecture: the GPU's gfx target (or the override's) in the wheel's arch list; NVIDIA sm in the wheel;
HSA_OVERRIDE_GFX_VERSION set where the profile needs it and flagged where it is harmful or wrong."""

from __future__ import annotations

from mw_env.checks.context import DoctorContext
from mw_env.checks.model import CheckResult, result
from mw_env.profiles.amd import decide_override, override_to_gfx, rank_native

AREA = "arch"
OVERRIDE = "HSA_OVERRIDE_GFX_VERSION"


def _native_only(ctx: DoctorContext, gfx: str | None) -> str | None:
    """The sources with native `gfx` kernels when the profile knows no override for it (gfx1151, gfx1100...):
    there an override only hurts (doctor-anchors B2#15, legacy#6348). Derived from the profile's source table,
    as bootstrap decides (issue 30), never a list typed here."""
    profile = ctx.profile
    if not gfx or profile.hsa_override_when_missing or any(o.gfx == gfx for o in profile.arch_overrides):
        return None
    native = rank_native(profile.sources, gfx)
    return ", ".join(s.id for s in native) if native else None


def _override_risk(ctx: DoctorContext, gfx: str | None, arch: list[str]) -> str:
    """The hang warning bootstrap gives for this override (profiles.amd.decide_override), with the source that
    has native kernels instead, if any."""
    if not gfx:
        return ""
    profile = ctx.profile
    native = rank_native(profile.sources, gfx)
    d = decide_override(profile, gfx, arch, source_id=ctx.selection.torch.id, alternatives=native)
    return "; ".join(d.warnings)


def check_arch(ctx: DoctorContext) -> list[CheckResult]:
    gpu = ctx.gpu
    if gpu is None:
        return [result("arch.kernels", "GPU kernels in the wheel", "skip", "no GPU")]
    if gpu.vendor == "nvidia":
        return [_nvidia(ctx)]
    if gpu.vendor != "amd":
        return [result("arch.kernels", "GPU kernels in the wheel", "skip", f"{gpu.vendor} GPU: not checked")]
    info = ctx.torch_info()
    override = _override(ctx, info)
    return [override, _amd_kernels(ctx, info, override)]


def _arch_list(ctx: DoctorContext, info: dict) -> tuple[list[str], str]:
    if info.get("build") == "rocm" and info.get("arch_list"):
        return list(info["arch_list"]), str(info.get("arch_source"))
    return [], ""


def _expected_override(ctx: DoctorContext, native: str | None, arch: list[str]) -> str | None:
    """The override this machine needs: the selection's, else the profile's when the wheel lacks the arch."""
    value = ctx.selection.env.get(OVERRIDE)
    if value:
        return value
    if arch and native and native not in arch:
        known = (o.hsa_override for o in ctx.profile.arch_overrides if o.gfx == native)
        return ctx.profile.hsa_override_when_missing or next(known, None)
    return None


def _override(ctx: DoctorContext, info: dict) -> CheckResult:
    title = OVERRIDE
    gpu = ctx.gpu
    assert gpu is not None
    native = gpu.gfx_target
    env = ctx.env
    value = env.get(OVERRIDE)
    arch, _ = _arch_list(ctx, info)
    expected = _expected_override(ctx, native, arch)
    env_file = ctx.venv / "mw-env.env"
    if value is not None and not value.strip():
        cause, fix = ctx.fix("arch.override_empty")
        return result("arch.override", title, "warn", cause, fix)
    if not value and not info:
        return result("arch.override", title, "skip", "no torch to inspect (see Training venv)")
    if not value and info.get("build") != "rocm":
        return result("arch.override", title, "skip", "not a ROCm build (see PyTorch build)")
    if value:
        target = override_to_gfx(value)
        native_ok = bool(arch) and native in arch
        native_only = _native_only(ctx, native)
        if native_only or native_ok:
            why = (
                "in this wheel's arch list"
                if native_ok
                else f"native kernels in {native_only}, no override known"
            )
            cause, fix = ctx.fix(
                "arch.override_harmful",
                gfx=native,
                value=value,
                target=target or value,
                why=why,
                env_file=env_file,
            )
            return result("arch.override", title, "warn", cause, fix)
        if target is None or (expected and value.strip() != expected):
            cause, fix = ctx.fix(
                "arch.override_wrong",
                value=value,
                target=target or "not a gfx version",
                gfx=native,
                expected=expected or "a major.minor.stepping value such as 11.0.0",
            )
            return result("arch.override", title, "warn", cause, fix)
        risk = _override_risk(ctx, native, arch)
        note = f" - {risk}" if risk else ""
        return result("arch.override", title, "pass", f"{value}: {native} runs {target} kernels{note}")
    if expected:
        cause, fix = ctx.fix(
            "arch.missing_override",
            gfx=native,
            arch_list=", ".join(arch) if arch else f"the profile's source lacks {native}",
            value=expected,
            env_file=env_file,
            risk=_override_risk(ctx, native, arch),
        )
        return result("arch.override", title, "fail", cause, fix)
    return result("arch.override", title, "pass", f"not set, not needed for {native or 'this GPU'}")


def _amd_kernels(ctx: DoctorContext, info: dict, override: CheckResult) -> CheckResult:
    title = "GPU kernels in the wheel"
    gpu = ctx.gpu
    assert gpu is not None
    arch, source = _arch_list(ctx, info)
    if info.get("build") != "rocm":
        return result("arch.kernels", title, "skip", "not a ROCm build (see PyTorch build)")
    if not arch:
        why = "run without --quick to ask torch" if ctx.quick else "torch reported no arch list"
        return result("arch.kernels", title, "skip", f"arch list unknown ({why})")
    value = (ctx.env.get(OVERRIDE) or "").strip()
    target = (override_to_gfx(value) if value else None) or gpu.gfx_target or ctx.profile.doctor.arch
    if target in arch:
        via = f" via {OVERRIDE}={value}" if value else ""
        return result("arch.kernels", title, "pass", f"{target}{via} is in {', '.join(arch)} ({source})")
    if override.status == "fail":  # the override finding above names the fix
        return result(
            "arch.kernels", title, "fail", f"{target} is not in {', '.join(arch)} ({source})", override.fix
        )
    cause, fix = ctx.fix(
        "arch.missing_from_wheel",
        target=target,
        arch_list=", ".join(arch),
        error_text="HIP error: invalid device function",
        install_command=ctx.install_command(),
    )
    return result("arch.kernels", title, "fail", cause, fix)


def _nvidia(ctx: DoctorContext) -> CheckResult:
    title = "GPU kernels in the wheel"
    gpu = ctx.gpu
    assert gpu is not None
    info = ctx.torch_info()
    probe = ctx.probe()
    rt = (probe.stage("runtime") if probe else None) or {}
    cap = gpu.compute_capability or (
        ".".join(str(x) for x in rt["capability"]) if rt.get("capability") else None
    )
    if info.get("build") != "cuda":
        return result("arch.kernels", title, "skip", "not a CUDA build (see PyTorch build)")
    arch = list(info.get("arch_list") or [])
    if not cap or not arch:
        why = (
            "compute capability unknown"
            if not cap
            else ("run without --quick to ask torch" if ctx.quick else "arch list unknown")
        )
        return result("arch.kernels", title, "skip", why)
    major, _, minor = cap.partition(".")
    sm = f"sm_{major}{minor or '0'}"
    if sm in arch:
        return result(
            "arch.kernels", title, "pass", f"{sm} (compute capability {cap}) is in {', '.join(arch)}"
        )
    ptx = [
        a
        for a in arch
        if a.startswith("compute_") and a[8:].isdigit() and int(a[8:]) <= int(f"{major}{minor or 0}")
    ]
    if ptx:
        return result(
            "arch.kernels", title, "pass", f"{sm} runs through PTX {ptx[-1]} (JIT-compiled on first use)"
        )
    cause, fix = ctx.fix(
        "arch.missing_from_wheel",
        target=f"{sm} (compute capability {cap})",
        arch_list=", ".join(arch),
        error_text="no kernel image is available for execution on the device",
        install_command=ctx.install_command(),
    )
    return result("arch.kernels", title, "fail", cause, fix)
