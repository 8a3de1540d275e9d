"""Runtime versions: HIP / CUDA in the wheel against the profile's minimum; the NVIDIA driver against the wheel's CUDA."""

from __future__ import annotations

from mw_env.base.versions import version_tuple
from mw_env.checks.context import DoctorContext
from mw_env.checks.model import CheckResult, result

AREA = "versions"
# Minor-version compatibility minimum driver per CUDA major (Linux), NVIDIA's compatibility guide.
MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


def check_versions(ctx: DoctorContext) -> list[CheckResult]:
    info = ctx.torch_info()
    if not info:
        return [result("versions.runtime", "HIP / CUDA runtime", "skip", "no torch to inspect")]
    wanted = ctx.gpu_build
    if wanted and info.get("build") != wanted:
        return [
            result(
                "versions.runtime",
                "HIP / CUDA runtime",
                "skip",
                "not the build this GPU needs (see PyTorch build)",
            )
        ]
    out: list[CheckResult] = []
    doctor = ctx.profile.doctor
    name = ctx.profile.name
    if info.get("hip"):
        out.append(_minimum(ctx, "HIP", info["hip"], doctor.min_hip, "versions.hip_too_old", name))
    elif info.get("cuda"):
        out.append(_minimum(ctx, "CUDA", info["cuda"], doctor.min_cuda, "versions.cuda_too_old", name))
        out.append(_driver(ctx, info["cuda"]))
    else:
        out.append(result("versions.runtime", "HIP / CUDA runtime", "skip", "CPU build: no GPU runtime"))
    return out


def _minimum(
    ctx: DoctorContext, label: str, found: str, needed: str | None, fix_id: str, profile: str
) -> CheckResult:
    title = f"{label} runtime"
    if needed and version_tuple(found) < version_tuple(needed):
        cause, fix = ctx.fix(
            fix_id, found=found, needed=needed, profile=profile, install_command=ctx.install_command()
        )
        return result("versions.runtime", title, "fail", cause, fix)
    return result(
        "versions.runtime", title, "pass", f"{found}" + (f" (profile needs >= {needed})" if needed else "")
    )


def _driver(ctx: DoctorContext, cuda: str) -> CheckResult:
    title = "NVIDIA driver"
    driver = ctx.hardware.nvidia_driver or (
        ctx.gpu.driver_version if ctx.gpu and ctx.vendor == "nvidia" else None
    )
    major = (version_tuple(cuda) or (0,))[0]
    needed = MIN_DRIVER.get(major)
    if not driver:
        return result("versions.driver", title, "skip", "no NVIDIA driver version found")
    if needed and version_tuple(driver) < version_tuple(needed):
        cause, fix = ctx.fix("versions.driver_too_old", driver=driver, cuda=cuda, needed=needed)
        return result("versions.driver", title, "fail", cause, fix)
    return result(
        "versions.driver",
        title,
        "pass",
        f"{driver} runs CUDA {cuda}" + (f" (needs >= {needed})" if needed else ""),
    )
