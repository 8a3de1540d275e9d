"""Findings from running the doctor as a new user would: wrong venv paths, fixes that must be the one
command that works for THIS venv and container, node names from detection, and vendor-true messages."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from doctor_helpers import GPU_780M, GPU_3090, by_id, fake_venv, hardware, run, selection

from conftest import MACHINES, fake_machine
from mw_env.cli import main
from mw_env.hardware.facts import ContainerInfo

CPU_ROOT = str(MACHINES / "doctor-cpu-docker-shm64m")


def _quick(root: str, gpu, venv, *, profile=None, env=None, **hw_kw):
    hw = hardware(gpu, **hw_kw)
    return run(fake_machine(root, env=env), selection(hw, profile), venv, hw=hw, quick=True)


# -- the venv path ---------------------------------------------------------------------------------


def test_venv_path_that_is_a_file_is_named_as_such(tmp_path):
    path = tmp_path / "training-venv"
    path.write_text("not a venv")
    check = by_id(_quick("doctor-cpu-docker-shm64m", None, path, container="docker"))["venv.exists"]
    assert check.status == "fail"
    assert "is a file, not a venv folder" in check.detail and "does not exist" not in check.detail


def test_folder_that_is_not_a_venv(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("x")
    check = by_id(_quick("doctor-cpu-docker-shm64m", None, tmp_path / "data", container="docker"))[
        "venv.exists"
    ]
    assert check.status == "fail" and "not a virtual environment" in check.detail
    assert "--venv" in check.fix


def test_venv_whose_interpreter_was_removed(tmp_path):
    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu")
    (venv / "bin" / "python").unlink()
    (venv / "bin" / "python").symlink_to(tmp_path / "gone" / "python3.11")
    checks = by_id(_quick("doctor-cpu-docker-shm64m", None, venv, container="docker"))
    py = checks["venv.python"]
    assert py.status == "fail"
    assert f"broken link to {tmp_path / 'gone' / 'python3.11'}" in py.detail
    assert f"`mw-env bootstrap --venv {venv} --recreate`" in py.fix
    assert checks["torch.build"].status == "skip"  # explained by the venv finding, not repeated


def test_missing_venv_fix_names_that_venv(tmp_path, capsys):
    rc = main(["doctor", "--root", CPU_ROOT, "--venv", str(tmp_path / "elsewhere"), "--quick"])
    out = capsys.readouterr().out
    assert rc == 1
    assert f"`mw-env bootstrap --venv {tmp_path / 'elsewhere'}` creates it" in out


# -- fixes that work for this venv -----------------------------------------------------------------


def test_wrong_build_in_a_bootstrapped_venv_is_fixed_by_recreate(tmp_path):
    # bootstrap pins the venv's torch (UV_CONSTRAINT, pip.conf): a plain `uv pip install` would be refused.
    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu", record={"profile": "cpu"})
    checks = by_id(
        _quick("doctor-docker-780m-shm64m", GPU_780M, venv, container="docker", env={"HOME": "/home/agent"})
    )
    build = checks["torch.build"]
    assert build.status == "fail" and "training silently runs on the CPU" in build.detail
    assert build.fix.startswith(
        f"`mw-env bootstrap --venv {venv} --recreate` (torch>=2.12,<2.15 from https://repo.amd.com/rocm/whl-multi-arch/"
    )
    assert "uv pip install" not in build.fix
    record = checks["venv.record"]
    assert record.status == "warn"
    assert "profile cpu; this run checks profile gfx1103 (detected for this machine)" in record.detail
    assert f"`mw-env bootstrap --venv {venv} --recreate` rebuilds it for gfx1103" in record.fix


def test_wrong_build_in_a_foreign_venv_gets_the_uv_command(tmp_path):
    venv = fake_venv(tmp_path / "v", version="2.12.0+cu130", cuda="13.0")  # no mw-env.json
    build = by_id(_quick("doctor-docker-780m-shm64m", GPU_780M, venv, container="docker"))["torch.build"]
    assert build.status == "fail"
    assert f"uv pip install --python {venv}/bin/python --reinstall-package torch" in build.fix
    assert (
        "--index-url https://repo.amd.com/rocm/whl-multi-arch/" in build.fix
        and "'torch[device-gfx1103]>=2.12,<2.15'" in build.fix
    )


def test_explicit_profile_is_carried_into_the_bootstrap_fix(tmp_path):
    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu", record={"profile": "cpu"})
    checks = by_id(_quick("doctor-cpu-docker-shm64m", None, venv, profile="gfx1103", container="docker"))
    record = checks["venv.record"]
    assert "(chosen with --profile)" in record.detail
    assert f"`mw-env bootstrap --venv {venv} --profile gfx1103 --recreate`" in record.fix


def test_gpu_profile_on_a_machine_without_a_gpu_fails(tmp_path):
    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu")
    report = _quick("doctor-cpu-docker-shm64m", None, venv, profile="gfx1103", container="docker")
    gpu = by_id(report)["devices.gpu"]
    assert gpu.status == "fail"
    assert "installs a ROCm build of torch, but no usable GPU is visible here" in gpu.detail
    assert "--profile cpu" in gpu.fix
    assert not report.ok


def test_cpu_profile_without_a_gpu_skips_the_nodes(tmp_path):
    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu")
    report = _quick("doctor-cpu-docker-shm64m", None, venv, container="docker")
    assert by_id(report)["devices.gpu"].status == "skip"


# -- device nodes and host commands ---------------------------------------------------------------


def test_nvidia_nodes_use_the_minor_detection_found():
    # Two RTX 3090s at host minors 1 and 6 passed into docker: /dev/nvidia1 is the first GPU, not nvidia0.
    from mw_env.checks.devices import expected_nodes

    class Ctx:
        pass

    from mw_env.hardware.detect import detect

    machine = fake_machine("nvidia-ampere-3090x2-560")
    hw = detect(machine)
    ctx = Ctx()
    ctx.gpu, ctx.hardware, ctx.machine = hw.gpu, hw, machine
    ctx.profile = selection(hw).profile
    assert expected_nodes(ctx)[:2] == ["/dev/nvidiactl", "/dev/nvidia1"]


def test_detected_nvidia_box_passes_its_device_nodes(tmp_path, capsys, monkeypatch):
    root = MACHINES / "nvidia-ampere-3090x2-560"
    monkeypatch.setenv("PATH", f"{root / '.mw-env-bin'}:{os.environ['PATH']}")
    venv = fake_venv(tmp_path / "v", version="2.13.0+cu126", cuda="12.6")
    main(["doctor", "--root", str(root), "--venv", str(venv), "--quick", "--json"])
    import json

    checks = {c["id"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["devices.nvidia1"]["status"] == "pass"
    assert "devices.nvidia0" not in checks
    # CUDA in a docker container with 64 MiB /dev/shm: DataLoader workers, not ROCm's allocator.
    shm = checks["ipc.shm"]
    assert shm["status"] == "warn" and "ROCm" not in shm["detail"] and "bus error" in shm["detail"]


def test_second_missing_node_points_at_the_first_fix(tmp_path):
    venv = fake_venv(tmp_path / "v", hip="6.4.43482")
    checks = by_id(
        _quick("incus-780m-no-passthrough", GPU_780M, venv, container="incus", name="playpen-mailwoman")
    )
    kfd, render = checks["devices.kfd"], checks["devices.renderD128"]
    assert kfd.status == render.status == "fail"
    assert "incus config device add playpen-mailwoman kfd unix-char" in kfd.fix
    assert render.fix == "The same host commands as for /dev/kfd above."


def test_docker_without_a_visible_name_uses_the_container_id(tmp_path):
    venv = fake_venv(tmp_path / "v", hip="6.4.43482")
    hw = hardware(GPU_780M, container="docker")
    hw = replace(hw, container=ContainerInfo(kind="docker", name=None, id="9c1e5b7f2a3d" + "0" * 52))
    report = run(fake_machine("incus-780m-no-passthrough"), selection(hw), venv, hw=hw, quick=True)
    kfd = by_id(report)["devices.kfd"]
    assert kfd.status == "fail"
    assert "docker run -dit --name 9c1e5b7f2a3d-gpu --device=/dev/kfd --device=/dev/dri" in kfd.fix
    assert "docker commit 9c1e5b7f2a3d" in kfd.fix and "podman" not in kfd.fix


def test_kubernetes_fix_is_the_pod_spec_not_incus(tmp_path):
    venv = fake_venv(tmp_path / "v", version="2.13.0+cu126", cuda="12.6")
    gpu = replace(GPU_3090, index=0)
    report = _quick(
        "incus-780m-no-passthrough", gpu, venv, container="kubernetes", name="trainer-7c9f8b6d5-x2kqz"
    )
    node = by_id(report)["devices.nvidiactl"]  # the first missing node carries the fix
    assert node.status == "fail"
    assert "nvidia.com/gpu" in node.fix and "incus" not in node.fix


# -- probe verdicts --------------------------------------------------------------------------------


@pytest.mark.slow
def test_timeout_during_import_is_not_called_a_gpu_fault(tmp_path):
    from test_doctor_states import _hanging_import_venv

    venv = _hanging_import_venv(tmp_path / "v")
    hw = hardware(None, container="docker")
    report = run(fake_machine("doctor-cpu-docker-shm64m"), selection(hw), venv, hw=hw, timeout=2.0)
    probe = by_id(report)["probe.run"]
    assert probe.status == "fail"
    assert "in `import torch`" in probe.detail and "not a GPU fault" in probe.detail
    assert "--timeout" in probe.fix and "-X importtime" in probe.fix


def test_hang_in_a_gpu_stage_names_the_stage_and_the_kernel_log():
    from test_verdicts import IMPORT, RUNTIME_780M, ctx_for, probe_of

    from mw_env.checks.compute import check_compute

    alloc = {"stage": "alloc", "ok": True, "device": "cuda", "bytes": 64 * 1024 * 1024}
    probe = replace(probe_of(IMPORT, RUNTIME_780M, alloc), timed_out=True, returncode=None)
    run_check = check_compute(ctx_for("doctor-incus-780m-nokfd", GPU_780M, probe))[0]
    assert run_check.status == "fail"
    assert "hung after stage 'alloc', in the fp32 matrix product" in run_check.detail
    assert "GPU fault" in run_check.detail and "journalctl -k" in run_check.fix


def test_render_shows_each_areas_duration_once(tmp_path, capsys):
    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu")
    main(["doctor", "--root", CPU_ROOT, "--venv", str(venv), "--quick", "-v"])
    out = capsys.readouterr().out
    area_lines = [line for line in out.splitlines() if line.startswith("[")]
    assert area_lines and all(line.rstrip().endswith(("ms)", " s)")) for line in area_lines)
    check_lines = [line for line in out.splitlines() if line.startswith("    ") and " ms)" in line]
    assert check_lines == []


# -- --explain -------------------------------------------------------------------------------------

WHISPER_SESSION = """\
>>> torch.__version__
'2.12.0+cu130'          # a CUDA build
>>> torch.cuda.is_available()
False
HIP error: hipErrorNoBinaryForGpu: Unable to find code object for all current devices!
Call returned HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources.
"""


def test_explain_names_cuda_build_no_binary_and_out_of_resources(tmp_path, capsys):
    log = tmp_path / "session.log"
    log.write_text(WHISPER_SESSION)
    rc = main(["doctor", "--explain", str(log)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "line 2: '2.12.0+cu130'" in out and "silently trains on" in out
    assert "line 5: HIP error: hipErrorNoBinaryForGpu" in out and "HSA_OVERRIDE_GFX_VERSION" in out
    assert "line 6: Call returned HSA_STATUS_ERROR_OUT_OF_RESOURCES" in out and "render" in out
    assert out.rstrip().endswith("3 known message(s) in " + str(log) + ": 2 fatal, 1 warning.")


def test_explain_empty_file_and_directory(tmp_path, capsys):
    log = tmp_path / "empty.log"
    log.write_text("")
    assert main(["doctor", "--explain", str(log)]) == 0
    assert "is empty: nothing to explain" in capsys.readouterr().out
    assert main(["doctor", "--explain", str(tmp_path)]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_explain_clean_log_counts_the_lines(tmp_path, capsys):
    log = tmp_path / "ok.log"
    log.write_text("step 1 loss 2.0\nstep 2 loss 1.9\n")
    assert main(["doctor", "--explain", str(log)]) == 0
    out = capsys.readouterr().out
    assert "No known messages in" in out and "(2 lines read)" in out


def test_cuda_version_text_in_probe_output_is_no_finding():
    # The doctor judges the build itself (torch.build); a "+cu126" in library chatter on NVIDIA is noise.
    from test_verdicts import ctx_for, probe_of

    from mw_env.checks.messages import check_messages

    probe = probe_of({"stage": "import", "ok": True}, stderr="loaded torch 2.7.1+cu126 from /venv\n")
    found = check_messages(ctx_for("doctor-nvidia-docker", GPU_3090, probe))
    assert [c.id for c in found] == ["messages.known"] and found[0].status == "pass"


def test_cpu_profile_chosen_on_an_amd_box_is_not_a_cpu_fallback(tmp_path):
    # `--profile cpu` on a 780M: the CPU build is what was asked for; "install the CPU build" would be a circle.
    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu", record={"profile": "cpu"})
    report = _quick(
        "incus-780m-no-kfd", GPU_780M, venv, profile="cpu", container="incus", name="playpen-mailwoman"
    )
    checks = by_id(report)
    build = checks["torch.build"]
    assert build.status == "pass"
    assert (
        "profile cpu (chosen with --profile) trains on the CPU, the AMD Radeon 780M stays unused"
        in build.detail
    )
    assert checks["versions.runtime"].detail == "CPU build: no GPU runtime"
    assert checks["venv.record"].status == "pass"
    # ... and the GPU's device nodes are not needed for it: no failure for a missing /dev/kfd.
    assert checks["devices.gpu"].status == "skip" and "devices.kfd" not in checks
    assert report.ok


def test_cpu_training_limited_by_omp_num_threads_warns():
    from test_verdicts import ctx_for, probe_of

    from mw_env.checks.device import check_device
    from mw_env.hardware.facts import CpuInfo

    stages = (
        {"stage": "import", "ok": True, "threads": 1},
        {"stage": "runtime", "ok": True, "device": "cpu", "available": False},
    )
    limited = ctx_for("doctor-cpu-docker-shm64m", None, probe_of(*stages), env={"OMP_NUM_THREADS": "1"})
    limited.hardware = replace(limited.hardware, cpu=CpuInfo(cores=16))
    check = check_device(limited)[0]
    assert check.status == "warn"
    assert "1 thread(s) although 16 CPUs are usable here, because OMP_NUM_THREADS=1" in check.detail
    assert "`unset OMP_NUM_THREADS`" in check.fix
    free = ctx_for("doctor-cpu-docker-shm64m", None, probe_of(*stages))
    free.hardware = replace(free.hardware, cpu=CpuInfo(cores=2))
    assert check_device(free)[0].status == "pass"


def test_compute_probe_line_shows_tflops_without_verbose(capsys):
    from mw_env.checks.model import CheckResult, DoctorReport
    from mw_env.commands.doctor import render_report

    report = DoctorReport(
        profile="cpu",
        checks=(CheckResult(id="probe.matmul.fp32", area="probe", title="fp32 matmul", status="pass"),),
        facts={"device": "cpu", "tflops": {"fp32": 0.1712, "bf16": 0.43, "fp16": None}},
    )
    render_report(report, verbose=False)
    out = capsys.readouterr().out
    assert "[✓] Compute probe (fp32 0.171, bf16 0.43 TFLOP/s on cpu)" in out


def test_a_crashed_check_gets_the_skull_mark(capsys):
    from mw_env.checks.model import CheckResult, DoctorReport
    from mw_env.commands.doctor import render_report

    crashed = CheckResult(
        id="ipc.crashed",
        area="ipc",
        title="Shared memory",
        status="fail",
        detail="check crashed: KeyError: 'x'",
    )
    render_report(DoctorReport(profile="cpu", checks=(crashed,)), verbose=False)
    out = capsys.readouterr().out
    assert "☠ Shared memory: check crashed: KeyError: 'x'" in out and "Traceback" not in out


def test_known_message_in_the_probe_points_at_the_machine_specific_finding():
    from test_verdicts import ctx_for, probe_of

    from mw_env.checks.messages import check_messages

    probe = probe_of(
        {"stage": "import", "ok": True},
        stderr="Unable to open /dev/kfd read-write: No such file or directory\n",
        returncode=1,
    )
    found = {c.id: c for c in check_messages(ctx_for("doctor-incus-780m-nokfd", GPU_780M, probe))}
    kfd = found["messages.kfd-missing"]
    assert kfd.status == "fail"
    assert kfd.detail.startswith("/dev/kfd (ROCm's compute entry point) is not in this container")  # no echo
    assert kfd.fix == "The device-node finding above names the host commands for this container."


MEMORY_CRITICAL = (
    "Memory critical error by agent node-0 (Agent handle: 0x1) on address 0x7f. Reason: Memory in use.\n"
)


@pytest.mark.parametrize(
    ("root", "needle"),
    [
        ("doctor-docker-780m-shm64m", "64 MiB - a private IPC namespace: cause (1)"),
        ("doctor-podman-7900xtx-selinux", "SELinux is enforcing here: cause (2)"),
        ("rx7900xtx", "(1) and (2) do not apply to this machine"),
    ],
)
def test_explain_reads_this_machines_ipc_and_selinux_for_memory_critical(tmp_path, capsys, root, needle):
    import json

    log = tmp_path / "train.log"
    log.write_text(MEMORY_CRITICAL)
    assert main(["doctor", "--explain", str(log), "--root", str(MACHINES / root)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "here:" in out and needle in out.split("here:", 1)[1]
    main(["doctor", "--explain", str(log), "--root", str(MACHINES / root), "--json"])
    (msg,) = json.loads(capsys.readouterr().out)["messages"]
    assert needle in msg["here"]


def test_broken_sysfs_does_not_crash_and_says_how_the_gpu_was_identified(tmp_path, capsys):
    import json

    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu")
    rc = main(["doctor", "--root", str(MACHINES / "broken-sysfs"), "--venv", str(venv), "--quick", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 1 and data["profile"] == "gfx1103"  # the CPU torch on a 780M fails torch.build
    checks = {c["id"]: c for c in data["checks"]}
    assert not [c for c in checks if c.endswith((".crashed", ".timeout"))]
    ident = checks["devices.detection"]
    assert ident["status"] == "warn" and "gfx_target_version 99999999" in ident["detail"]


def test_a_missing_device_node_is_not_called_an_identification_problem(tmp_path, capsys):
    import json

    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu")
    main(["doctor", "--root", str(MACHINES / "incus-780m-no-kfd"), "--venv", str(venv), "--quick", "--json"])
    checks = {c["id"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["devices.kfd"]["status"] == "fail"  # reported once, where it belongs
    assert "devices.detection" not in checks
