"""The torch in the venv: importable, and the build (ROCm / CUDA / CPU) this machine's GPU can use."""

from __future__ import annotations

from mw_env.checks.context import DoctorContext
from mw_env.checks.model import CheckResult, result
from mw_env.profiles.model import has_local_tag

AREA = "torch"
_LABEL = {"rocm": "ROCm", "cuda": "CUDA", "cpu": "CPU"}


def check_torch(ctx: DoctorContext) -> list[CheckResult]:
    static = ctx.static()
    st = static.stage("static") if static else None
    if st is None:
        return [
            result("torch.build", AREA, "torch build", "skip", "no working venv python (see Training venv)")
        ]
    if not st.get("torch_found"):
        cause, fix = ctx.fix(
            "torch.missing",
            python=ctx.python,
            error="No module named 'torch'",
            install_command=ctx.install_command(),
        )
        return [result("torch.build", AREA, "torch build", "fail", cause, fix)]
    out: list[CheckResult] = []
    probe = ctx.probe()
    imp = probe.stage("import") if probe else None
    if probe is not None and imp is not None and not imp.get("ok"):
        cause, fix = ctx.fix(
            "torch.import_failed", error=imp.get("error"), install_command=ctx.install_command()
        )
        out.append(result("torch.import", AREA, "import torch", "fail", cause, fix))
    elif imp is not None:
        out.append(
            result(
                "torch.import",
                AREA,
                "import torch",
                "pass",
                f"{imp.get('version')} in {imp.get('t', 0):.1f}s",
            )
        )
    info = ctx.torch_info()
    out.append(_build(ctx, info))
    triton = set(st.get("triton_dists") or [])
    if "triton" in triton and "pytorch-triton-rocm" in triton:
        cause, fix = ctx.fix(
            "torch.triton_conflict",
            python=ctx.python,
            index=ctx.selection.torch.index_url or "the torch index",
        )
        out.append(result("torch.triton", AREA, "triton packages", "warn", cause, fix))
    return out


def _build(ctx: DoctorContext, info: dict) -> CheckResult:
    build = info.get("build", "cpu")
    version = info.get("version") or "unknown"
    runtime = (
        f", HIP {info['hip']}" if info.get("hip") else f", CUDA {info['cuda']}" if info.get("cuda") else ""
    )
    detail = f"torch {version}: {_LABEL[build]} build{runtime}"
    vendor = ctx.vendor
    wanted = ctx.gpu_build
    if wanted and build != wanted:
        gpu = ctx.gpu
        cause, fix = ctx.fix(
            "torch.cpu_fallback",
            version=version,
            build=_LABEL[build],
            vendor=vendor.upper() if vendor == "amd" else "NVIDIA",
            gpu=f"{gpu.name}{f', {gpu.gfx_target}' if gpu and gpu.gfx_target else ''}" if gpu else "?",
            install_command=ctx.install_command(),
        )
        return result("torch.build", AREA, "torch build", "fail", cause, fix)
    if wanted is None and build != "cpu":
        cause, fix = ctx.fix(
            "torch.gpu_build_on_cpu",
            version=version,
            build=_LABEL[build],
            install_command=ctx.install_command(),
        )
        return result("torch.build", AREA, "torch build", "warn", cause, fix)
    tag = ctx.selection.torch.local_tag
    note = () if has_local_tag(version, tag) else (f"the profile's source is {tag}; this one works too",)
    if wanted is None and ctx.gpu is not None:
        # A CPU profile on a machine with a GPU is a choice (or the GPU has no wheel): say so, once.
        why = (
            "chosen with --profile"
            if getattr(ctx.selection, "explicit", False)
            else "no torch wheel serves it"
        )
        detail += f"; profile {ctx.profile.name} ({why}) trains on the CPU, the {ctx.gpu.name} stays unused"
    return result("torch.build", AREA, "torch build", "pass", detail, info=note)
