"""Issue 22, case 19: documented exit codes with the wrong words. Each message names what happened."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.fuzz.test_regressions import mw


class _Boom:
    def __reduce__(self):  # a pickle that would run code when loaded without weights_only
        import os

        return (os.system, ("touch /tmp/mw-env-pwned-by-checkpoint",))


@pytest.mark.torch
def test_a_code_executing_checkpoint_is_refused_in_mw_envs_words(tmp_path: Path) -> None:
    import torch

    from mw_env.trainer.ckpt.checkpoint import CheckpointError, load_checkpoint

    path = tmp_path / "step-000000002.pt"
    torch.save({"step": 2, "evil": _Boom()}, path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    text = info.value.message
    assert "never runs code" in text and "weights_only=True" in text, text
    assert "Re-running" not in text and "set to False" not in text  # torch's advice, cut, is not repeated
    assert not Path("/tmp/mw-env-pwned-by-checkpoint").exists()


def test_mw_env_root_is_named_as_the_variable(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    rc, _, err = mw(["detect"], env={"MW_ENV_ROOT": str(f)})
    assert rc == 2 and f"MW_ENV_ROOT {f}: is not a folder" in err and "--root" not in err.split("hint:")[0], (
        err
    )
    rc, _, err = mw(["detect", "--root", str(f)])
    assert rc == 2 and f"--root {f}: is not a folder" in err, err


def test_a_set_value_the_locale_cannot_decode(tmp_path: Path) -> None:
    out = str(tmp_path).encode() + b"/M\xc3\xbcnch\xe2\x82\xacn"
    import os
    import subprocess
    import sys

    env = {**os.environ, "LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    res = subprocess.run(
        [
            sys.executable.encode(),
            b"-m",
            b"mw_env",
            b"train",
            b"config",
            b"--config",
            b"smoke",
            b"--set",
            b"runtime.out_dir=" + out,
        ],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    err = res.stderr.decode("utf-8", "replace")
    assert res.returncode == 2 and "Traceback" not in err, err
    assert "not text in this locale" in err and "LANG=C.UTF-8" in err and "!!int" not in err, err


def test_a_folder_as_the_config(tmp_path: Path) -> None:
    rc, _, err = mw(["train", "config", "--config", str(tmp_path)])
    assert rc == 2 and "is a folder, not a config file" in err, err


@pytest.mark.torch
def test_a_single_jsonl_shard_is_told_about_blocks_not_row_groups(tmp_path: Path) -> None:
    from mw_env.base.errors import InputError
    from mw_env.trainer.data import open_corpus
    from mw_env.trainspec.config import resolve_config

    shard = tmp_path / "one.jsonl"
    shard.write_text(json.dumps({"tokens": ["1"], "tags": ["O"]}) + "\n")
    overrides = ["data.source=files", f"data.train_files=[{shard}]", f"runtime.out_dir={tmp_path / 'run'}"]
    cfg = resolve_config(overrides=overrides).config
    with pytest.raises(InputError) as info:
        open_corpus(cfg)
    assert "row groups" not in info.value.message + (info.value.hint or "")
    assert "data.val_files" in (info.value.hint or "")


def test_bootstrap_hints_stay_on_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "uv"
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    rc, out, err = mw(
        ["bootstrap", "--profile", "cpu", "--venv", str(tmp_path / "v"), "--yes", "--no-doctor"],
        env={"UV": str(broken), "COLUMNS": "80", "MW_ENV_VENV": ""},
    )
    text = out + err
    assert rc in (1, 2), text
    hint = next(line for line in text.splitlines() if line.startswith("hint:"))
    assert hint.endswith("installs one from PyPI"), text  # the whole hint on its one line


ASCII_LOCALE = {"LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}


@pytest.mark.parametrize(
    "args", [["doctor", "--quick", "--venv", "/nonexistent/venv"], ["profiles"]], ids=["doctor", "profiles"]
)
def test_a_locale_that_cannot_encode_the_reports_marks(args: list[str]) -> None:
    """Case 19's locale class: with a locale that is not UTF-8 (C with Python's UTF-8 mode off; latin-1 alike)
    the doctor's ✗ and the profile list's … raised UnicodeEncodeError mid-report. They are shown escaped."""
    import os
    import subprocess
    import sys

    env = {**os.environ, **ASCII_LOCALE, "PYTHONPATH": os.pathsep.join(sys.path)}
    res = subprocess.run(
        [sys.executable, "-m", "mw_env", *args], env=env, capture_output=True, timeout=120, check=False
    )
    err = res.stderr.decode("ascii", "replace")
    assert "Traceback" not in err and res.returncode in (0, 1), (res.returncode, err[-2000:])
    res.stdout.decode("ascii")  # everything it printed is ASCII: what the locale can show


@pytest.mark.torch
def test_the_trainer_in_a_locale_that_cannot_encode_a_corpus_word(tmp_path: Path) -> None:
    """The eval samples quote corpus words ("Münch€n"): in a non-UTF-8 locale the trainer died printing them
    (exit 1, UnicodeEncodeError), after its steps. They are shown escaped and the run finishes."""
    import os
    import subprocess
    import sys

    rows = [
        {"tokens": ["M\u00fcnch\u20acn", str(i)], "tags": ["B-locality", "B-house_number"]} for i in range(32)
    ]
    shard = tmp_path / "u.jsonl"
    shard.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    argv = [sys.executable, "-m", "mw_env.trainer", "run", "--config", "smoke"]
    for item in (
        f"runtime.out_dir={tmp_path / 'run'}",
        "runtime.max_steps=1",
        "runtime.eval_every=1",
        "runtime.eval_samples=2",
        "runtime.threads=1",
        "data.source=files",
        f"data.train_files=[{shard}]",
        f"data.val_files={shard}",
        "data.labels=[O, B-locality, I-locality, B-house_number, I-house_number]",
    ):
        argv += ["--set", item]
    env = {**os.environ, **ASCII_LOCALE, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    res = subprocess.run(argv, env=env, capture_output=True, timeout=300, check=False)
    out, err = res.stdout.decode("ascii", "replace"), res.stderr.decode("ascii", "replace")
    assert res.returncode == 0 and "Traceback" not in err, (res.returncode, err[-3000:])
    assert "M\\xfcnch\\u20acn" in out, out[-2000:]
