"""The disk a source needs, once (profiles/disk.py): bootstrap's preflight and the doctor's disk check quote the
same figure for the same source, the dry run's JSON carries it, and each kind of install has its own row."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
from doctor_helpers import GPU_780M, by_id, hardware, run, selection

from conftest import fake_machine
from mw_env.base.errors import StepFailed
from mw_env.profiles import load_profiles
from mw_env.profiles.disk import GB, MARGIN, disk_need, install_kind
from mw_env.provision import steps
from mw_env.provision.archtruth import GpuKernels
from mw_env.provision.events import NoEvents
from mw_env.provision.model import BootstrapOptions
from mw_env.provision.plan import plan
from mw_env.provision.state import State


@pytest.fixture(scope="module")
def sources():
    profiles = load_profiles()
    return {
        "amd-multiarch": profiles["gfx1103"].source("amd-multiarch"),
        "rocm7.14": profiles["gfx1103"].source("rocm7.14"),
        "rocm6.4": profiles["gfx1103"].source("rocm6.4"),
        "cu126": profiles["cuda"].source("cu126"),
        "cpu": profiles["cpu"].source("cpu"),
    }


def test_each_install_has_its_row_and_a_sources_stated_download_replaces_the_tables(sources):
    one = disk_need(sources["amd-multiarch"])
    assert one.kind == "one-gpu" and one.download_bytes == int(1.1 * GB)  # the source's own download_gb
    assert one.installed_bytes == 6 * GB and one.need_bytes == int(7.1 * GB) + MARGIN
    every = disk_need(sources["amd-multiarch"], all_devices=True)
    assert every.kind == "all-gpus" and (every.download_bytes, every.installed_bytes) == (10 * GB, 19 * GB)
    assert install_kind(sources["rocm7.14"]) == "all-gpus"  # its torch requires rocm[device-all]
    assert install_kind(sources["rocm6.4"]) == "all-gpus"  # ROCm bundled for every arch in the wheel
    assert install_kind(sources["cu126"]) == "cuda" and install_kind(sources["cpu"]) == "cpu"
    assert disk_need(sources["cpu"]).need_bytes < disk_need(sources["cu126"]).need_bytes < every.need_bytes


def test_preflight_and_the_doctor_quote_the_same_figure_for_the_same_source(tmp_path, monkeypatch, sources):
    src = sources["amd-multiarch"]
    need = disk_need(src)
    options = BootstrapOptions(
        venv=tmp_path / "v",
        python=sys.executable,
        python_explicit=True,
        offline=True,
        adopt=False,
        doctor=False,
    )
    kernels = GpuKernels(extras=("device-gfx1103",), packages=("amd-torch-device-gfx1103",))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_CONFIG_FILE": "/dev/null"}
    p = plan(profile="gfx1103", torch=src, runtime_env={}, options=options, env=env, kernels=kernels)
    assert p.disk == need and p.disk_need == need.need_bytes
    data = p.to_dict()["disk"]
    assert data["text"] == need.text and data["need_bytes"] == data["preflight_bytes"] == need.need_bytes
    # Preflight on a disk with 1 GiB free (the plan's offline problem put aside: the disk is what is asked).
    monkeypatch.setattr(steps.venvinfo, "free_bytes", lambda path: 1024**3)
    run_ = steps.Run(
        plan=replace(p, problem=None), state=State.load(p.build_venv), events=NoEvents(), uv=None, doctor=None
    )
    with pytest.raises(StepFailed) as err:
        steps.preflight(run_, p.step("preflight"))
    assert f"the install needs {need.text}" in err.value.message
    # The doctor, same source, on a fake machine with 1.5 GB free and no venv yet.
    hw = hardware(GPU_780M)
    sel = selection(hw, "gfx1103")
    assert sel.torch.id == "amd-multiarch"
    report = run(fake_machine("doctor-nvidia-docker"), sel, tmp_path / "none", hw=hw, quick=True)
    disk = by_id(report)["disk.free"]
    assert disk.status == "warn" and f"it needs {need.text}" in disk.detail
