"""Truth from the wheel: the archs read from an installed venv without importing torch, each way it is found."""

from __future__ import annotations

from pathlib import Path

from mw_env.venv.wheelarch import read_wheel_archs


def _site(venv: Path) -> Path:
    site = venv / "lib" / "python3.12" / "site-packages"
    (site / "torch" / "lib").mkdir(parents=True)
    return site


def _dist(site: Path, name: str, version: str = "2.14.0+rocm7.14.0") -> None:
    (site / f"{name}-{version}.dist-info").mkdir()


def test_device_packages_are_the_cheapest_truth(tmp_path):
    site = _site(tmp_path / "v")
    _dist(site, "amd_torch_device_gfx1103")
    _dist(site, "rocm_sdk_device_gfx1103")
    _dist(site, "amd_torch_device_gfx11")  # AMD's family package: not an arch
    found = read_wheel_archs(tmp_path / "v")
    assert found.archs == ("gfx1103",) and found.how == "device packages"
    assert found.packages == ("amd-torch-device-gfx1103",) and found.rocm_archs == ("gfx1103",)


def test_a_bundling_wheel_is_read_from_its_arch_flags(tmp_path):
    site = _site(tmp_path / "v")
    # The string torch._C._cuda_getArchFlags() returns on ROCm, space-separated (a 2.9.1+rocm7.2.4 build).
    flags = b"gfx908 gfx90a gfx942 gfx1030 gfx1100 gfx1101 gfx1200 gfx1201 gfx950 gfx1151 gfx1150"
    blob = b"\x00" * 4096 + flags + b"\x00gfx1100;gfx11\x00" + b"\x00" * 4096
    (site / "torch" / "lib" / "libtorch_python.so").write_bytes(blob)
    found = read_wheel_archs(tmp_path / "v")
    assert found.how == "build arch flags" and len(found.archs) == 11 and "gfx1103" not in found.archs
    assert {"gfx1151", "gfx942", "gfx1201"} <= set(found.archs)


def test_rocm_714_wheel_needs_both_torchs_and_rocms_kernels(tmp_path):
    site = _site(tmp_path / "v")
    (site / "torch" / "lib" / "libtorch_hip.so").write_bytes(b"gfx942;gfx1100;gfx1103\x00")
    _dist(site, "rocm_sdk_device_gfx1100")
    _dist(site, "rocm_sdk_device_gfx942")
    found = read_wheel_archs(tmp_path / "v")
    assert found.archs == ("gfx1100", "gfx942")  # no rocm-sdk-device-gfx1103 installed


def test_code_objects_when_there_is_no_flag_string(tmp_path):
    site = _site(tmp_path / "v")
    (site / "torch" / "lib" / "libc10_hip.so").write_bytes(
        b"..hipv4-amdgcn-amd-amdhsa--gfx1151..amdgcn-amd-amdhsa--gfx1151"
    )
    assert read_wheel_archs(tmp_path / "v").archs == ("gfx1151",)


def test_nothing_found_is_unknown_never_an_error(tmp_path):
    site = _site(tmp_path / "v")
    (site / "torch" / "lib" / "libtorch_hip.so").write_bytes(b"")  # empty: mmap refuses it
    found = read_wheel_archs(tmp_path / "v")
    assert found.archs == () and found.how == "unknown" and not found.known
    assert read_wheel_archs(tmp_path / "missing").how == "unknown"
