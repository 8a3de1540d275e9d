"""Broken states the doctor must name, with the exact failing check and its fix. No torch needed:
these run with --quick (the venv's torch is inspected without importing it) or touch no venv at all."""

from __future__ import annotations

from dataclasses import replace

import pytest
from doctor_helpers import (
    GIB,
    GPU_780M,
    GPU_3090,
    GPU_7900XTX,
    GPU_8060S,
    by_id,
    fake_venv,
    hardware,
    run,
    selection,
)

from conftest import fake_machine
from mw_env.checks.model import CheckResult


def _quick(root: str, gpu, venv, *, container="none", name=None, profile=None, env=None, **hw_kw):
    hw = hardware(gpu, container=container, name=name, **hw_kw)
    sel = selection(hw, profile)
    return run(fake_machine(root, env=env), sel, venv, hw=hw, quick=True)


def test_kfd_missing_in_incus_names_the_incus_commands(tmp_path):
    venv = fake_venv(tmp_path / "v", hip="6.4.43482", blas_gfx=["gfx1100"])
    report = _quick("doctor-incus-780m-nokfd", GPU_780M, venv, container="incus", name="mw-train")
    kfd = by_id(report)["devices.kfd"]
    assert kfd.status == "fail"
    assert "not passed into this incus container (mw-train)" in kfd.detail
    assert "incus config device add mw-train kfd unix-char source=/dev/kfd path=/dev/kfd gid=993" in kfd.fix
    assert by_id(report)["devices.renderD128"].status == "pass"
    assert not report.ok
    # Report order: the device-node failure comes first, it explains the rest.
    assert report.checks[0].id.startswith("devices.")


def test_kfd_without_permission_in_incus_sets_the_gid(tmp_path):
    venv = fake_venv(tmp_path / "v", hip="6.4.43482")
    report = _quick("doctor-incus-780m-kfd-noperm", GPU_780M, venv, container="incus", name="mw-train")
    kfd = by_id(report)["devices.kfd"]
    assert kfd.status == "fail"
    assert "uid 0 gid 0" in kfd.detail and "mode 0660" in kfd.detail
    assert "incus config device set mw-train kfd gid=993" in kfd.fix
    assert by_id(report)["devices.renderD128"].status == "fail"


def test_docker_with_64mb_shm_fails_on_amd_with_ipc_host_fix(tmp_path):
    venv = fake_venv(tmp_path / "v", hip="6.4.43482")
    report = _quick("doctor-docker-780m-shm64m", GPU_780M, venv, container="docker")
    shm = by_id(report)["ipc.shm"]
    assert shm.status == "fail"
    assert "64 MiB" in shm.detail and "Memory critical error" in shm.detail
    assert "--ipc=host" in shm.fix
    # Nodes passed with --group-add 110: fine.
    assert by_id(report)["devices.kfd"].status == "pass"
    # ~/.cache is a tmpfs here: MIOpen recompiles in every new container.
    assert by_id(report)["apu.miopen_custom_cache_dir"].status == "warn"
    assert by_id(report)["apu.miopen_user_db_path"].status == "pass"


def test_cpu_container_with_64mb_shm_only_warns(tmp_path):
    report = _quick(
        "doctor-cpu-docker-shm64m", None, fake_venv(tmp_path / "v", version="2.13.0+cpu"), container="docker"
    )
    assert by_id(report)["ipc.shm"].status == "warn"
    assert by_id(report)["devices.gpu"].status == "skip"
    assert report.ok


def test_selinux_enforcing_in_podman_warns_with_setsebool(tmp_path):
    venv = fake_venv(tmp_path / "v", hip="6.4.43482", blas_gfx=["gfx1100"])
    report = _quick("doctor-podman-7900xtx-selinux", GPU_7900XTX, venv, container="podman", name="trainer")
    se = by_id(report)["ipc.selinux"]
    assert se.status == "warn"
    assert "setsebool -P container_use_devices true" in se.fix
    assert by_id(report)["arch.kernels"].status == "pass"  # gfx1100 kernels in the wheel (rocBLAS files)


