"""`doctor --explain` knows the machine (issue 40): a message whose meaning depends on the hardware is explained
for the machine it is read on (`--root`), and hipBLASLt's missing-library lines are told apart by where the
library really is."""

from __future__ import annotations

import json

import pytest

from conftest import MACHINES
from mw_env.cli import main

# The two lines hipBLASLt prints (rocm-libraries tensile_host.cpp), as TheRock#7976 shows them from a pip wheel.
HIPBLASLT = (
    'rocblaslt error: Cannot read "{lib}/TensileLibrary_lazy_{gfx}.dat": No such file or directory\n'
    'rocblaslt error: Could not load "{lib}/TensileLibrary_lazy_{gfx}.dat"\n'
)
NO_DRIVER = (
    "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed "
    "a driver from http://www.nvidia.com/Download/index.aspx\n"
)


def _explain(tmp_path, capsys, text: str, machine: str, *extra: str) -> dict:
    log = tmp_path / "train.log"
    log.write_text(text)
    main(["doctor", "--explain", str(log), "--json", "--root", str(MACHINES / machine), *extra])
    return json.loads(capsys.readouterr().out)


def _venv(tmp_path, layout: str | None):
    """A venv whose AMD wheel put hipBLASLt's gfx1103 library per-arch ("sub"), flat, or nowhere (None)."""
    venv = tmp_path / "venv"
    lib = (
        venv
        / "lib"
        / "python3.12"
        / "site-packages"
        / "_rocm_sdk_libraries"
        / "lib"
        / "hipblaslt"
        / "library"
    )
    lib.mkdir(parents=True)
    (lib / "TensileLibrary_lazy_gfx950.dat.zlib").write_text("")  # another GPU's, flat
    if layout == "sub":
        (lib / "gfx1103").mkdir()
        (lib / "gfx1103" / "TensileLibrary_lazy_gfx1103.dat.zlib").write_text("")
    elif layout == "flat":
        (lib / "TensileLibrary_lazy_gfx1103.dat").write_text("")
    return venv, lib


def test_both_hipblaslt_lines_are_explained_with_the_per_arch_folder_cause(tmp_path, capsys):
    venv, lib = _venv(tmp_path, "sub")
    data = _explain(
        tmp_path, capsys, HIPBLASLT.format(lib=lib, gfx="gfx1103"), "incus-780m", "--venv", str(venv)
    )
    assert [(m["line_no"], m["id"]) for m in data["messages"]] == [
        (1, "rocblaslt-lazy-library"),
        (2, "rocblaslt-lazy-library"),
    ]
    msg = data["messages"][0]
    assert msg["severity"] == "warning"
    assert "per-arch folder" in msg["cause"] and "TheRock#7976" in msg["cause"]
    assert "ROCBLAS_USE_HIPBLASLT" not in msg["cause"].split("(2)")[0].split("(1)")[1]  # not the old cause
    assert "TORCH_BLAS_PREFER_HIPBLASLT=0" in msg["fix"]
    assert f"{lib}/gfx1103" in msg["here"] and "cause (1)" in msg["here"]


def test_a_hipblaslt_install_without_the_arch_is_cause_two(tmp_path, capsys):
    venv, lib = _venv(tmp_path, None)
    data = _explain(
        tmp_path, capsys, HIPBLASLT.format(lib=lib, gfx="gfx1103"), "incus-780m", "--venv", str(venv)
    )
    assert (
        "cause (2)" in data["messages"][0]["here"]
        and "no hipBLASLt kernels for gfx1103" in data["messages"][0]["here"]
    )


