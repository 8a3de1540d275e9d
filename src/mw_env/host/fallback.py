"""Host-side lines without a plan: what the doctor's fixes name when `mw_env.host.commands` cannot plan the
commands for this container (the runtime is unknown, or the container's name cannot be seen from inside).
The host modules are the one place the operator's commands are spelled; checks/context.py asks here."""

from __future__ import annotations

from mw_env.base.shellquote import sh


def fallback_lines(
    kind: str, name: str | None, vendor: str | None, render_gid: int | None = None
) -> list[str]:
    """The operator-side lines for a runtime when `host.host_commands` cannot plan them (an unknown
    container, or its name not visible from inside): the commands with placeholders the operator fills in."""
    # "<container>" only when the name cannot be seen from inside (`incus list` on the host shows it); a name
    # read from the machine is one shell word in the commands below, whatever it holds.
    c = sh(name) if name else "<container>"
    gid = str(render_gid) if render_gid is not None else f"<render gid in {c}>"
    if kind == "kubernetes":
        resource = "nvidia.com/gpu" if vendor == "nvidia" else "amd.com/gpu"
        plugin = "the NVIDIA device plugin" if vendor == "nvidia" else "the ROCm k8s-device-plugin"
        lines = [f"pod spec: resources.limits: {{{resource}: 1}} (needs {plugin} on the node)"]
        if vendor != "nvidia":
            lines.append("pod spec: securityContext.supplementalGroups: [<render gid on the node>]")
        return lines
    if vendor == "nvidia":
        if kind in ("incus", "lxc"):
            return [
                f"incus config device add {c} gpu0 gpu gputype=physical",
                f"incus config set {c} nvidia.runtime=true",
            ]
        docker = "docker run --gpus all --ipc=host ..."
        podman = "podman run --device nvidia.com/gpu=all --ipc=host ..."
        return [docker] if kind == "docker" else [podman] if kind == "podman" else [docker, podman]
    if kind in ("incus", "lxc"):
        return [
            f"incus config device add {c} gpu0 gpu gputype=physical gid={gid}",
            f"incus config device add {c} kfd unix-char source=/dev/kfd path=/dev/kfd gid={gid}",
        ]
    group = '--group-add video --group-add "$(getent group render | cut -d: -f3)"'
    if kind == "podman":
        return ["podman run --device /dev/kfd --device /dev/dri --group-add keep-groups --ipc=host ..."]
    return [f"docker run --device /dev/kfd --device /dev/dri {group} --ipc=host ..."]
