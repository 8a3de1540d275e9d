"""Issue 40: the suite leaves its user's state alone (tests/userstate.py, wired in tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import userstate
from mw_env.venv.record import last_venv_file

TESTS = Path(__file__).resolve().parent


def test_this_process_runs_with_home_and_state_in_the_session_temp_folder(tmp_path_factory):
    from conftest import USER_ENV

    base = tmp_path_factory.getbasetemp()
    for var in ("HOME", *userstate.XDG):
        assert base in Path(os.environ[var]).parents, var
    assert base in last_venv_file().parents
    assert base not in last_venv_file(USER_ENV).parents  # the user's own, watched by the session
    # uv's cache stays the user's: a cold cache per worker would make every install test slow.
    assert os.environ["UV_CACHE_DIR"] == userstate.shared(USER_ENV)["UV_CACHE_DIR"]


def test_redirected_env_keeps_the_users_pip_and_uv_configuration_readable(tmp_path):
    user = tmp_path / "user"
    (user / ".config" / "pip").mkdir(parents=True)
    (user / ".config" / "pip" / "pip.conf").write_text("[global]\nfind-links = /w\n")
    (user / ".pyenv").mkdir()
    env = userstate.redirected_env({"HOME": str(user)}, tmp_path / "home")
    assert env["HOME"] == str(tmp_path / "home") and env["XDG_STATE_HOME"].startswith(env["HOME"])
    assert env["MW_ENV_STATE_DIR"].startswith(env["HOME"])
    assert (tmp_path / "home" / ".config" / "pip" / "pip.conf").read_text() == "[global]\nfind-links = /w\n"
    assert env["UV_CACHE_DIR"] == str(user / ".cache" / "uv") and env["PYENV_ROOT"] == str(user / ".pyenv")


def test_a_write_to_the_state_file_or_home_is_a_change(tmp_path):
    user = {"HOME": str(tmp_path / "user")}
    (tmp_path / "user").mkdir()
    before = userstate.snapshot(user)
    assert userstate.changes(before["mw-env"], userstate.snapshot(user)["mw-env"]) == []
    (tmp_path / "user" / ".cache" / "uv").mkdir(parents=True)  # the shared cache may be made by the suite
    assert userstate.changes(before["home"], userstate.snapshot(user)["home"]) == []
    (tmp_path / "user" / ".config" / "procps").mkdir(parents=True)  # another process's: reported only
    assert userstate.changes(before["mw-env"], userstate.snapshot(user)["mw-env"]) == []
    assert "procps" in " ".join(userstate.changes(before["home"], userstate.snapshot(user)["home"]))
    from mw_env.venv.record import remember_venv

    remember_venv(tmp_path / "venv", user)
    found = userstate.changes(before["mw-env"], userstate.snapshot(user)["mw-env"])
    assert any("last-venv: created" in line and str(tmp_path / "venv") in line for line in found), found
    (tmp_path / "user" / "training-venv").mkdir()
    (tmp_path / "user" / "training-venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert "training-venv" in " ".join(
        userstate.changes(before["mw-env"], userstate.snapshot(user)["mw-env"])
    )


def test_a_name_the_checkout_gained_is_a_change_and_a_removed_one_is_not():
    # tests/conftest.py's checkout guard: a run folder a test left (runs/train/corpus-index.json from a
    # corpus opened with the default relative runtime.out_dir) fails the session, with the way to the test.
    from conftest import _new_in_checkout

    before = {"/r/": ["Makefile", "src"], "/r/runs/": None}
    assert _new_in_checkout(before, {"/r/": ["src"], "/r/runs/": None}) == []  # a `make clean` meanwhile
    found = _new_in_checkout(before, {"/r/": ["Makefile", "runs", "src"], "/r/runs/": ["train"]})
    assert found[:2] == ["/r/: new ['runs']", "/r/runs/: new ['train']"], found
    assert (
        "runtime.out_dir under its tmp_path" in found[2] and "corpus-index.json names the writer" in found[2]
    )


@pytest.mark.slow
def test_a_session_whose_test_writes_the_users_state_fails(tmp_path):
    # A session of its own, with this suite's hooks, for a user whose HOME is a temp folder: one test writes
    # that user's state file the way tests/envlock once did (an env captured before the test's own).
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "conftest.py").write_text(
        textwrap.dedent(f"""
        import importlib.util, sys
        sys.path.insert(0, {str(TESTS)!r})
        spec = importlib.util.spec_from_file_location("suite_conftest", {str(TESTS / "conftest.py")!r})
        suite = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(suite)
        pytest_sessionstart, pytest_sessionfinish = suite.pytest_sessionstart, suite.pytest_sessionfinish
        """)
    )
    (inner / "test_leak.py").write_text(
        textwrap.dedent("""
        import os
        from pathlib import Path
        from mw_env.venv.record import remember_venv

        def test_leak(tmp_path):
            remember_venv(tmp_path / "venv", {"HOME": os.environ["LEAKY_USER_HOME"]})
        """)
    )
    home = tmp_path / "user"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "LEAKY_USER_HOME": str(home)}
    for var in (*userstate.XDG, "MW_ENV_STATE_DIR"):
        env.pop(var, None)
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(inner)],
        cwd=inner,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert "1 passed" in res.stdout and "changed the user's mw-env state" in res.stdout, res.stdout
    assert f"{home}/.local/state/mw-env/last-venv: created" in res.stdout, res.stdout
