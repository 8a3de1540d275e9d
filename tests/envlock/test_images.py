"""Locks where images run: a multi-node manifest carries the lock, every pod bootstraps from it before training,
and each pod's `mw-env train` refuses a venv with another one; a single container's note says how to rebuild
its venv from the lock."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest
import yaml

from mw_env.cli import main
from mw_env.venv.lock import LOCK_FILE

from .lock_support import lock_text

MACHINES = Path(__file__).resolve().parents[1] / "fixtures" / "machines"


NODES = ["host-commands", "--root", str(MACHINES / "rx7900xtx"), "--runtime", "kubernetes", "--nodes", "2"]
NODES += ["--image", "ghcr.io/org/train:1"]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for var in ("MW_ENV_PROFILES", "MW_ENV_PROFILE", "MW_ENV_ROOT", "MW_ENV_VENV", "MW_ENV_LOCK_SHA256"):
        monkeypatch.delenv(var, raising=False)


def test_a_manifest_names_the_lock_for_every_pod(tmp_path, capsys):
    lock = tmp_path / "pylock.gfx1100.toml"
    lock.write_text(lock_text(Path("/srv/wheels"), profile="rocm", build="rocm", torch="2.9.1+rocm6.4"))
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    code = main([*NODES, "--lock", str(lock)])
    out, err = capsys.readouterr()
    assert code == 0, err
    job = list(yaml.safe_load_all(out))[-1]
    assert job["metadata"]["annotations"] == {"mw-env/lock": lock.name, "mw-env/lock-sha256": digest}
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "MW_ENV_LOCK_SHA256", "value": digest} in env
    assert f"--lock {lock.name}" in out  # the note says how the image is built
    # Every pod bootstraps from the same lock (a ConfigMap, mounted), then trains in the venv it left.
    docs = list(yaml.safe_load_all(out))
    lock_map = next(d for d in docs if d["kind"] == "ConfigMap")
    assert lock_map["metadata"]["name"] == "mw-env-train-lock"
    assert lock_map["data"]["pylock.mw-env.toml"] == lock.read_text()
    pod = job["spec"]["template"]["spec"]
    assert {"name": "lock", "configMap": {"name": "mw-env-train-lock"}} in pod["volumes"]
    container = pod["containers"][0]
    assert {"name": "lock", "mountPath": "/etc/mw-env/lock", "readOnly": True} in container["volumeMounts"]
    command = container["command"]
    assert command[:2] == ["sh", "-c"] and "args" not in container
    boot, train = command[2].split(" && exec ")
    assert (
        boot == "mw-env bootstrap --profile rocm --lock /etc/mw-env/lock/pylock.mw-env.toml --yes --no-doctor"
    )
    assert train.startswith("mw-env train --config address-tagger --nnodes 2 --node-rank $(NODE_RANK) ")
    # The same manifest without --lock says what it does instead.
    assert main(NODES) == 0
    plain = capsys.readouterr().out
    assert "# no --lock: each pod trains in its image's venv as built" in plain and "ConfigMap" not in plain


def test_a_broken_lock_for_a_manifest_is_bad_input(tmp_path, capsys):
    lock = tmp_path / "pylock.toml"
    lock.write_text('lock-version = "1.0"\n[[packages]]\nname = "torch"\n')
    code = main([*NODES, "--lock", str(lock)])
    assert code == 2 and f"lock {lock}" in capsys.readouterr().err


def _venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    os.symlink(sys.executable, venv / "bin" / "python")
    return venv


def test_train_refuses_a_venv_whose_lock_is_not_the_manifests(tmp_path, capsys, monkeypatch):
    venv = _venv(tmp_path)
    (venv / LOCK_FILE).write_text(lock_text(Path("/srv/wheels")))
    monkeypatch.setenv("MW_ENV_LOCK_SHA256", "ab" * 32)
    code = main(["train", "--venv", str(venv), "--config", "smoke", "--root", str(MACHINES / "cpu-only")])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1 and "MW_ENV_LOCK_SHA256=abababababababab... names the environment" in err, err
    assert "has the lock " + hashlib.sha256((venv / LOCK_FILE).read_bytes()).hexdigest()[:16] in err
    (venv / LOCK_FILE).unlink()
    code = main(["train", "--venv", str(venv), "--config", "smoke", "--root", str(MACHINES / "cpu-only")])
    assert code == 1 and f"has no {LOCK_FILE}" in capsys.readouterr().err
