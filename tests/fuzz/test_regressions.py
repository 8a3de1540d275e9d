"""Each reproducer of issue 11, as it was reported, run as the real command (a subprocess with a timeout, so a
hang fails here instead of stalling CI). Checkpoint reproducers are in test_fuzz_checkpoints.py, the
installer's (credentials, lock file, resumed record) in tests/provision/test_bootstrap_hostile.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MACHINES = REPO / "tests" / "fixtures" / "machines"
TIMEOUT = 60


def mw(
    args: list[str], *, env: dict[str, str] | None = None, stdin: bytes | None = None
) -> tuple[int, str, str]:
    base = {**os.environ, "PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(sys.path)}
    base.pop("MW_ENV_PROFILES", None)
    res = subprocess.run(
        [sys.executable, "-m", "mw_env", *args],
        env={**base, **(env or {})},
        input=stdin,
        capture_output=True,
        timeout=TIMEOUT,  # the "never a hang" assertion
        check=False,
    )
    out, err = res.stdout.decode("utf-8", "replace"), res.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    return res.returncode, out, err


def _profiles_dir(tmp_path: Path) -> Path:
    d = tmp_path / "profiles"
    d.mkdir()
    return d


def test_deeply_nested_yaml_in_a_profile(tmp_path: Path) -> None:
    d = _profiles_dir(tmp_path)
    (d / "deep.yaml").write_text("[" * 5000)
    rc, _, err = mw(["profiles", "--profiles-dir", str(d)])
    assert rc == 2 and "deep.yaml" in err and "nested deeper than 64 levels" in err


def test_deeply_nested_yaml_in_a_trainer_config(tmp_path: Path) -> None:
    config = tmp_path / "deep.yaml"
    config.write_text("model: " + "[" * 5000)
    rc, _, err = mw(["train", "config", "--config", str(config)])
    assert rc == 2 and "deep.yaml" in err and "nested" in err


def test_deeply_nested_yaml_in_a_set_value() -> None:
    rc, _, err = mw(["train", "config", "--config", "smoke", "--set", "model.d_model=" + "[" * 5000])
    assert rc == 2 and "--set model.d_model" in err and "nested" in err


def test_a_fifo_as_a_profile_file(tmp_path: Path) -> None:
    d = _profiles_dir(tmp_path)
    os.mkfifo(d / "pipe.yaml")
    rc, _, err = mw(["profiles", "--profiles-dir", str(d)])
    assert rc == 2 and "pipe.yaml" in err and "FIFO" in err


def test_dev_zero_as_a_profile_file(tmp_path: Path) -> None:
    d = _profiles_dir(tmp_path)
    (d / "zero.yaml").symlink_to("/dev/zero")
    rc, _, err = mw(["profiles", "--profiles-dir", str(d)])
    assert rc == 2 and "zero.yaml" in err and "character device" in err


def test_doctor_explain_dev_zero() -> None:
    rc, _, err = mw(["doctor", "--explain", "/dev/zero"])
    assert rc == 2 and "/dev/zero" in err and "not a regular file" in err


def test_doctor_explain_stdin_from_dev_zero_ends() -> None:
    with open("/dev/zero", "rb") as zero:
        res = subprocess.run(
            [sys.executable, "-m", "mw_env", "doctor", "--explain", "-"],
            stdin=zero,
            capture_output=True,
            timeout=TIMEOUT,
            check=False,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    assert res.returncode == 0 and b"stopped after" in res.stdout


def test_a_fifo_inside_a_root_is_not_available(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(MACHINES / "incus-780m", root, symlinks=True)
    (root / "proc" / "meminfo").unlink()
    os.mkfifo(root / "proc" / "meminfo")
    rc, out, _ = mw(["detect", "--root", str(root), "--json"])
    assert rc == 0 and json.loads(out)["profile"]


def test_a_non_utf8_trainer_config(tmp_path: Path) -> None:
    config = tmp_path / "latin1.yaml"
    config.write_bytes("runtime:\n  out_dir: M\u00fcnchen\n".encode("latin-1"))
    rc, _, err = mw(["train", "config", "--config", str(config)])
    assert rc == 2 and "latin1.yaml" in err and "not UTF-8" in err and "byte 21" in err


def test_set_with_an_int_tag_on_a_word() -> None:
    rc, _, err = mw(["train", "config", "--config", "smoke", "--set", "data.tokenizer=!!int x"])
    assert rc == 2 and "--set data.tokenizer" in err


def test_set_max_len_beyond_int64_is_refused_with_the_range() -> None:
    rc, _, err = mw(["train", "config", "--config", "smoke", "--set", "model.max_len=9223372036854775808"])
    assert rc == 2 and "model.max_len" in err and "an integer from 8 to 1048576" in err


def test_doctor_explain_shows_escape_sequences_escaped(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"\x1b]0;owned\x07\x1b[2J torch.OutOfMemoryError: CUDA out of memory\n")
    for extra in ([], ["--json"]):
        rc, out, _ = mw(["doctor", "--explain", str(log), *extra])
        assert rc in (0, 1) and "\x1b" not in out and "\x07" not in out
        assert "\\x1b]0;owned\\x07" in out or "\\\\x1b]0;owned\\\\x07" in out


def test_doctor_explain_json_caps_a_40_mb_matching_line(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    with open(log, "wb") as fh:
        fh.write(b"torch.OutOfMemoryError: CUDA out of memory " + b"x" * (40 * 1024 * 1024) + b"\n")
    rc, out, _ = mw(["doctor", "--explain", str(log), "--json"])
    assert rc in (0, 1) and len(out) < 20_000
    lines = [m["line"] for m in json.loads(out)["messages"]]
    assert lines and all(len(line) < 600 and line.endswith("more)") for line in lines)


@pytest.mark.parametrize("name", ["box\n", "box\nrm -rf /", "box "])
def test_host_commands_refuses_a_container_name_with_a_newline(name: str) -> None:
    rc, out, err = mw(["host-commands", "--root", str(MACHINES / "incus-780m"), "--container", name])
    assert rc == 2 and "invalid" in err and out == ""


def test_set_a_float_key_to_an_int_beyond_float_range() -> None:
    # Found by the fuzz suite (round 2): float(10**400) raised OverflowError through the config resolver.
    rc, _, err = mw(["train", "config", "--config", "smoke", "--set", "optim.lr=1" + "0" * 400])
    assert rc == 2 and "optim.lr must be a number" in err
