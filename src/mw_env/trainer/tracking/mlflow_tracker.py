"""MLflow tracking: any tracking URI (a file store, SQLite, a server), metrics batched, the report as artifacts.

Where the run goes, first match wins:
  1. runtime.tracking_uri (the config, so a run's own settings say where it was tracked);
  2. the MLFLOW_TRACKING_URI environment variable (how MLflow users point every tool at one store);
  3. <run>/mlruns, a file store inside the run folder (no database, no server).
The experiment is $MLFLOW_EXPERIMENT_NAME or "mw-env". A new experiment in a SQLite store keeps its
artifacts in `mlartifacts/` beside the database file (MLflow's own default would be ./mlruns under
whatever folder the trainer happened to start in); a server decides its artifact store itself.

The MLflow run's id is kept in <run>/mlflow-run.json with the URI, so a resumed run (one whose folder
already has metrics) continues the same MLflow run in the same store; a --fresh run starts a new one. Metrics are sent in batches (at most every 15 s, and at each eval and
at the end) so a remote server costs one request per batch, not one per scalar per step. After the
report is written, `log_run_artifacts` adds report/, MANIFEST.sha256 and the final checkpoint's path.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from mw_env.base.atomic import write_json_atomic
from mw_env.base.errors import MwEnvError
from mw_env.rundir.contract import MANIFEST, METRICS_FILE, MLRUNS_DIR, REPORT_DIR, sha256_file
from mw_env.rundir.contract import MLFLOW_RUN_FILE as RUN_FILE
from mw_env.trainer.tracking.values import Guarded, flatten, metric_values
from mw_env.trainspec.extras import bootstrap_hint

if TYPE_CHECKING:
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

EXPERIMENT = "mw-env"
FLUSH_EVERY_S = 15.0
BATCH_LIMIT = 1000  # MLflow takes at most 1000 metrics (and 100 params) per log_batch


def resolve_tracking_uri(run_dir: Path, configured: str = "") -> tuple[str, str]:
    """(tracking URI, where it came from: "runtime.tracking_uri" | "MLFLOW_TRACKING_URI" | "run folder")."""
    if configured.strip():
        return configured.strip(), "runtime.tracking_uri"
    env = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if env:
        return env, "MLFLOW_TRACKING_URI"
    return (Path(run_dir).resolve() / MLRUNS_DIR).as_uri(), "run folder"


def _is_file_store(uri: str) -> bool:
    return urlparse(uri).scheme in ("", "file")


def _sqlite_artifacts(uri: str) -> str | None:
    """mlartifacts/ beside a sqlite:///path database file, as a file URI; None for other stores."""
    parsed = urlparse(uri)
    if parsed.scheme != "sqlite" or not parsed.path or parsed.path in ("/", "/:memory:"):
        return None
    db = Path(parsed.path[1:])  # sqlite:///rel.db is relative, sqlite:////abs.db absolute (SQLAlchemy)
    return (db.resolve().parent / "mlartifacts").as_uri()


def missing(exc: ImportError) -> MwEnvError:
    return MwEnvError(
        f"runtime.tracking is 'mlflow' but mlflow cannot be imported in this venv ({exc})",
        hint=f"add the `mlflow` extra: {bootstrap_hint(sys.prefix, 'mlflow')}, or set runtime.tracking=none",
    )


