"""Shared memory and confinement: /dev/shm size (docker's private 64 MiB default) and SELinux on /dev/kfd."""

from __future__ import annotations

from mw_env.checks.context import DoctorContext, human_bytes
from mw_env.checks.model import CheckResult, CheckStatus, result
from mw_env.hardware.machine import Machine

AREA = "ipc"
MIB = 1024**2
DOCKER_DEFAULT_SHM = 64 * MIB


def shm_private(machine: Machine) -> bool:
    """docker/podman/k8s default: a private IPC namespace whose /dev/shm is 64 MiB."""
    du = machine.disk_usage("/dev/shm")
    return du is not None and du.total <= DOCKER_DEFAULT_SHM


def selinux_enforcing(machine: Machine) -> bool:
    return (machine.read("sys/fs/selinux/enforce") or "").strip() == "1"


# Known messages whose usual cause is /dev/shm (docker's private 64 MiB): DataLoader workers and NCCL/RCCL.
_SHM_MESSAGES = ("shm-bus-error", "shm-object-open", "nccl-shm-segment", "nccl-unhandled-system")


def explain_here(machine: Machine, message_id: str) -> str | None:
    """For `--explain`: what THIS machine says about a logged message that has IPC/SELinux causes, or None.

    'Memory critical error ... Memory in use' has three causes; two of them are facts of the container the
    log most likely came from, readable without torch.
    """
    if message_id not in ("memory-critical-in-use", *_SHM_MESSAGES):
        return None
    du = machine.disk_usage("/dev/shm")
    private = shm_private(machine)
    size = human_bytes(du.total) if du is not None else "missing"
    if message_id in _SHM_MESSAGES:
        if private:
            return f"/dev/shm here is {size} (private IPC namespace): this is the cause; restart with `--ipc=host`."
        return f"/dev/shm here is {size}: if the log is from this machine, the workers filled it (lower num_workers)."
    if private:
        return f"/dev/shm here is {size} - a private IPC namespace: cause (1); restart the container with `--ipc=host`."
    if selinux_enforcing(machine):
        return "SELinux is enforcing here: cause (2); on the host `sudo setsebool -P container_use_devices true`."
    return (
        f"/dev/shm here is {size} and SELinux is not enforcing, so (1) and (2) do not apply to this machine: "
        "`mw-env doctor` runs the staged probe that tells a driver or board fault (3) apart."
    )


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
            title,
            "warn",
            "/dev/shm is missing: DataLoader workers and ROCm IPC need it",
            "Mount a tmpfs on /dev/shm (`--ipc=host` for containers).",
        )
    size = human_bytes(du.total)
    if du.total <= DOCKER_DEFAULT_SHM:
        # ROCm's allocator needs the IPC namespace; CUDA and the CPU only lose DataLoader workers to it.
        fix_id = "ipc.shm_private" if ctx.vendor == "amd" else "ipc.shm_private_workers"
        cause, fix = ctx.fix(fix_id, size=size, host_commands=_ipc_command(ctx))
        # ROCm fails every allocation there ("Memory critical error ... Memory in use"); CUDA/CPU only
        # lose DataLoader workers, so that is a warning - as it is when the probe's GPU allocation worked.
        status: CheckStatus = "fail" if ctx.vendor == "amd" and not gpu_alloc_worked(ctx) else "warn"
        return result("ipc.shm", title, status, cause, fix)
    if du.total < 1024 * MIB:
        cause, fix = ctx.fix("ipc.shm_small", size=size)
        return result("ipc.shm", title, "warn", cause, fix)
    return result("ipc.shm", title, "pass", f"{size} (host IPC namespace or a large --shm-size)")


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
        return result("ipc.selinux", title, "pass", "not active")
    if text.strip() != "1":
        return result("ipc.selinux", title, "pass", "permissive")
    if ctx.vendor == "amd" and ctx.in_container:
        if gpu_alloc_worked(ctx):
            return result(
                "ipc.selinux", title, "pass", "enforcing; the probe mapped /dev/kfd and allocated fine"
            )
        cause, fix = ctx.fix("ipc.selinux")
        return result("ipc.selinux", title, "warn", cause, fix)
    return result("ipc.selinux", title, "pass", "enforcing (no AMD GPU in a container: no known effect)")