def test_the_gemm_failure_that_follows_is_explained_for_this_gpu(tmp_path, capsys):
    # TheRock#754: after the two rocblaslt lines the matrix product fails; that line names no arch or folder, so
    # the explanation looks for this machine's GPU (gfx1103) in the venv's hipBLASLt.
    venv, lib = _venv(tmp_path, "sub")
    failure = (
        "Error in Linear: CUDA error: HIPBLAS_STATUS_INVALID_VALUE when calling `hipblasLtMatmulAlgoGetHeuristic( "
        "ltHandle, computeDesc.descriptor(), Adesc.descriptor(), Bdesc.descriptor(), Cdesc.descriptor(), "
        "Cdesc.descriptor(), preference.descriptor(), 1, &heuristicResult, &returnedResult)`\n"
    )
    text = HIPBLASLT.format(lib=lib, gfx="gfx1103") + failure
    data = _explain(tmp_path, capsys, text, "incus-780m", "--venv", str(venv))
    assert [m["id"] for m in data["messages"]] == ["rocblaslt-lazy-library"] * 2 + ["hipblaslt-invalid-value"]
    last = data["messages"][2]
    assert last["severity"] == "fatal" and "TORCH_BLAS_PREFER_HIPBLASLT=0" in last["fix"]
    assert f"{lib}/gfx1103" in last["here"] and "cause (1)" in last["here"]


def test_a_hipblaslt_line_from_another_gpu_is_named_as_such(tmp_path, capsys):
    # The issue's own line: a Strix Halo path (gfx1151), explained on the 780M root.
    line = HIPBLASLT.format(
        lib="/opt/venv/lib/python3.12/site-packages/_rocm_sdk_libraries/lib/hipblaslt/library", gfx="gfx1151"
    )
    data = _explain(tmp_path, capsys, line, "incus-780m", "--venv", str(tmp_path / "none"))
    assert {m["id"] for m in data["messages"]} == {"rocblaslt-lazy-library"}
    assert "The log names gfx1151, this machine's GPU is gfx1103" in data["messages"][0]["here"]


def test_the_bare_and_quoted_forms_of_older_and_newer_releases_are_one_entry(tmp_path, capsys):
    text = (
        "rocblaslt error: Cannot read /opt/rocm/lib/hipblaslt/library/TensileLibrary_lazy_gfx1103.dat: No such file or directory\n"
        'rocblaslt error: Could not load "TensileLibrary_lazy_gfx1103.dat"\n'
        '2026-09-07 12:00:01,123 ERROR rocblaslt error: Cannot read "TensileLibrary_lazy_gfx1103.dat": No such file or directory\n'
    )
    data = _explain(tmp_path, capsys, text, "incus-780m")
    assert [m["id"] for m in data["messages"]] == ["rocblaslt-lazy-library"] * 3


@pytest.mark.parametrize(
    ("machine", "kind", "cause", "fix"),
    [
        ("incus-780m", "amd", "AMD", "mw-env bootstrap --recreate"),
        ("cpu-only", "cpu", "no GPU torch can use", "--profile cpu"),
        ("nvidia-l4-550", "nvidia", "NVIDIA GPU", "--gpus all"),
    ],
)
def test_found_no_nvidia_driver_is_explained_for_the_machine(tmp_path, capsys, machine, kind, cause, fix):
    data = _explain(tmp_path, capsys, NO_DRIVER, machine)
    assert data["machine"] == kind
    msg = data["messages"][0]
    assert msg["id"] == "no-nvidia-driver" and cause in msg["cause"] and fix in msg["fix"]
    if kind != "nvidia":  # no NVIDIA GPU: never told to pass one in
        assert "--gpus" not in msg["fix"] and "docker" not in msg["fix"]


def test_the_780m_gets_the_wrong_build_cause_in_the_human_report(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_text(NO_DRIVER)
    assert main(["doctor", "--explain", str(log), "--root", str(MACHINES / "incus-780m")]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "This machine's GPU is an AMD one" in out and "mw-env bootstrap --recreate" in out
    assert "docker run --gpus" not in out


def test_a_rocm_build_on_an_nvidia_machine_is_the_wrong_build(tmp_path, capsys):
    data = _explain(tmp_path, capsys, "RuntimeError: No HIP GPUs are available\n", "nvidia-l4-550")
    msg = data["messages"][0]
    assert msg["id"] == "no-hip-gpus" and "NVIDIA" in msg["cause"] and "mw-env bootstrap" in msg["fix"]
    assert "render group" not in msg["fix"]
