"""Issue 11 on the installer: credentials never in clear, the lock private and emptied, resume keeps the origin."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from mw_env.provision.execute import execute
from mw_env.provision.plan import BootstrapOptions, plan
from mw_env.provision.state import lock_path, venv_lock
from mw_env.venv.record import read_record

from .provision_support import FakeSource, cpu_bootstrap_args, offline_options

TOKEN = "s3cr3tTOKEN"
SECRET_INDEX = f"https://user:{TOKEN}@mirror.example/whl/cpu"
CPU = FakeSource(build="cpu", index_url=None, version=">=2.9", local_tag="+cpu")


def test_credentials_in_torch_index_are_redacted_in_warnings_and_dry_run_json(
    tmp_path, hermetic_env, indexes
):
    options = BootstrapOptions(
        venv=tmp_path / "venv",
        python=sys.executable,
        python_explicit=True,
        project=indexes.project,
        find_links=(str(indexes.cpu_links),),
        torch_index=SECRET_INDEX,
        adopt=False,
    )
    p = plan(profile="cpu", torch=CPU, runtime_env={}, options=options, env=hermetic_env)
    assert any("user:***@mirror.example" in w for w in p.warnings), p.warnings
    assert TOKEN not in json.dumps(p.to_dict())
    # Without a wheelhouse, torch comes from the index: uv gets the real URL, what is shown does not.
    no_wheels = plan(
        profile="cpu",
        torch=CPU,
        runtime_env={},
        options=BootstrapOptions(
            venv=tmp_path / "v2",
            python=sys.executable,
            python_explicit=True,
            project=indexes.project,
            torch_index=SECRET_INDEX,
            adopt=False,
            offline=True,
        ),
        env={**hermetic_env, "PIP_FIND_LINKS": "", "UV_FIND_LINKS": ""},
    )
    shown = json.dumps(no_wheels.to_dict())
    assert TOKEN not in shown
    # The real URL is in the torch step's own uv configuration (written 0600 when the step runs).
    from mw_env.provision.torchindex import config_text

    assert TOKEN in config_text(no_wheels.torch_indexes)
    assert "user:***@mirror.example" in shown


def test_the_lock_file_is_0600_redacted_and_emptied_on_release(tmp_path):
    venv = tmp_path / "venv"
    with venv_lock(venv, argv=["mw-env", "bootstrap", "--torch-index", SECRET_INDEX]) as path:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        text = path.read_text()
        assert TOKEN not in text and "user:***@mirror.example" in text
    assert lock_path(venv).read_text() == ""  # released: nobody holds it, nothing left to read


def test_an_old_world_readable_lock_file_is_made_private(tmp_path):
    venv = tmp_path / "venv"
    old = lock_path(venv)
    old.write_text('{"argv": ["old"]}')
    old.chmod(0o644)
    with venv_lock(venv, argv=["x"]):
        assert stat.S_IMODE(os.stat(old).st_mode) == 0o600


def _dry_run(tmp_path, hermetic_env, indexes, venv, *extra: str) -> subprocess.CompletedProcess[str]:
    """`python -m mw_env bootstrap --dry-run` for the CPU profile on an empty fake root, as a user runs it."""
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    env = {**hermetic_env, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = cpu_bootstrap_args(venv, indexes, root, "--dry-run", *extra)
    res = subprocess.run(
        [sys.executable, "-m", "mw_env", *argv],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return res


def test_cli_dry_run_text_and_json_never_print_the_token(tmp_path, hermetic_env, indexes):
    for extra in ([], ["--json"], ["--find-links", str(indexes.cpu_links)]):
        res = _dry_run(tmp_path, hermetic_env, indexes, tmp_path / "v", "--torch-index", SECRET_INDEX, *extra)
        assert TOKEN not in res.stdout + res.stderr
        assert "user:***@mirror.example" in res.stdout + res.stderr, (extra, res.stdout, res.stderr)


def test_a_path_with_an_emoji_code_is_printed_as_written(tmp_path, hermetic_env, indexes):
    # rich turns ":smile:" into an emoji unless told not to: a venv path must come out as the user wrote it.
    # A ':' in a venv path is refused (issue 40: PATH, which activate prepends VENV/bin to, splits on it), and
    # the refusal names the path as written.
    venv = tmp_path / "runs:smile:v"
    root = tmp_path / "root"
    root.mkdir()
    env = {**hermetic_env, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = cpu_bootstrap_args(venv, indexes, root, "--dry-run")
    res = subprocess.run([sys.executable, "-m", "mw_env", *argv], env=env, capture_output=True, text=True)
    assert res.returncode == 2 and f"--venv {str(venv)!r}: it holds ':'" in res.stderr, res.stderr
    assert "\N{SMILING FACE WITH OPEN MOUTH AND SMILING EYES}" not in res.stdout + res.stderr


def test_resume_after_a_kill_between_torch_and_verify_keeps_the_wheelhouse_origin(
    tmp_path, hermetic_env, indexes
):
    venv = tmp_path / "venv"
    options = offline_options(venv, indexes.project, find_links=(str(indexes.cpu_links),), offline=True)
    assert execute(plan(profile="cpu", torch=CPU, runtime_env={}, options=options, env=hermetic_env)).ok
    wheel = read_record(venv).torch_index
    assert wheel and wheel.endswith(".whl")
    # The state a kill right after the torch step leaves: torch done, nothing after it, no record yet.
    state_file = venv / ".mw-env-state.json"
    state = json.loads(state_file.read_text())
    order = [
        s.id for s in plan(profile="cpu", torch=CPU, runtime_env={}, options=options, env=hermetic_env).steps
    ]
    after = order[order.index("torch") + 1 :]
    state["steps"] = {k: v for k, v in state["steps"].items() if k not in after}
    state_file.write_text(json.dumps(state))
    (venv / "mw-env.json").unlink()

    resumed = plan(profile="cpu", torch=CPU, runtime_env={}, options=options, env=hermetic_env)
    assert resumed.torch.origin == "installed"
    assert execute(resumed).ok
    assert read_record(venv).torch_index == wheel  # not None: the doctor must not ask for the network


def test_network_check_skips_for_a_resumed_wheelhouse_venv(tmp_path):
    # What the doctor does with such a record: a local origin needs no index.
    from types import SimpleNamespace

    from mw_env.checks.network import check_network

    ctx = SimpleNamespace(
        network=True,
        record=SimpleNamespace(torch_index="/opt/wheels/torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"),
        selection=SimpleNamespace(torch=SimpleNamespace(index_url="https://download.pytorch.org/whl/cpu")),
    )
    (res,) = check_network(ctx)
    assert res.status == "skip" and "not needed" in res.detail


def test_a_lock_path_that_is_not_a_file_is_a_clean_error(tmp_path):
    from mw_env.base.errors import MwEnvError

    venv = tmp_path / "venv"
    lock_path(venv).mkdir(parents=True)
    with pytest.raises(MwEnvError, match="cannot create the bootstrap lock"), venv_lock(venv, argv=[]):
        pass
    fifo_venv = tmp_path / "v2"
    os.mkfifo(lock_path(fifo_venv))  # opened non-blocking, then refused: no hang
    with pytest.raises(MwEnvError, match="not a regular file"), venv_lock(fifo_venv, argv=[]):
        pass
