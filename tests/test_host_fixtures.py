"""host-commands against every fake machine root, with every runtime: the advice holds together.

- "nothing to change" only when nothing but a check follows;
- a docker/podman recreate says what is lost (the venv built inside) and how to keep it;
- a group number is the host's (read inside docker) or a lookup the host runs, never another container's;
- on bare metal there is nothing to pass through, and the advice says so.
"""

from __future__ import annotations

import re

import pytest

from conftest import MACHINES, fake_machine
from mw_env.base.errors import InputError
from mw_env.hardware.detect import detect
from mw_env.host.commands import host_plan
from mw_env.profiles import load_profiles, select

ROOTS = sorted(p.name for p in MACHINES.iterdir() if p.is_dir() and not p.name.startswith("doctor-"))
PROFILES = load_profiles(env={})


def _plan(root: str, runtime: str | None, container: str | None, profile: str | None = None):
    machine = fake_machine(root)
    hw = detect(machine, interpreters=False)
    sel = select(hw, PROFILES, name=profile)
    try:
        return hw, host_plan(
            runtime=runtime, container=container, hardware=hw, selection=sel, machine=machine
        )
    except InputError as exc:
        assert exc.hint, exc.message  # every refusal says what to do
        return hw, None


@pytest.mark.parametrize("root", ROOTS)
@pytest.mark.parametrize(
    ("runtime", "container"),
    [(None, None), ("incus", "box1"), ("docker", "box1"), ("podman", "box1"), ("kubernetes", "pod-1")],
)
def test_advice_is_consistent(root, runtime, container):
    hw, plan = _plan(root, runtime, container)
    if plan is None:
        return
    text = "\n".join((*plan.notes, *plan.commands))
    if any("nothing to change" in n for n in plan.notes):
        assert set(plan.commands) <= set(plan.checks), plan.commands
    recreates = [c for c in plan.commands if re.match(r"(docker|podman) run ", c)]
    if recreates:
        assert any(c.startswith(f"{plan.runtime} commit ") for c in plan.commands), plan.commands
        assert "training venv" in text and "volume" in text  # what is lost, and how to keep it
    for cmd in plan.commands:
        for gid in re.findall(r"--group-add (\d+)", cmd):
            # A literal number only comes from /dev/kfd seen inside docker, where it is the host's.
            assert hw.container.kind == "docker", (root, cmd)
            kfd = next(n for n in hw.gpu.device_nodes if n.path == "/dev/kfd")
            assert str(kfd.gid) == gid
        if hw.container.kind != plan.runtime and plan.runtime == "incus":
            assert not re.search(r"gid=\d", cmd), (root, cmd)  # this machine's groups are not the container's
    if hw.container.kind == "none" and runtime is None:
        assert plan.runtime == "none" and "nothing to pass through" in plan.notes[0]
        assert "--container" not in " ".join(plan.commands)


def test_incus_gid_on_docker_runtime_is_never_the_incus_containers():
    # incus-780m: the container's render gid is 993; docker on its host must not be told 993.
    _, plan = _plan("incus-780m-no-kfd", "docker", "box1")
    assert not any("993" in c for c in plan.commands)
    assert any('--group-add "$(getent group render | cut -d: -f3)"' in c for c in plan.commands)


def test_bare_metal_gets_bare_metal_advice():
    _, plan = _plan("nvidia-l4-550", None, None)
    assert plan.runtime == "none" and plan.commands == ()
    assert "nothing to pass through" in plan.notes[0] and "nothing to change" in plan.notes[1]
    assert "--runtime incus|docker|podman --container NAME" in plan.notes[-1]


def test_explicit_image_says_the_venv_is_lost():
    machine = fake_machine("incus-780m-no-passthrough")
    hw = detect(machine, interpreters=False)
    plan = host_plan(
        runtime="docker",
        container="c1",
        hardware=hw,
        selection=select(hw, PROFILES),
        machine=machine,
        image="ubuntu:24.04",
    )
    assert not any(c.startswith("docker commit") for c in plan.commands)
    assert plan.commands[0].endswith(" ubuntu:24.04")
    assert "is NOT in it, the training venv" in plan.notes[0] and "mw-env-venv:" in plan.notes[0]


def test_bare_metal_node_the_user_cannot_open_gets_the_group_not_a_passthrough():
    from mw_env.hardware.facts import ContainerInfo, DeviceNode, Gpu, Hardware

    gpu = Gpu(
        index=0,
        vendor="amd",
        name="AMD Radeon RX 7900 XTX",
        gfx_target="gfx1100",
        device_nodes=(
            DeviceNode("/dev/kfd", True, True, False, False, "0660", 0, 992),
            DeviceNode("/dev/dri/renderD128", True, True, False, False, "0660", 0, 992),
        ),
    )
    hw = Hardware(gpus=(gpu,), selected_gpu=0, container=ContainerInfo(kind="none"))
    plan = host_plan(runtime=None, container=None, hardware=hw, selection=select(hw, PROFILES))
    assert plan.commands == ("sudo usermod -aG render,video $USER",)
    assert "cannot open them" in plan.notes[1]
    missing = Hardware(
        gpus=(
            Gpu(
                index=0,
                vendor="amd",
                name="x",
                gfx_target="gfx1100",
                device_nodes=(DeviceNode("/dev/kfd", False),),
            ),
        ),
        selected_gpu=0,
    )
    plan = host_plan(runtime=None, container=None, hardware=missing, selection=select(missing, PROFILES))
    assert "sudo modprobe amdgpu" in plan.notes[1]
