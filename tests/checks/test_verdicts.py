"""The verdicts on probe results a CPU-only test machine cannot produce (a visible GPU, TF32, a Strix Halo
fault): the checks are fed the probe's JSON lines directly, exactly as probe_script.py prints them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from doctor_helpers import (
    GIB,
    GPU_780M,
    GPU_3090,
    GPU_8060S,
    fake_venv,
    hardware,
    run,
    selection,
)

from conftest import MACHINES, fake_machine
from mw_env.checks import apu, compute, device, devices
from mw_env.checks.catalogue import load_catalogue
from mw_env.checks.context import Background, DoctorContext
from mw_env.checks.probe import ProbeResult, parse_output
from mw_env.checks.probe_script import PREFIX
from mw_env.hardware.machine import Machine


def probe_of(*stages: dict, stderr: str = "", returncode: int | None = 0) -> ProbeResult:
    text = "".join(PREFIX + json.dumps(s) + "\n" for s in stages)
    parsed, order, other = parse_output(text + "some library chatter\n")
    assert other == "some library chatter"
    return ProbeResult(stages=parsed, order=order, returncode=returncode, stderr=stderr, duration_s=1.0)


def ctx_for(
    root: str, gpu, probe: ProbeResult, *, container: str = "none", env=None, **hw_kw
) -> DoctorContext:
    hw = hardware(gpu, container=container, **hw_kw)
    sel = selection(hw)
    ctx = DoctorContext(
        machine=fake_machine(root, env=env),
        hardware=hw,
        selection=sel,
        venv=Path("/nonexistent"),
        catalogue=load_catalogue(profile=sel.profile),
    )
    ctx._probe = Background(lambda: probe)
    ctx._static = Background(
        lambda: probe_of(
            {
                "stage": "static",
                "ok": True,
                "torch_found": True,
                "version_version": "2.9.1+rocm6.4",
                "version_hip": "6.4.1",
            }
        )
    )
    return ctx


IMPORT = {
    "stage": "import",
    "ok": True,
    "version": "2.9.1+rocm6.4",
    "hip": "6.4.43482",
    "cuda": None,
    "arch_flags": ["gfx1100"],
    "allow_tf32": False,
    "fp32_precision": "highest",
    "threads": 16,
    "t": 2.0,
}
RUNTIME_780M = {
    "stage": "runtime",
    "ok": True,
    "device": "cuda",
    "available": True,
    "device_count": 1,
    "name": "AMD Radeon 780M",
    "capability": [11, 0],
    "gcn_arch": "gfx1103",
    "total_memory": 16 * GIB,
    "total_visible": 16 * GIB,
    "free_memory": 10 * GIB,
    "arch_list": ["gfx1100"],
}


def mm(dtype: str, err: float, tflops: float, tol: float, device_: str = "cuda") -> dict:
    return {
        "stage": f"matmul.{dtype}",
        "ok": True,
        "device": device_,
        "n": 1024,
        "rel_err": err,
        "finite": True,
        "tolerance": tol,
        "tf32_band": 5e-3 if dtype == "fp32" else None,
        "bench_n": 2048,
        "iters": 20,
        "seconds": 0.5,
        "tflops": tflops,
    }


def test_visible_gpu_with_memory_held_by_another_process():
    ctx = ctx_for("doctor-docker-780m-shm64m", GPU_780M, probe_of(IMPORT, RUNTIME_780M), container="docker")
    out = {c.id: c for c in device.check_device(ctx)}
    assert out["device.available"].status == "pass"
    assert "AMD Radeon 780M (gfx1103)" in out["device.available"].detail
    assert "GTT 16.0 GiB" in out["device.available"].detail
    held = out["device.memory"]
    assert held.status == "warn" and "6.0 GiB of 16.0 GiB" in held.detail


def test_gpu_matmuls_judged_against_the_profile_figures():
    probe = probe_of(
        IMPORT,
        RUNTIME_780M,
        {"stage": "alloc", "ok": True},
        mm("fp32", 3e-7, 0.6, 1e-5),
        mm("bf16", 2e-3, 0.05, 1e-2),
        mm("fp16", 2e-4, 6.0, 2e-3),
        {"stage": "train_step", "ok": True, "device": "cuda", "attn_rel_err": 1e-6},
        {"stage": "done", "ok": True},
    )
    out = {
        c.id: c
        for c in compute.check_compute(
            ctx_for("doctor-docker-780m-shm64m", GPU_780M, probe, container="docker")
        )
    }
    assert out["probe.run"].status == "pass"
    assert out["probe.matmul.fp32"].status == "pass"
    assert out["probe.matmul.fp16"].status == "pass"
    slow = out["probe.matmul.bf16"]
    assert (
        slow.status == "warn" and "0.76% of the 6.6 TFLOP/s expected" in slow.detail
    )  # "2% of expected": wrong path
    assert out["probe.train_step"].status == "pass" and "math SDPA" in out["probe.train_step"].detail


@pytest.mark.parametrize(("allow_tf32", "status"), [(True, "pass"), (False, "warn")])
def test_tf32_is_recognised(allow_tf32, status):
    imp = {**IMPORT, "allow_tf32": allow_tf32}
    probe = probe_of(imp, RUNTIME_780M, {"stage": "alloc", "ok": True}, mm("fp32", 1.2e-3, 0.7, 1e-5))
    out = {
        c.id: c
        for c in compute.check_compute(
            ctx_for("doctor-docker-780m-shm64m", GPU_780M, probe, container="docker")
        )
    }
    fp32 = out["probe.matmul.fp32"]
    assert fp32.status == status
    assert ("TF32 active" in fp32.detail) if allow_tf32 else ("although TF32 is off" in fp32.detail)


def test_garbage_product_beyond_the_tf32_band_fails():
    probe = probe_of(IMPORT, RUNTIME_780M, {"stage": "alloc", "ok": True}, mm("fp32", 0.9, 0.7, 1e-5))
    out = {
        c.id: c
        for c in compute.check_compute(
            ctx_for("doctor-docker-780m-shm64m", GPU_780M, probe, container="docker")
        )
    }
    assert out["probe.matmul.fp32"].status == "fail"
    assert (
        "is_available() being True does not mean the GPU computes correct numbers"
        in out["probe.matmul.fp32"].detail
    )


def test_memory_critical_on_strix_halo_after_alloc_is_a_driver_fault():
    text = "Memory critical error by agent node-0 (Agent handle: 0x1) on address 0x2. Reason: Memory in use."
    probe = probe_of(
        IMPORT,
        {**RUNTIME_780M, "name": "AMD Radeon 8060S", "gcn_arch": "gfx1151"},
        {"stage": "alloc", "ok": True},
        stderr=text,
        returncode=-6,
    )
    ctx = ctx_for("doctor-strix-halo-old-kernel", GPU_8060S, probe, ram=128 * GIB)
    run_check = compute.check_compute(ctx)[0]
    assert run_check.status == "fail"
    assert "on Strix Halo; the out-of-tree amdgpu-dkms driver is loaded" in run_check.detail
    assert "--no-dkms" in run_check.fix


def test_gid_mismatch_between_render_group_and_node(tmp_path):
    root = tmp_path / "root"
    shutil.copytree(MACHINES / "doctor-podman-7900xtx-selinux", root)
    meta = root / ".mw-env-fake.yaml"
    meta.write_text(
        meta.read_text().replace(
            '/dev/kfd: {type: char, mode: "0660", uid: 0, gid: 993}',
            '/dev/kfd: {type: char, mode: "0660", uid: 0, gid: 110}',
        )
    )
    hw = hardware(GPU_780M, container="podman", name="trainer")
    report = run(
        Machine(root=root, env={"PATH": "/usr/bin:/bin", "HOME": "/home/agent"}),
        selection(hw),
        fake_venv(tmp_path / "v", hip="6.4.1"),
        hw=hw,
        quick=True,
    )
    checks = {c.id: c for c in report.checks}
    assert checks["devices.kfd"].status == "fail"
    assert "--group-add keep-groups" in checks["devices.kfd"].fix
    mismatch = checks["devices.render_gid"]
    assert (
        mismatch.status == "warn" and "GID 110" in mismatch.detail and "GID 993 'render'" in mismatch.detail
    )


def test_nvidia_driver_too_old_for_the_wheels_cuda(tmp_path):
    from dataclasses import replace

    old = replace(GPU_3090, driver_version="520.61.05")
    venv = fake_venv(tmp_path / "v", version="2.12.0+cu130", cuda="13.0")
    hw = hardware(old, container="docker")
    report = run(fake_machine("doctor-nvidia-docker"), selection(hw), venv, hw=hw, quick=True)
    drv = {c.id: c for c in report.checks}["versions.driver"]
    assert drv.status == "fail" and "520.61.05" in drv.detail and "580.65.06" in drv.detail


def test_apu_gtt_and_kernel_checks_only_for_amd_apus():
    ctx = ctx_for("doctor-nvidia-docker", GPU_3090, probe_of(IMPORT), container="docker")
    out = apu.check_apu(ctx)
    assert [c.id for c in out] == ["apu.kernel"] and out[0].status == "pass"


def test_nvidia_nodes_expected():
    ctx = ctx_for("doctor-nvidia-docker", GPU_3090, probe_of(IMPORT), container="docker")
    assert devices.expected_nodes(ctx) == ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm"]


def test_probe_script_needs_only_stdlib_and_torch():
    import ast
    import sys

    tree = ast.parse((Path(compute.__file__).with_name("probe_script.py")).read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    assert names - set(sys.stdlib_module_names) <= {"torch", "__future__"}


def test_private_shm_is_only_a_warning_when_the_gpu_allocation_worked():
    from mw_env.checks import ipc

    worked = probe_of(IMPORT, RUNTIME_780M, {"stage": "alloc", "ok": True, "device": "cuda"})
    out = {
        c.id: c
        for c in ipc.check_ipc(ctx_for("doctor-docker-780m-shm64m", GPU_780M, worked, container="docker"))
    }
    assert out["ipc.shm"].status == "warn" and "--ipc=host" in out["ipc.shm"].fix
    died = probe_of(IMPORT, RUNTIME_780M, returncode=-6)
    out = {
        c.id: c
        for c in ipc.check_ipc(ctx_for("doctor-docker-780m-shm64m", GPU_780M, died, container="docker"))
    }
    assert out["ipc.shm"].status == "fail"


def test_a_failing_dtype_the_profile_does_not_train_in_only_warns():
    failed = {
        "stage": "matmul.fp16",
        "ok": False,
        "device": "cuda",
        "error": "RuntimeError: HIP error: invalid device function",
    }
    probe = probe_of(
        IMPORT, RUNTIME_780M, {"stage": "alloc", "ok": True}, mm("fp32", 3e-7, 0.6, 1e-5), failed
    )
    out = {
        c.id: c
        for c in compute.check_compute(
            ctx_for("doctor-docker-780m-shm64m", GPU_780M, probe, container="docker")
        )
    }
    assert out["probe.matmul.fp16"].status == "warn"  # gfx1103 trains in fp32
    assert "invalid device function" in out["probe.matmul.fp16"].detail
    failed32 = {**failed, "stage": "matmul.fp32"}
    probe = probe_of(IMPORT, RUNTIME_780M, {"stage": "alloc", "ok": True}, failed32)
    out = {
        c.id: c
        for c in compute.check_compute(
            ctx_for("doctor-docker-780m-shm64m", GPU_780M, probe, container="docker")
        )
    }
    assert out["probe.matmul.fp32"].status == "fail"
