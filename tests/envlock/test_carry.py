"""A run carries its venv's lock: copied into the run folder once, listed in the manifest, named in the report."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from mw_env.rundir.manifest import read_manifest, sha256_file, verify_manifest
from mw_env.trainer.metrics import MetricsWriter
from mw_env.trainer.report.report import write_report
from mw_env.trainspec.config import find_config, resolve_config
from mw_env.venv.lock import LOCK_FILE, carry

from .lock_support import lock_text


def test_a_run_folder_holds_the_lock_and_the_report_names_its_hash(tmp_path: Path) -> None:
    venv, run = tmp_path / "venv", tmp_path / "run"
    venv.mkdir()
    run.mkdir()
    (venv / LOCK_FILE).write_text(lock_text(Path("/srv/wheels")))
    copied, digest = carry(venv, run)
    assert copied == run / LOCK_FILE and digest == sha256_file(venv / LOCK_FILE)
    # A resumed run keeps the lock it started with, even when the venv's lock changed since.
    (venv / LOCK_FILE).write_text(lock_text(Path("/srv/other")))
    assert carry(venv, run) == (copied, digest)
    m = MetricsWriter(run)
    m.log("step", step=1, loss=1.0, lr=1e-3, grad_norm=1.0, tokens_per_s=1.0)
    m.log("finished", step=1, reason="max_steps")
    m.close()
    facts = {"precision": "fp32", "env_lock": {"file": LOCK_FILE, "sha256": digest}}
    md = write_report(run, resolved=resolve_config(path=find_config("smoke")), card={}, facts=facts)
    assert f"Environment lock: `{LOCK_FILE} sha256 {digest}`" in md.read_text()
    assert read_manifest(run)[0][LOCK_FILE] == digest and verify_manifest(run).ok
    env = json.loads((run / "report" / "environment.json").read_text())
    assert env["facts"]["env_lock"]["sha256"] == digest


def test_a_venv_without_a_lock_is_said_in_the_report(tmp_path: Path) -> None:
    assert carry(tmp_path / "venv", tmp_path) is None
    m = MetricsWriter(tmp_path)
    m.log("finished", step=0, reason="max_steps")
    m.close()
    md = write_report(tmp_path, resolved=resolve_config(path=find_config("smoke")), card={}, facts={})
    assert "Environment lock: none" in md.read_text()


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="mlflow is not installed")
def test_a_training_run_logs_the_locks_hash_to_mlflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trainer copies the lock of the venv it runs in (sys.prefix) and names its hash in MLflow's params."""
    from mlflow.tracking import MlflowClient

    from mw_env.trainer.__main__ import main

    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / LOCK_FILE).write_text(lock_text(Path("/srv/wheels")))
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    uri = (tmp_path / "mlruns").as_uri()  # the file store: no database migrations to wait for
    sets = [
        f"runtime.out_dir={run}",
        "runtime.max_steps=2",
        "runtime.eval_every=2",
        "runtime.tracking=mlflow",
    ]
    argv = ["run", "--config", "smoke", "--set", f"runtime.tracking_uri={uri}"]
    for item in sets:
        argv += ["--set", item]
    assert main(argv) == 0
    digest = sha256_file(run / LOCK_FILE)
    assert read_manifest(run)[0][LOCK_FILE] == digest
    saved = json.loads((run / "mlflow-run.json").read_text())
    params = MlflowClient(tracking_uri=uri).get_run(saved["run_id"]).data.params
    assert params["env.lock_sha256"] == digest and params["env.lock"] == LOCK_FILE


def test_a_drifted_venv_is_named_in_the_report_and_what_the_runs_lock_holds(tmp_path: Path) -> None:
    """Issue 30 #3, without a bootstrap: a venv whose lock lacks a hand-added tqdm. (The real venv, the
    console and the lock uv writes: test_lock_e2e.py.)"""
    from mw_env.checks.model import doctor_warnings
    from mw_env.venv.lock.atlaunch import LaunchLock, drift_fact

    venv, run = tmp_path / "venv", tmp_path / "run"
    site = venv / "lib" / "python3.11" / "site-packages"
    for dist in ("torch-2.13.0+cpu", "sympy-1.14.0", "tqdm-4.67.1"):
        (site / f"{dist}.dist-info").mkdir(parents=True)
        (site / f"{dist}.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\n")
    (venv / LOCK_FILE).write_text(lock_text(Path("/srv/wheels")))
    stale = drift_fact(venv, sha256_file(venv / LOCK_FILE))
    assert stale == {
        "changes": ["tqdm 4.67.1 (added, not in the lock)"],
        "run_lock": "the venv's own lock: it lacks these changes (`mw-env lock` writes the venv as it is)",
    }
    assert "it holds these changes" in str(drift_fact(venv, "0" * 64))
    lines = LaunchLock(("tqdm 4.67.1 (added, not in the lock)",), written=run / LOCK_FILE).lines()
    assert (
        "drifted from its lock: tqdm 4.67.1" in lines[0] and "written from the venv as it is now" in lines[1]
    )
    assert LaunchLock().lines() == []
    doctor = {
        "ok": True,
        "checks": [
            {"id": "venv.lock", "title": "venv matches its lock", "status": "warn", "detail": "tqdm added"},
            {"id": "torch.build", "title": "torch build", "status": "pass", "detail": ""},
        ],
    }
    assert doctor_warnings(doctor) == ["venv.lock: venv matches its lock - tqdm added"]
    run.mkdir()
    m = MetricsWriter(run)
    m.log("finished", step=0, reason="max_steps")
    m.close()
    facts = {"venv_drift": stale}
    md = write_report(run, resolved=resolve_config(path=find_config("smoke")), card={}, facts=facts)
    doc = (run / "report" / "report.md").read_text()
    assert md.is_file() and "- Doctor: not run" in doc  # no doctor report given
    assert (
        "- Venv drift: tqdm 4.67.1 (added, not in the lock) (since the venv's lock); the run's lock: the venv's own"
        in doc
    )
