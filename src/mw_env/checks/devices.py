"""Device nodes: /dev/kfd and the GPU's render node (AMD) or /dev/nvidia* (NVIDIA), as this container sees them."""

from __future__ import annotations

from dataclasses import replace

from mw_env.base.shellquote import sh
from mw_env.checks.context import BUILD_LABEL, DoctorContext
from mw_env.checks.model import CheckResult, CheckStatus, result

AREA = "devices"


def expected_nodes(ctx: DoctorContext) -> list[str]:
    gpu = ctx.gpu
    if gpu is None:
        return []
    if gpu.vendor == "amd":
        if gpu.render_minor is not None:
            render = f"/dev/dri/renderD{gpu.render_minor}"
        else:
            found = ctx.machine.glob("dev/dri/renderD*")
            render = found[0] if found else "/dev/dri/renderD128"
        nodes = ["/dev/kfd", render]
    elif gpu.vendor == "nvidia":
        # detect() read the GPU's minor number (/proc/driver/nvidia/gpus/*/information): GPUs of a
        # multi-GPU host keep their host minors inside a container (--gpus device=3 -> /dev/nvidia3).
        named = [n.path for n in gpu.device_nodes if n.path.startswith("/dev/nvidia")]
        minor = sum(1 for g in ctx.hardware.gpus[: gpu.index] if g.vendor == "nvidia")
        card = next((p for p in named if p[len("/dev/nvidia") :].isdigit()), f"/dev/nvidia{minor}")
        nodes = ["/dev/nvidiactl", card, "/dev/nvidia-uvm"]
    else:
        return []
    # A profile may name extra fixed nodes; globs are covered by the vendor defaults above.
    for extra in ctx.profile.doctor.device_nodes:
        if "*" not in extra and extra not in nodes:
            nodes.append(extra)
    return nodes


def check_devices(ctx: DoctorContext) -> list[CheckResult]:
    if ctx.gpu is not None and ctx.gpu_build is None:
        detail = f"profile {ctx.profile.name} trains on the CPU: the {ctx.gpu.name}'s nodes are not needed"
        return [result("devices.gpu", "GPU device nodes", "skip", detail)]
    nodes = expected_nodes(ctx)
    if not nodes:
        return [_no_gpu(ctx)]
    out: list[CheckResult] = []
    for node in nodes:
        found = _check_node(ctx, node)
        # One missing passthrough has one host fix: say it once, point the other nodes at it.
        first = next((r for r in out if r.status == "fail" and r.fix == found.fix), None)
        if first is not None and found.fix:
            found = replace(found, fix=f"The same host commands as for {first.title} above.")
        out.append(found)
    mismatch = _gid_mismatch(ctx, nodes)
    if mismatch is not None:
        out.append(mismatch)
    if ctx.vendor == "nvidia" and all(r.status == "pass" for r in out):
        out.append(_libcuda(ctx))
    out.append(_visible_devices(ctx))
    gpu = ctx.gpu
    # Detection worked around unreadable or odd sysfs files; every arch verdict below rests on its result.
    # Notes about device nodes (/dev/...) are not about identification: the node checks above report them.
    odd = [n for n in (gpu.notes if gpu is not None else ()) if not n.startswith("/dev/")]
    if gpu is not None and odd:
        cause, fix = ctx.fix("devices.detection_notes", gpu=gpu.name, notes="; ".join(odd))
        out.append(result("devices.detection", "GPU identification", "warn", cause, fix))
    return out


def _no_gpu(ctx: DoctorContext) -> CheckResult:
    """No GPU selected: fine for a CPU profile, a failure when the profile installs a GPU build."""
    title = "GPU device nodes"
    build = ctx.selection.torch.build
    driver = ctx.hardware.nvidia_driver
    if driver and not ctx.hardware.gpus:
        where = f"this {ctx.container_kind} container" if ctx.in_container else "this machine"
        cause, fix = ctx.fix(
            "devices.driver_without_gpu", driver=driver, where=where, host_fix=ctx.host_fix()
        )
        return result("devices.gpu", title, "warn" if build == "cpu" else "fail", cause, fix)
    if build == "cpu":
        return result("devices.gpu", title, "skip", "no GPU selected: nothing to pass through")
    gpus = ", ".join(f"{g.name} ({g.vendor})" for g in ctx.hardware.gpus) or "none"
    cause, fix = ctx.fix(
        "devices.no_gpu_for_profile",
        profile=ctx.profile.name,
        build=BUILD_LABEL.get(build, build),
        gpus=gpus,
        how="chosen with --profile" if ctx.selection.explicit else "selected",
    )
    return result("devices.gpu", title, "fail", cause, fix)


