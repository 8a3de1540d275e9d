"""detect() against the fake machine roots in tests/fixtures/machines/ (one per real machine kind)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from conftest import MACHINES, fake_machine
from mw_env.base.errors import InputError
from mw_env.hardware.detect import detect
from mw_env.hardware.machine import Machine

GIB = 1024**3
MIB = 1024**2


def hw(name: str, **kw):
    # Only the fixture's own fake commands on PATH: results must not depend on this machine's tools.
    return detect(fake_machine(name, env={"PATH": str(MACHINES / name / ".mw-env-bin")}), **kw)


def node(gpu, path):
    return next(n for n in gpu.device_nodes if n.path == path)


def test_incus_780m_with_kfd_passed_through():
    h = hw("incus-780m")
    assert len(h.gpus) == 1 and h.selected_gpu == 0
    g = h.gpu
    assert (g.vendor, g.name, g.gfx_target, g.gfx_target_version) == (
        "amd",
        "AMD Radeon 780M",
        "gfx1103",
        110003,
    )
    assert (g.pci_id, g.revision, g.pci_slot, g.chip) == ("1002:15bf", "0xc1", "0000:c5:00.0", "Phoenix1")
    assert g.integrated and g.memory_bytes == 512 * MIB and g.gtt_bytes == 16430055424
    assert (g.kfd_node, g.render_minor, g.source) == (1, 128, "kfd")
    assert [n.path for n in g.device_nodes] == ["/dev/kfd", "/dev/dri/renderD128"]
    assert g.device_nodes_ok and all(n.group == "render" and n.gid == 993 for n in g.device_nodes)
    assert h.container.kind == "incus" and h.container.name == "playpen-mailwoman"
    assert h.os.id == "ubuntu" and h.os.version == "24.04" and h.os.kernel == "6.11.0-29-generic"
    assert h.cpu.cores == 16 and "avx512_bf16" in h.cpu.flags and "amx_bf16" not in h.cpu.flags
    assert h.notes == () and g.notes == ()


def test_incus_780m_without_kfd():
    g = hw("incus-780m-no-kfd").gpu
    kfd = node(g, "/dev/kfd")
    assert not kfd.exists and not kfd.ok
    assert node(g, "/dev/dri/renderD128").ok
    assert not g.device_nodes_ok
    assert g.gfx_target == "gfx1103"  # the host's KFD still says what the GPU is
    assert any("/dev/kfd is missing" in n for n in g.notes)


def test_incus_780m_without_any_passthrough():
    g = hw("incus-780m-no-passthrough").gpu
    assert g.name == "AMD Radeon 780M"
    assert not any(n.exists for n in g.device_nodes)


def test_strix_halo_8060s():
    h = hw("strix-halo-8060s")
    g = h.gpu
    assert (g.name, g.gfx_target, g.pci_id, g.revision) == (
        "AMD Radeon 8060S",
        "gfx1151",
        "1002:1586",
        "0xc1",
    )
    assert g.integrated and g.gtt_bytes == 112 * GIB and g.memory_bytes == 512 * MIB
    assert h.container.kind == "incus" and h.cpu.cores == 32


def test_rx7900xtx_in_docker_as_root():
    h = hw("rx7900xtx")
    g = h.gpu
    assert (g.name, g.gfx_target, g.pci_id, g.integrated) == (
        "AMD Radeon RX 7900 XTX",
        "gfx1100",
        "1002:744c",
        False,
    )
    assert g.memory_bytes == 25753026560
    # gid 992 has no name in the image's /etc/group: reported as unnamed, still usable as root.
    assert all(n.gid == 992 and n.group is None for n in g.device_nodes)
    assert g.device_nodes_ok
    assert h.container.kind == "docker" and h.container.id and len(h.container.id) == 64


def test_igpu_and_dgpu_prefers_discrete():
    h = hw("igpu-780m-dgpu-7900xtx")
    assert [g.name for g in h.gpus] == ["AMD Radeon 780M", "AMD Radeon RX 7900 XTX"]
    assert [g.index for g in h.gpus] == [0, 1] and [g.kfd_node for g in h.gpus] == [1, 2]
    assert h.selected_gpu == 1 and h.gpu.gfx_target == "gfx1100"
    assert "discrete" in h.selection_reason and "AMD Radeon 780M" in h.selection_reason
    assert h.container.kind == "none"


def test_gpu_option_chooses_explicitly():
    h = hw("igpu-780m-dgpu-7900xtx", gpu=0)
    assert h.selected_gpu == 0 and h.gpu.name == "AMD Radeon 780M" and "--gpu 0" in h.selection_reason


def test_gpu_option_out_of_range_lists_the_gpus():
    with pytest.raises(InputError) as info:
        hw("igpu-780m-dgpu-7900xtx", gpu=2)
    msg = str(info.value)
    assert "--gpu 2" in msg and "AMD Radeon 780M" in msg and "AMD Radeon RX 7900 XTX" in msg
    assert info.value.hint and "0..1" in info.value.hint and info.value.exit_code == 2


def test_gpu_option_on_cpu_only_machine():
    with pytest.raises(InputError, match="no GPU"):
        hw("cpu-only", gpu=0)


def test_mi300x_dual_socket_topology():
    h = hw("mi300x-x4")
    assert len(h.gpus) == 4
    assert [g.kfd_node for g in h.gpus] == [2, 3, 4, 5]  # CPU nodes 0 and 1 skipped
    assert [g.pci_slot for g in h.gpus] == ["0000:26:00.0", "0000:46:00.0", "0000:65:00.0", "0000:85:00.0"]
    assert {g.name for g in h.gpus} == {"AMD Instinct MI300X"} and {g.gfx_target for g in h.gpus} == {
        "gfx942"
    }
    assert all(g.memory_bytes == 201310208 * 1024 and not g.integrated for g in h.gpus)
    assert [g.render_minor for g in h.gpus] == [128, 129, 130, 131]
    assert h.selected_gpu == 0 and "4" in h.selection_reason
    assert h.ignored_devices == ("0000:02:00.0 1a03:2000 (ASPEED display adapter)",)
    assert h.cpu.cores == 192


NVIDIA = [
    # name, gpu count, product, CC, driver, MiB per GPU, device minors, container
    ("nvidia-pascal-1080ti-535", 1, "NVIDIA GeForce GTX 1080 Ti", "6.1", "535.183.01", 11264, [0], "incus"),
    ("nvidia-ampere-3090x2-560", 2, "NVIDIA GeForce RTX 3090", "8.6", "560.35.03", 24576, [1, 6], "docker"),
    ("nvidia-a100x4-555", 4, "NVIDIA A100-SXM4-80GB", "8.0", "555.42.02", 81920, [3, 4, 5, 6], "kubernetes"),
    ("nvidia-h100x8-565", 8, "NVIDIA H100 80GB HBM3", "9.0", "565.57.01", 81559, list(range(8)), "podman"),
    ("nvidia-l4-550", 1, "NVIDIA L4", "8.9", "550.90.07", 23034, [8], "none"),
    ("nvidia-blackwell-5090-580", 1, "NVIDIA GeForce RTX 5090", "12.0", "580.82.07", 32607, [0], "docker"),
    ("nvidia-old-driver-470", 1, "Tesla T4", "7.5", "470.256.02", 15109, [0], "none"),
]


@pytest.mark.parametrize(("name", "count", "product", "cc", "driver", "mib", "minors", "container"), NVIDIA)
def test_nvidia_machines(name, count, product, cc, driver, mib, minors, container):
    h = hw(name)
    assert len(h.gpus) == count and h.selected_gpu == 0
    assert {g.name for g in h.gpus} == {product} and {g.compute_capability for g in h.gpus} == {cc}
    assert h.nvidia_driver == driver and {g.driver_version for g in h.gpus} == {driver}
    assert all(
        g.memory_bytes == mib * MIB and g.vendor == "nvidia" and g.source == "nvidia-smi" for g in h.gpus
    )
    assert [g.device_nodes[0].path for g in h.gpus] == [f"/dev/nvidia{m}" for m in minors]
    assert all(g.device_nodes_ok for g in h.gpus)
    assert h.container.kind == container
    assert h.notes == ()


def test_old_driver_nvidia_smi_rejects_compute_cap_and_table_fills_in():
    root = MACHINES / "nvidia-old-driver-470"
    out = subprocess.run(
        [str(root / ".mw-env-bin/nvidia-smi"), "--query-gpu=name,compute_cap", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2 and 'Field "compute_cap" is not a valid field to query.' in out.stdout
    g = hw("nvidia-old-driver-470").gpu
    assert g.compute_capability == "7.5" and any("from the mw-env table" in n for n in g.notes)


def test_fake_nvidia_smi_answers_the_doctor_query_like_the_capture():
    root = MACHINES / "nvidia-ampere-3090x2-560"
    argv = [str(root / ".mw-env-bin/nvidia-smi"), "--query-gpu=name,driver_version,compute_cap,memory.total"]
    plain = subprocess.run(
        [*argv, "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True
    )
    assert plain.stdout.splitlines() == ["NVIDIA GeForce RTX 3090, 560.35.03, 8.6, 24576"] * 2
    units = subprocess.run([*argv, "--format=csv"], capture_output=True, text=True, check=True)
    assert units.stdout.splitlines()[0] == "name, driver_version, compute_cap, memory.total [MiB]"
    assert units.stdout.splitlines()[1].endswith("24576 MiB")
    table = subprocess.run([argv[0]], capture_output=True, text=True, check=True).stdout
    assert "Driver Version: 560.35.03" in table and "CUDA Version: 12.6" in table


def test_nvidia_without_nvidia_smi_uses_pci_and_the_table(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    h = detect(fake_machine("nvidia-pascal-1080ti-535", env={"PATH": str(empty)}))
    g = h.gpu
    assert (g.name, g.compute_capability, g.source) == ("NVIDIA GeForce GTX 1080 Ti", "6.1", "pci")
    assert g.memory_bytes is None and h.nvidia_driver == "535.183.01"  # from /proc/driver/nvidia/version
    assert any("nvidia-smi not found" in n for n in h.notes)


def test_cpu_only():
    h = hw("cpu-only")
    assert h.gpus == () and h.gpu is None and h.selected_gpu is None
    assert "CPU only" in h.selection_reason
    assert {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"} <= set(h.cpu.flags)
    assert h.cpu.cores == 8 and h.cpu.brand == "Intel(R) Xeon(R) Platinum 8488C" and h.cpu.arch == "x86_64"
    assert h.memory_bytes == 32386152 * 1024
    assert h.ignored_devices == ("0000:00:03.0 1d0f:1111 (Amazon display adapter)",)
    assert h.container.kind == "docker"


def test_broken_sysfs_completes_with_a_note_per_file():
    h = hw("broken-sysfs")
    notes = "\n".join(h.notes)
    nodes = "/sys/class/kfd/kfd/topology/nodes"
    for expected in (
        f"{nodes}/1/properties: not text",
        f"{nodes}/2/properties: is a folder",
        f"{nodes}/3: KFD node without a properties file",
        f"{nodes}/4/properties: 2 line(s) are not 'name integer'",
        "/sys/bus/pci/devices/0000:c5:00.0/revision: missing",
        "/sys/bus/pci/devices/0000:c5:00.0/mem_info_vram_total: 'lots' is not an integer",
        "/sys/bus/pci/devices/0000:04:00.0/vendor: missing",
        "/sys/bus/pci/devices/0000:05:00.0/class: missing",
        "/proc/cpuinfo: missing",
        "/proc/meminfo: no readable 'MemTotal",
        "/etc/os-release: is a folder",
        "/proc/sys/kernel/osrelease: not text",
    ):
        assert expected in notes
    # The one GPU node left is still found, its gfx taken from the PCI id table.
    g = h.gpu
    assert (g.gfx_target, g.kfd_node, g.name) == ("gfx1103", 4, "AMD Radeon 780M/760M/740M")
    assert any("99999999" in n for n in g.notes)
    assert h.cpu.cores == 0 and h.memory_bytes is None and h.os.id == "unknown"


def test_unreadable_properties_file(tmp_path, monkeypatch):
    root = tmp_path / "m"
    shutil.copytree(MACHINES / "incus-780m", root, symlinks=True)
    props = root / "sys/class/kfd/kfd/topology/nodes/1/properties"
    props.chmod(0)
    if os.geteuid() == 0:  # root reads chmod-000 files: make open() fail the way it does for a user
        import builtins

        real_open = builtins.open

        def guarded(file, *args, **kwargs):
            if str(file) == str(props):
                raise PermissionError(13, "Permission denied", str(file))
            return real_open(file, *args, **kwargs)

        real_os_open = os.open

        def guarded_os(file, *args, **kwargs):
            if str(file) == str(props):
                raise PermissionError(13, "Permission denied", str(file))
            return real_os_open(file, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", guarded)
        monkeypatch.setattr(os, "open", guarded_os)  # Machine reads with os.open (non-blocking, fstat)
    h = detect(Machine(root=root, env={"PATH": ""}))
    assert any("nodes/1/properties: exists but cannot be read" in n for n in h.notes)
    assert h.gpu is not None and h.gpu.source == "pci" and h.gpu.gfx_target == "gfx1103"


def test_empty_root_is_a_cpu_only_machine_with_notes(tmp_path):
    h = detect(Machine(root=tmp_path, env={"PATH": ""}))
    assert h.gpus == () and h.cpu.cores == 0
    assert any("/proc/cpuinfo" in n for n in h.notes)


@pytest.mark.parametrize(
    "name", sorted(p.name for p in MACHINES.iterdir() if p.is_dir() and not p.name.startswith("doctor-"))
)
def test_every_fixture_serializes_to_json(name):
    data = hw(name).to_dict()
    text = json.dumps(data)
    assert json.loads(text)["selected_gpu"] == data["selected_gpu"]
    assert all("device_nodes_ok" in g for g in data["gpus"])


def test_real_machine():
    h = detect(Machine.from_env(root="/"))
    assert h.cpu.cores >= 1 and h.cpu.arch != "unknown" and h.os.kernel != "unknown"
    assert h.memory_bytes and h.memory_bytes > 0
    assert all(p.version.startswith("3.") for p in h.pythons)


def test_an_unexpected_failure_in_one_part_becomes_a_note(monkeypatch):
    import mw_env.hardware.detect as detect_module

    def boom(probe):
        raise ValueError("odd file")

    monkeypatch.setattr(detect_module, "container_info", boom)
    h = hw("incus-780m")
    assert h.container.kind == "none" and h.gpu is not None
    assert h.notes == ("container: detection failed (ValueError: odd file); skipped",)


def test_wsl_nvidia_smi_outside_path_and_dxg_node(tmp_path):
    smi = tmp_path / "usr/lib/wsl/lib/nvidia-smi"
    smi.parent.mkdir(parents=True)
    smi.write_text(
        "#!/bin/sh\necho '0, 00000000:01:00.0, NVIDIA GeForce RTX 4070, 566.14, 8.9, 12282, GPU-9f'\n"
    )
    smi.chmod(0o755)
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text("5.15.167.4-microsoft-standard-WSL2\n")
    (tmp_path / ".mw-env-fake.yaml").write_text("devices:\n  /dev/dxg: {type: char, mode: '0666'}\n")
    h = detect(Machine(root=tmp_path, env={"PATH": ""}))
    g = h.gpu
    assert (g.name, g.compute_capability, g.driver_version) == ("NVIDIA GeForce RTX 4070", "8.9", "566.14")
    assert [n.path for n in g.device_nodes] == ["/dev/dxg"] and g.device_nodes_ok and g.runtime_index == 0
    assert h.container.kind == "wsl"


def test_nvidia_in_docker_without_gpus_flag(tmp_path):
    # `docker run` without --gpus: sysfs shows the GPU, /dev/nvidia* are absent, no nvidia-smi.
    root = tmp_path / "m"
    shutil.copytree(MACHINES / "nvidia-blackwell-5090-580", root, symlinks=True)
    (root / ".mw-env-fake.yaml").write_text("user: {uid: 1000, gid: 1000, groups: [1000], name: agent}\n")
    shutil.rmtree(root / ".mw-env-bin")
    g = detect(Machine(root=root, env={"PATH": ""})).gpu
    assert g.name == "NVIDIA GeForce RTX 5090" and g.compute_capability == "12.0"
    assert not g.device_nodes_ok
    assert "/dev/nvidia0 is missing in this container (the host has this GPU: not passed through)" in g.notes


def test_render_node_the_user_cannot_open(tmp_path):
    root = tmp_path / "m"
    shutil.copytree(MACHINES / "incus-780m", root, symlinks=True)
    meta = (root / ".mw-env-fake.yaml").read_text().replace("groups: [1000, 44, 993]", "groups: [1000]")
    (root / ".mw-env-fake.yaml").write_text(meta)
    g = detect(Machine(root=root, env={"PATH": ""})).gpu
    assert not g.device_nodes_ok
    assert "/dev/kfd is not read/writable by this user (mode 0660, group render)" in g.notes


def test_fake_rocm_tools_print_the_captures():
    bin_dir = MACHINES / "mi300x-x4" / ".mw-env-bin"
    info = subprocess.run(
        [str(bin_dir / "rocminfo")], capture_output=True, text=True, check=True, env={"PATH": ""}
    )
    assert info.stdout.count("Marketing Name:          AMD Instinct MI300X") == 4
    smi = subprocess.run(
        [str(bin_dir / "rocm-smi"), "--showallinfo"], capture_output=True, text=True, check=True
    )
    assert "113-MI3SRIOV-001" in smi.stdout


def test_runtime_indexes_count_reachable_gpus_per_vendor():
    h = hw("igpu-780m-dgpu-7900xtx")
    assert [g.runtime_index for g in h.gpus] == [0, 1]  # HIP order = KFD node order
    a100 = hw("nvidia-a100x4-555")
    assert [g.runtime_index for g in a100.gpus] == [0, 1, 2, 3]  # minors 3-6, but CUDA counts from 0
    assert a100.gpus[0].uuid == "GPU-31515c3d-1414-7c2c-004a-f86a898946ac"
    assert [g.runtime_index for g in hw("incus-780m-no-passthrough").gpus] == [None]
