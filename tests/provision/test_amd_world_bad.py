"""Bad index answers and a wheel without arch information, end to end: an `error:`/`hint:` before anything is
built, or a stated fallback; never a traceback, never a half-built venv presented as done."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from amdworld import profiles_dir
from indexserver import Behaviour, serve
from wheelfactory import fake_torch, simple_index

MACHINES = Path(__file__).resolve().parents[1] / "fixtures" / "machines"


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    base = tmp_path_factory.mktemp("bad-world")
    # A torch of the right build with no device packages and no HIP library: nothing tells its archs.
    noarch = simple_index(base / "noarch", [fake_torch(base / "dist", "2.14.0+rocm7.14", hip="7.14.0")])
    # An index listing torch only for another Python (cp39), and one whose listed torch file is gone (404).
    oldpy = fake_torch(base / "dist-py", "2.14.0+rocm7.14.0", hip="7.14.0", python_tag="cp39", abi_tag="cp39")
    gone = fake_torch(base / "dist-gone", "2.14.0+rocm7.14.0", hip="7.14.0")
    roots = {"noarch": noarch, "oldpy": simple_index(base / "oldpy", [oldpy])}
    roots["gone"] = simple_index(base / "gone", [gone])
    with serve(roots, {"gone": Behaviour(unserved=403, gone=frozenset({gone.name}))}) as srv:
        yield {"srv": srv, "base": base}


def _run(env, profiles: Path, venv: Path, project, *extra: str) -> subprocess.CompletedProcess[str]:
    args = ["bootstrap", "--root", str(MACHINES / "incus-780m"), "--profiles-dir", str(profiles)]
    args += ["--venv", str(venv), "--python", sys.executable, "--no-adopt-torch", "--no-doctor"]
    args += ["--project", str(project), *extra]
    return subprocess.run(
        [sys.executable, "-m", "mw_env", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("where", "needle"),
    [
        ("garbage", "answered an HTML page without links"),
        ("loop", "redirects in a loop"),
        ("nowhere", "has no project 'torch' (HTTP 404)"),
    ],
)
def test_a_bad_index_answer_stops_before_anything_is_built(
    tmp_path, hermetic_env, indexes, bad, where, needle
):
    profiles = profiles_dir(tmp_path / "p", {"multiarch": bad["srv"].url(where)})
    venv = tmp_path / "v"
    res = _run(hermetic_env, profiles, venv, indexes.project)
    out = " ".join((res.stdout + res.stderr).split())  # the terminal wraps long lines
    assert res.returncode == 1, out
    assert "error: step preflight:" in out and needle in out and "hint:" in out
    assert "Traceback" not in out and "ready" not in out
    assert not (venv / "mw-env.json").exists() and not (venv / "bin" / "python").exists()
    plan = json.loads(_run(hermetic_env, profiles, venv, indexes.project, "--dry-run", "--json").stdout)
    assert needle in plan["problem"]


@pytest.mark.slow
def test_an_index_that_never_answers_is_named_unreachable(tmp_path, hermetic_env, indexes, bad):
    profiles = profiles_dir(tmp_path / "p", {"multiarch": bad["srv"].url("hang")})
    res = _run(hermetic_env, profiles, tmp_path / "v", indexes.project)
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 1 and "timed out" in out and "hint:" in out and "Traceback" not in out
    assert bad["srv"].hung.is_set()


@pytest.mark.slow
def test_a_wheel_without_arch_information_is_a_stated_fallback(tmp_path, hermetic_env, indexes, bad):
    profiles = profiles_dir(tmp_path / "p", {"rocm714": bad["srv"].url("noarch")})
    venv = tmp_path / "v"
    res = _run(hermetic_env, profiles, venv, indexes.project, "--source", "rocm7.14")
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 0, out
    assert "shows no GPU arch list" in out and "going by the table of rocm7.14" in out
    record = json.loads((venv / "mw-env.json").read_text())
    assert record["wheel_archs"] == [] and record["wheel_archs_how"] == "unknown"
    assert record["arch_decision"].endswith("could not be read, so the table of rocm7.14 decides")
    # The table: no gfx1103 in rocm7.14 (issue 40), so the planned override stays.
    assert "export HSA_OVERRIDE_GFX_VERSION=11.0.0" in (venv / "mw-env.env").read_text()


def test_an_index_with_torch_only_for_another_python_stops_before_anything_is_built(
    tmp_path, hermetic_env, indexes, bad
):
    profiles = profiles_dir(tmp_path / "p", {"multiarch": bad["srv"].url("oldpy")})
    venv = tmp_path / "v"
    res = _run(hermetic_env, profiles, venv, indexes.project, "--all-devices")
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 1, out
    assert "lists no torch+rocm7.14 wheel (its +rocm7.14 wheels are for cp39" in out and "--python" in out
    assert not (venv / "bin" / "python").exists() and "Traceback" not in out


@pytest.mark.slow
def test_a_listed_torch_file_that_answers_404_is_named(tmp_path, hermetic_env, indexes, bad):
    profiles = profiles_dir(tmp_path / "p", {"multiarch": bad["srv"].url("gone")})
    venv = tmp_path / "v"
    res = _run({**hermetic_env, "UV_HTTP_RETRIES": "0"}, profiles, venv, indexes.project, "--all-devices")
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 1, out
    assert f"the index amd-multiarch ({bad['srv'].url('gone')}) answered HTTP 404 for torch" in out
    assert "lists a file of torch that answers 404" in out and "Traceback" not in out