def test_cuda_build_on_amd_box_says_training_runs_on_cpu(tmp_path):
    venv = fake_venv(tmp_path / "v", version="2.12.0+cu130", cuda="13.0")
    report = _quick("doctor-podman-7900xtx-selinux", GPU_7900XTX, venv, container="podman", name="trainer")
    build = by_id(report)["torch.build"]
    assert build.status == "fail"
    assert "2.12.0+cu130 is a CUDA build on an AMD GPU" in build.detail
    assert "silently runs on the CPU" in build.detail
    assert (
        "uv pip install" in build.fix and "--index-url https://repo.amd.com/rocm/whl-multi-arch/" in build.fix
    )
    assert str(venv / "bin" / "python") in build.fix


def test_cpu_build_on_nvidia_fails(tmp_path):
    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu")
    report = _quick("doctor-nvidia-docker", GPU_3090, venv, container="docker")
    build = by_id(report)["torch.build"]
    assert build.status == "fail"
    assert "CPU build on an NVIDIA GPU" in build.detail
    assert "download.pytorch.org/whl/cu" in build.fix
    assert by_id(report)["devices.nvidia0"].status == "pass"
    # 1.5 GB free on the fixture's disk: enough for checkpoints of an installed venv, but flagged.
    assert by_id(report)["disk.free"].status in ("warn", "pass")


def test_missing_override_on_gfx1103(tmp_path):
    venv = fake_venv(tmp_path / "v", hip="6.4.43482", blas_gfx=["gfx1030", "gfx1100", "gfx1101"])
    report = _quick("doctor-docker-780m-shm64m", GPU_780M, venv, container="docker")
    ov = by_id(report)["arch.override"]
    assert ov.status == "fail"
    assert "invalid device function" in ov.detail
    assert "export HSA_OVERRIDE_GFX_VERSION=11.0.0" in ov.fix
    # The risk and the way out, as bootstrap words them from the profile's table (issue 30), not typed here.
    assert "TheRock#1184" in ov.fix and "`--source amd-multiarch`" in ov.fix
    kernels = by_id(report)["arch.kernels"]
    assert kernels.status == "fail" and "gfx1103 is not in" in kernels.detail


def test_override_from_the_venv_env_file_counts(tmp_path):
    venv = fake_venv(
        tmp_path / "v",
        hip="6.4.43482",
        blas_gfx=["gfx1100"],
        record={"profile": "gfx1103", "env": {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}},
    )
    report = _quick("doctor-docker-780m-shm64m", GPU_780M, venv, container="docker")
    assert by_id(report)["arch.override"].status == "pass"
    assert "hang" in by_id(report)["arch.override"].detail  # the override runs, with bootstrap's warning
    assert by_id(report)["arch.kernels"].status == "pass"
    assert by_id(report)["venv.record"].status == "pass"
    assert (
        by_id(report)["venv.env"].status == "pass"
    )  # applied by mw-env train; info says how for own scripts


def test_override_on_gfx1151_is_harmful(tmp_path):
    venv = fake_venv(tmp_path / "v", version="2.11.0+rocm7.2", hip="7.2.0", blas_gfx=["gfx1100", "gfx1151"])
    report = _quick(
        "doctor-strix-halo-old-kernel",
        GPU_8060S,
        venv,
        env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"},
        ram=128 * GIB,
        kernel="6.14.0-1007-oem",
    )
    ov = by_id(report)["arch.override"]
    assert ov.status == "warn"
    assert "gfx1151 has native kernels" in ov.detail
    assert "unset HSA_OVERRIDE_GFX_VERSION" in ov.fix
    # Kernel older than 6.18.4 on Strix Halo, GTT at half of 128 GB.
    assert by_id(report)["apu.kernel"].status == "warn"
    gtt = by_id(report)["apu.gtt"]
    assert gtt.status == "warn" and "ttm.pages_limit=25165824" in gtt.fix  # 96 GiB


