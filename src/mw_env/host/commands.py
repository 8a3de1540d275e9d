"""Operator-side commands that pass this machine's GPU into its container (incus, docker, podman).

The commands run on the HOST, so they are strings for a POSIX shell: every value we put in is validated and
shell-quoted; the only unquoted parts are `$(...)` lookups we write ourselves (a group id or an image name that
only the host knows). Facts (doctor-anchors d, B1): incus passes /dev/dri with a `gpu` device but never
/dev/kfd, and creates both root:root 0660, so a non-root user needs `gid=` = the render group's number INSIDE
the container (numbers, not names: the render gid is allocated dynamically and differs between host and image).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from mw_env.base.errors import InputError
from mw_env.base.shellquote import sh
from mw_env.hardware.facts import Hardware
from mw_env.host.oci import HostPlan, node_of, oci_amd, oci_nvidia

if TYPE_CHECKING:
    from mw_env.hardware.machine import Machine
    from mw_env.profiles.model import Selection

RUNTIMES = ("incus", "docker", "podman", "kubernetes")
# incus instance names: 1-63 letters, digits and dashes, starting with a letter, not ending with a dash.
_INCUS_NAME = re.compile(r"^[A-Za-z](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
# docker/podman: the daemon's own rule [a-zA-Z0-9][a-zA-Z0-9_.-]+ (at least 2 characters).
_OCI_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{1,127}$")
_OCI_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$")
_LIST = {
    "incus": "incus list",
    "docker": "docker ps -a",
    "podman": "podman ps -a",
    "kubernetes": "kubectl get pods",
}
# kubernetes pod names: a DNS-1123 subdomain.
_K8S_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?$")
_NAME_RULES = {
    "incus": (_INCUS_NAME, "1-63 letters, digits and '-', starting with a letter and not ending with '-'"),
    "kubernetes": (
        _K8S_NAME,
        "1-253 lower-case letters, digits, '-' and '.', starting and ending alphanumeric",
    ),
    "docker": (_OCI_NAME, "2-128 characters from [A-Za-z0-9_.-], starting with a letter or digit"),
}
_USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


def default_runtime(hardware: Hardware) -> str:
    """The runtime this container runs under when we can tell (LXC-style containers are incus), else incus."""
    kind = hardware.container.kind
    if kind in RUNTIMES:
        return kind
    return "incus"


def validate_container_name(runtime: str, name: str) -> str:
    """`name` when it is a valid container name for `runtime`; InputError naming the rule otherwise."""
    if runtime not in RUNTIMES:
        raise InputError(f"unknown runtime {runtime!r}", hint=f"allowed: {', '.join(RUNTIMES)}")
    pattern, rule = _NAME_RULES.get(runtime, _NAME_RULES["docker"])
    if not pattern.fullmatch(name or ""):
        raise InputError(
            f"invalid {runtime} container name {name!r}", hint=f"{_a(runtime)} {runtime} name is {rule}"
        )
    return name


def host_plan(
    *,
    runtime: str | None,
    container: str | None,
    hardware: Hardware,
    selection: Selection,
    machine: Machine | None = None,
    image: str | None = None,
) -> HostPlan:
    """The host-side commands for this container, runtime and profile (see the module doc)."""
    explicit_runtime = runtime
    runtime = runtime or default_runtime(hardware)
    if runtime not in RUNTIMES:
        raise InputError(f"unknown runtime {runtime!r}", hint=f"allowed: {', '.join(RUNTIMES)}")
    if container is not None:
        validate_container_name(runtime, container)
    if image is not None and not _OCI_IMAGE.fullmatch(image):
        raise InputError(
            f"invalid image reference {image!r}", hint="e.g. ubuntu:24.04 or ghcr.io/org/img:tag"
        )
    # No GPU to pass is the first thing to say: without one, naming the container would not help.
    vendor = _vendor(hardware, selection)
    if container is None and explicit_runtime is None and hardware.container.kind == "none":
        return _bare_metal(hardware, vendor, machine)
    id_note = None
    detected = container is None
    if container is None:
        container, id_note = _detected_container(runtime, hardware)
        validate_container_name(runtime, container)
    # Facts read here (device nodes, group numbers, the user) describe the container only when mw-env runs
    # inside it; from the host, or from another runtime, they describe something else and are not used.
    info = hardware.container
    inside = (info.kind == runtime or (runtime == "incus" and info.kind == "lxc")) and (
        detected or container == info.name or bool(info.id and info.id.startswith(container))
    )
    venv = _venv_path(machine if inside else None)

    if runtime == "kubernetes":
        plan = _kubernetes(container, vendor)
    elif runtime == "incus" and vendor == "amd":
        seen = hardware if inside else _without_nodes(hardware)
        plan = _incus_amd(container, seen, machine if inside else None)
    elif runtime == "incus":
        plan = _incus_nvidia(container)
    elif vendor == "amd":
        plan = oci_amd(runtime, container, hardware, image, in_docker=info.kind == "docker", venv=venv)
    else:
        plan = oci_nvidia(runtime, container, image, venv=venv)
    if id_note:
        plan = replace(plan, notes=(id_note, *plan.notes))
    gpu = hardware.gpu
    if inside and gpu is not None and gpu.vendor == vendor and gpu.device_nodes_ok:
        plan = _nothing_to_change(plan, runtime, container)
    return plan


def _nothing_to_change(plan: HostPlan, runtime: str, container: str) -> HostPlan:
    """The nodes already work: only a check is left to run; the recipe stays as a note for a new container."""
    if runtime in ("docker", "podman"):
        what = "nvidia-smi" if plan.vendor == "nvidia" else "ls -ln /dev/kfd /dev/dri"
        checks: tuple[str, ...] = (f"{runtime} exec {sh(container)} {what}",)  # this container, not a new one
    else:
        checks = plan.checks
    notes = ["this container can already open the GPU's device nodes: nothing to change for it"]
    recipe = [c for c in plan.commands if c not in plan.checks]
    if recipe and not any(n.startswith("for a new container") for n in plan.notes):
        notes.append("for a new container: " + " && ".join(recipe))
    notes += [n for n in plan.notes if n.startswith(("for a new container", "gid=")) or " id " in n]
    return replace(plan, commands=checks, notes=tuple(notes), checks=checks)


def _without_nodes(hardware: Hardware) -> Hardware:
    """The hardware with its GPU's device nodes unknown (they were read outside the target container)."""
    gpu = hardware.gpu
    if gpu is None:
        return hardware
    gpus = tuple(replace(g, device_nodes=()) if g is gpu else g for g in hardware.gpus)
    return replace(hardware, gpus=gpus)


