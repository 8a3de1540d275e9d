"""Small contracts between the commands and what the README/docs say of them (issue 30, items 8 and 11): a dry
run inside someone's venv shows the refusal as a warning; every "create it with" hint is a command bootstrap
accepts; env and host-commands take --source; `train summary` refuses a glob that matches nothing; a missing
`export` extra is exit 2 as the docs say."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from conftest import MACHINES
from mw_env.cli import main

sys.path.insert(0, str(Path(__file__).parent / "checks"))
from doctor_helpers import fake_venv

ROOT_780M = str(MACHINES / "incus-780m")


def _cpu_venv(path: Path) -> Path:
    """A finished CPU-profile venv (its record), as a 780M owner finds it activated on someone's fixture."""
    return fake_venv(
        path, version="2.10.0+cpu", with_torch=False, record={"profile": "cpu", "torch_source": "cpu"}
    )


def test_dry_run_in_a_venv_a_real_run_would_refuse_warns_and_exits_0(tmp_path, capsys, monkeypatch):
    venv = _cpu_venv(tmp_path / "v")
    monkeypatch.setenv("MW_ENV_VENV", str(venv))
    monkeypatch.setenv("VIRTUAL_ENV", str(venv))
    before = sorted(p.name for p in tmp_path.iterdir())
    rc = main(["bootstrap", "--dry-run", "--root", ROOT_780M, "--offline"])
    out = capsys.readouterr().out
    assert rc == 0
    flat = " ".join(out.split())
    assert "warning: a real run would refuse:" in flat and "would replace its working torch" in flat
    assert "what --recreate would do" in flat
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing made, nothing moved


def test_the_real_run_still_refuses_that_venv(tmp_path, capsys, monkeypatch):
    venv = _cpu_venv(tmp_path / "v")
    monkeypatch.setenv("MW_ENV_VENV", str(venv))
    rc = main(["bootstrap", "--root", ROOT_780M, "--offline", "--yes", "--no-doctor"])
    err = capsys.readouterr().err
    assert rc == 2 and "would replace its working torch" in err and "--recreate" in err


def test_dry_run_json_carries_the_refusal_as_a_warning(tmp_path, capsys, monkeypatch):
    venv = _cpu_venv(tmp_path / "v")
    rc = main(["bootstrap", "--dry-run", "--json", "--root", ROOT_780M, "--offline", "--venv", str(venv)])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert any("a real run would refuse" in w for w in data["warnings"])


def _hinted_venv(err: str) -> str:
    m = re.search(r"`mw-env bootstrap --venv ([^`]+)`", " ".join(err.split()))
    assert m, err
    return shlex.split(m.group(1))[0]


@pytest.mark.parametrize("kind", ["folder", "file", "missing", "empty"])
def test_the_create_hint_for_a_non_venv_is_a_path_bootstrap_accepts(tmp_path, capsys, kind):
    from mw_env.provision.venvchoice import checked_venv as _checked_venv

    target = tmp_path / "data"
    if kind == "folder":
        target.mkdir()
        (target / "notes.txt").write_text("mine")
    elif kind == "file":
        target.write_text("mine")
    elif kind == "empty":
        target.mkdir()
    rc = main(["env", "--venv", str(target)])
    err = capsys.readouterr().err
    assert rc == 2 and "error:" in err
    hinted = Path(_hinted_venv(err))
    _checked_venv(hinted)  # bootstrap's own check of --venv: raises for a path it would refuse
    if kind in ("missing", "empty"):
        assert hinted == target
    else:
        assert hinted != target and "never takes over" in err
    if kind == "folder":
        assert (target / "notes.txt").read_text() == "mine"


def test_train_hint_for_a_folder_that_is_no_venv_is_accepted_by_bootstrap(tmp_path, capsys, monkeypatch):
    from mw_env.provision.venvchoice import checked_venv as _checked_venv

    monkeypatch.chdir(tmp_path)
    target = tmp_path / "work"
    target.mkdir()
    (target / "data.jsonl").write_text("{}\n")
    rc = main(["train", "--venv", str(target), "--config", "smoke"])
    err = capsys.readouterr().err
    assert rc == 2
    _checked_venv(Path(_hinted_venv(err)))


def test_env_takes_source_and_derives_the_override_from_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MW_ENV_VENV", str(tmp_path / "none"))  # no bootstrapped venv: the profile's env
    assert main(["env", "--root", ROOT_780M]) == 0
    native = capsys.readouterr().out
    assert main(["env", "--root", ROOT_780M, "--source", "rocm6.4"]) == 0
    forced = capsys.readouterr().out
    assert "HSA_OVERRIDE_GFX_VERSION" not in native
    assert "export HSA_OVERRIDE_GFX_VERSION=11.0.0" in forced
    assert main(["env", "--root", ROOT_780M, "--source", "nope"]) == 2
    assert "rocm6.4" in capsys.readouterr().err  # the profile's sources are named