def test_override_with_wrong_value_and_empty_value(tmp_path):
    venv = fake_venv(tmp_path / "v", hip="6.4.43482", blas_gfx=["gfx1100"])
    wrong = _quick(
        "doctor-docker-780m-shm64m",
        GPU_780M,
        venv,
        container="docker",
        env={"HSA_OVERRIDE_GFX_VERSION": "11.0.2"},
    )
    ov = by_id(wrong)["arch.override"]
    assert ov.status == "warn" and "export HSA_OVERRIDE_GFX_VERSION=11.0.0" in ov.fix
    empty = _quick(
        "doctor-docker-780m-shm64m", GPU_780M, venv, container="docker", env={"HSA_OVERRIDE_GFX_VERSION": ""}
    )
    assert by_id(empty)["arch.override"].status == "warn"
    assert "empty" in by_id(empty)["arch.override"].detail


def test_arch_missing_from_the_wheel(tmp_path):
    # A 7900 XTX (gfx1100) with a wheel whose kernels stop at gfx1030: no override can fix a dGPU.
    venv = fake_venv(
        tmp_path / "v", version="2.3.1+rocm5.7", hip="5.7.31921", blas_gfx=["gfx900", "gfx906", "gfx1030"]
    )
    report = _quick("doctor-podman-7900xtx-selinux", GPU_7900XTX, venv, container="podman", name="trainer")
    kernels = by_id(report)["arch.kernels"]
    assert kernels.status == "fail"
    assert "gfx1100 is not in" in kernels.detail and "invalid device function" in kernels.detail
    assert "uv pip install" in kernels.fix
    hip = by_id(report)["versions.runtime"]
    assert hip.status == "fail" and "needs >=" in hip.detail


def test_no_venv_and_no_torch(tmp_path):
    report = _quick("doctor-cpu-docker-shm64m", None, tmp_path / "nowhere", container="docker")
    assert by_id(report)["venv.exists"].status == "fail"
    assert "mw-env bootstrap" in by_id(report)["venv.exists"].fix
    empty = _quick(
        "doctor-cpu-docker-shm64m", None, fake_venv(tmp_path / "v", with_torch=False), container="docker"
    )
    assert by_id(empty)["torch.build"].status == "fail"
    assert "No module named 'torch'" in by_id(empty)["torch.build"].detail


def test_corrupt_record_is_a_failed_check_not_a_traceback(tmp_path):
    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu")
    (venv / "mw-env.json").write_text("{not json")
    report = _quick("doctor-cpu-docker-shm64m", None, venv, container="docker")
    rec = by_id(report)["venv.record"]
    # The one JSON reader's wording (mw_env.base.userjson): the file, then why.
    assert rec.status == "fail" and "mw-env.json: not valid JSON" in rec.detail, rec.detail


def test_a_crashing_check_is_reported_as_crashed(tmp_path, monkeypatch):
    from mw_env.checks import runner

    def boom(ctx) -> list[CheckResult]:
        raise ZeroDivisionError("division by zero")

    areas = tuple(replace(a, check=boom) if a.key == "ipc" else a for a in runner.AREAS)
    monkeypatch.setattr(runner, "AREAS", areas)
    report = _quick(
        "doctor-cpu-docker-shm64m", None, fake_venv(tmp_path / "v", version="2.13.0+cpu"), container="docker"
    )
    crashed = by_id(report)["ipc.crashed"]
    assert crashed.status == "fail"
    assert crashed.detail == "check crashed: ZeroDivisionError: division by zero"
    assert by_id(report)["disk.free"].status == "pass"  # the others still ran


