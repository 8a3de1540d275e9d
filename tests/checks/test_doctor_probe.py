"""The probe, run for real: the real CPU torch of the test venv, and fake torches (real torch + one
injected fault) that hang, crash, compute wrong products or report the wrong build."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from doctor_helpers import GPU_780M, GPU_7900XTX, by_id, fake_venv, hardware, run, selection

from conftest import fake_machine

pytestmark = pytest.mark.torch
TEST_VENV = Path(sys.prefix)  # the venv running these tests holds the real torch


@pytest.mark.slow
def test_real_probe_on_cpu_torch_passes_with_tflops():
    hw = hardware(None, container="docker")
    report = run(fake_machine("doctor-cpu-docker-shm64m"), selection(hw), TEST_VENV, hw=hw)
    checks = by_id(report)
    assert checks["probe.run"].status == "pass", checks["probe.run"]
    for dtype in ("fp32", "bf16", "fp16"):
        mm = checks[f"probe.matmul.{dtype}"]
        # The CPU profile has no fallback to detect: speed is reported (against its 2-vCPU floor), never
        # judged, so a loaded shared CPU still passes.
        assert mm.status == "pass", mm
        assert "TFLOP/s" in mm.detail and "on cpu" in mm.detail
        assert any("2-vCPU floor" in line for line in mm.info)
        assert report.facts["tflops"][dtype] > 0
    assert checks["probe.train_step"].status == "pass"
    assert checks["torch.build"].status == "pass" and "CPU build" in checks["torch.build"].detail
    assert checks["device.available"].status == "pass"
    assert report.ok


@pytest.mark.slow
def test_hanging_probe_returns_at_its_timeout_naming_the_last_stage(tmp_path):
    # The matmul never returns, so coming back at all is the timeout at work (pytest-timeout guards a hang).
    hung = tmp_path / "hung"
    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu", matmul="hang", hang_marker=hung)
    hw = hardware(None, container="docker")
    report = run(fake_machine("doctor-cpu-docker-shm64m"), selection(hw), venv, hw=hw, timeout=6.0)
    probe = by_id(report)["probe.run"]
    assert probe.status == "fail"
    assert "did not finish within 6s" in probe.detail
    assert by_id(report)["probe.matmul.fp32"].status == "skip"
    # On a loaded machine the 6 s can run out inside `import torch`; the detail names whichever stage was
    # last. Once the first product began (the marker), that stage is the allocation before it.
    if hung.exists():
        assert "it hung after stage 'alloc'" in probe.detail, probe.detail
    else:
        assert "it hung after stage '" in probe.detail, probe.detail


@pytest.mark.slow
def test_crashing_probe_is_reported_with_its_stage(tmp_path):
    venv = fake_venv(
        tmp_path / "v", version="2.13.0+cpu", matmul="crash", crash_message="Segmentation fault (core dumped)"
    )
    hw = hardware(None, container="docker")
    report = run(fake_machine("doctor-cpu-docker-shm64m"), selection(hw), venv, hw=hw)
    probe = by_id(report)["probe.run"]
    assert probe.status == "fail"
    assert "The probe died (killed by SIGABRT) after stage 'alloc'" in probe.detail
    assert not report.ok


@pytest.mark.slow
def test_memory_critical_in_docker_without_ipc_host_names_ipc(tmp_path):
    msg = "Memory critical error by agent node-0 (Agent handle: 0x55d0c6a8b2a0) on address 0x7f5a40000000. Reason: Memory in use."
    venv = fake_venv(
        tmp_path / "v", hip="6.4.43482", blas_gfx=["gfx1100"], crash_at="alloc", crash_message=msg
    )
    hw = hardware(GPU_780M, container="docker")
    report = run(
        fake_machine("doctor-docker-780m-shm64m", env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}),
        selection(hw),
        venv,
        hw=hw,
    )
    probe = by_id(report)["probe.run"]
    assert probe.status == "fail"
    assert "the cause is IPC, not memory" in probe.detail
    assert "--ipc=host" in probe.fix


@pytest.mark.slow
def test_memory_critical_with_selinux_names_selinux(tmp_path):
    msg = (
        "Memory critical error by agent node-0 (Agent handle: 0x1) on address 0x7f00. Reason: Memory in use."
    )
    venv = fake_venv(
        tmp_path / "v", hip="6.4.43482", blas_gfx=["gfx1100"], crash_at="alloc", crash_message=msg
    )
    hw = hardware(GPU_7900XTX, container="podman", name="trainer")
    report = run(fake_machine("doctor-podman-7900xtx-selinux"), selection(hw), venv, hw=hw)
    probe = by_id(report)["probe.run"]
    assert "SELinux denies the `map` of /dev/kfd" in probe.detail
    assert "setsebool" in probe.fix


@pytest.mark.slow
def test_numerically_wrong_product_fails_the_matmul_check(tmp_path):
    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu", matmul="wrong")
    hw = hardware(None, container="docker")
    report = run(fake_machine("doctor-cpu-docker-shm64m"), selection(hw), venv, hw=hw)
    for dtype in ("fp32", "bf16", "fp16"):
        mm = by_id(report)[f"probe.matmul.{dtype}"]
        assert mm.status == "fail", mm
        assert "relative error 2.50e-01" in mm.detail
    assert by_id(report)["probe.run"].status == "pass"  # it ran to the end; the numbers are wrong
    assert not report.ok


@pytest.mark.slow
def test_cuda_build_on_amd_full_probe_and_harmless_messages(tmp_path):
    venv = fake_venv(
        tmp_path / "v",
        version="2.12.0+cu130",
        cuda="13.0",
        arch_flags=["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
        stderr=[
            "/opt/amdgpu/share/libdrm/amdgpu.ids: No such file or directory",
            "MIOpen(HIP): Warning [SQLiteBase] Missing system database file: gfx1030_40.kdb Performance may degrade.",
        ],
    )
    hw = hardware(GPU_780M, container="docker")
    report = run(fake_machine("doctor-docker-780m-shm64m"), selection(hw), venv, hw=hw)
    checks = by_id(report)
    assert (
        checks["torch.build"].status == "fail"
        and "training silently runs on the CPU" in checks["torch.build"].detail
    )
    dev = checks["device.available"]
    assert dev.status == "fail" and "a CUDA build cannot use this AMD GPU" in dev.detail
    # The CPU fallback measured against the 780M's expected figure.
    slow = checks["probe.matmul.bf16"]
    assert slow.status == "warn" and "torch computed on the CPU" in slow.detail
    assert "GPU as torch sees it" in slow.fix
    kdb = checks["messages.miopen-missing-kdb"]
    assert kdb.status == "warn"
    # The override is not the problem while the build is wrong: no second, misleading failure.
    assert checks["arch.override"].status == "skip"
    assert checks["versions.runtime"].status == "skip"
    harmless = checks["messages.harmless"]
    assert harmless.status == "pass" and any("amdgpu.ids" in line for line in harmless.info)


@pytest.mark.slow
def test_sm_missing_from_the_cuda_wheel(tmp_path):
    from doctor_helpers import GPU_5090

    venv = fake_venv(
        tmp_path / "v",
        version="2.13.0+cu126",
        cuda="12.6",
        arch_flags=["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
    )
    hw = hardware(GPU_5090, container="docker")
    report = run(fake_machine("doctor-nvidia-docker"), selection(hw), venv, hw=hw)
    kernels = by_id(report)["arch.kernels"]
    assert kernels.status == "fail"
    assert "sm_120 (compute capability 12.0) is not in" in kernels.detail
    assert "no kernel image is available" in kernels.detail
    assert "/whl/cu1" in kernels.fix


def test_quick_doctor_never_imports_torch(tmp_path):
    import subprocess

    from conftest import MACHINES

    code = (
        "import sys; from mw_env.cli import main;"
        f"rc = main(['doctor', '--root', {str(MACHINES / 'doctor-cpu-docker-shm64m')!r}, '--venv', {sys.prefix!r}, '--quick', '--json']);"
        "print('TORCH', 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "TORCH False" in out
