"""`train summary` and `doctor --explain` apply the input rules of the trainer and the doctor (issue 29, class 8).

The summary exited 0 on shards the trainer refuses; it now runs the same host checks as `mw-env train`
(trainspec/preflight.py), so its error is the trainer's, word for word. `doctor --explain /proc/self/mem`
(a kernel pseudo-file: size 0, and reading it fails with EIO) was exit 1 "check the disk (smartctl)"; the one
reader of a user's file (userfile) now says it is not a regular file, exit 2, as docs/reliability.md says.
`doctor --venv FILE` was a usage error (2) where the README says the doctor reports a --venv that is not a
venv as a failed check (1): it is now that check, `venv.exists`, with its fix.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.cli import main
from mw_env.trainspec.config import resolve_config
from mw_env.trainspec.preflight import check_on_host

ROOT = Path(__file__).resolve().parents[1]
CPU = str(ROOT / "tests" / "fixtures" / "machines" / "cpu-only")


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def _shards(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo.parquet"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.parquet"
    zero.symlink_to("/dev/zero")
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    return {"fifo": fifo, "/dev/zero": zero, "folder": folder}


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "folder"])
def test_train_summary_refuses_what_the_trainer_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    shard = _shards(tmp_path)[kind]
    overrides = ["data.source=files", f"data.train_files=[{shard}]"]
    with pytest.raises(InputError) as caught:  # what `mw-env train` says before the doctor
        check_on_host(resolve_config(overrides=overrides).config, venv=None, base=tmp_path)
    sets = [a for o in overrides for a in ("--set", o)]
    code, _, err = _run(capsys, "train", "summary", "--config", "smoke", *sets)
    assert code == 2 and err.splitlines()[0] == f"error: {caught.value.message}", err


def test_explain_on_a_kernel_pseudo_file_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    for extra in ([], ["--json"]):
        code, _, err = _run(capsys, "doctor", "--explain", "/proc/self/mem", *extra)
        assert code == 2, err
        assert (
            "/proc/self/mem: it is a kernel pseudo-file, not a regular file" in err and "smartctl" not in err
        )


def test_explain_still_reads_a_readable_proc_file_and_an_empty_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "doctor", "--explain", "/proc/self/status")
    assert code == 0 and "No known messages" in out
    (tmp_path / "empty.log").write_text("")
    code, out, _ = _run(capsys, "doctor", "--explain", str(tmp_path / "empty.log"))
    assert code == 0 and "is empty" in out


def test_doctor_venv_file_is_a_failed_check_as_the_readme_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "venv"
    file.write_text("not a venv\n")
    code, out, _ = _run(capsys, "doctor", "--root", CPU, "--venv", str(file), "--quick", "--json")
    checks = {c["id"]: c for c in json.loads(out)["checks"]}
    assert code == 1 and checks["venv.exists"]["status"] == "fail"
    assert f"{file} is a file, not a venv folder" in checks["venv.exists"]["detail"]
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "the doctor reports it as a failed check (1)" in readme