# Where distributions, the NVIDIA container toolkit, incus (nvidia.runtime) and WSL put the driver library.
LIBCUDA_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "usr/local/nvidia/lib64",
    "usr/local/cuda/compat",
    "usr/lib/wsl/lib",
)


def _libcuda(ctx: DoctorContext) -> CheckResult:
    title = "NVIDIA driver library"
    extra = [p.strip("/") for p in ctx.env.get("LD_LIBRARY_PATH", "").split(":") if p.strip("/")]
    for d in (*LIBCUDA_DIRS, *extra):
        if ctx.machine.exists(f"{d}/libcuda.so.1"):
            return result("devices.libcuda", title, "pass", f"/{d}/libcuda.so.1")
    if ctx.machine.is_real:
        cache = ctx.machine.run(["ldconfig", "-p"], timeout=5)
        for line in cache.stdout.splitlines() if cache.ok else ():
            if "libcuda.so.1 " in line and "=>" in line:
                return result("devices.libcuda", title, "pass", line.split("=>")[-1].strip())
    cause, fix = ctx.fix(
        "devices.no_libcuda", paths=", ".join("/" + d for d in LIBCUDA_DIRS), host_commands=ctx.host_fix()
    )
    # A warning: the library may sit somewhere unusual; the probe's torch.cuda.is_available() decides.
    return result("devices.libcuda", title, "warn", cause, fix)


# ROCm torch honours HIP_VISIBLE_DEVICES, falls back to CUDA_VISIBLE_DEVICES; the HSA runtime reads
# ROCR_VISIBLE_DEVICES first. Set-and-empty means "no devices", not "all".
_VISIBLE = {
    "amd": ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
    "nvidia": ("CUDA_VISIBLE_DEVICES",),
}


def _visible_devices(ctx: DoctorContext) -> CheckResult:
    title = "GPU visibility variables"
    env = ctx.env
    vendor = ctx.vendor or ""
    same_vendor = [g for g in ctx.hardware.gpus if g.vendor == vendor]
    for var in _VISIBLE.get(vendor, ()):
        value = env.get(var)
        if value is None:
            continue
        items = [v.strip() for v in value.split(",") if v.strip()]
        why = ""
        if not items:
            why = "is set but empty, which means no devices"
        elif all(v.isdigit() for v in items) and all(int(v) >= len(same_vendor) for v in items):
            why = f"names no existing GPU (this machine has {len(same_vendor)})"
        if why:
            cause, fix = ctx.fix("devices.hidden_by_env", var=var, value=value, why=why)
            return result("devices.visible", title, "fail", cause, fix)
    set_vars = [f"{v}={env[v]}" for v in _VISIBLE.get(vendor, ()) if v in env]
    gpu = ctx.gpu
    # The selection asks for HIP_VISIBLE_DEVICES when AMD GPUs of different archs share the box (an iGPU
    # next to a dGPU); same-arch boxes keep every GPU for DDP.
    wanted = ctx.selection.env.get("HIP_VISIBLE_DEVICES")
    if vendor == "amd" and wanted and not set_vars and gpu is not None:
        cause, fix = ctx.fix(
            "devices.several_amd",
            count=len(same_vendor),
            names=", ".join(g.name for g in same_vendor),
            selected=gpu.name,
            position=wanted,
        )
        return result("devices.visible", title, "warn", cause, fix)
    return result("devices.visible", title, "pass", ", ".join(set_vars) or "not set (all GPUs visible)")


def _node_id(node: str) -> str:
    return "devices." + node.rsplit("/", 1)[-1]


