"""Host-side passthrough commands: incus / docker / podman, AMD and NVIDIA, names validated and quoted."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mw_env.base.errors import InputError
from mw_env.hardware.facts import ContainerInfo, DeviceNode, Gpu, Hardware
from mw_env.hardware.machine import Machine
from mw_env.host.commands import default_runtime, host_commands, host_plan, validate_container_name
from mw_env.profiles import load_profiles, select


@pytest.fixture(scope="module")
def profiles():
    return load_profiles(env={})


def machine(
    tmp_path, *, groups="root:x:0:\nvideo:x:44:\nrender:x:993:\nagent:x:1000:\n", user_groups=(1000,)
):
    (tmp_path / "etc").mkdir(exist_ok=True)
    (tmp_path / "etc" / "group").write_text(groups)
    (tmp_path / ".mw-env-fake.yaml").write_text(
        f"user: {{uid: 1000, gid: 1000, groups: {list(user_groups)}, name: agent}}\n"
    )
    return Machine(root=tmp_path, env={"PATH": "/usr/bin"})


def box(nodes=(), *, kind="incus", name="train-box", vendor="amd"):
    gpu = Gpu(
        index=0,
        vendor=vendor,
        name="AMD Radeon 780M" if vendor == "amd" else "NVIDIA GeForce RTX 3090",
        gfx_target="gfx1103" if vendor == "amd" else None,
        compute_capability="8.6" if vendor == "nvidia" else None,
        device_nodes=tuple(nodes),
    )
    return Hardware(
        gpus=(gpu,),
        selected_gpu=0,
        container=ContainerInfo(kind=kind, name=name),
        nvidia_driver="560.35.03" if vendor == "nvidia" else None,
    )


def test_incus_amd_without_kfd_adds_both_devices_with_the_container_render_gid(tmp_path, profiles):
    nodes = [DeviceNode("/dev/kfd", False), DeviceNode("/dev/dri/renderD128", False)]
    hw = box(nodes)
    plan = host_plan(
        runtime=None, container=None, hardware=hw, selection=select(hw, profiles), machine=machine(tmp_path)
    )
    assert plan.runtime == "incus" and plan.container == "train-box"
    assert "incus config device add train-box gpu gpu gid=993" in plan.commands
    assert (
        "incus config device add train-box kfd unix-char source=/dev/kfd path=/dev/kfd gid=993"
        in plan.commands
    )
    assert "incus exec train-box -- usermod -aG render agent" in plan.commands
    assert plan.commands[-1] == "incus exec train-box -- ls -ln /dev/kfd /dev/dri"
    assert any("993" in n and "inside" in n for n in plan.notes)


def test_incus_amd_nodes_present_but_root_only_get_their_gid_set(tmp_path, profiles):
    nodes = [
        DeviceNode("/dev/kfd", True, True, False, False, "0660", 0, 0, "root"),
        DeviceNode("/dev/dri/renderD128", True, True, False, False, "0660", 0, 0, "root"),
    ]
    hw = box(nodes)
    cmds = host_commands(
        runtime="incus",
        container=None,
        hardware=hw,
        selection=select(hw, profiles),
        machine=machine(tmp_path, user_groups=(1000, 993)),
    )
    assert "incus config device set train-box kfd gid=993" in cmds
    assert "incus config device set train-box gpu gid=993" in cmds
    assert not any("device add" in c for c in cmds)
    assert not any("usermod" in c for c in cmds)  # the user is already in render


def test_incus_amd_image_without_render_group_creates_it(tmp_path, profiles):
    hw = box([DeviceNode("/dev/kfd", False)])
    plan = host_plan(
        runtime="incus",
        container=None,
        hardware=hw,
        selection=select(hw, profiles),
        machine=machine(tmp_path, groups="root:x:0:\nvideo:x:44:\n"),
    )
    assert plan.commands[0] == "incus exec train-box -- groupadd --system render"
    lookup = '"$(incus exec train-box -- getent group render | cut -d: -f3)"'
    assert (
        f"incus config device add train-box kfd unix-char source=/dev/kfd path=/dev/kfd gid={lookup}"
        in plan.commands
    )


def test_lxc_kind_defaults_to_incus():
    assert default_runtime(Hardware(container=ContainerInfo(kind="lxc", name="c1"))) == "incus"
    assert default_runtime(Hardware(container=ContainerInfo(kind="podman"))) == "podman"
    assert default_runtime(Hardware()) == "incus"


def test_docker_amd_flags(profiles):
    hw = box(
        [DeviceNode("/dev/kfd", True, True, False, False, "0660", 0, 109)], kind="docker", name="trainer_1"
    )
    plan = host_plan(runtime=None, container=None, hardware=hw, selection=select(hw, profiles))
    assert plan.commands[0] == "docker commit trainer_1 trainer-1-mw-env:gpu"  # keeps the venv built inside
    run = plan.commands[1]
    assert run.startswith("docker run -dit --name trainer_1-gpu ")
    for flag in ("--device=/dev/kfd", "--device=/dev/dri", "--group-add 109", "--ipc=host"):
        assert flag in run
    assert '--group-add "$(getent group video | cut -d: -f3)"' in run  # numbers, not names
    assert run.endswith(" trainer-1-mw-env:gpu")
    assert any("the training venv" in n and "commit" in n for n in plan.notes)
    assert plan.to_dict()["runtime"] == "docker"


def test_podman_amd_flags_and_explicit_image(profiles):
    hw = box(kind="podman", name="pod-box")
    plan = host_plan(
        runtime="podman", container=None, hardware=hw, selection=select(hw, profiles), image="ubuntu:24.04"
    )
    run = plan.commands[0]
    for flag in (
        "--device=/dev/kfd",
        "--device=/dev/dri",
        "--group-add keep-groups",
        "--security-opt label=disable",
        "--ipc=host",
    ):
        assert flag in run
    assert run.endswith(" ubuntu:24.04")


def test_nvidia_incus_docker_podman(profiles):
    hw = box(vendor="nvidia")
    sel = select(hw, profiles)
    incus = host_commands(runtime="incus", container=None, hardware=hw, selection=sel)
    assert "incus config set train-box nvidia.runtime=true" in incus
    assert any(c.startswith("incus config device add train-box gpu gpu") for c in incus)
    docker = host_plan(runtime="docker", container="box2", hardware=hw, selection=sel)
    assert docker.commands[0] == "docker commit box2 box2-mw-env:gpu"
    assert "--gpus all" in docker.commands[1] and "--ipc=host" in docker.commands[1]
    podman = host_plan(runtime="podman", container="box2", hardware=hw, selection=sel)
    assert podman.commands[0] == "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
    assert podman.commands[1] == "podman commit box2 box2-mw-env:gpu"
    assert "--device nvidia.com/gpu=all" in podman.commands[2]


@pytest.mark.parametrize(
    ("runtime", "name", "ok"),
    [
        ("incus", "train-box", True),
        ("incus", "a", True),
        ("incus", "1box", False),  # must start with a letter
        ("incus", "box-", False),
        ("incus", "box_1", False),
        ("incus", "x" * 64, False),
        ("docker", "trainer_1.dev", True),
        ("docker", "a", False),  # docker wants 2+ characters
        ("docker", "-rm", False),
        ("podman", "box;rm -rf /", False),
        ("docker", "$(reboot)", False),
        ("incus", "", False),
    ],
)
def test_container_names_are_validated(runtime, name, ok):
    if ok:
        assert validate_container_name(runtime, name) == name
    else:
        with pytest.raises(InputError, match=r"invalid .* container name"):
            validate_container_name(runtime, name)


def test_unknown_container_name_requires_the_option(profiles):
    hw = box(kind="docker", name=None)
    with pytest.raises(InputError) as err:
        host_plan(runtime=None, container=None, hardware=hw, selection=select(hw, profiles))
    assert "--container" in err.value.hint and "docker ps -a" in err.value.hint


def test_detected_name_of_another_runtime_is_not_reused(profiles):
    hw = box(kind="docker", name="dock1")
    with pytest.raises(InputError, match="cannot tell which container"):
        host_plan(runtime="incus", container=None, hardware=hw, selection=select(hw, profiles))


def test_cpu_profile_without_gpu_has_nothing_to_pass(profiles):
    hw = Hardware(container=ContainerInfo(kind="incus", name="c1"))
    with pytest.raises(InputError, match="nothing to pass through"):
        host_plan(runtime=None, container=None, hardware=hw, selection=select(hw, profiles))
    # Naming the profile prints the commands for the GPU the host has.
    plan = host_plan(
        runtime=None, container=None, hardware=hw, selection=select(hw, profiles, name="gfx1103")
    )
    assert any("unix-char source=/dev/kfd" in c for c in plan.commands)


def test_bad_image_and_runtime_rejected(profiles):
    hw = box(kind="docker", name="dock1")
    with pytest.raises(InputError, match="invalid image"):
        host_plan(
            runtime=None, container=None, hardware=hw, selection=select(hw, profiles), image="x; reboot"
        )
    with pytest.raises(InputError, match="unknown runtime"):
        host_plan(runtime="lxd", container="c1", hardware=hw, selection=select(hw, profiles))


def test_usable_nodes_are_said_and_not_re_added(tmp_path, profiles):
    nodes = [
        DeviceNode("/dev/kfd", True, True, True, True, "0660", 0, 993, "render"),
        DeviceNode("/dev/dri/renderD128", True, True, True, True, "0660", 0, 993, "render"),
    ]
    hw = box(nodes)
    plan = host_plan(
        runtime=None,
        container=None,
        hardware=hw,
        selection=select(hw, profiles),
        machine=machine(tmp_path, user_groups=(1000, 993)),
    )
    assert plan.commands == ("incus exec train-box -- ls -ln /dev/kfd /dev/dri",)
    assert "already open" in plan.notes[0]


def test_names_are_shell_quoted_even_when_valid(profiles):
    # Valid docker names cannot hold shell metacharacters, so quoting is a no-op for them; the image is
    # user input too and is quoted.
    hw = box(kind="docker", name="a.b_c-d")
    plan = host_plan(
        runtime=None, container=None, hardware=hw, selection=select(hw, profiles), image="repo/img:1.0"
    )
    assert "--name a.b_c-d-gpu" in plan.commands[0] and plan.commands[0].endswith(" repo/img:1.0")


def test_docker_without_a_visible_name_uses_the_container_id(profiles):
    hw = replace(
        box(kind="docker", name=None), container=ContainerInfo(kind="docker", id="9c1e5b7f2a3d" + "0" * 52)
    )
    plan = host_plan(runtime=None, container=None, hardware=hw, selection=select(hw, profiles))
    assert plan.container == "9c1e5b7f2a3d"
    assert plan.commands[0] == "docker commit 9c1e5b7f2a3d 9c1e5b7f2a3d-mw-env:gpu"
    assert any("container's id" in n for n in plan.notes)
    # incus has no such id: there the name must be given.
    with pytest.raises(InputError, match="not an incus one"):
        host_plan(runtime="incus", container=None, hardware=hw, selection=select(hw, profiles))


def test_runtime_other_than_the_detected_one_names_both(profiles):
    hw = box(kind="incus", name="playpen")
    with pytest.raises(InputError) as err:
        host_plan(runtime="docker", container=None, hardware=hw, selection=select(hw, profiles))
    assert "runs in an incus container 'playpen', not a docker one" in err.value.message
    assert "docker ps -a" in err.value.hint


def test_no_gpu_is_said_before_the_unknown_container(profiles):
    hw = Hardware(container=ContainerInfo(kind="none"))
    with pytest.raises(InputError, match="nothing to pass through"):
        host_plan(runtime=None, container=None, hardware=hw, selection=select(hw, profiles))
    # A bad --container is refused before anything else, whatever the hardware.
    with pytest.raises(InputError, match="invalid incus container name"):
        host_plan(runtime=None, container="x; rm -rf /", hardware=hw, selection=select(hw, profiles))


def test_usable_nodes_still_give_the_recipe_for_a_new_container(tmp_path, profiles):
    ok = dict(
        exists=True, is_char=True, readable=True, writable=True, mode="0660", uid=0, gid=993, group="render"
    )
    hw = box([DeviceNode("/dev/kfd", **ok), DeviceNode("/dev/dri/renderD128", **ok)])
    plan = host_plan(
        runtime=None,
        container=None,
        hardware=hw,
        selection=select(hw, profiles),
        machine=machine(tmp_path, user_groups=(1000, 993)),
    )
    recipe = next(n for n in plan.notes if n.startswith("for a new container: "))
    assert "incus config device add train-box gpu gpu gid=993" in recipe
    assert "incus config device add train-box kfd unix-char source=/dev/kfd path=/dev/kfd gid=993" in recipe
    assert not any("device add" in c for c in plan.commands)  # re-adding an existing device would fail
