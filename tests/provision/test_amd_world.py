"""The 2026 AMD wheel world end to end, on local indexes laid out like the real ones (tests/amdworld.py) served over
loopback HTTP: each fake machine root gets a native source, only its GPU's device package, no override and never
PyPI's placeholder; a forced source without the GPU's kernels gets the override and the hang warning; a wheel whose
own arch list contradicts the table wins over it, and the record and the doctor say so."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from amdworld import BEHAVIOURS, TORCH_DEPS, build_world, profiles_dir
from indexserver import AMD, Behaviour, serve
from mw_env.venv.venvinfo import installed_version

MACHINES = Path(__file__).resolve().parents[1] / "fixtures" / "machines"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("amd-world")
    w = build_world(base)
    roots = {"multiarch": w.multiarch, "rocm714": w.rocm714, "lacking": w.rocm714_lacking, "pypi": w.pypi}
    # The same indexes failing the way real ones do: a copy of AMD's index given as --torch-index (read as an
    # index that answers 404), a default index that wants credentials, one that fails with 500.
    roots |= {"amdcopy": w.multiarch, "pypi401": w.pypi, "pypi500": w.pypi}
    roots |= {"simple": w.pypi}  # served behind Basic auth as "private" (user u, token t)
    failing = {"amdcopy": AMD, "pypi401": Behaviour(status=401), "pypi500": Behaviour(status=500)}
    with serve(roots, {**BEHAVIOURS, **failing}) as srv:
        profiles = profiles_dir(
            base / "profiles", {"multiarch": srv.url("multiarch"), "rocm714": srv.url("rocm714")}
        )
        lacking = profiles_dir(
            base / "lacking", {"multiarch": srv.url("multiarch"), "rocm714": srv.url("lacking")}
        )
        _claim_gfx1103(lacking / "sources.yaml")
        yield {"world": w, "srv": srv, "profiles": profiles, "lacking": lacking}


def _claim_gfx1103(sources: Path) -> None:
    """A user's table that claims rocm7.14 carries gfx1103, as a confirmed fact: the shipped one does not (its arch
    list is inferred and lacks gfx1103, issue 40), so only such a table can be contradicted by the wheel."""
    text = sources.read_text()
    start = text.index("  - id: rocm7.14\n")
    end = text.index("\n  - id: ", start + 1)
    block = text[start:end].replace("gfx1102, gfx1150", "gfx1102, gfx1103, gfx1150", 1)
    block = re.sub(r"    inferred:\n      arch_list: >-\n(?:        .*\n)+", "", block)
    block = block.replace(
        "    evidence:\n", "    evidence:\n      arch_list: [https://example.invalid/a-users-table]\n", 1
    )
    sources.write_text(text[:start] + block + text[end:])


@pytest.fixture
def env(hermetic_env, world):
    pypi = world["srv"].url("pypi")
    # No PYTHONPATH: the venv's own python must see only the venv (this interpreter has mw_env installed).
    return {**hermetic_env, "PIP_INDEX_URL": pypi, "UV_DEFAULT_INDEX": pypi}


def _mw(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mw_env", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def _bootstrap(env, world, root: str, venv: Path, *extra: str, profiles: str = "profiles", project=None):
    args = ["bootstrap", "--root", str(MACHINES / root), "--profiles-dir", str(world[profiles])]
    args += ["--venv", str(venv), "--python", sys.executable, "--no-adopt-torch", "--no-doctor", *extra]
    if project is not None:
        args += ["--project", str(project)]
    return _mw(env, *args)


@pytest.mark.parametrize(("root", "gfx"), [("incus-780m", "gfx1103"), ("strix-halo-8060s", "gfx1151")])
def test_dry_run_json_says_version_index_device_packages_size_and_the_override_decision(
    tmp_path, env, world, indexes, root, gfx
):
    res = _bootstrap(env, world, root, tmp_path / "v", "--dry-run", "--json", project=indexes.project)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    srv = world["srv"]
    assert plan["torch_source"] == "amd-multiarch" and plan["index"] == srv.url("multiarch")
    assert plan["torch_version"] == "2.14.0+rocm7.14.0"  # the newest the index lists in the profile's range
    assert plan["device_packages"] == [f"amd-torch-device-{gfx}"] and plan["torch_extras"] == [
        f"device-{gfx}"
    ]
    w = world["world"]
    sizes = [
        (w.multiarch / "files" / "torch-2.14.0+rocm7.14.0-py3-none-any.whl").stat().st_size,
        (w.multiarch / "files" / f"amd_torch_device_{gfx}-2.14.0+rocm7.14.0-py3-none-any.whl").stat().st_size,
    ]
    assert plan["download_bytes"] == sum(sizes) and plan["download_note"] == "stated by the index"
    assert plan["override"]["set"] is False and plan["env"] == {}
    disk = plan["disk"]  # profiles/disk.py: one GPU's device package, the figure the doctor quotes too
    assert disk["kind"] == "one-gpu" and disk["source"] == "amd-multiarch" and disk["need_bytes"] > 6 * 10**9
    assert f"ships native {gfx} kernels" in plan["override"]["reason"]
    cmd = next(s for s in plan["steps"] if s["id"] == "torch")["command"]
    assert f"torch[device-{gfx}]==2.14.0+rocm7.14.0" in cmd
    assert "--index" not in cmd and "first-index" in cmd  # the indexes are in the step's own uv.toml
    assert cmd[cmd.index("--config-file") + 1] == str(tmp_path / "v" / "mw-env-torch-uv.toml")
    amd, default = plan["indexes"]
    assert amd["name"] == "amd-multiarch" and amd["url"] == srv.url("multiarch") and amd["role"] == "torch"
    assert (
        amd["ignore_error_codes"] == [403]
        and "answers 403 for a project it does not hold" in amd["behaviour"]
    )
    assert default["url"] == srv.url("pypi") and default["role"] == "default"
    assert any(n.startswith("torch 2.14.0+rocm7.14.0: the newest +rocm7.14 release") for n in plan["notes"])
    assert f"amd-multiarch won: the newest torch (2.14) with native {gfx} kernels" in plan["reason"]
    # rocm7.14's arch list is inferred, not shown by a source (issue 40): it is never weighed as a native rival.
    assert "rocm7.14 has" not in plan["reason"]


def test_the_dry_run_text_shows_the_indexes_with_how_they_answer_and_the_disk(tmp_path, env, world, indexes):
    res = _bootstrap(env, world, "incus-780m", tmp_path / "v", "--dry-run", project=indexes.project)
    assert res.returncode == 0, res.stderr
    out = " ".join(res.stdout.split())
    srv = world["srv"]
    assert (
        f"index amd-multiarch {srv.url('multiarch')}: torch and its GPU packages come only from here" in out
    )
    assert "it answers 403 for a project it does not hold: uv reads that as 'not here'" in out
    assert f"index default {srv.url('pypi')}: the default index: torch's own dependencies" in out
    assert "disk needs ~7.1 GiB for torch with one GPU's device package from amd-multiarch" in out
    assert "--config-file" in out and "mw-env-torch-uv.toml" in out


def test_a_forced_source_without_the_gpus_kernels_gets_the_override_and_the_warning(
    tmp_path, env, world, indexes
):
    res = _bootstrap(
        env,
        world,
        "incus-780m",
        tmp_path / "v",
        "--source",
        "rocm6.4",
        "--offline",
        "--dry-run",
        "--json",
        project=indexes.project,
    )
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["env"] == {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"} and plan["override"]["set"] is True
    assert "lacks gfx1103" in plan["override"]["reason"]
    assert any("hang" in w and "--source amd-multiarch" in w for w in plan["warnings"])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("root", "gfx"),
    [
        ("incus-780m", "gfx1103"),
        ("strix-halo-8060s", "gfx1151"),
        ("rx7900xtx", "gfx1100"),
        ("igpu-780m-dgpu-7900xtx", "gfx1100"),  # the dGPU is chosen; the iGPU is hidden and gets nothing
        ("mi300x-x4", "gfx942"),
    ],
)
def test_each_gpu_gets_a_native_source_only_its_device_package_and_never_a_placeholder(
    tmp_path, env, world, indexes, root, gfx
):
    venv = tmp_path / "v"
    # The user's uv setting that would let PyPI's higher placeholder win is overruled for the torch step.
    res = _bootstrap(
        {**env, "UV_INDEX_STRATEGY": "unsafe-best-match"}, world, root, venv, project=indexes.project
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert installed_version(venv, "torch") == "2.14.0+rocm7.14.0"
    assert installed_version(venv, f"amd-torch-device-{gfx}") == "2.14.0+rocm7.14.0"  # not PyPI's 99.0.0
    # torch's own dependencies, which the AMD index answers 403 for, came from the default index.
    assert all(installed_version(venv, dep) == "80.0.0" for dep in TORCH_DEPS)
    assert "/multiarch/setuptools/" in world["srv"].requests  # asked first, answered 403, then the default
    others = [g for g in ("gfx942", "gfx1100", "gfx1103", "gfx1151") if g != gfx]
    assert all(installed_version(venv, f"amd-torch-device-{g}") is None for g in others)
    assert "HSA_OVERRIDE_GFX_VERSION" not in (venv / "mw-env.env").read_text()
    record = json.loads((venv / "mw-env.json").read_text())
    assert record["torch_source"] == "amd-multiarch" and record["wheel_archs"] == [gfx]
    assert record["wheel_archs_how"] == "device packages" and record["device_packages"] == [
        f"amd-torch-device-{gfx}"
    ]
    assert record["arch_decision"] == f"no HSA_OVERRIDE_GFX_VERSION: the installed wheel ships {gfx}"
    # The pin covers the device package: a later install cannot swap in the placeholder.
    assert f"amd-torch-device-{gfx}==2.14.0+rocm7.14.0" in (venv / "mw-env-constraints.txt").read_text()


@pytest.mark.slow
def test_the_placeholder_would_win_without_the_index_first_rule(tmp_path, env, world, uv_bin):
    """The control: the same request with uv's unsafe-best-match lets PyPI's higher placeholder in."""
    venv = tmp_path / "plain"
    subprocess.run(
        [uv_bin, "venv", "--python", sys.executable, str(venv)], env=env, check=True, capture_output=True
    )
    res = subprocess.run(
        [
            uv_bin,
            "pip",
            "install",
            "--python",
            str(venv / "bin" / "python"),
            "--index",
            world["srv"].url("multiarch"),
            "--index-strategy",
            "unsafe-best-match",
            "torch[device-gfx1103]==2.14.0+rocm7.14.0",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert installed_version(venv, "amd-torch-device-gfx1103") == "99.0.0"


@pytest.mark.slow
def test_a_plain_index_option_stops_at_the_amd_indexs_403(tmp_path, env, world, uv_bin):
    """The control: the same request with the AMD index as a plain --index (no ignore-error-codes) stops at the
    403 it answers for setuptools, as uv does against repo.amd.com (LocalAI#10997)."""
    venv = tmp_path / "plain"
    subprocess.run(
        [uv_bin, "venv", "--python", sys.executable, str(venv)], env=env, check=True, capture_output=True
    )
    srv = world["srv"]
    argv = [
        uv_bin,
        "pip",
        "install",
        "--python",
        str(venv / "bin" / "python"),
        "--index",
        srv.url("multiarch"),
    ]
    argv += ["--index-strategy", "first-index", "torch[device-gfx1103]==2.14.0+rocm7.14.0"]
    res = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    assert res.returncode == 1 and "setuptools was not found" in res.stderr
    assert f"An index ({srv.url('multiarch')}) returned a 403 Forbidden error" in res.stderr


@pytest.mark.slow
def test_a_wheel_whose_arch_list_contradicts_the_table_wins_and_the_doctor_shows_it(
    tmp_path, env, world, indexes
):
    venv = tmp_path / "v"
    res = _bootstrap(
        env, world, "incus-780m", venv, "--source", "rocm7.14", profiles="lacking", project=indexes.project
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "the installed wheel contradicts the table" in res.stdout
    assert "export HSA_OVERRIDE_GFX_VERSION=11.0.0" in (venv / "mw-env.env").read_text()
    record = json.loads((venv / "mw-env.json").read_text())
    assert (
        record["wheel_archs"] == ["gfx1100", "gfx1151", "gfx942"]
        and record["wheel_archs_how"] == "build arch flags"
    )
    assert record["arch_decision"] == "HSA_OVERRIDE_GFX_VERSION=11.0.0: the installed wheel lacks gfx1103"
    # Every GPU's ROCm kernels: pytorch.org's torch requires rocm[libraries,device-all].
    assert installed_version(venv, "rocm-sdk-device-gfx942") == "7.14.0"
    doctor = _mw(
        env,
        "doctor",
        "--json",
        "--quick",
        "--root",
        str(MACHINES / "incus-780m"),
        "--profiles-dir",
        str(world["lacking"]),
        "--venv",
        str(venv),
    )
    checks = {c["id"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["torch.archs"]["status"] == "warn"
    assert "the installed wheel carries no gfx1103" in checks["torch.archs"]["detail"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("where", "status", "needle"),
    [
        ("amdcopy", "403", "answers 403 for a project it does not hold"),
        ("pypi401", "401", "wants credentials"),
        ("pypi500", "500", "the server (or a proxy in between) is failing"),
    ],
)
def test_a_torch_install_stopped_by_an_index_names_the_index_the_project_and_the_status(
    tmp_path, env, world, indexes, where, status, needle
):
    srv = world["srv"]
    env = {**env, "UV_HTTP_RETRIES": "0"}  # uv retries a 500 three times with back-off: one answer is enough
    extra: tuple[str, ...] = ()
    if where == "amdcopy":
        extra = ("--torch-index", srv.url("amdcopy"))
    else:
        env |= {"UV_DEFAULT_INDEX": srv.url(where), "PIP_INDEX_URL": srv.url(where)}
    venv = tmp_path / "v"
    res = _bootstrap(env, world, "incus-780m", venv, *extra, project=indexes.project)
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 1, out
    assert "error: step torch:" in out and "Traceback" not in out
    # uv asks for torch's dependencies side by side: whichever answer came first is the one named.
    assert any(f"{srv.url(where)}) answered HTTP {status} for {dep}" in out for dep in TORCH_DEPS), out
    assert "hint:" in out and needle in out and "no torch of this build matches" not in out
    assert not (venv / "mw-env.json").exists()


def test_the_users_uv_toml_default_index_and_its_credentials_serve_the_torch_step(
    tmp_path, env, world, indexes
):
    """A company mirror named only in the user's uv.toml, its credentials in uv's UV_INDEX_<NAME>_* variables:
    the torch step (its own --config-file) asks it for torch's dependencies as the extras step does."""
    srv = world["srv"]
    xdg = tmp_path / "xdg-home"
    (xdg / "uv").mkdir(parents=True)
    (xdg / "uv" / "uv.toml").write_text(
        '[pip]\nkeyring-provider = "disabled"\n\n'
        f'[[index]]\nname = "corp"\nurl = "{srv.url("private")}"\ndefault = true\n'
    )
    env = {k: v for k, v in env.items() if k not in ("UV_NO_CONFIG", "UV_DEFAULT_INDEX", "PIP_INDEX_URL")}
    env |= {"XDG_CONFIG_HOME": str(xdg), "UV_INDEX_CORP_USERNAME": "u", "UV_INDEX_CORP_PASSWORD": "t"}
    venv = tmp_path / "v"
    dry = _bootstrap(env, world, "incus-780m", venv, "--dry-run", "--json", project=indexes.project)
    plan = json.loads(dry.stdout)
    assert plan["uv_config_files"] == [str(xdg / "uv" / "uv.toml")]
    assert [(ix["name"], ix["role"]) for ix in plan["indexes"]] == [
        ("amd-multiarch", "torch"),
        ("corp", "default"),
    ]
    res = _bootstrap(env, world, "incus-780m", venv, project=indexes.project)
    assert res.returncode == 0, res.stdout + res.stderr
    assert installed_version(venv, "torch") == "2.14.0+rocm7.14.0"
    assert all(
        installed_version(venv, dep) == "80.0.0" for dep in TORCH_DEPS
    )  # from the mirror, with credentials
    assert any(r.startswith("/private/setuptools") for r in srv.requests)
    step = tomllib.loads((venv / "mw-env-torch-uv.toml").read_text())
    assert step["pip"] == {"keyring-provider": "disabled"} and "u:t" not in str(step)  # no secret copied in
    # Without the credentials the mirror refuses, and the failure names it.
    env.pop("UV_INDEX_CORP_PASSWORD")
    res = _bootstrap(
        {**env, "UV_HTTP_RETRIES": "0"}, world, "incus-780m", tmp_path / "v2", project=indexes.project
    )
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 1 and "the index corp" in out and "401" in out, out
