"""Detection edge cases: a partial KFD view identified from its ids; an NVIDIA driver with no GPU visible."""

from __future__ import annotations

import shutil

from conftest import MACHINES, fake_machine
from mw_env.cli import main
from mw_env.hardware.detect import detect
from mw_env.hardware.machine import Machine
from mw_env.profiles import load_profiles, select


def test_kfd_node_without_gfx_target_version_is_identified_from_its_device_id():
    h = detect(fake_machine("kfd-partial-780m"), interpreters=False)
    assert h.gpu is not None and h.gpu.gfx_target == "gfx1103" and h.gpu.pci_id == "1002:15bf"
    note = " ".join(h.gpu.notes)
    assert "lack gfx_target_version and simd_count (a filtered or partial sysfs view)" in note
    assert "identified as gfx1103" in note and "from its device id 1002:15bf" in note
    assert select(h, load_profiles(env={})).profile.name == "gfx1103"


def test_partial_kfd_node_with_an_unknown_device_id_says_so(tmp_path):
    root = tmp_path / "m"
    shutil.copytree(MACHINES / "kfd-partial-780m", root, symlinks=True)
    props = root / "sys/class/kfd/kfd/topology/nodes/1/properties"
    props.write_text(props.read_text().replace("device_id 5567", "device_id 65279"))  # 0xfeff
    h = detect(Machine(root=root, env={"PATH": ""}), interpreters=False)
    assert h.gpu is not None and h.gpu.gfx_target is None
    assert any("1002:feff is not in the PCI id table, so the gfx target is unknown" in n for n in h.gpu.notes)


def test_kfd_node_with_no_ids_at_all_is_still_skipped_with_a_note(tmp_path):
    root = tmp_path / "m"
    shutil.copytree(MACHINES / "kfd-partial-780m", root, symlinks=True)
    props = root / "sys/class/kfd/kfd/topology/nodes/1/properties"
    lines = [ln for ln in props.read_text().splitlines() if not ln.startswith(("vendor_id", "device_id"))]
    props.write_text("\n".join(lines) + "\n")
    h = detect(Machine(root=root, env={"PATH": ""}), interpreters=False)
    assert h.gpus == ()
    assert any("has neither simd_count nor gfx_target_version; node skipped" in n for n in h.notes)


def test_loaded_nvidia_driver_without_a_gpu_gets_passthrough_advice(capsys):
    h = detect(fake_machine("nvidia-driver-no-gpu"), interpreters=False)
    assert h.gpus == () and h.nvidia_driver == "550.90.07"
    assert "NVIDIA kernel driver 550.90.07 is loaded" in h.selection_reason
    assert "not passed into this container" in h.selection_reason and "--gpus all" in h.selection_reason
    assert "no GPU detected" not in h.selection_reason
    root = str(MACHINES / "nvidia-driver-no-gpu")
    assert main(["host-commands", "--root", root]) == 0
    out = capsys.readouterr().out
    assert "--gpus all" in out and "nvidia-smi" in out