def test_host_commands_takes_source(capsys):
    assert main(["host-commands", "--root", ROOT_780M, "--source", "rocm6.4"]) == 0
    assert capsys.readouterr().out
    assert main(["host-commands", "--root", ROOT_780M, "--source", "nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_train_summary_refuses_a_glob_that_matches_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(
        [
            "train",
            "summary",
            "--config",
            "smoke",
            "--set",
            "data.source=files",
            "--set",
            "data.train_files=[corpus/*.parquet]",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2
    assert "data.train_files" in err and "corpus/*.parquet" in err


def test_export_without_its_extra_is_exit_2_as_the_docs_say(tmp_path, capsys):
    venv = fake_venv(tmp_path / "v", with_torch=False, record={"profile": "cpu"})
    run = tmp_path / "run"
    run.mkdir()
    rc = main(["train", "export", "--format", "onnx", "--venv", str(venv), str(run)])
    err = capsys.readouterr().err
    assert rc == 2 and "export" in err and "--extras" in err
    docs = (Path(__file__).parents[1] / "docs" / "runs.md").read_text()
    assert re.search(r"without it: `error:`[^.]*exit 2", " ".join(docs.split()))


# Item 4: the venv a user built is the one later commands use, and they say so.


def _built(path: Path) -> Path:
    return fake_venv(
        path, version="2.10.0+cpu", with_torch=False, record={"profile": "cpu", "torch_source": "cpu"}
    )


def test_commands_without_venv_use_the_venv_bootstrap_built_last_and_say_so(tmp_path, capsys, monkeypatch):
    from mw_env.venv.record import default_venv, remember_venv

    home = tmp_path / "home"
    (home / "training-venv").mkdir(parents=True)  # an older venv at the default path: never used in silence
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    data = _built(tmp_path / "data" / "venv")
    (data / "mw-env.env").write_text("export MW_MARK=data-venv\n")
    assert default_venv() == home / "training-venv"
    assert remember_venv(data) is not None
    assert default_venv() == data
    assert main(["env"]) == 0
    out = capsys.readouterr()
    assert "export MW_MARK=data-venv" in out.out
    assert f"using {data}" in out.err and "built last" in out.err
    # An activated venv still wins (it sets MW_ENV_VENV), without a note.
    monkeypatch.setenv("MW_ENV_VENV", str(home / "training-venv"))
    assert default_venv() == home / "training-venv"


def test_a_vanished_last_venv_falls_back_to_the_default(tmp_path, monkeypatch):
    import shutil

    from mw_env.venv.record import chosen_venv, remember_venv

    monkeypatch.setenv("HOME", str(tmp_path))
    data = _built(tmp_path / "gone")
    remember_venv(data)
    shutil.rmtree(data)
    assert chosen_venv() == (tmp_path / "training-venv", "")


def test_the_doctor_says_which_venv_it_checks(tmp_path, capsys, monkeypatch):
    from mw_env.venv.record import remember_venv

    monkeypatch.setenv("HOME", str(tmp_path))
    data = _built(tmp_path / "data-venv")
    remember_venv(data)
    main(["doctor", "--quick", "--root", str(MACHINES / "cpu-only")])
    out = capsys.readouterr()
    assert f"using {data}" in out.err
    assert f"(venv {data})" in " ".join(out.out.split())


def test_a_real_bootstrap_records_its_venv(tmp_path, monkeypatch):
    # The record is written by the bootstrap command after a finished run (the slow end-to-end test of a real
    # bootstrap covers the install); here: the state file is where commands look.
    from mw_env.venv.record import last_venv_file, remember_venv

    monkeypatch.setenv("MW_ENV_STATE_DIR", str(tmp_path / "state"))
    path = remember_venv(tmp_path / "v")
    assert path == last_venv_file() == tmp_path / "state" / "last-venv"
    assert path.read_text().strip() == str(tmp_path / "v")


def test_the_doctors_fix_for_a_folder_that_is_no_venv_is_a_command_bootstrap_accepts(tmp_path, capsys):
    from mw_env.provision.venvchoice import checked_venv as _checked_venv

    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    rc = main(["doctor", "--quick", "--json", "--root", str(MACHINES / "cpu-only"), "--venv", str(folder)])
    checks = {c["id"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert rc == 1 and checks["venv.exists"]["status"] == "fail"
    _checked_venv(Path(_hinted_venv(checks["venv.exists"]["fix"])))
