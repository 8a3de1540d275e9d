"""Wheel filenames are read by packaging (as pip reads them), and pyproject metadata is read on 3.10 too."""

from __future__ import annotations

import sys

import pytest

from mw_env.provision.choose import read_project_meta
from mw_env.sources.wheelhouse import wheel_problem, wheels_in


def test_wheel_names_are_read_as_pip_reads_them(tmp_path, monkeypatch):
    monkeypatch.setattr("mw_env.sources.wheelhouse._machine_arch", lambda: "x86_64")
    for name in (
        "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        "Torch-2.12.0%2Bcpu-1-cp310.cp311-none-any.whl",  # capitals, an escaped '+', a build tag, two tags
        "torch-2.11.0+cpu-cp311-cp311-manylinux_2_28_aarch64.whl",  # another machine's wheel
        "torch-2.10.0-cp311-cp311.whl",  # too few parts: not a wheel name, skipped as pip skips it
        "torch_audio-2.13.0-py3-none-any.whl",  # another project whose name starts the same
        "torch-notes.txt",
    ):
        (tmp_path / name).write_bytes(b"")
    wheels = wheels_in([str(tmp_path)], "Torch")
    assert [(w.name, w.version) for w in wheels] == [("torch", "2.13.0+cpu"), ("torch", "2.12.0+cpu")]
    assert wheels[0].local == "+cpu" and wheels[0].platform == "manylinux_2_28_x86_64"
    assert wheels[1].python_tags == ("cp310", "cp311") and wheels[1].fits_python("3.10.4")
    assert [w.name for w in wheels_in([str(tmp_path)], "torch-audio")] == ["torch-audio"]


def test_pyproject_is_read_on_python_3_10_with_tomli(tmp_path, monkeypatch):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "mw-env"\nrequires-python = ">=3.10"\n[project.optional-dependencies]\ntrain = ["numpy"]\n'
    )
    meta = ("mw-env", ">=3.10", {"train": ["numpy"]})
    assert read_project_meta(pyproject) == meta
    # On 3.10 the reader imports tomli (a declared dependency there), the same parser as 3.11's tomllib.
    parser = __import__("tomllib" if sys.version_info >= (3, 11) else "tomli")
    monkeypatch.setattr(sys, "version_info", (3, 10, 14, "final", 0))
    monkeypatch.setitem(sys.modules, "tomli", parser)
    assert read_project_meta(pyproject) == meta
    # Without tomli there it fails loudly (a broken install) instead of silently skipping the validation.
    monkeypatch.setitem(sys.modules, "tomli", None)
    with pytest.raises(ImportError):
        read_project_meta(pyproject)


def test_installed_version_matches_dist_info_names_canonically(tmp_path):
    from mw_env.venv.venvinfo import installed_version

    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    for folder in ("torch-2.13.0+cpu.dist-info", "Sentence_Piece-0.2.0.dist-info", "half_done-1.0.dist-info"):
        (site / folder).mkdir(parents=True)
    for folder in ("torch-2.13.0+cpu.dist-info", "Sentence_Piece-0.2.0.dist-info"):
        (site / folder / "METADATA").write_text("Metadata-Version: 2.1\n")
    venv = tmp_path / "venv"
    assert installed_version(venv, "torch") == "2.13.0+cpu"
    assert installed_version(venv, "sentence-piece") == "0.2.0"
    assert installed_version(venv, "sentence.piece") == "0.2.0"
    assert installed_version(venv, "half-done") is None  # no METADATA: an install that did not finish
    assert installed_version(venv, "numpy") is None


def test_a_wheel_is_whole_by_its_end_record_and_directory(tmp_path):
    """wheel_problem reads the zip's end record and central directory only (zipfile's parse of a torch wheel's
    12,000 entries was 80 ms of every preflight): a copy cut short, a zip that is no wheel, and a whole one."""
    import zipfile

    whole = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whole, "w") as zf:
        zf.writestr("demo/__init__.py", "x = 1\n" * 1000)
        zf.writestr("demo-1.0.dist-info/RECORD", "demo/__init__.py,,\n")
        zf.comment = b"a comment after the end record"
    assert wheel_problem(whole) is None
    data = whole.read_bytes()
    cut = tmp_path / "cut-1.0-py3-none-any.whl"
    cut.write_bytes(data[: len(data) // 2])  # a download that stopped early
    assert "not a whole zip file" in (wheel_problem(cut) or "")
    moved = tmp_path / "moved-1.0-py3-none-any.whl"
    moved.write_bytes(data[:100] + data[200:])  # the end record points where the directory no longer is
    assert "not a whole zip file" in (wheel_problem(moved) or "")
    bare = tmp_path / "bare-1.0-py3-none-any.whl"
    with zipfile.ZipFile(bare, "w") as zf:
        zf.writestr("demo/__init__.py", "x = 1\n")
    assert "not a wheel" in (wheel_problem(bare) or "")
    assert "cannot be read" in (wheel_problem(tmp_path / "missing.whl") or "")