def _venv_path(machine: Machine | None) -> str:
    """Where bootstrap puts the venv in the container ($MW_ENV_VENV or ~/training-venv), for the notes."""
    if machine is None:
        return "~/training-venv"
    from mw_env.venv.record import default_venv

    return str(default_venv(machine.env))


def _bare_metal(hardware: Hardware, vendor: str, machine: Machine | None) -> HostPlan:
    """mw-env runs on the host itself: there is no container to pass anything into."""
    gpu = hardware.gpu if hardware.gpu is not None and hardware.gpu.vendor == vendor else None
    notes = ["mw-env runs on the host itself (no container): there is nothing to pass through"]
    commands: list[str] = []
    nodes = gpu.device_nodes if gpu is not None else ()
    missing = [n.path for n in nodes if not n.exists]
    denied = [n.path for n in nodes if n.exists and not n.ok]
    if gpu is None or missing:
        what = ", ".join(missing) if missing else "no device node"
        if vendor == "amd":
            notes.append(
                f"{what}: the amdgpu driver has not created the GPU's nodes; load it (`sudo modprobe amdgpu`, "
                "then `sudo dmesg | grep -i amdgpu` for why it failed) and check that the kernel has KFD"
            )
            commands.append("ls -ln /dev/kfd /dev/dri")
        else:
            notes.append(
                f"{what}: the NVIDIA driver is not loaded or not installed; install it for this kernel "
                "(`ubuntu-drivers install` on Ubuntu), then `nvidia-smi` lists the GPU"
            )
            commands.append("nvidia-smi")
    elif denied:
        user = machine.user() if machine is not None else None
        name = user.name if user is not None and user.name and _USER_NAME.fullmatch(user.name) else "$USER"
        groups = "render,video" if vendor == "amd" else "video"
        notes.append(
            f"{', '.join(denied)} exist but this user cannot open them: join the owning groups, then log in "
            f"again (or `newgrp {groups.split(',')[0]}`)"
        )
        commands.append(f"sudo usermod -aG {groups} {name if name == '$USER' else sh(name)}")
    else:
        notes.append("the GPU's device nodes are usable here: nothing to change")
    notes.append(
        "to pass the GPU into a container on this host instead, name it: --runtime incus|docker|podman "
        "--container NAME"
    )
    return HostPlan(
        "none", "(none)", tuple(commands), tuple(notes), vendor=vendor, checks=tuple(commands[-1:])
    )