def _check_node(ctx: DoctorContext, node: str) -> CheckResult:
    m = ctx.machine
    gpu = ctx.gpu
    assert gpu is not None
    title = f"{node}"
    st = m.stat(node)
    if st is None:
        runtime = ctx.container_kind
        if ctx.in_container:
            name = ctx.hardware.container.name
            cause, fix = ctx.fix(
                "devices.missing_passthrough",
                gpu=f"{gpu.name}{f', {gpu.gfx_target}' if gpu.gfx_target else ''}",
                node=node,
                runtime=runtime,
                container_note=f" ({name})" if name else "",
                host_commands=ctx.host_fix(),
            )
        else:
            cause, fix = ctx.fix(
                "devices.missing_host_driver",
                node=node,
                gpu=f"{gpu.name}{f' ({gpu.gfx_target})' if gpu.gfx_target else ''}",
                driver="amdgpu" if gpu.vendor == "amd" else "nvidia",
            )
        return result(_node_id(node), title, "fail", f"missing: {cause}", fix)
    if st.kind != "char":
        cause, fix = ctx.fix("devices.not_char", node=node, kind=st.kind, host_commands=ctx.host_fix())
        return result(_node_id(node), title, "fail", cause, fix)
    owner = _owner(ctx, st.uid, st.gid)
    mode = f"{st.mode:04o}"
    if not m.can_access(node, write=True):
        who = m.user()
        groups = ", ".join(_group_label(ctx, g) for g in who.groups) or "none"
        cause, fix = ctx.fix(
            "devices.no_permission",
            node=node,
            owner=owner,
            mode=mode,
            user=who.name or who.uid,
            groups=groups,
            group_fix=_group_fix(ctx, node, st.gid),
        )
        return result(_node_id(node), title, "fail", cause, fix)
    return result(_node_id(node), title, "pass", f"character device {owner} mode {mode}, read/write ok")


def _owner(ctx: DoctorContext, uid: int, gid: int) -> str:
    return f"uid {uid} gid {gid} ({ctx.machine.group_name(gid) or 'unnamed here'})"


def _group_label(ctx: DoctorContext, gid: int) -> str:
    name = ctx.machine.group_name(gid)
    return f"{gid}({name})" if name else str(gid)


def _group_fix(ctx: DoctorContext, node: str, gid: int) -> str:
    """The group fix for this runtime: incus sets the node's gid; docker/podman add the group; a host adds the user."""
    kind = ctx.container_kind
    # Names read from the machine go into the commands as shell words (a placeholder stays as it is).
    name = sh(ctx.hardware.container.name) if ctx.hardware.container.name else "<container>"
    user = ctx.machine.user()
    render = ctx.machine.group_id("render")
    target = render if render is not None else "<render gid in the container>"
    if kind in ("incus", "lxc"):
        device = "kfd" if node == "/dev/kfd" else "<gpu device>"
        add_user = (
            ""
            if isinstance(target, int) and target in user.groups
            else f"; inside: `sudo usermod -aG render {sh(user.name) if user.name else '$USER'}` and log in again"
        )
        return (
            f"On the host: `incus config device set {name} {device} gid={target}` "
            f"(`incus config device show {name}` lists the device names; incus creates nodes as uid 0 gid 0 mode 0660 unless told){add_user}"
        )
    if kind == "docker":
        return f"Restart the container with `--group-add {gid}` (the node's numeric GID; `--group-add render` fails when the image has no render group)."
    if kind == "podman":
        return f"Restart with `--group-add keep-groups` (rootless) or `--group-add {gid}`."
    group = ctx.machine.group_name(gid) or str(gid)
    return f"`sudo usermod -aG {group} {sh(user.name) if user.name else '$USER'}`, then log out and in again (or `newgrp {group}`)."


def _gid_mismatch(ctx: DoctorContext, nodes: list[str]) -> CheckResult | None:
    """A `render` group whose GID differs from the render node's: the image's and the host's GIDs disagree."""
    render_gid = ctx.machine.group_id("render")
    if render_gid is None:
        return None
    for node in nodes:
        if "renderD" not in node and node != "/dev/kfd":
            continue
        st = ctx.machine.stat(node)
        if st is None or st.gid in (0, render_gid):
            continue
        if ctx.machine.group_name(st.gid) == "video":
            continue  # older systems: kfd/render owned by video, which is fine
        cause, fix = ctx.fix(
            "devices.gid_mismatch",
            node=node,
            gid=st.gid,
            group_gid=render_gid,
            group="render",
        )
        status: CheckStatus = "pass" if ctx.machine.can_access(node) else "warn"
        return result(
            "devices.render_gid", "render group GID", status, cause, fix if status == "warn" else ""
        )
    return None
