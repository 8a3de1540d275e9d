"""`mw-env host-commands` end to end over the fake machine roots: the script, --json, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mw_env.cli import main

MACHINES = Path(__file__).parent / "fixtures" / "machines"


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["host-commands", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_incus_780m_without_kfd_is_a_script_of_comments_and_commands(capsys):
    code, out, err = _run(capsys, "--root", str(MACHINES / "incus-780m-no-kfd"))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "# run on the host (incus, container playpen-mailwoman, profile gfx1103)"
    commands = [ln for ln in lines if not ln.startswith("#")]
    assert commands == [
        "incus config device add playpen-mailwoman kfd unix-char source=/dev/kfd path=/dev/kfd gid=993",
        "incus exec playpen-mailwoman -- ls -ln /dev/kfd /dev/dri",
    ]


def test_json_is_only_json(capsys):
    code, out, _ = _run(capsys, "--root", str(MACHINES / "rx7900xtx"), "--container", "trainbox", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["runtime"] == "docker" and data["container"] == "trainbox"
    assert data["commands"][0] == "docker commit trainbox trainbox-mw-env:gpu"
    run = data["commands"][1]
    for flag in ("--device=/dev/kfd", "--device=/dev/dri", "--ipc=host", "--group-add 992"):
        assert flag in run
    assert "--ipc=host" in " ".join(data["notes"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--container", "x; rm -rf /"], "invalid incus container name 'x; rm -rf /'"),
        (["--runtime", "docker"], "runs in an incus container 'playpen-mailwoman', not a docker one"),
    ],
)
def test_bad_input_is_error_and_hint_exit_2(capsys, args, message):
    code, out, err = _run(capsys, "--root", str(MACHINES / "incus-780m"), *args)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err and "\nhint: " in err


def test_nvidia_pascal_in_incus(capsys):
    code, out, _ = _run(capsys, "--root", str(MACHINES / "nvidia-pascal-1080ti-535"))
    assert code == 0
    # The GPU already works there: only the check is a command; the recipe is a note for a new container.
    lines = out.splitlines()
    assert "# this container can already open the GPU's device nodes: nothing to change for it" in lines
    assert [ln for ln in lines if not ln.startswith("#")] == ["incus exec pascal-train -- nvidia-smi"]
    recipe = next(ln for ln in lines if ln.startswith("# for a new container: "))
    assert "incus config set pascal-train nvidia.runtime=true" in recipe
    assert "incus config device add pascal-train gpu gpu gputype=physical mode=0666" in recipe


def test_no_gpu_says_so_first(tmp_path, capsys):
    code, out, err = _run(capsys, "--root", str(tmp_path))
    assert code == 2 and out == ""
    assert "nothing to pass through" in err and "--profile gfx1103" in err


def test_kubernetes_pod_gets_the_pod_spec_never_incus_commands(capsys):
    # The A100 fixture runs in a Kubernetes pod: the default runtime is kubernetes, the pod name is detected.
    code, out, _ = _run(capsys, "--root", str(MACHINES / "nvidia-a100x4-555"))
    assert code == 0
    assert "# run on the host (kubernetes, container trainer-a100-7c9f8b6d5-x2kqz" in out
    assert "nvidia.com/gpu: 1" in out and "incus" not in out and "docker" not in out
    code, out, _ = _run(
        capsys, "--root", str(MACHINES / "incus-780m"), "--runtime", "kubernetes", "--container", "t-0"
    )
    assert code == 0 and "amd.com/gpu: 1" in out and "supplementalGroups" in out
    assert "kubectl exec t-0 -- ls -l /dev/kfd /dev/dri" in out.splitlines()


def test_kubernetes_pod_names_follow_dns_1123(capsys):
    code, _, err = _run(
        capsys, "--root", str(MACHINES / "incus-780m"), "--runtime", "kubernetes", "--container", "Bad_Name"
    )
    assert code == 2 and "invalid kubernetes container name 'Bad_Name'" in err and "lower-case" in err


def test_the_click_options_are_the_planners_options():
    # One list of what host-commands is asked (HostOptions): the command passes its options on as they are,
    # so an option added to the command but not to HostOptions (or the reverse) fails here, not in use.
    from mw_env.commands.host import HostOptions, host_commands

    assert {p.name for p in host_commands.params} - {"out_file"} == set(HostOptions.__annotations__)
