"""The quick doctor reads what pip/uv see as installed (torch's dist-info), not only bootstrap's record:
a torch swapped behind bootstrap's back, or a CPU torch on a GPU profile, fails with "re-run bootstrap",
and `mw-env train`, which gates on the quick checks, refuses to start."""

from __future__ import annotations

import sys

from doctor_helpers import GPU_780M, by_id, fake_venv, hardware, run, selection

from conftest import fake_machine
from mw_env.checks.torch_build import installed_torch_versions
from mw_env.cli import main


def _dist_info(venv, version: str, *, name: str | None = None) -> None:
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    folder = venv / "lib" / ver / "site-packages" / f"{name or 'torch-' + version}.dist-info"
    folder.mkdir(parents=True)
    (folder / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\nSummary: fake\n\nVersion: 9.9.9 (body)\n"
    )


def _cpu_venv(tmp_path, installed: str):
    venv = fake_venv(tmp_path / "v", version=installed, record={"profile": "cpu"})
    # The record says what bootstrap installed; the dist-info says what is there now.
    rec = (venv / "mw-env.json").read_text().replace(f"=={installed}", "==2.13.0+cpu")
    (venv / "mw-env.json").write_text(rec.replace(f'"{installed}"', '"2.13.0+cpu"'))
    _dist_info(venv, installed)
    return venv


def _quick_cpu(venv):
    hw = hardware(None)
    return run(fake_machine("cpu-only"), selection(hw), venv, hw=hw, quick=True)


def test_metadata_version_is_read_from_the_headers_only(tmp_path):
    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu")
    assert installed_torch_versions(venv) == []
    _dist_info(venv, "2.13.0+cpu", name="torch-2.13.0+cpu")
    assert installed_torch_versions(venv) == ["2.13.0+cpu"]


def test_recorded_torch_still_installed_passes(tmp_path):
    venv = _cpu_venv(tmp_path, "2.13.0+cpu")
    check = by_id(_quick_cpu(venv))["torch.installed"]
    assert check.status == "pass" and "2.13.0+cpu" in check.detail


def test_swapped_torch_fails_with_rerun_bootstrap(tmp_path):
    # `uv pip install --python <venv>/bin/python torch` outside the activated venv: PyPI's 2.14.1.
    venv = _cpu_venv(tmp_path, "2.14.1")
    report = _quick_cpu(venv)
    check = by_id(report)["torch.installed"]
    assert check.status == "fail" and not report.ok
    assert "torch 2.14.1 is installed, but bootstrap installed 2.13.0+cpu" in check.detail
    assert "not profile cpu's torch" in check.detail
    assert check.fix.startswith("Re-run mw-env bootstrap") and f"--venv {venv}" in check.fix


def test_in_range_swap_fails_too(tmp_path):
    venv = _cpu_venv(tmp_path, "2.12.0+cpu")  # the profile's build and range, not what bootstrap pinned
    check = by_id(_quick_cpu(venv))["torch.installed"]
    assert check.status == "fail" and "bootstrap installed 2.13.0+cpu" in check.detail
    assert "profile cpu's torch" not in check.detail


def test_two_torch_dist_infos_fail(tmp_path):
    venv = _cpu_venv(tmp_path, "2.13.0+cpu")
    _dist_info(venv, "2.14.1")
    check = by_id(_quick_cpu(venv))["torch.installed"]
    assert check.status == "fail" and "installed twice" in check.detail


def test_cpu_fallback_on_a_gpu_profile_fails(tmp_path):
    venv = fake_venv(
        tmp_path / "v",
        version="2.9.1+rocm6.4",
        hip="6.4.43482",
        record={"profile": "gfx1103", "env": {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}},
    )
    _dist_info(venv, "2.9.1+cpu")  # a resolver put the CPU wheel in, whatever version.py says
    hw = hardware(GPU_780M)
    report = run(fake_machine("strix-halo-8060s"), selection(hw), venv, hw=hw, quick=True)
    check = by_id(report)["torch.installed"]
    assert check.status == "fail"
    # Judged against today's default source for the 780M (the record names none).
    assert "bootstrap installed 2.9.1+rocm6.4" in check.detail and "+rocm7.14 build" in check.detail


def test_no_record_means_no_judgement(tmp_path):
    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu")
    _dist_info(venv, "2.14.1")
    assert "torch.installed" not in by_id(_quick_cpu(venv))


def test_train_refuses_a_swapped_torch(tmp_path, capsys, monkeypatch):
    venv = _cpu_venv(tmp_path, "2.14.1")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MW_ENV_ROOT", str(fake_machine("cpu-only").root))
    code = main(["train", "--venv", str(venv), "--profile", "cpu", "--config", "smoke"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "torch.installed" in err or "installed torch" in err
