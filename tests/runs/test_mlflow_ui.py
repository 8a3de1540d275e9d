"""Issue 30 #7: the `mlflow ui` command docs/runs.md gives serves a real run's MLflow store.

A smoke run (20 steps) tracks into its own file store `<run>/mlruns`; the full `mlflow` package's server is
started on it the way the doc says (`MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri <run>/mlruns
--port N`, plus `--workers 1` to spare the test machine's cores) and asked through its REST API for the
experiment, the run, its metrics, its model artifact and its LoggedModel, as the UI's pages ask; `/` must be
the UI's HTML. Then it is stopped and no process of it may be left.

The `mlflow` extra installs mlflow-skinny, which has no UI pages and no Flask, so this is skipped in the
test venv and in CI; it runs in a venv that also has the full `mlflow` of the same version (docs/runs.md).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from mw_env.rundir.occupants import marked_processes


def _has_ui() -> bool:
    """The full `mlflow`: its server, Flask, and the UI's built pages (mlflow-skinny has mlflow.server only)."""
    spec = importlib.util.find_spec("mlflow")
    if spec is None or not spec.submodule_search_locations:
        return False
    pages = Path(next(iter(spec.submodule_search_locations))) / "server" / "js" / "build" / "index.html"
    return (
        importlib.util.find_spec("mlflow.server") is not None
        and importlib.util.find_spec("flask") is not None
        and pages.is_file()
    )


HAVE_UI = _has_ui()
MARK = "MW_ENV_TEST_MLFLOW_UI"  # in the server's environment: finds every process of it, whatever its group


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), resp.read()


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _wait_until_it_answers(base: str, server: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    """Poll /health until it says 200; fail at once, with the server's output, if the server exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(
                f"mlflow ui exited with {server.returncode}:\n{log.read_text(errors='replace')[-4000:]}"
            )
        try:
            if _get(f"{base}/health")[0] == 200:
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    pytest.fail(f"mlflow ui did not answer in {timeout:.0f} s:\n{log.read_text(errors='replace')[-4000:]}")


def _stop(server: subprocess.Popen[bytes], mark: str) -> list[int]:
    """SIGTERM to the server's process group (`kill -- -PGID`); SIGKILL what is left after 30 s. Returns the
    processes still alive at that deadline: none for a server that stops cleanly."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.wait(timeout=30)
    deadline = time.monotonic() + 30
    while marked_processes(mark, key=MARK) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = marked_processes(mark, key=MARK)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)
    server.wait(timeout=10)
    return left


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.skipif(
    not HAVE_UI,
    reason="the full `mlflow` (its server: Flask and the UI's pages) is not installed; the `mlflow` extra has "
    "mlflow-skinny only (docs/runs.md, Tracking)",
)
def test_mlflow_ui_serves_the_run_its_metrics_and_its_model(tmp_path, monkeypatch):
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
    run = tmp_path / "smoke"
    argv = [sys.executable, "-m", "mw_env.trainer", "run", "--config", "smoke"]
    for item in (f"runtime.out_dir={run}", "runtime.tracking=mlflow"):
        argv += ["--set", item]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    saved = json.loads((run / "mlflow-run.json").read_text())
    assert saved["tracking_uri"] == (run / "mlruns").as_uri()
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [(e["step"], e["loss"]) for e in events if e["event"] == "step"]
    last_eval = [e for e in events if e["event"] == "eval"][-1]

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    mark = uuid.uuid4().hex
    env = dict(os.environ, MLFLOW_ALLOW_FILE_STORE="true", **{MARK: mark})
    log = tmp_path / "mlflow-ui.log"
    ui = ["mlflow", "ui", "--backend-store-uri", str(run / "mlruns"), "--port", str(port), "--workers", "1"]
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", *ui],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_until_it_answers(base, server, log, timeout=180)
        api = f"{base}/api/2.0/mlflow"

        experiments = _post(f"{api}/experiments/search", {"max_results": 10})["experiments"]
        assert {e["experiment_id"]: e["name"] for e in experiments}[saved["experiment_id"]] == "mw-env"

        runs = _post(f"{api}/runs/search", {"experiment_ids": [saved["experiment_id"]]})["runs"]
        assert [r["info"]["run_id"] for r in runs] == [saved["run_id"]]
        info, data = runs[0]["info"], runs[0]["data"]
        assert info["run_name"] == "smoke" and info["status"] == "FINISHED"
        latest = {m["key"]: m for m in data["metrics"]}
        assert latest["eval/entity_f1"]["step"] == last_eval["step"]
        assert latest["eval/entity_f1"]["value"] == pytest.approx(last_eval["entity_f1"])
        tags = {t["key"]: t["value"] for t in data["tags"]}
        model_id = tags["mw-env.logged_model"].removeprefix("models:/")
        assert [o["model_id"] for o in runs[0]["outputs"]["model_outputs"]] == [model_id]

        query = f"run_id={saved['run_id']}&metric_key=train/loss&max_results=1000"
        history = sorted(
            json.loads(_get(f"{api}/metrics/get-history?{query}")[2])["metrics"], key=lambda m: m["step"]
        )
        assert [(m["step"], pytest.approx(m["value"])) for m in history] == losses  # metrics.jsonl's numbers

        status, _, mlmodel = _get(f"{base}/get-artifact?path=model/MLmodel&run_uuid={saved['run_id']}")
        assert status == 200 and b"loader_module: mw_env.trainer.mlflow_model" in mlmodel

        models = _post(f"{api}/logged-models/search", {"experiment_ids": [saved["experiment_id"]]})["models"]
        assert [m["info"]["model_id"] for m in models] == [model_id]
        logged = models[0]["info"]
        assert logged["status"] == "LOGGED_MODEL_READY" and logged["name"] == "model"
        assert logged["source_run_id"] == saved["run_id"]

        status, content_type, page = _get(f"{base}/")
        assert status == 200 and content_type.startswith("text/html") and b"<html" in page
    finally:
        left = _stop(server, mark)
    assert left == [], f"mlflow ui left processes behind after SIGTERM: {left}"
    assert marked_processes(mark, key=MARK) == []
