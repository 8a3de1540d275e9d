"""`mw-env profiles [NAME]` and `mw-env host-commands` through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mw_env.cli import main

USER = Path(__file__).parent / "fixtures" / "profiles" / "user"
BAD = Path(__file__).parent / "fixtures" / "profiles" / "bad"


def test_list_json(capsys):
    assert main(["profiles", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = [p["name"] for p in data["profiles"]]
    assert set(names) == {"gfx1103", "gfx1151", "rocm", "cuda", "cpu"}
    assert names[-1] == "cpu"  # lowest priority last: the order matching tries them
    g = next(p for p in data["profiles"] if p["name"] == "gfx1103")
    assert g["torch"]["index_url"] == "https://repo.amd.com/rocm/whl-multi-arch/" and g["shipped"]


def test_list_human_includes_user_profiles(capsys):
    assert main(["profiles", "--profiles-dir", str(USER)]) == 0
    out = capsys.readouterr().out
    assert "lab-cpu" in out and str(USER) in out


def test_list_from_env_folder(capsys, monkeypatch):
    monkeypatch.setenv("MW_ENV_PROFILES", str(USER))
    assert main(["profiles", "--json"]) == 0
    assert "lab-cpu" in [p["name"] for p in json.loads(capsys.readouterr().out)["profiles"]]


def test_show_one(capsys):
    assert main(["profiles", "gfx1103"]) == 0
    out = capsys.readouterr().out
    assert "therock-gfx110x" in out and "HSA_OVERRIDE_GFX_VERSION=11.0.0" in out and "math" in out
    assert main(["profiles", "rocm-other", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["name"] == "rocm" and data["arch_overrides"]


def test_unknown_name_exits_2_listing_names(capsys):
    assert main(["profiles", "gfx9999"]) == 2
    err = capsys.readouterr().err
    assert "unknown profile 'gfx9999'" in err and "cpu, cuda, gfx1103, gfx1151, rocm" in err


def test_bad_profiles_dir_exits_2(capsys):
    assert main(["profiles", "--profiles-dir", str(BAD)]) == 2
    err = capsys.readouterr().err
    assert "error: profile" in err and str(BAD) in err and "Traceback" not in err


def test_host_commands_json(tmp_path, capsys):
    assert (
        main(
            [
                "host-commands",
                "--root",
                str(tmp_path),
                "--profile",
                "gfx1103",
                "--container",
                "box1",
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["runtime"] == "incus" and data["container"] == "box1"
    assert any("unix-char source=/dev/kfd path=/dev/kfd" in c for c in data["commands"]) and data["notes"]


def test_host_commands_human_is_a_shell_script(tmp_path, capsys):
    args = [
        "host-commands",
        "--root",
        str(tmp_path),
        "--profile",
        "cuda",
        "--runtime",
        "docker",
        "--container",
        "b1",
    ]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith(("#", "docker ")) for line in lines)
    assert any("--gpus all" in line for line in lines)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--profile", "gfx1103", "--container", "bad name;"], "invalid incus container name"),
        (["--container", "box1"], "nothing to pass through"),  # cpu profile, no GPU
        (["--profile", "gfx1103", "--container", "box1", "--runtime", "lxd"], "lxd"),
    ],
)
def test_host_commands_bad_input(tmp_path, capsys, args, needle):
    assert main(["host-commands", "--root", str(tmp_path), *args]) == 2
    captured = capsys.readouterr()
    assert needle in captured.err and captured.out == ""


def test_host_commands_on_bare_metal_says_there_is_nothing_to_pass(tmp_path, capsys):
    # An empty root is no container: the advice is for the host itself, not "pass --container".
    assert main(["host-commands", "--root", str(tmp_path), "--profile", "gfx1103"]) == 0
    out = capsys.readouterr().out
    assert "nothing to pass through" in out and "pass --container NAME (the name" not in out


def test_one_profile_shows_device_packages_channels_and_retired_sources_verbatim(capsys):
    assert main(["profiles", "gfx1103"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    # Requirements are shown as written, never eaten as terminal markup.
    assert "GPU kernels: torch[device-{gfx}] -> amd-torch-device-{gfx}" in out
    assert "rocm[libraries,device-all]==7.14.*" in out
    assert "nightly: installed only with --source amd-multiarch-nightly" in out
    assert (
        "retired: AMD's per-family indexes get no new releases" in out and "replaced by amd-multiarch" in out
    )
