"""The GPU as torch sees it: available, name, capability, memory (VRAM, GTT on APUs), memory held by others."""

from __future__ import annotations

from mw_env.checks.context import BUILD_LABEL, GIB, DoctorContext, human_bytes
from mw_env.checks.model import CheckResult, result

AREA = "device"
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def check_device(ctx: DoctorContext) -> list[CheckResult]:
    title = "torch.cuda device"
    if ctx.quick:
        return [result("device.available", title, "skip", "skipped with --quick")]
    probe = ctx.probe()
    rt = probe.stage("runtime") if probe else None
    if rt is None:
        why = "no venv python" if probe is None else f"the probe stopped at stage '{probe.last_stage}'"
        return [result("device.available", title, "skip", why)]
    if not rt.get("ok"):
        return [
            result(
                "device.available",
                title,
                "fail",
                f"device init failed: {rt.get('error')}",
                "See the compute probe and known messages below.",
            )
        ]
    gpu = ctx.gpu
    if gpu is None or (ctx.gpu_build is None and not rt.get("available")):
        return [_cpu(ctx, (probe.stage("import") or {}).get("threads") if probe else None)]
    if not rt.get("available"):
        return [_not_available(ctx)]
    name = rt.get("name") or "?"
    arch = rt.get("gcn_arch") or ".".join(str(x) for x in rt.get("capability") or [])
    total = rt.get("total_visible") or rt.get("total_memory")
    free = rt.get("free_memory")
    mem = f"{human_bytes(total)} visible, {human_bytes(free)} free"
    if gpu.vendor == "amd" and gpu.integrated and gpu.gtt_bytes:
        mem += f" (APU: VRAM carve-out {human_bytes(gpu.memory_bytes)}, GTT {human_bytes(gpu.gtt_bytes)})"
    out = [
        result(
            "device.available",
            title,
            "pass",
            f"{name} ({arch}), {rt.get('device_count', 1)} device(s); {mem}",
        )
    ]
    if total and free is not None:
        used = total - free
        if used > max(1 * GIB, 0.1 * total):
            who = _nvidia_apps(ctx) if gpu.vendor == "nvidia" else ""
            cause, fix = ctx.fix(
                "device.memory_held", used=human_bytes(used), total=human_bytes(total), who=who
            )
            out.append(result("device.memory", "GPU memory in use", "warn", cause, fix))
    return out


def _cpu(ctx: DoctorContext, threads: int | None) -> CheckResult:
    """Training on the CPU: torch's thread count against the CPUs this container may use."""
    title = "CPU device"
    cpu = ctx.hardware.cpu
    usable = int(cpu.quota_cores) if cpu.quota_cores else cpu.cores
    detail = f"training runs on the CPU ({threads} threads, {usable or '?'} CPUs usable)"
    limits = {v: ctx.env[v] for v in THREAD_VARS if v in ctx.env}
    # torch starts one thread per physical core (half the logical CPUs with SMT); fewer than that is a limit
    # someone set, and every matrix product pays for it.
    if threads and usable and limits and threads < usable / 2:
        setting = ", ".join(f"{k}={v}" for k, v in limits.items())
        cause, fix = ctx.fix(
            "device.cpu_threads", threads=threads, usable=usable, setting=setting, vars=" ".join(limits)
        )
        return result("device.available", title, "warn", cause, fix)
    return result("device.available", title, "pass", detail)


def _not_available(ctx: DoctorContext) -> CheckResult:
    info = ctx.torch_info()
    build = info.get("build", "unknown")
    wanted = "rocm" if ctx.vendor == "amd" else "cuda"
    label = BUILD_LABEL.get(build, build)
    if build != wanted:
        reason, hint = (
            f": a {label} build cannot use this {'AMD' if ctx.vendor == 'amd' else 'NVIDIA'} GPU",
            f"Install the right build: {ctx.install_command()}",
        )
    elif ctx.vendor == "amd" and not ctx.machine.exists("/dev/kfd"):
        reason, hint = ": /dev/kfd is not in this container", f"On the host: {ctx.host_fix()}"
    elif ctx.env.get("CUDA_VISIBLE_DEVICES") == "" or ctx.env.get("HIP_VISIBLE_DEVICES") == "":
        reason, hint = (
            ": CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES is set and empty (= no devices)",
            "`unset CUDA_VISIBLE_DEVICES HIP_VISIBLE_DEVICES`",
        )
    else:
        reason, hint = (
            " although the device nodes look fine",
            "See the device-node and known-message findings; on the host check `dmesg | grep -i amdgpu` or `nvidia-smi`.",
        )
    cause, fix = ctx.fix("device.not_available", build=label, reason=reason, fix_hint=hint)
    return result(
        "device.available", "torch.cuda device", "fail", f"{cause} Training would run on the CPU.", fix
    )


def _nvidia_apps(ctx: DoctorContext) -> str:
    res = ctx.machine.run(
        ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"],
        timeout=5,
    )
    if not res.ok or not res.stdout.strip():
        return ""
    return " by: " + "; ".join(line.strip() for line in res.stdout.strip().splitlines()[:5])
