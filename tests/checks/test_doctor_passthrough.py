"""The doctor on a machine whose NVIDIA kernel driver is loaded but whose GPU was not passed in."""

from __future__ import annotations

from doctor_helpers import by_id, fake_venv, run

from conftest import fake_machine
from mw_env.hardware.detect import detect
from mw_env.profiles import load_profiles, select


def test_doctor_warns_about_the_driver_without_a_gpu(tmp_path):
    h = detect(fake_machine("nvidia-driver-no-gpu"), interpreters=False)
    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu")
    report = run(
        fake_machine("nvidia-driver-no-gpu"), select(h, load_profiles(env={})), venv, hw=h, quick=True
    )
    check = by_id(report)["devices.gpu"]
    assert check.status == "warn" and "NVIDIA kernel driver 550.90.07 is loaded" in check.detail
    assert "docker run" in check.fix and "--gpus all" in check.fix
    forced = select(h, load_profiles(env={}), name="cuda")
    report = run(fake_machine("nvidia-driver-no-gpu"), forced, venv, hw=h, quick=True)
    assert by_id(report)["devices.gpu"].status == "fail"
