"""`mw-env doctor` on the command line: --json is only JSON, exit codes, --explain on logs and stdin."""

from __future__ import annotations

import io
import json
import sys

import click
import pytest
from doctor_helpers import fake_venv

from conftest import MACHINES
from mw_env.cli import main

CPU_ROOT = str(MACHINES / "doctor-cpu-docker-shm64m")

WHISPER_LOG = """\
Loading checkpoint shards: 100%|##########| 2/2
Memory critical error by agent node-0 (Agent handle: 0x5581) on address 0x7f3a. Reason: Memory in use.
Aborted (core dumped)
"""
PLAYPEN_LOG = """\
cuda: True
device: AMD Radeon Graphics
hip: 6.2.41133-dd7f95766
/opt/amdgpu/share/libdrm/amdgpu.ids: No such file or directory
UserWarning: Attempting to use hipBLASLt on an unsupported architecture! Overriding blas backend to hipblas
RuntimeError: HIP error: invalid device function
"""


def test_doctor_json_is_only_json_and_exit_0(tmp_path, capsys, monkeypatch):
    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu")
    monkeypatch.setenv("HOME", str(tmp_path))
    rc = main(["doctor", "--root", CPU_ROOT, "--venv", str(venv), "--quick", "--json"])
    out = capsys.readouterr().out
    data = json.loads(out)  # nothing but JSON on stdout
    assert rc == 0 and data["ok"] is True and data["profile"] == "cpu"
    assert {c["id"] for c in data["checks"]} >= {"venv.exists", "torch.build", "ipc.shm", "disk.free"}


def test_doctor_exit_1_on_a_failed_check(tmp_path, capsys):
    rc = main(["doctor", "--root", CPU_ROOT, "--venv", str(tmp_path / "missing"), "--quick"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "✗ venv exists" in out and "mw-env bootstrap" in out
    assert "Doctor found failures" in out


def test_doctor_exit_2_when_it_cannot_run(tmp_path, capsys):
    rc = main(
        ["doctor", "--root", CPU_ROOT, "--venv", str(tmp_path), "--profile", "no-such-profile", "--quick"]
    )
    err = capsys.readouterr().err
    assert rc == 2
    assert "no-such-profile" in err and "Traceback" not in err


def test_verbose_shows_durations_and_details(tmp_path, capsys):
    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu")
    main(["doctor", "--root", CPU_ROOT, "--venv", str(venv), "--quick", "-v"])
    out = capsys.readouterr().out
    assert " ms)" in out and "torch 2.13.0+cpu: CPU build" in out


def test_explain_whisper_log_names_the_staged_causes(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_text(WHISPER_LOG)
    rc = main(["doctor", "--explain", str(log)])
    out = capsys.readouterr().out
    assert rc == 1  # a fatal message is in the log
    assert "line 2" in out and "--ipc=host" in out and "SELinux" in out and "Strix Halo" in out


def test_explain_playpen_log_from_stdin_as_json(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(PLAYPEN_LOG))
    rc = main(["doctor", "--explain", "-", "--json"])
    data = json.loads(capsys.readouterr().out)
    found = {m["id"]: m for m in data["messages"]}
    assert rc == 1 and data["fatal"] is True
    assert found["amdgpu-ids-missing"]["severity"] == "harmless"
    assert found["hipblaslt-unsupported-arch"]["severity"] == "harmless"
    assert found["invalid-device-function"]["line_no"] == 6
    assert "HSA_OVERRIDE_GFX_VERSION=11.0.0" in found["invalid-device-function"]["fix"]
    assert "torch-no-gpu" not in found  # "cuda: True" is the good case


def test_explain_only_harmless_exits_0(tmp_path, capsys):
    log = tmp_path / "ok.log"
    log.write_text("amdgpu.ids: No such file or directory\nstep 10 loss 2.0\n")
    assert main(["doctor", "--explain", str(log)]) == 0
    assert "harmless" in capsys.readouterr().out


def test_explain_missing_file_is_usage_error(tmp_path, capsys):
    rc = main(["doctor", "--explain", str(tmp_path / "nope.log")])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot read" in err and "nope.log" in err


def test_doctor_help_documents_exit_codes():
    from mw_env.commands.doctor import doctor

    ctx = click.Context(doctor, info_name="doctor")
    text = doctor.get_help(ctx)
    for opt in (
        "--venv",
        "--root",
        "--profile",
        "--profiles-dir",
        "--gpu",
        "--json",
        "--quick",
        "--explain",
        "--timeout",
    ):
        assert opt in text
    assert "2 the doctor itself could not run" in " ".join(text.split())


@pytest.mark.torch
@pytest.mark.slow
def test_full_doctor_cli_on_the_real_cpu_torch(capsys):
    rc = main(["doctor", "--root", CPU_ROOT, "--venv", sys.prefix, "--json", "--timeout", "120"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0, [c for c in data["checks"] if c["status"] == "fail"]
    assert data["facts"]["tflops"]["fp32"] > 0


def _bin_path(name: str) -> str:
    import os

    return f"{MACHINES / name / '.mw-env-bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"


def test_detect_to_doctor_on_the_incus_780m_without_kfd(tmp_path, capsys, monkeypatch):
    # The whole chain on a base fixture: real detect(), real profile selection, the doctor's fix.
    monkeypatch.setenv("PATH", _bin_path("incus-780m-no-kfd"))
    venv = fake_venv(tmp_path / "v", hip="6.4.43482", blas_gfx=["gfx1030", "gfx1100"])
    rc = main(
        ["doctor", "--root", str(MACHINES / "incus-780m-no-kfd"), "--venv", str(venv), "--quick", "--json"]
    )
    data = json.loads(capsys.readouterr().out)
    checks = {c["id"]: c for c in data["checks"]}
    assert rc == 1 and data["profile"] == "gfx1103"
    kfd = checks["devices.kfd"]
    assert kfd["status"] == "fail"
    assert "incus config device add playpen-mailwoman kfd unix-char source=/dev/kfd" in kfd["fix"]
    assert checks["devices.renderD128"]["status"] == "pass"
    assert checks["arch.override"]["status"] == "fail"  # gfx1100 kernels only, and no override set


def test_detect_to_doctor_on_the_rx7900xtx(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", _bin_path("rx7900xtx"))
    venv = fake_venv(
        tmp_path / "v", version="2.9.1+rocm6.4", hip="6.4.43482", blas_gfx=["gfx1030", "gfx1100"]
    )
    main(["doctor", "--root", str(MACHINES / "rx7900xtx"), "--venv", str(venv), "--quick", "--json"])
    checks = {c["id"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["devices.kfd"]["status"] == "pass"
    assert checks["arch.kernels"]["status"] == "pass" and "gfx1100" in checks["arch.kernels"]["detail"]
    assert checks["torch.build"]["status"] == "pass"
