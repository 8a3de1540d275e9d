"""Shared memory and confinement: /dev/shm size (docker's private 64 MiB default) and SELinux on /dev/kfd."""

from __future__ import annotations

from mw_env.checks.context import DoctorContext, human_bytes
from mw_env.checks.model import CheckResult, result

AREA = "ipc"
MIB = 1024**2
DOCKER_DEFAULT_SHM = 64 * MIB


def shm_private(ctx: DoctorContext) -> bool:
    """docker/podman/k8s default: a private IPC namespace whose /dev/shm is 64 MiB."""
    du = ctx.machine.disk_usage("/dev/shm")
    return du is not None and du.total <= DOCKER_DEFAULT_SHM


def selinux_enforcing(ctx: DoctorContext) -> bool:
    return (ctx.machine.read("sys/fs/selinux/enforce") or "").strip() == "1"


def check_ipc(ctx: DoctorContext) -> list[CheckResult]:
    return [_shm(ctx), _selinux(ctx)]


def gpu_alloc_worked(ctx: DoctorContext) -> bool:
    """The probe allocated and filled 64 MiB on the GPU: IPC and SELinux are not blocking ROCm here."""
    probe = ctx.probe()
    alloc = probe.stage("alloc") if probe else None
    return bool(alloc and alloc.get("ok") and alloc.get("device") == "cuda")


def _shm(ctx: DoctorContext) -> CheckResult:
    title = "/dev/shm"
    du = ctx.machine.disk_usage("/dev/shm")
    if du is None:
        return result(
            "ipc.shm",
            AREA,
            title,
            "warn",
            "/dev/shm is missing: DataLoader workers and ROCm IPC need it",
            "Mount a tmpfs on /dev/shm (`--ipc=host` for containers).",
        )
    size = human_bytes(du.total)
    if du.total <= DOCKER_DEFAULT_SHM:
        cause, fix = ctx.fix("ipc.shm_private", size=size, host_commands=_ipc_command(ctx))
        # ROCm fails every allocation there ("Memory critical error ... Memory in use"); CUDA/CPU only
        # lose DataLoader workers, so that is a warning - as it is when the probe's GPU allocation worked.
        status = "fail" if ctx.vendor == "amd" and not gpu_alloc_worked(ctx) else "warn"
        return result("ipc.shm", AREA, title, status, cause, fix)
    if du.total < 1024 * MIB:
        cause, fix = ctx.fix("ipc.shm_small", size=size)
        return result("ipc.shm", AREA, title, "warn", cause, fix)
    return result("ipc.shm", AREA, title, "pass", f"{size} (host IPC namespace or a large --shm-size)")


def _ipc_command(ctx: DoctorContext) -> str:
    kind = ctx.container_kind
    if kind == "podman":
        return "`podman run --ipc=host ...`"
    if kind == "kubernetes":
        return "mount an `emptyDir: {medium: Memory}` volume at /dev/shm"
    return "`docker run --ipc=host ...` (compose: `ipc: host`)"


def _selinux(ctx: DoctorContext) -> CheckResult:
    title = "SELinux"
    text = ctx.machine.read("sys/fs/selinux/enforce")
    if text is None:
        return result("ipc.selinux", AREA, title, "pass", "not active")
    if text.strip() != "1":
        return result("ipc.selinux", AREA, title, "pass", "permissive")
    if ctx.vendor == "amd" and ctx.in_container:
        if gpu_alloc_worked(ctx):
            return result(
                "ipc.selinux", AREA, title, "pass", "enforcing; the probe mapped /dev/kfd and allocated fine"
            )
        cause, fix = ctx.fix("ipc.selinux")
        return result("ipc.selinux", AREA, title, "warn", cause, fix)
    return result(
        "ipc.selinux", AREA, title, "pass", "enforcing (no AMD GPU in a container: no known effect)"
    )