def test_a_hanging_check_times_out(tmp_path, monkeypatch):
    import threading

    from mw_env.checks import runner

    gate, released = threading.Event(), threading.Event()

    def stuck(ctx) -> list[CheckResult]:
        gate.wait(120)
        released.set()
        return []

    monkeypatch.setattr(
        runner,
        "AREAS",
        tuple(replace(a, check=stuck) if a.key == "network" else a for a in runner.AREAS),
    )
    hw = hardware(None, container="docker")
    from mw_env.checks import run_doctor

    report = run_doctor(
        machine=fake_machine("doctor-cpu-docker-shm64m"),
        selection=selection(hw),
        venv=tmp_path / "v",
        quick=True,
        hardware=hw,
        check_timeout=0.5,
    )
    # The doctor came back while the check was still stuck: it gave up on it, it did not wait it out.
    assert not released.is_set()
    gate.set()
    assert by_id(report)["network.timeout"].status == "fail"


@pytest.mark.parametrize(
    ("error", "check_status", "needle"),
    [
        (OSError(-3, "Temporary failure in name resolution"), "warn", "Temporary failure in name resolution"),
        (None, "pass", "download.pytorch.org:443"),
    ],
)
def test_network_dns_vs_reachable(tmp_path, monkeypatch, error, check_status, needle):
    from mw_env.checks import network

    def fake_resolve(host, port):
        if error:
            raise error
        return [(2, 1, 6, "", ("127.0.0.1", port))]

    monkeypatch.setattr(network, "resolve", fake_resolve)
    monkeypatch.setattr(network, "connect", lambda *a: None)
    hw = hardware(None)
    report = run(
        fake_machine("doctor-cpu-docker-shm64m"),
        selection(hw),
        tmp_path / "v",
        hw=hw,
        quick=True,
        network=True,
    )
    net = by_id(report)["network.index"]
    assert net.status == check_status
    assert needle in net.detail


def test_network_refused(tmp_path, monkeypatch):
    from mw_env.checks import network

    monkeypatch.setattr(network, "resolve", lambda h, p: [(2, 1, 6, "", ("10.0.0.1", p))])

    def refuse(address, family, timeout):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(network, "connect", refuse)
    hw = hardware(None)
    report = run(
        fake_machine("doctor-cpu-docker-shm64m"),
        selection(hw),
        tmp_path / "v",
        hw=hw,
        quick=True,
        network=True,
    )
    net = by_id(report)["network.index"]
    assert net.status == "warn" and "Connection refused" in net.detail and "HTTPS_PROXY" in net.fix


def test_old_kernel_on_780m_caps_memory(tmp_path):
    report = _quick(
        "doctor-incus-780m-kfd-noperm",
        GPU_780M,
        tmp_path / "v",
        container="incus",
        name="mw-train",
        kernel="6.8.0-45-generic",
    )
    k = by_id(report)["apu.kernel"]
    assert k.status == "warn" and "6.8.0-45-generic < 6.10" in k.detail and "512 MiB" in k.detail


def test_json_contract_shape(tmp_path):
    report = _quick(
        "doctor-cpu-docker-shm64m", None, fake_venv(tmp_path / "v", version="2.13.0+cpu"), container="docker"
    )
    data = report.to_dict()
    assert set(data) >= {"profile", "ok", "checks"}
    assert data["profile"] == "cpu" and data["ok"] is True
    for c in data["checks"]:
        assert set(c) >= {"id", "title", "status", "detail", "fix"}
        assert c["status"] in ("pass", "warn", "fail", "skip")


def _hanging_import_venv(path, marker=None):
    """A torch whose import never returns; it touches `marker` first (so a test knows the hang began)."""
    venv = fake_venv(path, with_torch=False)
    pkg = next((venv / "lib").glob("python*/site-packages")) / "torch"
    pkg.mkdir()
    (pkg / "version.py").write_text("__version__ = '2.13.0+cpu'\ncuda = None\nhip = None\n")
    touch = f"open({str(marker)!r}, 'w').close()\n" if marker else ""
    (pkg / "__init__.py").write_text(f"import time\n{touch}while True:\n    time.sleep(0.05)\n")
    return venv


