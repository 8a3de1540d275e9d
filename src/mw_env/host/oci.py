"""docker/podman recipes for `mw_env.host.commands`: a running container cannot be given devices, so the GPU comes with a
new one; and the plan type they share with host/commands.py (kept apart so each module stays small)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mw_env.base.shellquote import sh
from mw_env.hardware.facts import DeviceNode, Hardware


@dataclass(frozen=True)
class HostPlan:
    """What the operator runs on the host, in order, and what they should know."""

    runtime: str
    container: str
    commands: tuple[str, ...]
    notes: tuple[str, ...] = ()
    vendor: str = "amd"
    checks: tuple[str, ...] = field(default=())  # commands that verify the result (also in `commands`)

    def to_dict(self) -> dict[str, object]:
        return {
            "runtime": self.runtime,
            "container": self.container,
            "commands": list(self.commands),
            "notes": list(self.notes),
        }


def node_of(hardware: Hardware, prefix: str) -> DeviceNode | None:
    gpu = hardware.gpu
    nodes = gpu.device_nodes if gpu is not None else ()
    return next((n for n in nodes if n.path == prefix or n.path.startswith(prefix)), None)


def _committed_image(container: str) -> str:
    """An image name for `docker commit` of the container: repository names are lower-case, [a-z0-9._-]."""
    base = re.sub(r"[^a-z0-9]+", "-", container.lower()).strip("-") or "container"
    return f"{base[:100]}-mw-env:gpu"


def _recreate(runtime: str, container: str, image: str | None, venv: str) -> tuple[list[str], str, list[str]]:
    """(commands before the run, the image expression to run, notes) for a container started anew.

    docker/podman cannot add devices to a running container, so the GPU comes with a new one. Started from
    the original image, it would lack everything made inside the old container since (the training venv
    first): so by default the old container is committed and the new one starts from that.
    """
    new = _gpu_name(container)
    # The venv path is the container's ($MW_ENV_VENV): any text, so every command that names it quotes it.
    keep_volume = (
        f"-v {sh('mw-env-venv:' + venv)}"
        if venv.startswith("/")
        else "-v mw-env-venv:<the venv's absolute path inside it>"
    )
    lock_copy = sh(f"{container}:{venv.rstrip('/')}/pylock.mw-env.toml")
    if image is not None:
        notes = [
            f"{runtime} cannot add devices to a running container: this starts {new} from {image} with the GPU. "
            f"Anything made inside {container} is NOT in it, the training venv ({venv}) included: bootstrap "
            f"again in {new} (the same packages: `{runtime} cp {lock_copy} .`, then "
            f"`mw-env bootstrap --lock pylock.mw-env.toml` in {new}), or drop --image to `{runtime} commit` {container} first; to keep the venv across "
            f"recreations, put it on a volume ({keep_volume})",
            f"repeat your own volumes, ports and env (see `{runtime} inspect {container}`)",
        ]
        return [], sh(image), notes
    committed = _committed_image(container)
    notes = [
        f"{runtime} cannot add devices to a running container: {runtime} commit saves {container} (the "
        f"training venv {venv} and everything else made inside it) as {committed}, and {new} starts from that "
        "with the GPU. Without the commit, a container from the original image would not have the venv",
        f"volumes are not in a commit: repeat your own -v mounts, ports "
        f"and env (see `{runtime} inspect {container}`); to keep the venv across recreations without a commit, "
        f"put it on a volume ({keep_volume})",
    ]
    return [f"{runtime} commit {sh(container)} {committed}"], committed, notes


def _gpu_name(container: str) -> str:
    # docker cannot add devices to a running container: the GPU copy is a new container next to it.
    return f"{container[:124]}-gpu"


def oci_amd(
    runtime: str, container: str, hardware: Hardware, image: str | None, *, in_docker: bool, venv: str
) -> HostPlan:
    new = _gpu_name(container)
    before, image_expr, notes = _recreate(runtime, container, image, venv)
    flags = ["--device=/dev/kfd", "--device=/dev/dri"]
    if runtime == "docker":
        kfd = node_of(hardware, "/dev/kfd") if in_docker else None
        # Inside docker (no user namespace) a passed node shows the HOST's gid, which is what --group-add needs;
        # read anywhere else (an incus container's own gid, the host's view) the number means something else.
        render = str(kfd.gid) if kfd is not None and kfd.exists and kfd.gid not in (None, 0) else None
        flags += [
            "--group-add",
            '"$(getent group video | cut -d: -f3)"',
            "--group-add",
            render or '"$(getent group render | cut -d: -f3)"',
        ]
        notes.append(
            "--group-add uses the host's video and render group numbers (names differ between host and image)"
            + (
                f"; {render} is /dev/kfd's group as this container sees it, which is the host's"
                if render
                else ""
            )
        )
    else:
        flags += ["--group-add", "keep-groups", "--security-opt", "label=disable"]
        notes.append(
            "rootless podman: keep-groups hands the container your host groups, so your host user must be in "
            "render and video (`sudo usermod -aG render,video $USER`); rootful podman: use "
            '--group-add "$(getent group render | cut -d: -f3)" instead'
        )
        notes.append(
            "label=disable: SELinux otherwise denies mmap of /dev/kfd ('Memory critical error ... Memory in use'); "
            "alternative: sudo setsebool -P container_use_devices true"
        )
    flags.append("--ipc=host")
    notes.append(
        "--ipc=host: without it ROCm allocations fail with 'Memory critical error ... Memory in use'"
    )
    run = " ".join([runtime, "run", "-dit", "--name", sh(new), *flags, image_expr])
    check = f"{runtime} exec {sh(new)} ls -ln /dev/kfd /dev/dri"
    return HostPlan(runtime, container, (*before, run, check), tuple(notes), vendor="amd", checks=(check,))


def oci_nvidia(runtime: str, container: str, image: str | None, *, venv: str) -> HostPlan:
    new = _gpu_name(container)
    before, image_expr, notes = _recreate(runtime, container, image, venv)
    commands: list[str] = []
    if runtime == "docker":
        notes.append(
            "needs the NVIDIA container toolkit: sudo nvidia-ctk runtime configure --runtime=docker && "
            "sudo systemctl restart docker"
        )
        flags = ["--gpus", "all"]
    else:
        commands.append("sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml")
        notes.append(
            "podman uses CDI: `nvidia-ctk cdi generate` writes the device spec (NVIDIA container toolkit)"
        )
        flags = ["--device", "nvidia.com/gpu=all", "--security-opt", "label=disable"]
    flags.append("--ipc=host")
    commands += before
    commands.append(" ".join([runtime, "run", "-dit", "--name", sh(new), *flags, image_expr]))
    check = f"{runtime} exec {sh(new)} nvidia-smi"
    commands.append(check)
    return HostPlan(runtime, container, tuple(commands), tuple(notes), vendor="nvidia", checks=(check,))
