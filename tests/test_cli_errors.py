"""Exit codes and two-line errors exactly as the README says, for every command and subcommand.

README: 0 ok, 1 a check or step failed, 2 usage or bad input, 130 interrupted; errors are two lines,
`error:` and `hint:`, never a traceback; `--debug` shows the traceback, and is accepted anywhere.
"""

from __future__ import annotations

import importlib
import os
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from mw_env.cli import COMMANDS, main, split_debug


def _all_command_paths() -> list[list[str]]:
    paths = []
    for name, (module, attr, _) in COMMANDS.items():
        cmd = getattr(importlib.import_module(module), attr)
        paths.append([name])
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            paths += [[name, sub] for sub in cmd.list_commands(ctx)]
    return paths


PATHS = _all_command_paths()


def _two_lines(err: str) -> list[str]:
    lines = err.strip().splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith("error: ") and lines[1].startswith("hint: "), err
    assert "Traceback" not in err
    return lines


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_unknown_option_is_two_lines_and_exit_2(path, capsys):
    assert main([*path, "--no-such-option"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    error, hint = _two_lines(err)
    assert "--no-such-option" in error
    assert f"see `mw-env {' '.join(path)} --help`" in hint and "usage: mw-env" in hint


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_debug_is_accepted_before_and_after_the_subcommand(path, capsys):
    assert main(["--debug", *path, "--help"]) == 0
    assert main([*path, "--debug", "--help"]) == 0
    assert main([*path, "--help", "--debug"]) == 0
    capsys.readouterr()


def test_unknown_command_and_missing_value(capsys):
    assert main(["no-such-command"]) == 2
    _two_lines(capsys.readouterr().err)
    assert main(["doctor", "--explain"]) == 2  # click gives this error no context
    error, hint = _two_lines(capsys.readouterr().err)
    assert "requires an argument" in error and "`mw-env doctor --help`" in hint


def test_split_debug_leaves_passthrough_arguments_alone():
    assert split_debug(["train", "--debug", "--", "--debug"]) == (["train", "--", "--debug"], True)
    assert split_debug(["detect"]) == (["detect"], False)


def test_debug_shows_the_traceback_and_keeps_the_exit_code(tmp_path, capsys):
    # Issue 20 #9: --debug used to re-raise, turning a bad-input exit 2 into Python's 1.
    assert main(["env", "--venv", str(tmp_path / "typo"), "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "InputError" in err
    assert "error: --venv" in err and "hint:" in err


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--config", "smoke", "--skip-doctor"],
        ["train", "start", "--config", "smoke", "--skip-doctor"],
        ["env"],
        ["env", "--json"],
    ],
    ids=" ".join,
)
def test_wrong_venv_is_bad_input_exit_2(args, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    typo = tmp_path / "traning-venv"
    assert main([*args, "--venv", str(typo)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    error, hint = _two_lines(err)
    assert str(typo) in error and "mw-env bootstrap --venv" in hint


def test_bootstrap_venv_that_is_a_file_is_exit_2(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["bootstrap", "--dry-run", "--offline", "--venv", str(f)]) == 2
    _two_lines(capsys.readouterr().err)


# -- env --json and runnable next steps ------------------------------------------------------------------


def _fake_bootstrapped_venv(path: Path, *, with_mw_env: bool) -> Path:
    (path / "bin").mkdir(parents=True)
    (path / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (path / "bin" / "activate").write_text(f'export PATH="{path / "bin"}:$PATH"\n. "{path / "mw-env.env"}"\n')
    (path / "mw-env.env").write_text(
        "# test\nexport HSA_OVERRIDE_GFX_VERSION=11.0.0\nexport UV_CONSTRAINT='/a b/c.txt'\n"
        "export _MW_ENV_VARS='HSA_OVERRIDE_GFX_VERSION UV_CONSTRAINT'\n"
    )
    (path / "mw-env.json").write_text(
        '{"profile": "gfx1103", "torch_requirement": "torch==2.9.1+rocm6.4", "torch_version": "2.9.1+rocm6.4", '
        '"torch_build": "rocm", "torch_index": null, "python": "3.11.7"}'
    )
    if with_mw_env:
        script = path / "bin" / "mw-env"
        script.write_text('#!/bin/sh\necho "venv mw-env $*"\n')
        script.chmod(0o755)
    return path


def _fresh_shell(script: str) -> subprocess.CompletedProcess[str]:
    """bash with a clean environment: PATH holds only the system folders, like a new login shell."""
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8"}
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)


def test_env_json(tmp_path, capsys):
    venv = _fake_bootstrapped_venv(tmp_path / "v", with_mw_env=True)
    assert main(["env", "--venv", str(venv), "--json"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    assert data["venv"] == str(venv) and data["bootstrapped"] and data["profile"] == "gfx1103"
    assert (
        data["env"]["HSA_OVERRIDE_GFX_VERSION"] == "11.0.0" and data["env"]["UV_CONSTRAINT"] == "/a b/c.txt"
    )
    assert data["path_prepend"] == str(venv / "bin")


def test_next_line_runs_in_a_fresh_shell_with_the_venvs_mw_env(tmp_path):
    from mw_env.commands.env import next_line

    venv = _fake_bootstrapped_venv(tmp_path / "v", with_mw_env=True)
    res = _fresh_shell(next_line(venv))  # the whole line, as pasted (issue 20 #3: its note broke the paste)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "venv mw-env train --config smoke"


def test_next_line_names_the_profiles_own_model_config(tmp_path):
    from mw_env.commands.env import next_line

    venv = _fake_bootstrapped_venv(tmp_path / "v", with_mw_env=True)
    assert next_line(venv, "address-tagger-cpu").endswith(
        "# then --config address-tagger-cpu for the real model"
    )
    assert "--config address-tagger for" in next_line(venv)


def test_next_line_without_mw_env_in_the_venv_names_mw_env_by_path(tmp_path):
    from mw_env.commands.env import next_line

    venv = _fake_bootstrapped_venv(tmp_path / "v", with_mw_env=False)
    words = shlex.split(next_line(venv), comments=True)
    assert words[-5:] == ["train", "--venv", str(venv), "--config", "smoke"]
    res = _fresh_shell(shlex.join([*words[:-5], "--version"]))
    assert res.returncode == 0 and "mw-env" in res.stdout, res.stderr


def test_eval_env_puts_the_venvs_mw_env_on_path(tmp_path):
    from mw_env.commands.env import self_command

    venv = _fake_bootstrapped_venv(tmp_path / "v", with_mw_env=True)
    me = shlex.join(self_command())
    res = _fresh_shell(
        f'eval "$({me} env --venv {shlex.quote(str(venv))})" && command -v mw-env && mw-env train'
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [str(venv / "bin" / "mw-env"), "venv mw-env train"]
    assert "HSA_OVERRIDE_GFX_VERSION" not in res.stderr


def test_self_command_is_absolute():
    words = __import__("mw_env.commands.env", fromlist=["x"]).self_command()
    assert Path(words[0]).is_absolute()
    assert words == [sys.executable, "-m", "mw_env"] or Path(words[0]).name == "mw-env"


def test_interrupted_bootstrap_hint_keeps_the_options_it_was_given():
    from mw_env.commands.bootstrap import bootstrap, rerun_command

    args = [
        "--venv",
        "/srv/my venv",
        "--profile",
        "gfx1103",
        "--recreate",
        "--find-links",
        "/a",
        "--find-links",
        "/b",
    ]
    ctx = bootstrap.make_context("bootstrap", args)
    again = shlex.split(rerun_command(ctx, Path("/srv/my venv")))
    assert again[:2] == ["mw-env", "bootstrap"]
    joined = " ".join(again)
    assert "--venv /srv/my venv" in joined and "--profile gfx1103" in joined and "--recreate" in again
    assert again.count("--find-links") == 2
    ctx = bootstrap.make_context("bootstrap", [])
    assert (
        rerun_command(ctx, Path("/home/u/training-venv")) == "mw-env bootstrap --venv /home/u/training-venv"
    )


def test_toml_config_gets_a_toml_hint_and_a_section_typo_names_the_section(tmp_path, capsys):
    toml = tmp_path / "c.toml"
    toml.write_text("model = 5\n")
    assert main(["train", "config", "--config", str(toml)]) == 2
    error, hint = _two_lines(capsys.readouterr().err)
    assert "[model] table" in hint and "key = value" in hint and "indented" not in hint
    toml.write_text("[[model]]\nd_model = 1\n")  # an array of tables, not a table
    assert main(["train", "config", "--config", str(toml)]) == 2
    assert "[model] table" in _two_lines(capsys.readouterr().err)[1]
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("modle:\n  d_model: 64\n")
    assert main(["train", "config", "--config", str(yaml_file)]) == 2
    error, hint = _two_lines(capsys.readouterr().err)
    assert "unknown config section 'modle'" in error and "did you mean section 'model'?" in hint
    assert "model.max_len" not in hint
    yaml_file.write_text("model:\n  d_modle: 64\n")
    assert main(["train", "config", "--config", str(yaml_file)]) == 2
    assert "model.d_model" in _two_lines(capsys.readouterr().err)[1]  # a key typo still suggests keys


def test_every_extra_hint_names_the_one_install_form():
    """Issue 20 #9: hints named `uv pip install --python ...`, `mw-env[tracking]` or `install mw-env[spm]` for the
    same fix. Every hint about a missing optional package says `mw-env bootstrap --venv V --extras train,X`
    (trainspec/extras.py), the install the torch pin covers."""
    import ast

    src = Path(__file__).resolve().parents[1] / "src" / "mw_env"
    offenders = []
    for path in [*src.glob("trainer/**/*.py"), *src.glob("trainspec/*.py"), *src.glob("runs/*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                if "mw-env[" in text or ("pip install" in text and "a bare `pip install`" not in text):
                    offenders.append(f"{path.relative_to(src)}:{node.lineno}: {text[:80]}")
    assert offenders == []