@pytest.mark.slow
def test_probe_hanging_in_import_torch_returns_within_timeout(tmp_path):
    # The import never returns, so coming back at all is the timeout at work (pytest-timeout guards a hang).
    venv = _hanging_import_venv(tmp_path / "v")
    hw = hardware(None, container="docker")
    report = run(fake_machine("doctor-cpu-docker-shm64m"), selection(hw), venv, hw=hw, timeout=2.0)
    probe = by_id(report)["probe.run"]
    assert probe.status == "fail" and "it hung after stage 'static'" in probe.detail
    assert by_id(report)["torch.build"].status == "pass"  # the static inspection still named the build


def test_kill_active_ends_a_running_probe(tmp_path):
    import threading

    from mw_env.checks import probe
    from proctools import wait_for

    hung = tmp_path / "hung"
    venv = _hanging_import_venv(tmp_path / "v", marker=hung)
    results = []
    progress: list[str] = []
    t = threading.Thread(
        target=lambda: results.append(
            probe.run_probe(
                python=venv / "bin" / "python",
                env={"PATH": "/usr/bin:/bin"},
                timeout=60,
                config={},
                progress=progress,
            )
        )
    )
    t.start()
    # The marker appears inside `import torch`, after the probe printed its static stage: the event, not a sleep.
    wait_for(hung.exists, 120, "the probe to reach its hanging import")
    # While it runs, its progress is known (what the doctor reports when it gives up on a probe).
    wait_for(lambda: progress == ["static"], 60, "the static stage to be read as progress")
    probe.kill_active()
    t.join(60)
    assert not t.is_alive()
    assert results[0].returncode is not None and results[0].returncode < 0  # killed by a signal
    assert results[0].last_stage == "static"


@pytest.mark.parametrize(
    ("container", "name", "needle"),
    [
        ("docker", None, "--device /dev/kfd --device /dev/dri"),
        ("none", None, "lsmod | grep amdgpu"),
    ],
)
def test_kfd_missing_fix_follows_the_runtime(tmp_path, container, name, needle):
    import shutil

    from conftest import MACHINES

    root = tmp_path / "root"
    shutil.copytree(MACHINES / "doctor-docker-780m-shm64m", root)
    meta = root / ".mw-env-fake.yaml"
    meta.write_text(
        meta.read_text().replace('  /dev/kfd: {type: char, mode: "0660", uid: 0, gid: 110}\n', "")
    )
    from mw_env.hardware.machine import Machine

    hw = hardware(GPU_780M, container=container, name=name)
    report = run(
        Machine(root=root, env={"PATH": "/usr/bin:/bin", "HOME": "/home/agent"}),
        selection(hw),
        tmp_path / "v",
        hw=hw,
        quick=True,
    )
    kfd = by_id(report)["devices.kfd"]
    assert kfd.status == "fail"
    assert needle in kfd.fix


def test_run_env_from_the_trainer_decides_the_override(tmp_path):
    # The trainer passes the env it will start training with; an override there counts.
    venv = fake_venv(tmp_path / "v", hip="6.4.43482", blas_gfx=["gfx1100"])
    hw = hardware(GPU_780M, container="docker")
    from mw_env.checks import run_doctor

    machine = fake_machine("doctor-docker-780m-shm64m")
    report = run_doctor(
        machine=machine,
        selection=selection(hw),
        venv=venv,
        quick=True,
        hardware=hw,
        network=False,
        run_env={**machine.env, "HSA_OVERRIDE_GFX_VERSION": "11.0.0"},
    )
    assert by_id(report)["arch.override"].status == "pass"


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"HIP_VISIBLE_DEVICES": ""}, "is set but empty"),
        ({"CUDA_VISIBLE_DEVICES": "3"}, "names no existing GPU (this machine has 1)"),
    ],
)
def test_visibility_variables_that_hide_the_gpu(tmp_path, env, needle):
    report = _quick("doctor-docker-780m-shm64m", GPU_780M, tmp_path / "v", container="docker", env=env)
    vis = by_id(report)["devices.visible"]
    assert vis.status == "fail" and needle in vis.detail and "unset" in vis.fix