def _detected_container(runtime: str, hardware: Hardware) -> tuple[str, str | None]:
    """(the name of the container mw-env runs in, a note) for `runtime`; InputError when it cannot be known."""
    info = hardware.container
    same_kind = info.kind == runtime or (runtime == "incus" and info.kind == "lxc")
    hint = f"pass --container NAME (the name `{_LIST[runtime]}` shows on the host)"
    if same_kind and info.name:
        return info.name, None
    if same_kind and info.id and runtime in ("docker", "podman"):
        # The daemon accepts any unique prefix of the id wherever it accepts a name.
        short = info.id[:12]
        return (
            short,
            f"{short} is this container's id ({runtime} accepts it like a name; see `{_LIST[runtime]}`)",
        )
    if info.kind == "none":
        where = "mw-env does not seem to run in a container"
    elif not same_kind:
        named = f" {info.name!r}" if info.name else ""
        where = (
            f"mw-env runs in {_a(info.kind)} {info.kind} container{named}, not {_a(runtime)} {runtime} one"
        )
    else:
        where = f"this {info.kind} container's name is not visible from inside"
    raise InputError(f"cannot tell which container to pass the GPU into: {where}", hint=hint)


def host_commands(
    *,
    runtime: str | None,
    container: str | None,
    hardware: Hardware,
    selection: Selection,
    machine: Machine | None = None,
) -> list[str]:
    """The commands of `host_plan()` (the contract's shape)."""
    plan = host_plan(
        runtime=runtime, container=container, hardware=hardware, selection=selection, machine=machine
    )
    return list(plan.commands)


# -- helpers -------------------------------------------------------------------------------------------


def _vendor(hardware: Hardware, selection: Selection) -> str:
    kind = selection.profile.host.kind
    if kind in ("amd", "nvidia"):
        return kind
    gpu = hardware.gpu or next((g for g in hardware.gpus if g.vendor in ("amd", "nvidia")), None)
    if gpu is not None and gpu.vendor in ("amd", "nvidia"):
        return gpu.vendor
    if hardware.nvidia_driver:
        return "nvidia"  # the host's NVIDIA module is loaded, its GPU just not passed in (see detect)
    raise InputError(
        f"nothing to pass through: profile {selection.profile.name!r} uses no GPU and none was detected",
        hint="to prepare a container for a GPU the host has, name its profile: --profile gfx1103 / gfx1151 / rocm / cuda",
    )


def _render_gid(hardware: Hardware, machine: Machine | None) -> int | None:
    """The render group's number in THIS container: its /etc/group, else a device node owned by `render`."""
    if machine is not None and (gid := machine.group_id("render")) is not None:
        return gid
    for node in hardware.gpu.device_nodes if hardware.gpu else ():
        if node.group == "render" and node.gid is not None:
            return node.gid
    return None


def _a(word: str) -> str:
    """The article for a runtime name as it is spoken: an incus, an lxc, a docker."""
    return "an" if word[:1] in "aeiou" or word == "lxc" else "a"


