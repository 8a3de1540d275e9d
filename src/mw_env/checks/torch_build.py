"""The torch in the venv: importable, and the build (ROCm / CUDA / CPU) this machine's GPU can use."""

from __future__ import annotations

from pathlib import Path

from mw_env.base.shellquote import sh
from mw_env.checks.context import BUILD_LABEL, DoctorContext
from mw_env.checks.model import CheckResult, result
from mw_env.profiles.model import has_local_tag

AREA = "torch"


def check_torch(ctx: DoctorContext) -> list[CheckResult]:
    static = ctx.static()
    st = static.stage("static") if static else None
    if st is None:
        return [result("torch.build", "torch build", "skip", "no working venv python (see Training venv)")]
    if not st.get("torch_found"):
        cause, fix = ctx.fix(
            "torch.missing",
            python=ctx.python,
            error="No module named 'torch'",
            install_command=ctx.install_command(),
        )
        return [result("torch.build", "torch build", "fail", cause, fix)]
    out: list[CheckResult] = []
    probe = ctx.probe()
    imp = probe.stage("import") if probe else None
    if probe is not None and imp is not None and not imp.get("ok"):
        cause, fix = ctx.fix(
            "torch.import_failed", error=imp.get("error"), install_command=ctx.install_command()
        )
        out.append(result("torch.import", "import torch", "fail", cause, fix))
    elif imp is not None:
        out.append(
            result("torch.import", "import torch", "pass", f"{imp.get('version')} in {imp.get('t', 0):.1f}s")
        )
    info = ctx.torch_info()
    out.append(_build(ctx, info))
    swapped = _installed(ctx)
    if swapped is not None:
        out.append(swapped)
    out += _source(ctx)
    triton = set(st.get("triton_dists") or [])
    if "triton" in triton and "pytorch-triton-rocm" in triton:
        cause, fix = ctx.fix(
            "torch.triton_conflict",
            python=ctx.python,
            index=ctx.selection.torch.index_url or "the torch index",
        )
        out.append(result("torch.triton", "triton packages", "warn", cause, fix))
    return out


def _build(ctx: DoctorContext, info: dict) -> CheckResult:
    build = info.get("build", "cpu")
    version = info.get("version") or "unknown"
    runtime = (
        f", HIP {info['hip']}" if info.get("hip") else f", CUDA {info['cuda']}" if info.get("cuda") else ""
    )
    detail = f"torch {version}: {BUILD_LABEL[build]} build{runtime}"
    vendor = ctx.vendor
    wanted = ctx.gpu_build
    if wanted and build != wanted:
        gpu = ctx.gpu
        cause, fix = ctx.fix(
            "torch.cpu_fallback",
            version=version,
            build=BUILD_LABEL[build],
            vendor=vendor.upper() if vendor == "amd" else "NVIDIA",
            gpu=f"{gpu.name}{f', {gpu.gfx_target}' if gpu and gpu.gfx_target else ''}" if gpu else "?",
            install_command=ctx.install_command(),
        )
        return result("torch.build", "torch build", "fail", cause, fix)
    if wanted is None and build != "cpu":
        cause, fix = ctx.fix(
            "torch.gpu_build_on_cpu",
            version=version,
            build=BUILD_LABEL[build],
            install_command=ctx.install_command(),
        )
        return result("torch.build", "torch build", "warn", cause, fix)
    tag = ctx.selection.torch.local_tag
    note = () if has_local_tag(version, tag) else (f"the profile's source is {tag}; this one works too",)
    if wanted is None and ctx.gpu is not None:
        # A CPU profile on a machine with a GPU is a choice (or the GPU has no wheel): say so, once.
        why = "chosen with --profile" if ctx.selection.explicit else "no torch wheel serves it"
        detail += f"; profile {ctx.profile.name} ({why}) trains on the CPU, the {ctx.gpu.name} stays unused"
    return result("torch.build", "torch build", "pass", detail, info=note)