class MLflowTracker(Guarded):
    """Metrics events -> one MLflow run (see the module docstring for where)."""

    def __init__(self, run_dir: Path, hparams: Mapping[str, Any]) -> None:
        super().__init__("mlflow")
        try:
            from mlflow.entities import Param
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise missing(exc) from exc
        self.run_dir = Path(run_dir).resolve()
        configured = str((hparams.get("runtime") or {}).get("tracking_uri") or "")
        self.uri, self.origin = resolve_tracking_uri(self.run_dir, configured)
        if _is_file_store(self.uri):
            # MLflow >= 3 refuses the file store ("maintenance mode") unless this opt-out is set; a plain
            # folder beside metrics.jsonl is exactly what a run without a server wants.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            if self.origin == "run folder":
                (self.run_dir / MLRUNS_DIR).mkdir(parents=True, exist_ok=True)
        # A tracking server that is down must not hold the start of training for minutes of retries.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
        self._pending: list[Metric] = []
        self._last_flush = time.monotonic()
        self._status = "KILLED"
        try:
            self.client = MlflowClient(tracking_uri=self.uri)
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "").strip() or EXPERIMENT
            experiment = self.client.get_experiment_by_name(name)
            self.experiment_id = (
                experiment.experiment_id
                if experiment
                else self.client.create_experiment(name, artifact_location=_sqlite_artifacts(self.uri))
            )
            self.run_id = self._resume()
            if self.run_id is None:
                run = self.client.create_run(
                    self.experiment_id,
                    run_name=self.run_dir.name,
                    tags={"mw-env.run_dir": str(self.run_dir)},
                )
                self.run_id = run.info.run_id
                params = [Param(k, v) for k, v in flatten(hparams).items()]
                for i in range(0, len(params), 100):
                    self.client.log_batch(self.run_id, params=params[i : i + 100])
                write_json_atomic(
                    self.run_dir / RUN_FILE,
                    {"tracking_uri": self.uri, "experiment_id": self.experiment_id, "run_id": self.run_id},
                )
        except MwEnvError:
            raise
        except Exception as exc:  # a bad URI, a server that is down, a database it cannot open
            raise MwEnvError(
                f"MLflow tracking could not start at {self.uri} (from {self.origin}): "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                hint="check the tracking URI (sqlite:///ABSOLUTE/path.db, http://host:port, a folder) and that "
                "the server is up; unset it for the run folder's own store, or set runtime.tracking=none",
            ) from exc

    def _resume(self) -> str | None:
        metrics = self.run_dir / METRICS_FILE
        if not (metrics.is_file() and metrics.stat().st_size > 0):
            return None  # nothing logged in this folder yet (a new run, or --fresh moved it aside)
        try:
            saved = json.loads((self.run_dir / RUN_FILE).read_text(encoding="utf-8"))
            if saved.get("tracking_uri") != self.uri:
                return None  # tracked elsewhere before: a new run in this store
            run_id = str(saved["run_id"])
            self.client.get_run(run_id)
        except Exception:  # no file, or a run the store does not know: start a new one
            return None
        self.client.update_run(run_id, status="RUNNING")
        return run_id

    def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:BATCH_LIMIT], self._pending[BATCH_LIMIT:]
            self.guard("log_batch", self.client.log_batch, self.run_id, metrics=batch)
        self._last_flush = time.monotonic()

    def log(self, event: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        step = event.get("step")
        if not isinstance(step, int):
            return
        stamp = int(float(event.get("time") or time.time()) * 1000)
        self._pending += [Metric(k, v, stamp, step) for k, v in metric_values(event).items()]
        kind = event.get("event")
        if kind == "finished":
            self._status = "FAILED" if event.get("reason") == "nonfinite" else "FINISHED"
            self.guard(
                "set_tag", self.client.set_tag, self.run_id, "mw-env.finished", str(event.get("reason"))
            )
        if kind in ("eval", "finished") or time.monotonic() - self._last_flush >= FLUSH_EVERY_S:
            self._flush()

    def close(self) -> None:
        self._flush()
        self.guard("set_terminated", self.client.set_terminated, self.run_id, self._status)


def log_run_artifacts(run_dir: Path, *, checkpoint: Path | None, checkpoint_sha256: str | None) -> str | None:
    """Add report/, MANIFEST.sha256 and the final checkpoint's path to this run's MLflow run.

    Called after the report is written (the tracker is closed by then; MLflow accepts artifacts on a
    finished run). Returns a warning line instead of raising: the report exists whatever MLflow says.
    """
    run_dir = Path(run_dir).resolve()
    try:
        saved = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
        if not isinstance(saved, dict):
            raise ValueError(RUN_FILE)
    except (OSError, ValueError, RecursionError):
        return f"mw-env: no {RUN_FILE} in {run_dir}: the report was not logged to MLflow"
    try:
        from mlflow.tracking import MlflowClient

        if _is_file_store(saved["tracking_uri"]):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        client = MlflowClient(tracking_uri=saved["tracking_uri"])
        run_id = saved["run_id"]
        if (run_dir / REPORT_DIR).is_dir():
            client.log_artifacts(run_id, str(run_dir / REPORT_DIR), artifact_path=REPORT_DIR)
        if (run_dir / MANIFEST).is_file():
            client.log_artifact(run_id, str(run_dir / MANIFEST))
        manifest = run_dir / MANIFEST
        manifest_sha = sha256_file(manifest) if manifest.is_file() else None
        if manifest_sha:  # the run this model came from, verifiable: `mw-env train verify RUN`
            client.set_tag(run_id, "mw-env.manifest_sha256", manifest_sha)
            client.set_tag(run_id, "mw-env.run_dir", str(run_dir))
        if checkpoint is not None:
            client.set_tag(run_id, "mw-env.checkpoint", str(checkpoint))
            client.log_dict(
                run_id,
                {"path": str(checkpoint), "sha256": checkpoint_sha256, "run_dir": str(run_dir)},
                "checkpoint.json",
            )
    except Exception as exc:  # the report is on disk either way
        return f"mw-env: logging the report to MLflow failed ({type(exc).__name__}: {exc})"
    if checkpoint is not None:
        return _log_model(client, run_id, checkpoint, manifest_sha)
    return None


def _log_model(client: MlflowClient, run_id: str, checkpoint: Path, manifest_sha: str | None) -> str | None:
    """The model as the run's `model/` artifact (an MLflow pyfunc model: mlflow_model.py, for MLflow 2's
    `runs:/<id>/model`) and, where MLflow 3 is installed, as a LoggedModel (`models:/<model id>`): what MLflow
    3's UI lists under the run's and the experiment's Models, and what `mlflow.register_model` takes."""
    import tempfile

    from mw_env.trainer.mlflow_model import save_model_dir

    try:
        with tempfile.TemporaryDirectory(prefix="mw-env-mlflow-") as tmp:
            folder = save_model_dir(checkpoint, Path(tmp) / "model", manifest_sha256=manifest_sha)
            client.log_artifacts(run_id, str(folder), artifact_path="model")
        client.set_tag(run_id, "mw-env.model", f"runs:/{run_id}/model")
    except Exception as exc:  # a checkpoint that does not load is not logged as the model; the rest stands
        return f"mw-env: logging the model to MLflow failed ({type(exc).__name__}: {str(exc)[:300]})"
    if not hasattr(client, "create_logged_model"):
        return None  # MLflow 2: the run's artifact is the model
    try:
        _log_logged_model(client, run_id, checkpoint, manifest_sha)
    except Exception as exc:  # the run's model/ artifact stands
        return f"mw-env: logging the MLflow 3 LoggedModel failed ({type(exc).__name__}: {str(exc)[:300]})"
    return None


def _log_logged_model(client: MlflowClient, run_id: str, checkpoint: Path, manifest_sha: str | None) -> None:
    """MLflow 3's model entity, made with the client API (mlflow.pyfunc.log_model would do the same but
    imports pandas, which mlflow-skinny lacks): create it linked to the run, upload the folder (its MLmodel
    names the model id), mark it READY, and record it as the run's output at the checkpoint's step."""
    import tempfile

    from mlflow.entities import LoggedModelOutput

    from mw_env.trainer.mlflow_model import save_model_dir

    run = client.get_run(run_id)
    tags = {
        "mw-env.checkpoint": str(checkpoint),
        **({"mw-env.manifest_sha256": manifest_sha} if manifest_sha else {}),
    }
    model = client.create_logged_model(
        experiment_id=run.info.experiment_id,
        name="model",
        source_run_id=run_id,
        tags=tags,
        model_type="mw-env address tagger",
    )
    try:
        with tempfile.TemporaryDirectory(prefix="mw-env-mlflow-") as tmp:
            folder = save_model_dir(
                checkpoint, Path(tmp) / "model", manifest_sha256=manifest_sha, model_id=model.model_id
            )
            client.log_model_artifacts(model.model_id, str(folder))
    except BaseException:
        client.finalize_logged_model(model.model_id, "FAILED")
        raise
    client.finalize_logged_model(model.model_id, "READY")
    digits = checkpoint.stem.rpartition("-")[2]  # step-000000400.pt: the model is the run's output at 400
    client.log_outputs(run_id, [LoggedModelOutput(model.model_id, int(digits) if digits.isdigit() else 0)])
    client.set_tag(run_id, "mw-env.logged_model", f"models:/{model.model_id}")
