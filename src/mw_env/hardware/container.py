"""Which container this runs in, following systemd's detect_container() order (src/basic/virt.c).

Order: WSL (kernel osrelease) -> /run/host/container-manager -> /run/systemd/container -> `container=` of
PID 1 -> /run/.containerenv (podman) -> /.dockerenv (docker, last: other engines imitate it). Then the
refinements systemd does not make: incus vs plain LXC (/dev/incus/sock), Kubernetes (service-account
mount or KUBERNETES_SERVICE_HOST), and the cgroup/mountinfo heuristics as a last resort.
"""

from __future__ import annotations

import re
from typing import cast, get_args

from mw_env.hardware.facts import ContainerInfo, ContainerKind
from mw_env.hardware.probe import MAX_READ, Probe

_NAMES = {
    "lxc": "lxc",
    "lxc-libvirt": "lxc",
    "docker": "docker",
    "podman": "podman",
    "wsl": "wsl",
    "systemd-nspawn": "other",
    "rkt": "other",
    "proot": "other",
    "pouch": "other",
}
_DOCKER_ID = re.compile(r"/(?:docker/containers|containers/overlay-containers|docker)/([0-9a-f]{64})")


def container_info(probe: Probe) -> ContainerInfo:
    kind, evidence = _kind(probe)
    if kind in ("lxc", "other", "none") and _is_incus(probe):
        kind, evidence = "incus", (evidence or "") + " + /dev/incus/sock"
    elif kind in ("lxc", "other", "none") and probe.machine.exists("dev/lxd/sock"):
        kind, evidence = "lxc", (evidence or "") + " + /dev/lxd/sock (LXD: `lxc` is its host command)"
    if kind != "wsl" and (k8s := _kubernetes(probe)):
        kind, evidence = "kubernetes", k8s
    if kind == "none":
        kind, evidence = _cgroup_guess(probe)
    known = _as_kind(kind)
    return ContainerInfo(
        kind=known, name=_name(probe, kind), evidence=evidence, id=_container_id(probe, kind)
    )


def _as_kind(kind: str) -> ContainerKind:
    """The tables above hold only ContainerKind values; anything else (never expected) reads as "other"."""
    return cast(ContainerKind, kind) if kind in get_args(ContainerKind) else "other"


def _kind(probe: Probe) -> tuple[str, str | None]:
    osrelease = probe.line("proc/sys/kernel/osrelease") or ""
    if "microsoft" in osrelease.lower() or "wsl" in osrelease.lower():
        return "wsl", f"/proc/sys/kernel/osrelease = {osrelease}"
    for rel in ("run/host/container-manager", "run/systemd/container"):
        value = probe.line(rel)
        if value:
            return _translate(probe, value), f"/{rel} = {value}"
    env1 = _pid1_env(probe).get("container")
    if env1:
        return _translate(probe, env1), f"container={env1} in /proc/1/environ"
    files = _files(probe)
    if files:
        return files
    return "none", None


def _translate(probe: Probe, value: str) -> str:
    value = value.strip().lower()
    if value == "oci":
        # Some images hard-code container=oci, which names no manager: ask the well-known files.
        files = _files(probe)
        return files[0] if files else "other"
    return _NAMES.get(value, "other")


def _files(probe: Probe) -> tuple[str, str] | None:
    m = probe.machine
    if m.exists("run/.containerenv"):
        return "podman", "/run/.containerenv"
    if m.exists(".dockerenv"):
        return "docker", "/.dockerenv"
    return None


def _pid1_env(probe: Probe) -> dict[str, str]:
    # Usually unreadable for non-root users in a real container: a missing fact, not a note.
    data = probe.machine.read_bytes("proc/1/environ", max_bytes=MAX_READ)
    out: dict[str, str] = {}
    for item in (data or b"").split(b"\0"):
        key, sep, value = item.decode("utf-8", "replace").partition("=")
        if sep:
            out[key] = value
    return out


def _is_incus(probe: Probe) -> bool:
    # incus mounts its guest API socket at /dev/incus/sock (LXD: /dev/lxd/sock) in every container.
    return probe.machine.exists("dev/incus/sock") or probe.machine.exists("dev/incus")


def _kubernetes(probe: Probe) -> str | None:
    if probe.machine.exists("var/run/secrets/kubernetes.io/serviceaccount") or probe.machine.exists(
        "run/secrets/kubernetes.io/serviceaccount"
    ):
        return "/var/run/secrets/kubernetes.io/serviceaccount"
    if probe.machine.env.get("KUBERNETES_SERVICE_HOST") and probe.machine.is_real:
        return "KUBERNETES_SERVICE_HOST"
    if _pid1_env(probe).get("KUBERNETES_SERVICE_HOST"):
        return "KUBERNETES_SERVICE_HOST in /proc/1/environ"
    return None


def _cgroup_guess(probe: Probe) -> tuple[str, str | None]:
    for rel in ("proc/1/cgroup", "proc/self/cgroup"):
        text = probe.machine.read(rel, max_bytes=MAX_READ) or ""
        for marker, kind in (
            ("kubepods", "kubernetes"),
            ("libpod", "podman"),
            ("docker", "docker"),
            ("lxc", "lxc"),
        ):
            if marker in text:
                return kind, f"/{rel} mentions {marker}"
    return "none", None


def _name(probe: Probe, kind: str) -> str | None:
    """The container's name where the container can know it."""
    m = probe.machine
    if kind == "podman":
        text = m.read("run/.containerenv", max_bytes=MAX_READ) or ""
        if found := re.search(r'^name="?([^"\n]+)"?', text, re.MULTILINE):
            return found.group(1)
        return None
    if kind == "wsl":
        return m.env.get("WSL_DISTRO_NAME") if m.is_real else _pid1_env(probe).get("WSL_DISTRO_NAME")
    if kind in ("incus", "lxc", "kubernetes"):
        # incus/LXC set the hostname to the instance name; a pod's hostname is the pod name.
        return probe.line("etc/hostname") or None
    return None  # docker: the hostname is the short container id, not the name


def _container_id(probe: Probe, kind: str) -> str | None:
    if kind == "podman":
        text = probe.machine.read("run/.containerenv", max_bytes=MAX_READ) or ""
        if found := re.search(r'^id="?([0-9a-f]{12,64})"?', text, re.MULTILINE):
            return found.group(1)
    if kind in ("docker", "podman", "kubernetes"):
        found = _DOCKER_ID.search(probe.machine.read("proc/self/mountinfo", max_bytes=MAX_READ) or "")
        if found:
            return found.group(1)
    return None
