"""A venv whose pyvenv.cfg its own Python cannot read (issue 29, class 4).

Python's site.py reads pyvenv.cfg as UTF-8 and dies with a UnicodeDecodeError traceback on a latin-1 byte;
`bootstrap --dry-run --venv V` printed that traceback (its plan read the file with read_text). Every reader
now goes through `provision.venvinfo.read_pyvenv_cfg`: bootstrap (plan and dry run), the doctor, `mw-env
train` (with and without the doctor) and `train export` each say in one sentence what is wrong and how to
rebuild the venv.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.cli import main
from mw_env.venv.venvinfo import read_pyvenv_cfg, venv_python_version

SRC = Path(__file__).resolve().parents[2] / "src" / "mw_env"
CPU = Path(__file__).resolve().parents[1] / "fixtures" / "machines" / "cpu-only"
LATIN1 = b"home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.7\nprompt = caf\xe9\n"


def _venv(tmp_path: Path, kind: str) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text("#!/bin/sh\nexit 3\n")
    python.chmod(0o755)
    cfg = venv / "pyvenv.cfg"
    if kind == "latin-1":
        cfg.write_bytes(LATIN1)
    elif kind == "fifo":
        os.mkfifo(cfg)
    elif kind == "folder":
        cfg.mkdir()
    elif kind == "huge":
        cfg.write_bytes(b"version = 3.11.7\n" + b"#" * (1 << 20))
    return venv


KINDS = ("latin-1", "fifo", "folder", "huge")
WORDS = {"latin-1": "not UTF-8 text (byte 82", "fifo": "a FIFO", "folder": "a directory", "huge": "at most"}


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "UnicodeDecodeError" not in out + err
    return code, out, err


@pytest.mark.parametrize("kind", KINDS)
def test_the_one_reader_says_what_is_wrong_and_how_to_rebuild(tmp_path: Path, kind: str) -> None:
    venv = _venv(tmp_path, kind)
    with pytest.raises(InputError) as caught:
        read_pyvenv_cfg(venv)
    assert f"{venv}/pyvenv.cfg" in caught.value.message and WORDS[kind] in caught.value.message
    assert f"mw-env bootstrap --recreate --venv {venv}" in (caught.value.hint or "")
    with pytest.raises(InputError):
        venv_python_version(venv)


def test_a_utf8_file_reads_and_none_is_none(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    assert read_pyvenv_cfg(venv) is None and venv_python_version(venv) is None
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\nversion_info = 3.11.7.final.0\nprompt = café\n")
    assert read_pyvenv_cfg(venv) == {"home": "/usr/bin", "version_info": "3.11.7.final.0", "prompt": "café"}
    assert venv_python_version(venv) == "3.11.7.final.0"


@pytest.mark.parametrize("kind", KINDS)
def test_bootstrap_and_its_dry_run_say_it_in_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    venv = _venv(tmp_path, kind)
    for extra in (["--dry-run"], ["--dry-run", "--json"]):
        code, _, err = _run(capsys, "bootstrap", "--root", str(CPU), "--venv", str(venv), *extra)
        assert code == 2, err
        first, hint = err.splitlines()
        assert first.startswith("error: ") and f"venv config {venv}/pyvenv.cfg" in first, err
        assert hint.startswith("hint: ") and "--recreate" in hint, err


def test_the_doctor_train_export_and_lock_say_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    venv = _venv(tmp_path, "latin-1")
    code, out, _ = _run(capsys, "doctor", "--root", str(CPU), "--venv", str(venv), "--quick", "--json")
    checks = {c["id"]: c for c in json.loads(out)["checks"]}
    assert code == 1 and checks["venv.python"]["status"] == "fail"
    assert "pyvenv.cfg: not UTF-8 text" in checks["venv.python"]["detail"]
    assert "--recreate" in checks["venv.python"]["fix"]
    code, _, err = _run(capsys, "train", "--config", "smoke", "--venv", str(venv), "--skip-doctor")
    assert code == 2 and "pyvenv.cfg: not UTF-8 text" in err, err
    code, _, err = _run(capsys, "train", "export", str(tmp_path), "--venv", str(venv))
    assert code == 2 and "pyvenv.cfg: not UTF-8 text" in err, err
    code, _, err = _run(capsys, "lock", "--venv", str(venv), "--output", str(tmp_path / "lock.toml"))
    assert code == 2 and "pyvenv.cfg: not UTF-8 text" in err, err


def test_no_other_module_reads_pyvenv_cfg() -> None:
    """The file is named elsewhere only to test that it exists; its text is read in venvinfo.py alone."""
    readers = []
    for module in SRC.rglob("*.py"):
        for line in module.read_text().splitlines():
            if "pyvenv" in line and re.search(r"\bopen\(|read_text|read_bytes|readlines|configparser", line):
                readers.append(f"{module.relative_to(SRC)}: {line.strip()}")
    assert readers == []
