"""The lock end to end, on one real CPU venv (torch from this machine's wheelhouse), shared by the module:

bootstrap writes the lock; `bootstrap --lock` rebuilds the venv offline with the same packages and hashes;
a changed sha256 is refused naming the package with nothing installed; `uv pip install` of another version
is drift the doctor names with both versions; a smoke run carries the lock into its folder, manifest and
report. Skipped cleanly where no wheelhouse holds a CPU torch (as the e2e bootstrap test is).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mw_env.rundir.manifest import read_manifest, sha256_file
from mw_env.venv.lock import LOCK_FILE
from mw_env.venv.lock.lockfile import read_lock
from provision.provision_support import find_uv_binary

pytestmark = [pytest.mark.slow, pytest.mark.torch]


def _cpu_wheel():
    from mw_env.sources.wheelhouse import discover, matching_torch, wheels_in

    sources = discover(env=os.environ)
    good, _ = matching_torch(
        wheels_in(sources.find_links, "torch"), local_tag="+cpu", specifier=">=2.9,<2.15"
    )
    return good[0] if good else None


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    uv = find_uv_binary()
    if _cpu_wheel() is None or uv is None:
        pytest.skip("no wheelhouse holds a CPU torch wheel (or uv is missing)")
    out = {**os.environ, "UV": uv, "PYTHONPATH": os.pathsep.join(sys.path)}
    for var in ("VIRTUAL_ENV", "MW_ENV_VENV", "MW_ENV_ROOT", "MW_ENV_PROFILE"):
        out.pop(var, None)
    return out


def mw_env(env: dict[str, str], *args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mw_env", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def uv_freeze(env: dict[str, str], venv: Path) -> str:
    res = subprocess.run(
        [env["UV"], "pip", "freeze", "--python", str(venv / "bin" / "python")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return res.stdout


def freeze(env: dict[str, str], venv: Path) -> list[str]:
    return [ln for ln in uv_freeze(env, venv).splitlines() if not ln.startswith("-e ")]  # the project aside


@pytest.fixture(scope="module")
def first(env, tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("lock") / "first"
    res = mw_env(env, "bootstrap", "--profile", "cpu", "--venv", str(venv), "--no-adopt-torch", "--no-doctor")
    assert res.returncode == 0, res.stdout + res.stderr
    return venv


@pytest.fixture(scope="module")
def rebuilt(env, first) -> Path:
    venv = first.parent / "rebuilt"
    res = mw_env(
        env,
        "bootstrap",
        "--profile",
        "cpu",
        "--lock",
        str(first / LOCK_FILE),
        "--venv",
        str(venv),
        "--offline",
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return venv


def test_bootstrap_writes_the_lock_of_the_venv_it_built(env, first):
    lock = read_lock(first / LOCK_FILE)
    wheel = _cpu_wheel()
    torch = lock.package("torch")
    assert torch.version == wheel.version and lock.meta.profile == "cpu" and lock.meta.build == "cpu"
    # The wheelhouse's very file, once (uv listed it twice when its folder was named twice), the entry written
    # by mw-env (venv/lock/localwheel.py) from the hash taken while the extras installed.
    assert [(w.local, w.sha256) for w in torch.wheels] == [(wheel.path.resolve(), sha256_file(wheel.path))]
    assert lock.meta.python.startswith("3.") and lock.meta.torch_source
    # Every installed package is in it, at the installed version (the project itself aside).
    assert sorted(f"{p.name}=={p.version}" for p in lock.packages) == sorted(
        f"{n.lower().replace('_', '-')}=={v}" for n, _, v in (ln.partition("==") for ln in freeze(env, first))
    )


def test_the_lock_reads_the_venv_as_uv_pip_freeze_does(env, first):
    # The lock step reads the dist-info folders instead of running `uv pip freeze`: the same answer on the venv
    # bootstrap built (torch from the wheelhouse, the project editable, pip).
    from mw_env.venv.lock.make import parse_freeze, read_installed

    mine = read_installed(first)
    assert mine is not None and mine == parse_freeze(uv_freeze(env, first))
    assert "torch" in mine.pins and len(mine.skipped) == 1  # the project, `-e file:///…`


def test_a_rebuild_from_the_lock_offline_has_the_same_packages_and_hashes(env, first, rebuilt):
    assert freeze(env, rebuilt) == freeze(env, first)
    a, b = read_lock(first / LOCK_FILE), read_lock(rebuilt / LOCK_FILE)
    assert [(p.name, p.version, [w.sha256 for w in p.wheels]) for p in a.packages] == [
        (p.name, p.version, [w.sha256 for w in p.wheels]) for p in b.packages
    ]
    # The doctor (run by that bootstrap) found the venv as locked.
    doctor = mw_env({**env, "MW_ENV_VENV": str(rebuilt)}, "doctor", "--profile", "cpu", "--quick", "--json")
    check = next(c for c in json.loads(doctor.stdout)["checks"] if c["id"] == "venv.lock")
    assert check["status"] == "pass", check


def test_a_changed_sha256_is_refused_naming_the_package_with_nothing_installed(env, first):
    lock = read_lock(first / LOCK_FILE)
    victim = next(p for p in lock.packages if p.name != "torch" and p.wheels)
    digest = victim.wheels[0].sha256
    bad = first.parent / "pylock.bad.toml"
    bad.write_text(lock.text.replace(digest, digest[:-1] + ("0" if digest[-1] != "0" else "1")))
    venv = first.parent / "refused"
    res = mw_env(env, "bootstrap", "--profile", "cpu", "--lock", str(bad), "--venv", str(venv), "--offline")
    assert res.returncode == 1, res.stdout + res.stderr
    said = " ".join((res.stdout + res.stderr).split())
    assert f"the wheel of {victim.name}=={victim.version} does not match the lock" in said, said
    assert "nothing was installed" in said
    assert freeze(env, venv) == []


def test_the_doctor_names_a_package_changed_after_the_lock_with_both_versions(env, first, rebuilt):
    lock = read_lock(rebuilt / LOCK_FILE)
    # fsspec: in the lock (torch needs it) and published in several versions; any other will do.
    now = lock.package("fsspec").version
    other = "2026.7.0" if now != "2026.7.0" else "2026.6.0"
    subprocess.run(
        [env["UV"], "pip", "install", "--python", str(rebuilt / "bin" / "python"), f"fsspec=={other}"],
        env=env,
        check=True,
        capture_output=True,
    )
    doctor = mw_env({**env, "MW_ENV_VENV": str(rebuilt)}, "doctor", "--profile", "cpu", "--quick", "--json")
    check = next(c for c in json.loads(doctor.stdout)["checks"] if c["id"] == "venv.lock")
    assert check["status"] == "warn" and f"fsspec {now} -> {other} (changed)" in check["detail"], check
    assert f"mw-env bootstrap --lock {rebuilt / LOCK_FILE}" in check["fix"] and "mw-env lock" in check["fix"]


def test_a_smoke_run_carries_the_lock(env, first, tmp_path):
    out = tmp_path / "run"
    res = mw_env(
        env,
        *("train", "--venv", str(first), "--profile", "cpu", "--config", "smoke", "--skip-doctor"),
        *("--set", f"runtime.out_dir={out}", "--set", "runtime.max_steps=2", "--set", "runtime.eval_every=2"),
    )
    assert res.returncode == 0, res.stdout + res.stderr
    digest = sha256_file(first / LOCK_FILE)
    assert sha256_file(out / LOCK_FILE) == digest
    assert read_manifest(out)[0][LOCK_FILE] == digest
    assert f"{LOCK_FILE} sha256 {digest}" in (out / "report" / "report.md").read_text()
    # The run's copy is the venv's lock byte for byte (the rebuild test installs that one): bootstrap takes it.
    plan = mw_env(
        env,
        *("bootstrap", "--profile", "cpu", "--lock", str(out / LOCK_FILE)),
        *("--venv", str(tmp_path / "v"), "--dry-run", "--json"),
    )
    assert plan.returncode == 0 and json.loads(plan.stdout)["lock"]["sha256"] == digest, plan.stderr


def test_mw_env_lock_writes_the_same_packages_for_an_existing_venv(env, first, tmp_path):
    out = tmp_path / "pylock.again.toml"
    res = mw_env(env, "lock", "--profile", "cpu", "--venv", str(first), "--output", str(out), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    said = json.loads(res.stdout)
    again, bootstrap_lock = read_lock(out), read_lock(first / LOCK_FILE)
    assert said["sha256"] == again.sha256 and said["hardware"] == "profile cpu (no GPU)"
    assert [(p.name, p.version, p.wheels) for p in again.packages] == [
        (p.name, p.version, p.wheels) for p in bootstrap_lock.packages
    ]


def test_a_run_in_a_drifted_venv_says_so_and_carries_the_venv_as_it_is(env, rebuilt, tmp_path):
    """Issue 30 #3: a package added by hand after the lock. The console, the report and the data card say
    drift, and the run's lock is the venv as it was at launch: a rebuild from it installs that package."""
    from wheelfactory import build_wheel

    wheel = build_wheel(tmp_path / "dist", "drift-probe", "1.0", files={"drift_probe.py": "X = 1\n"})
    subprocess.run(
        [env["UV"], "pip", "install", "--python", str(rebuilt / "bin" / "python"), str(wheel)],
        env=env,
        check=True,
        capture_output=True,
    )
    out = tmp_path / "run"
    res = mw_env(
        env,
        *("train", "--venv", str(rebuilt), "--profile", "cpu", "--config", "smoke"),
        *("--set", f"runtime.out_dir={out}", "--set", "runtime.max_steps=2", "--set", "runtime.eval_every=2"),
    )
    assert res.returncode == 0, res.stdout + res.stderr
    said = " ".join(res.stderr.split())
    assert "doctor: quick checks passed with" in said and "venv.lock: venv matches its lock" in said, said
    assert "drift-probe 1.0 (added, not in the lock)" in said, said
    assert f"the run's lock {out / LOCK_FILE} was written from the venv as it is now" in said, said
    report = (out / "report" / "report.md").read_text()
    doctor_row = next(line for line in report.splitlines() if line.startswith("- Doctor:"))
    assert "ok with" in doctor_row and "drift-probe" in doctor_row, doctor_row
    drift_row = next(line for line in report.splitlines() if line.startswith("- Venv drift:"))
    assert "drift-probe 1.0 (added, not in the lock)" in drift_row and "it holds these changes" in drift_row
    card = json.loads((out / "report" / "data_card.json").read_text())
    assert any("drift-probe 1.0" in line for line in card["venv_drift"]["changes"])
    # The run's lock holds the hand-added package (from its wheel file), and the rebuild plan takes that lock.
    lock = read_lock(out / LOCK_FILE)
    assert lock.package("drift-probe").version == "1.0"
    assert lock.package("drift-probe").wheels[0].sha256 == sha256_file(wheel)
    assert read_lock(rebuilt / LOCK_FILE).sha256 != lock.sha256  # the venv's own lock is left as it was
    plan = mw_env(
        env,
        *("bootstrap", "--profile", "cpu", "--lock", str(out / LOCK_FILE)),
        *("--venv", str(tmp_path / "v"), "--find-links", str(wheel.parent), "--dry-run", "--json"),
    )  # the hand-added wheel is a local file: the rebuild names its folder, as the lock reader's hint says
    assert plan.returncode == 0 and json.loads(plan.stdout)["lock"]["sha256"] == lock.sha256, plan.stderr
