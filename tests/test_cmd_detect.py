"""`mw-env detect` end to end: human and JSON output, exit codes, and the fake machine roots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mw_env.cli import main

MACHINES = Path(__file__).parent / "fixtures" / "machines"
BAD = Path(__file__).parent / "fixtures" / "profiles" / "bad"


def _run_json(capsys, *args: str) -> dict:
    assert main(["detect", "--json", *args]) == 0
    out = capsys.readouterr().out
    return json.loads(out)  # stdout holds JSON and nothing else


def test_empty_machine_is_cpu_and_says_why(tmp_path, capsys):
    data = _run_json(capsys, "--root", str(tmp_path))
    assert data["profile"] == "cpu"
    assert "no" in data["reason"].lower() and "GPU" in data["reason"]
    assert (
        data["torch"]["index_url"] == "https://download.pytorch.org/whl/cpu"
        and data["torch"]["build"] == "cpu"
    )
    assert data["gpus"] == [] and data["env"] == {}
    for key in ("hardware", "container", "warnings", "trainer", "required_arch"):
        assert key in data
    assert set(data["container"]) == {"kind", "name"}


@pytest.mark.slow
def test_this_machine_detects_and_explains(capsys):
    # Whatever this machine is, detect must produce a profile and a reason (here: a CPU-only box).
    data = _run_json(capsys)
    assert data["profile"] and data["reason"]
    if not data["gpus"]:
        assert data["profile"] == "cpu"


def test_human_output(tmp_path, capsys):
    assert main(["detect", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Profile" in out and "cpu" in out and "Why" in out and "download.pytorch.org/whl/cpu" in out


def test_explicit_profile_and_source(tmp_path, capsys):
    data = _run_json(capsys, "--root", str(tmp_path), "--profile", "gfx1103", "--source", "therock-gfx110x")
    assert data["profile"] == "gfx1103" and data["torch"]["source"] == "therock-gfx110x"
    assert "chosen with --profile" in data["reason"]


def test_profile_from_environment(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MW_ENV_PROFILE", "gfx1151")
    assert _run_json(capsys, "--root", str(tmp_path))["profile"] == "gfx1151"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--profile", "nope"], "known profiles: cpu, cuda, gfx1103, gfx1151, rocm"),
        (["--profile", "gfx1103", "--source", "cu126"], "has no torch source 'cu126'"),
        (["--profiles-dir", str(BAD)], ".yaml"),
        (["--profiles-dir", "/nonexistent/profiles"], "does not exist"),
    ],
)
def test_bad_input_exits_2_with_a_message(tmp_path, capsys, args, needle):
    assert main(["detect", "--json", "--root", str(tmp_path), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert needle in captured.err and "Traceback" not in captured.err


# fixture root -> (profile, torch source, HSA override or None)
EXPECTED = {
    "cpu-only": ("cpu", "cpu", None),
    "incus-780m": ("gfx1103", "amd-multiarch", None),
    "incus-780m-no-kfd": ("gfx1103", "amd-multiarch", None),
    "strix-halo-8060s": ("gfx1151", "amd-multiarch", None),
    "rx7900xtx": ("rocm", "amd-multiarch", None),
    "igpu-780m-dgpu-7900xtx": ("rocm", "amd-multiarch", None),
    "mi300x-x4": ("rocm", "amd-multiarch", None),
    "nvidia-pascal-1080ti-535": ("cuda", "cu126", None),
    "nvidia-ampere-3090x2-560": ("cuda", "cu126", None),
    "nvidia-a100x4-555": ("cuda", "cu126", None),
    "nvidia-h100x8-565": ("cuda", "cu126", None),
    "nvidia-l4-550": ("cuda", "cu126", None),
    "nvidia-blackwell-5090-580": ("cuda", "cu132", None),
    # cu118 (the only CUDA a 470 driver runs) has an inferred arch list for torch 2.5-2.7: CPU, `--source cu118` named.
    "nvidia-old-driver-470": ("cpu", "cpu", None),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_machines(name, capsys, monkeypatch):
    root = MACHINES / name
    assert root.is_dir(), f"fixture machine {name} is missing"
    monkeypatch.setenv("PATH", f"{root / '.mw-env-bin'}:/usr/bin:/bin")
    data = _run_json(capsys, "--root", str(root))
    profile, source, override = EXPECTED[name]
    assert (data["profile"], data["torch"]["source"]) == (profile, source), data["reason"]
    assert data["env"].get("HSA_OVERRIDE_GFX_VERSION") == override
    assert data["reason"]
    if name == "incus-780m-no-kfd":
        assert "bootstrap can still prepare the venv" in data["reason"]
    if name == "igpu-780m-dgpu-7900xtx":
        assert "HIP_VISIBLE_DEVICES" in data["env"]


def test_broken_sysfs_never_tracebacks(capsys, monkeypatch):
    root = MACHINES / "broken-sysfs"
    assert root.is_dir()
    monkeypatch.setenv("PATH", f"{root / '.mw-env-bin'}:/usr/bin:/bin")
    data = _run_json(capsys, "--root", str(root))
    assert data["profile"] and data["reason"]


def test_gpu_out_of_range_is_usage_error(capsys, monkeypatch):
    root = MACHINES / "rx7900xtx"
    assert root.is_dir()
    monkeypatch.setenv("PATH", f"{root / '.mw-env-bin'}:/usr/bin:/bin")
    assert main(["detect", "--json", "--root", str(root), "--gpu", "7"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "--gpu 7" in captured.err


def test_detect_help_documents_exit_codes(capsys):
    assert main(["detect", "--help"]) == 0
    out = capsys.readouterr().out
    assert "Exit codes" in out and "--json" in out and "--profiles-dir" in out


def test_torch_source_from_the_environment(capsys, monkeypatch):
    monkeypatch.setenv("MW_ENV_TORCH_SOURCE", "therock-gfx110x")
    data = _run_json(capsys, "--root", str(MACHINES / "incus-780m"))
    assert data["torch"]["source"] == "therock-gfx110x" and data["env"] == {}
    monkeypatch.setenv("MW_ENV_TORCH_SOURCE", "nope")
    assert main(["detect", "--root", str(MACHINES / "incus-780m")]) == 2
    assert "no torch source 'nope'" in capsys.readouterr().err


def test_a_root_that_is_not_a_folder_is_bad_input(tmp_path, capsys, monkeypatch):
    assert main(["detect", "--root", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --root {tmp_path / 'nope'}: does not exist") and "hint:" in err
    monkeypatch.setenv("MW_ENV_ROOT", str(tmp_path / "nope"))
    assert main(["detect"]) == 2
    assert "MW_ENV_ROOT" in capsys.readouterr().err


def test_forced_gfx1103_with_no_gpu_shows_the_override_in_detect_and_dry_run(tmp_path, capsys):
    root = MACHINES / "cpu-only"
    data = _run_json(capsys, "--root", str(root), "--profile", "gfx1103", "--source", "rocm6.4")
    assert data["env"] == {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}
    args = ["bootstrap", "--dry-run", "--json", "--offline", "--root", str(root), "--profile", "gfx1103"]
    code = main([*args, "--venv", str(tmp_path / "v"), "--source", "rocm6.4"])
    out = capsys.readouterr().out
    assert code in (0, 1), out
    plan = json.loads(out)
    assert plan["env"] == {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}
    # The default source ships native gfx1103 kernels: no override for the image either.
    assert main([*args, "--venv", str(tmp_path / "v")]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["env"] == {}


def test_detect_under_a_root_runs_none_of_the_hosts_programs(tmp_path, capsys, monkeypatch):
    """A PATH full of Pythons (and uv, nvidia-smi) that record being run: under --root none runs, and the
    JSON is the same whatever the host has. The fake root's own python3 is the one listed."""
    host_bin = tmp_path / "host-bin"
    host_bin.mkdir()
    ran = tmp_path / "ran.log"
    for name in ("python3", "python3.10", "python3.11", "python3.12", "python3.13", "uv", "nvidia-smi"):
        exe = host_bin / name
        exe.write_text(f'#!/bin/sh\necho "$0 $*" >> {ran}\necho 3.99.0\necho /host/{name}\n')
        exe.chmod(0o755)
    root = MACHINES / "cpu-only"
    fake_bin = root / ".mw-env-bin"
    monkeypatch.setenv("PATH", f"{host_bin}:{fake_bin}:/usr/bin:/bin")
    crowded = _run_json(capsys, "--root", str(root))
    assert not ran.exists(), ran.read_text()
    monkeypatch.setenv("PATH", str(fake_bin))
    assert _run_json(capsys, "--root", str(root)) == crowded
    pythons = crowded["hardware"]["pythons"]
    assert [(p["version"], p["path"]) for p in pythons] == [("3.12.3", str(root / ".mw-env-bin" / "python3"))]
    assert crowded["hardware"]["uv"] is None  # the host's uv is not the fake machine's


def test_detect_json_leaves_the_slow_imports_alone():
    # What `detect --root --json` no longer pays at start-up (docs/benchmarks.md, detect under 0.2 s): packaging
    # (packaging.tags, platform, logging), importlib.resources (tempfile, shutil) and rich (the JSON path prints
    # no table). A fresh interpreter: this process has them all imported already.
    import subprocess
    import sys

    root = Path(__file__).parent / "fixtures" / "machines" / "cpu-only"
    code = (
        "import contextlib, io, sys\n"
        "from mw_env.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert main(['detect', '--root', {str(root)!r}, '--json']) == 0\n"
        "print(sorted(m for m in ('packaging', 'importlib.resources', 'rich') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
