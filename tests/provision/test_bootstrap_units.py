"""Sources, wheelhouse matching, reachability, records, python choice, the dry-run contract."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.provision.choose import ChoiceRequest, choose, exact_requirement
from mw_env.sources.wheelhouse import discover, matching_torch, probe_index, unreachable_hint, wheels_in
from mw_env.venv.record import VenvRecord, default_venv, read_record, write_record
from wheelfactory import fake_torch

from .provision_support import cpu_bootstrap_args


def test_discover_honours_cli_env_and_pip_conf_in_order(tmp_path):
    xdg = tmp_path / "xdg" / "pip"
    xdg.mkdir(parents=True)
    (xdg / "pip.conf").write_text(
        "[global]\nfind-links = /conf/wheels\nextra-index-url = file:///a/simple file:///b/simple\n"
        "constraint = /etc/cons.txt\n[install]\nindex-url = https://mirror.example/simple\n"
    )
    env = {"HOME": str(tmp_path), "XDG_CONFIG_DIRS": str(tmp_path / "xdg"), "UV_FIND_LINKS": "/uv/wheels"}
    s = discover(env=env, find_links=["/cli/wheels"])
    assert s.find_links == ("/cli/wheels", "/uv/wheels", "/conf/wheels")
    assert s.index_url == "https://mirror.example/simple"
    assert s.extra_index_urls == ("file:///a/simple", "file:///b/simple")
    assert s.constraints == ("/etc/cons.txt",)
    assert s.uv_args()[:2] == ["--find-links", "/cli/wheels"]
    # PIP_FIND_LINKS replaces the config file's value, as in pip; uv's own index variable wins over pip's.
    s2 = discover(
        env={**env, "PIP_FIND_LINKS": "/env/wheels", "UV_DEFAULT_INDEX": "https://uv.example/simple"}
    )
    assert s2.find_links == ("/uv/wheels", "/env/wheels")
    assert s2.index_url is None and "UV_DEFAULT_INDEX" in s2.uv_native
    # A broken pip.conf is ignored (pip reports it itself), never a traceback here.
    (xdg / "pip.conf").write_text("[global\nfind-links")
    assert discover(env=env).find_links == ("/uv/wheels",)


def test_wheelhouse_matching_picks_build_and_range(tmp_path):
    for v, kw in (
        ("2.13.0+cpu", {}),
        ("2.9.1+rocm6.4", {"hip": "6.4"}),
        ("2.14.1", {"cuda": "13.0"}),
        ("2.8.0+cpu", {}),
    ):
        fake_torch(
            tmp_path, v, python_tag="cp311", abi_tag="cp311", platform_tag="manylinux_2_28_x86_64", **kw
        )
    wheels = wheels_in([str(tmp_path), "https://remote.example/wheels"], "torch")
    good, other = matching_torch(wheels, local_tag="+cpu", specifier=">=2.9,<2.15")
    assert [w.version for w in good] == ["2.13.0+cpu"] and [w.version for w in other] == ["2.8.0+cpu"]
    assert (
        good[0].fits_python("3.11.7") and not good[0].fits_python("3.12.1") and good[0].pythons() == ["3.11"]
    )
    rocm, _ = matching_torch(wheels, local_tag="+rocm6.4", specifier="==2.9.1")
    assert [w.version for w in rocm] == ["2.9.1+rocm6.4"]


def test_exact_requirement():
    assert exact_requirement("==2.9.1", "+rocm6.4") == "torch==2.9.1+rocm6.4"
    assert exact_requirement(">=2.9,<2.15", "+cpu") == "torch>=2.9,<2.15"


def test_probe_tells_dns_failure_from_refused_connection(tmp_path):
    dns = probe_index("https://no-such-host.invalid/whl/rocm6.4", env={})
    assert not dns.ok and dns.reason == "dns"
    assert "firewall" in unreachable_hint(dns) and "--find-links" in unreachable_hint(dns)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused = probe_index(f"http://127.0.0.1:{port}/simple", env={})
    assert not refused.ok and refused.reason == "refused"
    assert probe_index(tmp_path.as_uri(), env={}).ok
    assert probe_index((tmp_path / "missing").as_uri(), env={}).reason == "missing"


def test_python_fallback_warns_and_explicit_request_does_not_fall_back(tmp_path, uv_bin):
    fake_torch(tmp_path, "2.13.0+cpu", python_tag=f"cp3{sys.version_info[1]}", abi_tag="none")
    common = dict(
        uv=uv_bin,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
        build="cpu",
        version_spec=">=2.9",
        local_tag="+cpu",
        index_url="https://no-such-host.invalid/whl/cpu",
        offline=False,
        requires_python=">=3.10",
    )
    from mw_env.sources.wheelhouse import Sources

    src = Sources(find_links=(str(tmp_path),))
    got = choose(ChoiceRequest(request="3.99", explicit=False, sources=src, **common))
    assert got.problem is None and got.torch.origin == "wheelhouse"
    assert got.python.version.startswith(f"3.{sys.version_info[1]}.")
    assert any("the default Python 3.99 has no wheel there" in n for n in got.notes) and got.warnings == ()
    strict = choose(ChoiceRequest(request="3.99", explicit=True, sources=src, **common))
    assert strict.torch is None and "3.99 was not found" in strict.problem.message and strict.problem.input
    # No wheel and an unreachable index: a clear problem, with the DNS hint.
    none = choose(ChoiceRequest(request=sys.executable, explicit=True, sources=Sources(), **common))
    assert none.torch is None and "unreachable" in none.problem.message and "DNS" in none.problem.hint
    assert not none.problem.input  # not the user's input: the preflight step stops on it


def test_record_roundtrip_and_bad_input(tmp_path):
    assert default_venv({"HOME": "/h"}) == Path("/h/training-venv")
    assert default_venv({"MW_ENV_VENV": "/v", "HOME": "/h"}) == Path("/v")
    assert read_record(tmp_path) is None
    rec = VenvRecord(
        profile="gfx1103",
        torch_requirement="torch==2.9.1+rocm6.4",
        torch_version="2.9.1+rocm6.4",
        torch_build="rocm",
        torch_index="https://x",
        python="3.12.3",
        env={"A": "1"},
        extras=("train",),
    )
    write_record(tmp_path, rec)
    assert read_record(tmp_path) == rec
    (tmp_path / "mw-env.json").write_text("{broken")
    with pytest.raises(InputError, match="not valid JSON"):
        read_record(tmp_path)
    (tmp_path / "mw-env.json").write_text(json.dumps({"profile": "x"}))
    with pytest.raises(InputError, match="torch_requirement"):
        read_record(tmp_path)


def _mw(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mw_env", *args], env=env, capture_output=True, text=True, check=False
    )


@pytest.mark.slow
def test_dry_run_json_contract_and_bad_input(tmp_path, hermetic_env, indexes):
    env = {**hermetic_env, "PYTHONPATH": ":".join(sys.path)}
    venv = tmp_path / "v"
    extra = ["--find-links", str(indexes.cpu_links), "--no-adopt-torch"]
    base = cpu_bootstrap_args(venv, indexes, tmp_path, *extra)
    res = _mw([*base, "--dry-run", "--json"], env)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["profile"] == "cpu" and data["venv"] == str(venv)
    ids = [s["id"] for s in data["steps"]]
    assert ids.index("torch") < ids.index("extras") and ids[-1] == "doctor"
    torch_step = next(s for s in data["steps"] if s["id"] == "torch")
    assert torch_step["command"][-1] == "torch==2.10.0+cpu" and torch_step["done"] is False
    assert not venv.exists()  # dry run changes nothing

    bad = _mw([*base, "--extras", "nope", "--dry-run"], env)
    assert bad.returncode == 2 and "nope" in bad.stderr and "train" in bad.stderr
    (tmp_path / "notvenv").mkdir()
    (tmp_path / "notvenv" / "keep.txt").write_text("mine")
    bad = _mw([*base[:6], str(tmp_path / "notvenv"), *base[7:], "--dry-run"], env)
    assert bad.returncode == 2 and "not a virtual environment" in bad.stderr


def test_env_command_prints_exports(tmp_path, hermetic_env):
    (tmp_path / "mw-env.env").write_text(
        "# c\nexport HSA_OVERRIDE_GFX_VERSION=11.0.0\nexport UV_CONSTRAINT=/v/c\n"
    )
    res = _mw(["env", "--venv", str(tmp_path)], {**hermetic_env, "PYTHONPATH": ":".join(sys.path)})
    assert res.returncode == 0
    assert res.stdout == "export HSA_OVERRIDE_GFX_VERSION=11.0.0\nexport UV_CONSTRAINT=/v/c\n"


def _demo_plan(tmp_path, hermetic_env, indexes, **opts):
    from mw_env.provision.plan import BootstrapOptions, plan

    from .provision_support import FakeSource

    cpu = FakeSource(build="cpu", index_url=None, version=">=2.9", local_tag="+cpu")
    options = BootstrapOptions(
        venv=tmp_path / "venv",
        python=sys.executable,
        python_explicit=True,
        project=indexes.project,
        find_links=(str(indexes.cpu_links),),
        adopt=False,
        doctor=False,
        **opts,
    )
    return plan(profile="cpu", torch=cpu, runtime_env={}, options=options, env=hermetic_env)


def test_disk_full_stops_in_preflight_and_changes_nothing(tmp_path, hermetic_env, indexes):
    from mw_env.provision.execute import execute

    p = _demo_plan(tmp_path, hermetic_env, indexes)
    result = execute(replace(p, disk_need=1 << 60))
    assert not result.ok and result.failed_step == "preflight"
    assert "not enough disk space" in result.error.message and "--venv" in result.error.hint
    assert not (tmp_path / "venv").exists()


def test_uv_missing_and_not_installable_names_what_was_tried(tmp_path):
    from mw_env.base.errors import StepFailed
    from mw_env.sources.uv import install_uv

    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'No module named pip' >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(StepFailed) as info:
        install_uv(python=str(broken), env={"HOME": str(tmp_path), "PATH": "/nonexistent"})
    assert "could not be installed" in info.value.message and "pip install --user" in info.value.message
    assert "pipx install uv" in info.value.hint


def test_ctrl_c_marks_the_step_and_keeps_state(tmp_path, hermetic_env, indexes, monkeypatch):
    import json as _json

    from mw_env.provision import execute as ex
    from mw_env.provision import table

    p = _demo_plan(tmp_path, hermetic_env, indexes)

    def interrupted(run, step):
        raise KeyboardInterrupt

    monkeypatch.setitem(table.BY_ID, "extras", replace(table.EXTRAS, action=interrupted))
    with pytest.raises(KeyboardInterrupt):
        ex.execute(p)
    state = _json.loads((tmp_path / "venv" / ".mw-env-state.json").read_text())
    assert state["steps"]["extras"]["status"] == "interrupted"
    assert state["steps"]["torch"]["status"] == "done"
    monkeypatch.undo()
    resumed = _demo_plan(tmp_path, hermetic_env, indexes)
    # The verify ran alongside the interrupted extras and was stopped with it: it is redone too.
    assert [s.id for s in resumed.steps if not s.done] == [
        "preflight",
        "verify-torch",
        "extras",
        "env",
        "lock",
    ]
    assert ex.execute(resumed).ok


def test_pin_env_keeps_the_users_own_constraints():
    from mw_env.provision.pin import pin_env

    env = pin_env(Path("/v"), user_constraints=["/etc/pip-cons.txt"], uv_constraints=["/u/uv-cons.txt"])
    assert env["PIP_CONSTRAINT"] == "/v/mw-env-constraints.txt /etc/pip-cons.txt"
    assert env["UV_CONSTRAINT"] == "/v/mw-env-constraints.txt /u/uv-cons.txt"
    adopted = pin_env(Path("/v"), adopted=True)
    assert adopted["UV_OVERRIDE"] == "/v/mw-env-overrides.txt" and "UV_CONSTRAINT" not in adopted


def test_activate_patch_is_idempotent_and_hooks_deactivate():
    from mw_env.provision.pin import ACTIVATE_BEGIN, patched_activate

    original = "deactivate () {\n    unset VIRTUAL_ENV\n}\nexport VIRTUAL_ENV=/v\n"
    once = patched_activate(original, Path("/v"))
    assert patched_activate(once, Path("/v")) == once
    assert once.count(ACTIVATE_BEGIN) == 2  # the deactivate hook and the source line
    assert once.index("_MW_ENV_VARS") < once.index("unset VIRTUAL_ENV")
    assert once.rstrip().endswith("# <<< mw-env <<<") and ". /v/mw-env.env;" in once


def _choose_cpu(uv_bin, env: dict[str, str], request: str, index_url: str, *, wheelhouse: Path):
    """choose() for a CPU torch >=2.9 from `wheelhouse` (find-links) or `index_url`, the Python not explicit."""
    from mw_env.sources.wheelhouse import Sources

    return choose(
        ChoiceRequest(
            uv=uv_bin,
            env=env,
            request=request,
            explicit=False,
            build="cpu",
            version_spec=">=2.9",
            local_tag="+cpu",
            index_url=index_url,
            offline=False,
            requires_python=">=3.10",
            sources=Sources(find_links=(str(wheelhouse),)),
        )
    )


def test_wheel_for_another_python_wins_when_the_index_is_unreachable(tmp_path, uv_bin):
    """3.12 is there, but the only torch at hand is a cp3X wheel for the running Python: use that Python."""
    import glob

    mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
    others = [
        p
        for p in glob.glob(
            str(
                Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
                / "versions/3.1[0-4]*/bin/python3.1*"
            )
        )
        if not p.endswith(f"python{mine}") and Path(p).name.count(".") == 1
    ]
    if not others:
        pytest.skip("needs a second Python version on this machine")
    other = Path(others[0])
    other_minor = other.name.removeprefix("python")
    fake_torch(tmp_path, "2.13.0+cpu", python_tag=f"cp3{sys.version_info[1]}", abi_tag="none")
    env = {"PATH": f"{other.parent}:{Path(sys.executable).parent}:/usr/bin:/bin"}
    got = _choose_cpu(uv_bin, env, other_minor, "https://no-such-host.invalid/whl/cpu", wheelhouse=tmp_path)
    assert got.torch is not None and got.torch.origin == "wheelhouse", got
    assert got.python.version.startswith(mine + ".")
    # The wheelhouse decides: a one-line note, no warning, and the index is never asked.
    assert got.warnings == () and got.reach is None, got.warnings
    assert len(got.notes) == 1 and f"fits Python {mine}" in got.notes[0]


def test_wheelhouse_that_fits_picks_the_python_with_no_network(tmp_path, uv_bin, monkeypatch):
    """The default Python (3.12) is missing, the wheelhouse's torch fits this one: no index lookup at all."""
    import socket

    import mw_env.provision.choose as choose_mod

    def no_network(*args, **kwargs):
        raise AssertionError(f"network contacted: {args}")

    monkeypatch.setattr(choose_mod, "probe_index", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
    fake_torch(tmp_path, "2.13.0+cpu", python_tag=f"cp3{sys.version_info[1]}", abi_tag="none")
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    got = _choose_cpu(uv_bin, env, "3.99", "https://download.pytorch.org/whl/cpu", wheelhouse=tmp_path)
    assert got.torch is not None and got.torch.origin == "wheelhouse" and got.python.version.startswith(mine)
    assert got.warnings == () and got.notes and "the default Python 3.99 has no wheel there" in got.notes[0]


def test_no_index_settings_mean_find_links_only(tmp_path):
    s = discover(
        env={
            "HOME": str(tmp_path),
            "XDG_CONFIG_DIRS": str(tmp_path),
            "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": "/w",
        }
    )
    assert s.no_index and s.uv_args() == ["--no-index", "--find-links", "/w"]
    assert not discover(env={"HOME": str(tmp_path), "XDG_CONFIG_DIRS": str(tmp_path)}).no_index


@pytest.mark.registry
@pytest.mark.slow
def test_uv_is_installed_from_pypi_into_the_users_environment(tmp_path):

    from mw_env.sources.uv import find_uv, install_uv

    if not probe_index("https://pypi.org/simple", env=os.environ).ok:
        pytest.skip("PyPI is not reachable")
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "PATH": "/usr/bin:/bin",
        "PYTHONUSERBASE": str(tmp_path / ".local"),
    }
    env.pop("UV", None)
    uv = install_uv(python=sys.executable, env=env, timeout=600)
    assert Path(uv).is_file() and str(tmp_path) in uv
    version = subprocess.run([uv, "--version"], capture_output=True, text=True, check=True).stdout
    assert version.startswith("uv ")
    assert find_uv({"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}) is not None


def test_too_old_or_broken_uv_is_refused(tmp_path):
    from mw_env.base.errors import StepFailed
    from mw_env.sources.uv import check_version

    old = tmp_path / "uv-old"
    old.write_text("#!/bin/sh\necho 'uv 0.4.1'\n")
    broken = tmp_path / "uv-broken"
    broken.write_text("#!/bin/sh\necho 'segfault' >&2\nexit 139\n")
    for f in (old, broken):
        f.chmod(0o755)
    with pytest.raises(StepFailed, match=r"uv 0\.4\.1 .* too old") as info:
        check_version(str(old), {})
    assert "self update" in info.value.hint
    with pytest.raises(StepFailed, match="does not run as uv"):
        check_version(str(broken), {})
    from .provision_support import find_uv_binary

    real = find_uv_binary()
    if real:
        assert check_version(real, {}).count(".") >= 2


def test_a_full_disk_while_writing_is_a_clear_step_failure(tmp_path, hermetic_env, indexes, monkeypatch):
    import errno

    from mw_env.provision import execute as ex
    from mw_env.provision import table

    def no_space(run, step):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "venv" / "mw-env.env"))

    monkeypatch.setitem(table.BY_ID, "env", replace(table.ENV, action=no_space))
    result = ex.execute(_demo_plan(tmp_path, hermetic_env, indexes))
    assert not result.ok and result.failed_step == "env"
    assert "cannot write" in result.error.message and "mw-env.env: the disk is full" in result.error.message
    assert "free space" in result.error.hint
    assert (tmp_path / "venv" / "bin" / "python").exists()  # everything before the failure is kept