def _incus_amd(container: str, hardware: Hardware, machine: Machine | None) -> HostPlan:
    c = sh(container)
    commands: list[str] = []
    notes: list[str] = []
    gid = _render_gid(hardware, machine)
    if gid is None and machine is None:
        # Not run inside the container: its render group (and whether it exists) is only known there.
        commands.append(
            f"incus exec {c} -- sh -c 'getent group render >/dev/null || groupadd --system render'"
        )
        g = f'"$(incus exec {c} -- getent group render | cut -d: -f3)"'
        notes.append(
            f"the render group's number inside {container} is read with `incus exec` (mw-env does not run in "
            "it, so it cannot know it); the first command creates the group if the image lacks it"
        )
    elif gid is None:
        # The image has no render group yet: create one and read its number back on the host.
        commands.append(f"incus exec {c} -- groupadd --system render")
        g = f'"$(incus exec {c} -- getent group render | cut -d: -f3)"'
        notes.append(
            "this container has no 'render' group: the first command creates it, the others use its number"
        )
    else:
        g = str(gid)
        notes.append(
            f"gid={gid} is the 'render' group's number inside {container} (read from its /etc/group)"
        )

    kfd, render = node_of(hardware, "/dev/kfd"), node_of(hardware, "/dev/dri/renderD")
    adds = (
        ("gpu", render, f"incus config device add {c} gpu gpu gid={g}"),
        ("kfd", kfd, f"incus config device add {c} kfd unix-char source=/dev/kfd path=/dev/kfd gid={g}"),
    )
    if all(node is not None and node.ok for _, node, _ in adds) and gid is not None:
        # Re-adding a device incus already has fails; the operator may still want the recipe.
        notes.append("for a new container: " + " && ".join(add for _, _, add in adds))
    for dev, node, add in adds:
        if node is None or not node.exists:
            commands.append(add)
        elif not node.ok:
            # Passed through already, but root:root 0660: only the gid is wrong.
            commands.append(f"incus config device set {c} {dev} gid={g}")
            notes.append(
                f"{node.path} exists but this user cannot open it (owner {node.uid}:{node.gid}, mode {node.mode}); "
                f"if your device is not named {dev!r}, find it with `incus config device show {c}`"
            )
        else:
            notes.append(f"{node.path} is already passed through and usable")

    user = machine.user() if machine is not None else None
    if machine is None:
        notes.append(
            f"add the training user to 'render' inside {container}: `incus exec {c} -- usermod -aG render USER`"
        )
    elif user is not None and user.uid != 0 and (gid is None or gid not in user.groups):
        if user.name and _USER_NAME.fullmatch(user.name):
            commands.append(f"incus exec {c} -- usermod -aG render {sh(user.name)}")
            notes.append(
                f"{user.name} joins 'render'; log in again (or `newgrp render`) for it to take effect"
            )
        else:
            notes.append(
                "add the training user to the 'render' group inside the container (usermod -aG render USER)"
            )
    check = f"incus exec {c} -- ls -ln /dev/kfd /dev/dri"
    commands.append(check)
    notes.append(
        "incus device changes are live: no restart needed; then run `mw-env doctor` inside the container"
    )
    return HostPlan("incus", container, tuple(commands), tuple(notes), vendor="amd", checks=(check,))


def _incus_nvidia(container: str) -> HostPlan:
    c = sh(container)
    check = f"incus exec {c} -- nvidia-smi"
    commands = (
        f"incus config device add {c} gpu gpu gputype=physical mode=0666",
        f"incus config set {c} nvidia.runtime=true",
        f"incus restart {c}",
        check,
    )
    notes = (
        "nvidia.runtime=true injects the host's driver libraries and nvidia-smi (needs the NVIDIA container "
        "toolkit on the host) and takes effect on restart",
        "mode=0666 matches the host's /dev/nvidia* permissions; incus would otherwise create them root-only (0660)",
    )
    return HostPlan("incus", container, commands, notes, vendor="nvidia", checks=(check,))


def _kubernetes(pod: str, vendor: str) -> HostPlan:
    """A pod cannot be given devices while it runs: the fix is in its spec, served by the node's device plugin."""
    resource = "nvidia.com/gpu" if vendor == "nvidia" else "amd.com/gpu"
    plugin = (
        "the NVIDIA device plugin (or the GPU operator)"
        if vendor == "nvidia"
        else "AMD's ROCm k8s-device-plugin (github.com/ROCm/k8s-device-plugin)"
    )
    notes = [
        f"pods are immutable: recreate pod {pod} (or its Deployment/Job) with this, and make sure {plugin}",
        "runs on the node:",
        "spec:",
    ]
    if vendor == "amd":
        # The device plugin mounts /dev/kfd and the render node root:render 0660; a non-root user needs the
        # node's render gid (a number: the name differs between node and image). supplementalGroups exists
        # only in the POD's securityContext (PodSecurityContext), not in a container's.
        notes += [
            "  securityContext:            # the pod's (spec.securityContext), not a container's",
            "    supplementalGroups: [<the render group's gid ON THE NODE: getent group render>]",
        ]
    notes += [
        "  containers:",
        "  - name: <the training container>",
        "    resources:",
        "      limits:",
        f"        {resource}: 1",
    ]
    checks = (
        (f"kubectl exec {sh(pod)} -- ls -l /dev/kfd /dev/dri",)
        if vendor == "amd"
        else (f"kubectl exec {sh(pod)} -- nvidia-smi",)
    )
    edit = f"the container's resources.limits {{{resource}: 1}}" + (
        " and the pod's spec.securityContext.supplementalGroups [the node's render gid]"
        if vendor == "amd"
        else ""
    )
    return HostPlan(
        runtime="kubernetes",
        container=pod,
        commands=(
            f"kubectl get pod {sh(pod)} -o yaml > {sh(pod + '.yaml')}  # add {edit}, then re-create",
            *checks,
        ),
        notes=tuple(notes),
        vendor=vendor,
        checks=checks,
    )
