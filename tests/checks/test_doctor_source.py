"""The doctor on where the venv's torch came from: a retired index (works, replacement named) and a wheel whose
own arch list contradicted the profile's table at install time (the record keeps what bootstrap decided)."""

from __future__ import annotations

from doctor_helpers import GPU_780M, by_id, fake_venv, hardware, run, selection

from conftest import fake_machine


def test_a_venv_from_a_retired_index_keeps_working_and_names_the_replacement(tmp_path):
    venv = fake_venv(
        tmp_path / "v",
        version="2.11.0+rocm7.13.0",
        hip="7.13",
        record={"profile": "gfx1103", "torch_source": "therock-gfx110x"},
    )
    hw = hardware(GPU_780M)
    sel = selection(hw, source="therock-gfx110x")  # what resolve_for_venv gives: the recorded source
    check = by_id(run(fake_machine("incus-780m"), sel, venv, hw=hw, quick=True))["torch.source"]
    assert check.status == "warn"
    assert "therock-gfx110x" in check.detail and "no new per-family releases" in check.detail
    assert "keeps working" in check.detail
    assert f"mw-env bootstrap --venv {venv} --recreate --source amd-multiarch" in check.fix


def test_the_wheel_that_contradicted_the_table_is_shown(tmp_path):
    # The table says amd-multiarch carries gfx1103 (ROCm/pytorch#3518); this installed wheel did not: bootstrap
    # set the override. (rocm7.14 served here before; its gfx1103 turned out to be inferred, issue 40.)
    venv = fake_venv(
        tmp_path / "v",
        version="2.14.0+rocm7.14.0",
        hip="7.14.0",
        record={
            "profile": "gfx1103",
            "torch_source": "amd-multiarch",
            "wheel_archs": ["gfx1100", "gfx942"],
            "wheel_archs_how": "build arch flags",
            "arch_decision": "HSA_OVERRIDE_GFX_VERSION=11.0.0: the installed wheel lacks gfx1103",
            "env": {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"},
        },
    )
    hw = hardware(GPU_780M)
    sel = selection(hw, source="amd-multiarch")
    checks = by_id(run(fake_machine("incus-780m"), sel, venv, hw=hw, quick=True))
    check = checks["torch.archs"]
    assert check.status == "warn" and "amd-multiarch's table lists gfx1103" in check.detail
    assert "the installed wheel carries no gfx1103 (it has gfx1100, gfx942)" in check.detail
    assert (
        "read from its build arch flags" in check.detail and "HSA_OVERRIDE_GFX_VERSION=11.0.0" in check.detail
    )
    assert "torch.source" not in checks  # amd-multiarch is current


def test_quick_doctor_reads_the_kernels_from_the_device_packages(tmp_path):
    venv = fake_venv(
        tmp_path / "v",
        version="2.14.0+rocm7.14.0",
        hip="7.14.0",
        record={"profile": "gfx1103", "torch_source": "amd-multiarch"},
    )
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "amd_torch_device_gfx1103-2.14.0+rocm7.14.0.dist-info").mkdir()
    hw = hardware(GPU_780M)
    checks = by_id(run(fake_machine("incus-780m"), selection(hw), venv, hw=hw, quick=True))
    kernels = checks["arch.kernels"]
    assert kernels.status == "pass" and "gfx1103 is in gfx1103 (installed device packages)" in kernels.detail
    assert checks["arch.override"].status == "pass"  # no override, none needed