def installed_torch_versions(venv: Path) -> list[str]:
    """The versions in the venv's torch dist-info METADATA (the image's, for an adopted torch), read as files.

    This is what pip and uv see as installed, without importing torch: the quick doctor (and so every
    `mw-env train`) compares it with the record. Usually one entry; two mean a torn or overlapping install.
    """
    sites = sorted(Path(venv).glob("lib/python3*/site-packages"))
    for site in list(sites):
        try:  # an adopted torch lives in the image's site-packages, named by bootstrap's .pth file
            extra = (site / "_mw_env_adopted_torch.pth").read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if extra:
            sites.append(Path(extra))
    versions: list[str] = []
    for site in sites:
        for meta in sorted(site.glob("torch-*.dist-info/METADATA")):
            version = _metadata_version(meta)
            if version and version not in versions:
                versions.append(version)
    return versions


def _metadata_version(path: Path) -> str | None:
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for _ in range(64):  # the headers come first; never read a whole (large) file for one field
                line = fh.readline()
                if not line or not line.strip():
                    break
                if line.lower().startswith("version:"):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        return None
    return None


def _same(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def _installed(ctx: DoctorContext) -> CheckResult | None:
    """Fail when the torch pip/uv see is not the one bootstrap recorded, or not the profile's build.

    Only for a venv bootstrap made (its record names what it installed); a venv without a record, or a torch
    without dist-info, is judged by the build check alone.
    """
    rec = ctx.record
    if rec is None:
        return None
    versions = installed_torch_versions(ctx.venv)
    if not versions:
        return None
    title = "installed torch"
    src = ctx.selection.torch
    problems: list[str] = []
    if len(versions) > 1:
        problems.append(f"torch is installed twice ({', '.join(versions)}), a torn or overlapping install")
    version = versions[0]
    recorded = rec.torch_version
    if recorded and not any(_same(v, recorded) for v in versions):
        problems.append(f"torch {version} is installed, but bootstrap installed {recorded} (mw-env.json)")
    same_profile = rec.profile == ctx.profile.name
    if same_profile and not rec.adopted and not any(src.accepts(v) for v in versions):
        problems.append(
            f"torch {version} is not profile {ctx.profile.name}'s torch ({src.requirement}, {src.local_tag} build)"
        )
    if not problems:
        return result("torch.installed", title, "pass", f"{version} (as recorded by bootstrap)")
    cause, fix = ctx.fix(
        "torch.swapped",
        problem="; ".join(problems),
        python=ctx.python,
        bootstrap=ctx.bootstrap_command(),
    )
    return result("torch.installed", title, "fail", cause, fix)


def _source(ctx: DoctorContext) -> list[CheckResult]:
    """Where the venv's torch came from: a retired index (it keeps working; the replacement is named), and a
    wheel whose own arch list contradicted the table at install time (the record keeps what bootstrap saw)."""
    out: list[CheckResult] = []
    rec = ctx.record
    src = ctx.selection.torch
    if rec is None or rec.torch_source != src.id:
        return out
    if src.retired:
        argv = f"`mw-env bootstrap --venv {sh(ctx.venv)} --recreate" + (
            f" --source {src.replaced_by}`" if src.replaced_by else "`"
        )
        cause, fix = ctx.fix(
            "torch.source_retired",
            version=rec.torch_version,
            source=src.id,
            index=src.index_url or "?",
            why=src.retired.rstrip("."),
            replacement=src.replaced_by or "the profile's current source",
            command=argv,
        )
        out.append(result("torch.source", "torch source", "warn", cause, fix))
    wheel = rec.wheel_archs
    if wheel and rec.arch_decision:
        gfx = ctx.selection.device_targets or (
            (ctx.selection.required_arch,) if ctx.selection.required_arch else ()
        )
        table_has = [g for g in gfx if g in src.arch_list]
        wheel_has = [g for g in gfx if g in wheel]
        if table_has != wheel_has:
            cause, fix = ctx.fix(
                "torch.wheel_table_differ",
                source=src.id,
                table=", ".join(table_has) or f"no {', '.join(gfx)}",
                wheel=", ".join(wheel_has) or f"no {', '.join(gfx)} (it has {', '.join(wheel)})",
                how=rec.wheel_archs_how or "installed files",
                decision=rec.arch_decision,
            )
            out.append(result("torch.archs", "wheel vs table", "warn", cause, fix))
    return out