def test_igpu_plus_dgpu_asks_for_hip_visible_devices(tmp_path):
    from dataclasses import replace

    from mw_env.checks import run_doctor
    from mw_env.hardware.facts import Hardware

    igpu = replace(GPU_780M, index=0)
    dgpu = replace(GPU_7900XTX, index=1, render_minor=129)
    hw = Hardware(gpus=(igpu, dgpu), selected_gpu=1)
    report = run_doctor(
        machine=fake_machine("doctor-docker-780m-shm64m"),
        selection=selection(hw),
        venv=tmp_path / "v",
        quick=True,
        hardware=hw,
        network=False,
    )
    vis = by_id(report)["devices.visible"]
    assert vis.status == "warn" and "export HIP_VISIBLE_DEVICES=1" in vis.fix
    assert by_id(report)["devices.renderD129"].status == "fail"  # the fixture only has renderD128


def test_nvidia_nodes_without_libcuda(tmp_path):
    import shutil

    from conftest import MACHINES
    from mw_env.hardware.machine import Machine

    root = tmp_path / "root"
    shutil.copytree(MACHINES / "doctor-nvidia-docker", root)
    ok = _quick("doctor-nvidia-docker", GPU_3090, tmp_path / "v", container="docker")
    assert by_id(ok)["devices.libcuda"].status == "pass"
    (root / "usr/lib/x86_64-linux-gnu/libcuda.so.1").unlink()
    hw = hardware(GPU_3090, container="incus", name="gpu-box")
    report = run(
        Machine(root=root, env={"PATH": "/usr/bin:/bin"}), selection(hw), tmp_path / "v", hw=hw, quick=True
    )
    lib = by_id(report)["devices.libcuda"]
    assert lib.status == "warn" and "nvidia.runtime=true" in lib.fix


def test_network_not_needed_when_torch_came_from_a_wheelhouse(tmp_path, monkeypatch):
    from mw_env.checks import network

    def no_network(*_a):
        raise AssertionError("the doctor must not contact the index for a wheelhouse-built venv")

    monkeypatch.setattr(network, "resolve", no_network)
    hw = hardware(None)
    venv = fake_venv(
        tmp_path / "v",
        version="2.13.0+cpu",
        record={"profile": "cpu", "torch_index": "/srv/wheels/torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"},
    )
    report = run(
        fake_machine("doctor-cpu-docker-shm64m"), selection(hw), venv, hw=hw, quick=True, network=True
    )
    net = by_id(report)["network.index"]
    assert net.status == "skip" and "/srv/wheels" in net.detail


def test_override_on_gfx1151_is_harmful_under_a_wheel_without_it_too(tmp_path):
    # The profile knows no override for gfx1151 and its sources carry native kernels: the doctor says which,
    # from the profile's table (issue 30; it was a list of targets typed into the check).
    venv = fake_venv(tmp_path / "v", version="2.9.1+rocm6.4", hip="6.4.43482", blas_gfx=["gfx1100"])
    report = _quick(
        "doctor-strix-halo-old-kernel",
        GPU_8060S,
        venv,
        env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"},
        ram=128 * GIB,
        kernel="6.14.0-1007-oem",
    )
    ov = by_id(report)["arch.override"]
    assert ov.status == "warn" and "native kernels in amd-multiarch" in ov.detail
    assert "unset HSA_OVERRIDE_GFX_VERSION" in ov.fix
