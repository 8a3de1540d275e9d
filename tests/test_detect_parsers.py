"""Detection parts in isolation: gfx decoding, the PCI tables, KFD/PCI parsing, NVIDIA parsing, GPU choice."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.hardware import tables
from mw_env.hardware.amd import KfdNode, gfx_name, gfx_version_string
from mw_env.hardware.detect import describe_gpu, select_gpu
from mw_env.hardware.facts import DeviceNode, Gpu
from mw_env.hardware.machine import Machine
from mw_env.hardware.nvidia import kernel_driver_version, query_smi
from mw_env.hardware.pci import normalize_slot
from mw_env.hardware.probe import Probe

GIB = 1024**3


def probe_for(root: Path, files: dict[str, str | bytes], path: str = "") -> Probe:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
    return Probe(Machine(root=root, env={"PATH": path}))


@pytest.mark.parametrize(
    ("version", "name"),
    [
        (110003, "gfx1103"),
        (110501, "gfx1151"),
        (110500, "gfx1150"),
        (110000, "gfx1100"),
        (100300, "gfx1030"),
        (120001, "gfx1201"),
        (90010, "gfx90a"),
        (90012, "gfx90c"),
        (90402, "gfx942"),
        (90500, "gfx950"),
        (0, None),
        (-5, None),
        (99999999, None),  # minor 99: not a gfx target
        (110016, None),  # stepping 16 has no single hex digit
    ],
)
def test_gfx_name(version, name):
    assert gfx_name(version) == name


@pytest.mark.parametrize(
    ("gfx", "override"),
    [
        ("gfx1103", "11.0.3"),
        ("gfx1151", "11.5.1"),
        ("gfx90c", "9.0.12"),
        ("gfx90a", "9.0.10"),
        ("gfx942", "9.4.2"),
    ],
)
def test_gfx_version_string(gfx, override):
    assert gfx_version_string(gfx) == override


def test_gfx_version_string_rejects_garbage():
    assert gfx_version_string("gfx") is None and gfx_version_string("gfxzz9") is None


@pytest.mark.parametrize(
    ("device", "revision", "name"),
    [
        ("15bf", "0xc1", "AMD Radeon 780M"),
        ("15bf", "c3", "AMD Radeon 760M"),
        ("15bf", "c5", "AMD Radeon 740M"),
        ("15bf", "0x00", "AMD Radeon 780M"),
        ("1900", "c1", "AMD Radeon 760M"),
        ("1586", "c1", "AMD Radeon 8060S"),
        ("1586", "c2", "AMD Radeon 8050S"),
        ("1586", "d5", "AMD Radeon 8040S"),
        ("150e", "c1", "AMD Radeon 890M"),
        ("150e", "c4", "AMD Radeon 880M"),
        ("1114", "c2", "AMD Radeon 860M"),
        ("1114", "c3", "AMD Radeon 840M"),
        ("744c", "c8", "AMD Radeon RX 7900 XTX"),
        ("744c", "cc", "AMD Radeon RX 7900 XT"),
        ("7550", "c0", "AMD Radeon RX 9070 XT"),
        ("73bf", "c1", "AMD Radeon RX 6800 XT"),
        ("74a1", "00", "AMD Instinct MI300X"),
        ("740c", "01", "AMD Instinct MI250X / MI250"),
    ],
)
def test_amd_product_names_by_revision(device, revision, name):
    assert tables.amd_product_name(device, revision) == name


def test_amd_unknown_revision_has_no_exact_name():
    assert tables.amd_product_name("15bf", "0x99") is None and tables.amd_product_name("15bf", None) is None


def test_every_named_amd_gpu_has_a_chip_with_a_valid_gfx():
    chips = tables.amd_chips()
    missing = {dev for dev, _ in tables.amd_names()} - set(chips)
    assert missing == set()
    for chip in chips.values():
        assert chip.gfx and gfx_version_string(chip.gfx), chip
    assert chips["15bf"].integrated and chips["1586"].integrated and not chips["744c"].integrated


def test_kfd_location_id_to_pci_slot():
    assert KfdNode(1, {"location_id": 50432, "domain": 0}).slot == "0000:c5:00.0"
    assert KfdNode(2, {"location_id": 9728}).slot == "0000:26:00.0"  # rocminfo BDFID of the MI300X capture
    assert KfdNode(3, {"location_id": 0x0311, "domain": 1}).slot == "0001:03:02.1"
    assert KfdNode(4, {}).slot is None


def test_normalize_nvidia_bus_id():
    assert normalize_slot("00000000:41:00.0") == "0000:41:00.0"
    assert normalize_slot("00000001:9E:00.0") == "0001:9e:00.0"


@pytest.mark.parametrize(
    ("text", "version"),
    [
        (
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n",
            "535.183.01",
        ),
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.144.03  Release Build  "
            "(dvs-builder@U16-I3-D08-1-2)  Mon Dec 30 17:26:13 UTC 2024\nGCC version:  gcc version 12.3.0\n",
            "550.144.03",
        ),
        ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  375.74  Wed Jun 14 01:39:39 PDT 2017\n", "375.74"),
    ],
)
def test_kernel_driver_version_from_proc(tmp_path, text, version):
    probe = probe_for(tmp_path, {"proc/driver/nvidia/version": text})
    assert kernel_driver_version(probe) == version and probe.notes == []


def test_kernel_driver_version_falls_back_to_sys_module(tmp_path):
    probe = probe_for(
        tmp_path, {"proc/driver/nvidia/version": "NVRM garbage\n", "sys/module/nvidia/version": "580.82.07\n"}
    )
    assert kernel_driver_version(probe) == "580.82.07"
    assert any("/proc/driver/nvidia/version" in n for n in probe.notes)


def write_smi(root: Path, body: str) -> str:
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(bin_dir)


def test_query_smi_parses_rows_and_missing_values(tmp_path):
    path = write_smi(
        tmp_path,
        "echo '0, 00000000:01:00.0, NVIDIA GeForce RTX 4090, 570.86.16, 8.9, 24564, GPU-1'\n"
        "echo '1, 00000000:02:00.0, NVIDIA A100-PCIE-40GB, 570.86.16, [N/A], [N/A], GPU-2'\n"
        "echo 'garbage line'\n",
    )
    probe = Probe(Machine(root=tmp_path, env={"PATH": path}))
    rows = query_smi(probe)
    assert rows is not None and [r.slot for r in rows] == ["0000:01:00.0", "0000:02:00.0"]
    assert probe.notes == ["nvidia-smi: unexpected line 'garbage line'; ignored"]
    assert (rows[0].name, rows[0].cc, rows[0].memory_bytes) == (
        "NVIDIA GeForce RTX 4090",
        "8.9",
        24564 * 1024**2,
    )
    assert rows[1].cc is None and rows[1].memory_bytes is None and rows[1].uuid == "GPU-2"


def test_query_smi_failure_becomes_a_note(tmp_path):
    path = write_smi(tmp_path, "echo 'Failed to initialize NVML: Driver/library version mismatch'\nexit 18\n")
    probe = Probe(Machine(root=tmp_path, env={"PATH": path}))
    assert query_smi(probe) is None
    assert probe.notes == ["nvidia-smi failed: Failed to initialize NVML: Driver/library version mismatch"]


def test_query_smi_absent_is_none_without_note(tmp_path):
    probe = Probe(Machine(root=tmp_path, env={"PATH": str(tmp_path)}))
    assert query_smi(probe) is None and probe.notes == []


@pytest.mark.parametrize(
    ("name", "cc"),
    [
        ("NVIDIA GeForce GTX 1080 Ti", "6.1"),
        ("Tesla V100-SXM2-32GB", "7.0"),
        ("Tesla T4", "7.5"),
        ("NVIDIA GeForce RTX 2080 Ti", "7.5"),
        ("NVIDIA A100-SXM4-80GB", "8.0"),
        ("NVIDIA A10G", "8.6"),
        ("NVIDIA RTX A6000", "8.6"),
        ("NVIDIA L40S", "8.9"),
        ("NVIDIA H100 80GB HBM3", "9.0"),
        ("NVIDIA GH200 480GB", "9.0"),
        ("NVIDIA B200", "10.0"),
        ("NVIDIA GeForce RTX 5090", "12.0"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0"),
        ("Some Future GPU", None),
    ],
)
def test_nvidia_cc_from_name(name, cc):
    assert tables.nvidia_cc_from_name(name) == cc


def test_probe_notes_name_the_file(tmp_path):
    probe = probe_for(
        tmp_path, {"a/bin": b"\xff\xfe\x80", "a/nul": "x\x00y", "a/dir/x": "", "a/hex": "0xZZ\n"}
    )
    assert probe.text("a/bin") is None and probe.text("a/nul") is None and probe.text("a/dir") is None
    assert probe.hex_id("a/hex") is None
    assert probe.line("a/missing") is None and probe.line("a/missing2", required=True) is None
    assert probe.notes == [
        "/a/bin: not text (binary garbage); ignored",
        "/a/nul: not text (contains NUL bytes); ignored",
        "/a/dir: is a folder where a file was expected; ignored",
        "/a/hex: '0xZZ' is not a hex number; ignored",
        "/a/missing2: missing",
    ]


# -- GPU choice ----------------------------------------------------------------------------------------------
def gpu(
    index: int, name: str, *, integrated=False, mem=None, reachable=True, vendor="amd", gfx="gfx1100"
) -> Gpu:
    nodes = (DeviceNode(path=f"/dev/dri/renderD{128 + index}", exists=reachable),)
    return Gpu(
        index=index,
        vendor=vendor,
        name=name,
        integrated=integrated,
        memory_bytes=mem,
        gfx_target=gfx,
        device_nodes=nodes,
    )


def test_select_discrete_over_integrated_with_more_memory():
    igpu = gpu(0, "APU", integrated=True, mem=96 * GIB)  # a big carve-out does not beat a dGPU
    dgpu = gpu(1, "dGPU", mem=16 * GIB)
    index, reason = select_gpu((igpu, dgpu))
    assert index == 1 and "discrete" in reason and "APU (GPU 0)" in reason


def test_select_most_memory_among_discrete():
    index, reason = select_gpu(
        (gpu(0, "small", mem=8 * GIB), gpu(1, "big", mem=24 * GIB), gpu(2, "mid", mem=16 * GIB))
    )
    assert index == 1 and "most memory (24.0 GiB)" in reason


def test_select_prefers_a_gpu_passed_into_the_container():
    index, reason = select_gpu(
        (gpu(0, "host-only", mem=24 * GIB, reachable=False), gpu(1, "passed", integrated=True))
    )
    assert index == 1 and "device node is present" in reason


def test_select_prefers_a_gpu_with_a_known_gfx_target():
    index, _ = select_gpu((gpu(0, "unknown", gfx=None, mem=32 * GIB), gpu(1, "known", mem=8 * GIB)))
    assert index == 1


def test_select_ties_go_to_the_lowest_index():
    index, reason = select_gpu(tuple(gpu(i, "same", mem=GIB) for i in range(3)))
    assert index == 0 and "first of 3" in reason


def test_select_explicit_and_errors():
    gpus = (gpu(0, "A", integrated=True), gpu(1, "B"))
    assert select_gpu(gpus, gpu=0)[0] == 0
    with pytest.raises(
        InputError, match=r"--gpu -1: no such GPU; this machine has 2: 0 A \(gfx1100, integrated\); 1 B"
    ):
        select_gpu(gpus, gpu=-1)
    assert select_gpu((), gpu=None) == (None, select_gpu((), gpu=None)[1])
    assert "CPU only" in select_gpu(())[1]


def test_describe_gpu():
    g = Gpu(
        index=3,
        vendor="nvidia",
        name="NVIDIA L4",
        compute_capability="8.9",
        memory_bytes=23034 * 1024**2,
        pci_slot="0000:01:00.0",
    )
    assert describe_gpu(g) == "3 NVIDIA L4 (CC 8.9, discrete, 22.5 GiB, 0000:01:00.0)"


def test_kfd_node_with_bad_render_minor_falls_back_to_sysfs(tmp_path):
    from mw_env.hardware.amd import amd_gpus
    from mw_env.hardware.pci import display_devices

    base = "sys/bus/pci/devices/0000:03:00.0"
    props = "simd_count 192\ngfx_target_version 110000\nvendor_id 4098\ndevice_id 29772\nlocation_id 768\ndrm_render_minor -1\n"
    probe = probe_for(
        tmp_path,
        {
            "sys/class/kfd/kfd/topology/nodes/1/properties": props,
            f"{base}/vendor": "0x1002\n",
            f"{base}/device": "0x744c\n",
            f"{base}/revision": "0xcc\n",
            f"{base}/class": "0x030000\n",
            f"{base}/drm/renderD129/dev": "226:129\n",
        },
    )
    (g,) = amd_gpus(probe, display_devices(probe))
    assert (g.name, g.render_minor, g.pci_slot) == ("AMD Radeon RX 7900 XT", 129, "0000:03:00.0")
    assert probe.notes == []
