"""Optional tracking: TensorBoard and MLflow (file store, SQLite, any URI) receive the metrics events."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from mw_env.base.errors import InputError, MwEnvError
from mw_env.trainer.tracking.tracking import NullTracker, open_trackers
from mw_env.trainer.tracking.values import flatten, metric_values

EVENTS = [
    {
        "event": "step",
        "step": 1,
        "loss": 2.5,
        "lr": 1e-3,
        "grad_norm": 0.9,
        "tokens_per_s": 900.0,
        "time": 100.0,
    },
    {
        "event": "step",
        "step": 2,
        "loss": 2.0,
        "lr": 1e-3,
        "grad_norm": 0.8,
        "tokens_per_s": 950.0,
        "time": 101.0,
    },
    {"event": "eval", "step": 2, "loss": 1.9, "token_acc": 0.5, "entity_f1": 0.25, "time": 102.0},
    {
        "event": "checkpoint",
        "step": 2,
        "phase": "done",
        "path": "checkpoints/step-000000002.pt",
        "time": 103.0,
    },
    {"event": "finished", "step": 2, "reason": "max_steps", "time": 104.0},
]
HPARAMS = {"optim": {"lr": 1e-3, "batch_size": 16}, "data": {"countries": ["US", "GB"]}}

HAVE_TB = (
    importlib.util.find_spec("tensorboard") is not None and importlib.util.find_spec("torch") is not None
)
HAVE_MLFLOW = importlib.util.find_spec("mlflow") is not None


def test_metric_values_and_flatten():
    assert metric_values(EVENTS[0]) == {
        "train/loss": 2.5,
        "train/lr": 1e-3,
        "train/grad_norm": 0.9,
        "train/tokens_per_s": 900.0,
    }
    assert metric_values(EVENTS[2]) == {"eval/loss": 1.9, "eval/token_acc": 0.5, "eval/entity_f1": 0.25}
    assert metric_values(EVENTS[3]) == {}
    assert math.isnan(metric_values({"event": "step", "step": 3, "loss": None})["train/loss"])
    assert metric_values({"event": "skipped_step", "step": 3, "reason": "x"}) == {"train/skipped_step": 1.0}
    assert flatten(HPARAMS) == {
        "optim.lr": "0.001",
        "optim.batch_size": "16",
        "data.countries": '["US", "GB"]',
    }


def test_none_and_unknown(tmp_path):
    tracker = open_trackers("none", tmp_path, {})
    assert isinstance(tracker, NullTracker)
    tracker.log(EVENTS[0])
    tracker.close()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(InputError, match="unknown tracker 'wandb'") as err:
        open_trackers("wandb", tmp_path, {})
    assert "tensorboard" in err.value.hint


def test_missing_package_names_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # makes `import mlflow` raise ImportError
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    monkeypatch.setitem(sys.modules, "mlflow.entities", None)
    with pytest.raises(MwEnvError, match="'mlflow' but mlflow cannot be imported") as err:
        open_trackers("mlflow", tmp_path, {})
    assert "--extras train,mlflow`" in err.value.hint and "runtime.tracking=none" in err.value.hint
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(MwEnvError, match="tensorboard cannot be imported") as err:
        open_trackers("tensorboard", tmp_path, {})
    assert "--extras train,tracking`" in err.value.hint


@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TB, reason="tensorboard is not installed (the `tracking` extra)")
def test_tensorboard_scalars_round_trip(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = open_trackers("tensorboard", tmp_path, HPARAMS)
    for event in EVENTS:
        tracker.log(event)
    tracker.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    loss = [(s.step, s.value) for s in acc.Scalars("train/loss")]
    assert loss == [(1, 2.5), (2, 2.0)]
    assert [s.value for s in acc.Scalars("eval/entity_f1")] == [0.25]
    assert "train/tokens_per_s" in acc.Tags()["scalars"]


@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TB, reason="tensorboard is not installed (the `tracking` extra)")
def test_a_failing_tracker_warns_once_and_training_goes_on(tmp_path, capsys):
    tracker = open_trackers("tensorboard", tmp_path, {})

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    tracker.writer.add_scalar = broken
    for event in EVENTS:
        tracker.log(event)  # never raises
    tracker.close()
    err = capsys.readouterr().err
    assert err.count("tensorboard tracking stopped") == 1 and "No space left" in err


@pytest.fixture
def no_mlflow_env(monkeypatch):
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)


def test_tracking_uri_precedence(tmp_path, monkeypatch, no_mlflow_env):
    from mw_env.trainer.tracking.mlflow_tracker import _sqlite_artifacts, resolve_tracking_uri

    assert resolve_tracking_uri(tmp_path) == ((tmp_path / "mlruns").resolve().as_uri(), "run folder")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.cluster:5000")
    assert resolve_tracking_uri(tmp_path) == ("http://mlflow.cluster:5000", "MLFLOW_TRACKING_URI")
    assert resolve_tracking_uri(tmp_path, "sqlite:////db/m.db") == (
        "sqlite:////db/m.db",
        "runtime.tracking_uri",
    )
    assert _sqlite_artifacts("sqlite:////db/m.db") == "file:///db/mlartifacts"
    assert _sqlite_artifacts("http://x") is None and _sqlite_artifacts("sqlite://") is None


@pytest.mark.skipif(not HAVE_MLFLOW, reason="mlflow is not installed (the `mlflow` extra)")
def test_mlflow_file_backend_round_trip_and_resume(tmp_path, no_mlflow_env):
    from mlflow.tracking import MlflowClient

    tracker = open_trackers("mlflow", tmp_path, HPARAMS)
    for event in EVENTS[:2]:
        tracker.log(event)
    tracker.close()  # killed before `finished`: a resume continues the same MLflow run
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in EVENTS[:2]))
    first_id = tracker.run_id
    again = open_trackers("mlflow", tmp_path, HPARAMS)
    assert again.run_id == first_id
    for event in EVENTS[2:]:
        again.log(event)
    again.close()
    # --fresh moves metrics.jsonl aside: the same folder then starts a new MLflow run.
    (tmp_path / "metrics.jsonl").rename(tmp_path / "metrics.jsonl.old")
    fresh = open_trackers("mlflow", tmp_path, HPARAMS)
    fresh.close()
    assert fresh.run_id != first_id
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").resolve().as_uri())
    run = client.get_run(first_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["optim.lr"] == "0.001"
    assert [(m.step, m.value) for m in client.get_metric_history(first_id, "train/loss")] == [
        (1, 2.5),
        (2, 2.0),
    ]
    assert run.data.metrics["eval/entity_f1"] == 0.25


HAVE_SQL = HAVE_MLFLOW and importlib.util.find_spec("sqlalchemy") is not None


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_SQL, reason="mlflow + sqlalchemy are not installed (the `mlflow` extra)")
def test_mlflow_sqlite_store_gets_the_run_its_metrics_and_the_report(tmp_path, monkeypatch, no_mlflow_env):
    """runtime.tracking_uri names a SQLite store (and beats MLFLOW_TRACKING_URI): params, metrics, then the
    report, the manifest and the checkpoint's path as artifacts."""
    from mlflow.tracking import MlflowClient

    from mw_env.trainer.metrics import MetricsWriter
    from mw_env.trainer.report.report import write_report
    from mw_env.trainspec.config import find_config, resolve_config

    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    overrides = ["runtime.tracking=mlflow", f"runtime.tracking_uri={uri}", "runtime.report_figures=false"]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9/not-this-one")
    monkeypatch.chdir(tmp_path)  # nothing may land in the working directory
    resolved = resolve_config(path=find_config("smoke"), overrides=overrides)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "step-000000002.pt").write_bytes(b"weights")  # named like the trainer's
    writer = MetricsWriter(run, tracking="mlflow", hparams=resolved.config.to_dict())
    for event in EVENTS:
        writer.log(event["event"], **{k: v for k, v in event.items() if k not in ("event", "time")})
    writer.close()
    write_report(run, resolved=resolved, card={"rows": {"train": 2}}, facts={})

    assert not (run / "mlruns").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["run", "store"]
    client = MlflowClient(tracking_uri=uri)
    saved = json.loads((run / "mlflow-run.json").read_text())
    assert saved["tracking_uri"] == uri
    mlrun = client.get_run(saved["run_id"])
    assert mlrun.info.status == "FINISHED" and mlrun.info.run_name == "run"
    assert mlrun.data.params["optim.lr"] == "0.003" and mlrun.data.params["runtime.tracking"] == "mlflow"
    assert [(m.step, m.value) for m in client.get_metric_history(saved["run_id"], "train/loss")] == [
        (1, 2.5),
        (2, 2.0),
    ]
    assert mlrun.data.metrics["eval/entity_f1"] == 0.25
    assert mlrun.data.tags["mw-env.checkpoint"] == str(run / "checkpoints" / "step-000000002.pt")
    top = {f.path for f in client.list_artifacts(saved["run_id"])}
    assert top == {"report", "MANIFEST.sha256", "checkpoint.json"}
    report = {f.path for f in client.list_artifacts(saved["run_id"], "report")}
    assert {"report/report.md", "report/report.html", "report/hyperparameters.json"} <= report
    # Artifacts beside the database, not in whatever folder the trainer started in.
    assert mlrun.info.artifact_uri.startswith((tmp_path / "store" / "mlartifacts").as_uri())
    local = client.download_artifacts(saved["run_id"], "checkpoint.json", str(tmp_path / "store"))
    assert json.loads(Path(local).read_text())["sha256"] == hashlib.sha256(b"weights").hexdigest()


@pytest.mark.skipif(not HAVE_MLFLOW, reason="mlflow is not installed (the `mlflow` extra)")
def test_an_unreachable_tracking_uri_is_a_clear_error(tmp_path, monkeypatch, no_mlflow_env):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuchscheme://x")
    with pytest.raises(
        MwEnvError, match=r"could not start at nosuchscheme://x \(from MLFLOW_TRACKING_URI\)"
    ) as err:
        open_trackers("mlflow", tmp_path, {})
    assert "runtime.tracking=none" in err.value.hint


def _train_smoke(run: Path, tracking: str, capsys, monkeypatch) -> str:
    """The trainer on the smoke config, 3 steps with one eval at the last, feeding `tracking`: train() in this
    process (what `python -m mw_env.trainer run` calls; a child only added a torch import). Returns what it
    wrote to stderr. The MLflow variables the tracker sets by default are put back after the test."""
    from mw_env.trainer.loop import train
    from mw_env.trainspec.config import find_config, resolve_config

    for name in ("MLFLOW_ALLOW_FILE_STORE", "MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    sets = (
        f"runtime.out_dir={run}",
        "runtime.max_steps=3",
        "runtime.eval_every=3",
        f"runtime.tracking={tracking}",
        "runtime.report_figures=false",  # what is tracked is the question here, not the report's figures
    )
    capsys.readouterr()
    train(resolved=resolve_config(path=find_config("smoke"), overrides=sets), echo=lambda _m: None)
    return capsys.readouterr().err


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.skipif(not HAVE_TB, reason="tensorboard is not installed (the `tracking` extra)")
def test_the_trainer_feeds_tensorboard_when_enabled(tmp_path, capsys, monkeypatch):
    import json

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "smoke"
    _train_smoke(run, "tensorboard", capsys, monkeypatch)
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [(e["step"], e["loss"]) for e in steps if e["event"] == "step"]
    # The same numbers as metrics.jsonl, the source of truth (TensorBoard stores float32).
    assert [(s.step, pytest.approx(s.value, rel=1e-6)) for s in acc.Scalars("train/loss")] == losses
    assert [s.step for s in acc.Scalars("eval/entity_f1")] == [3]


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.skipif(not HAVE_MLFLOW, reason="mlflow is not installed (the `mlflow` extra)")
def test_mlflow_gets_the_model_loadable_by_pyfunc_and_registrable(
    tmp_path, no_mlflow_env, monkeypatch, capsys
):
    """Issue 20 #14: params, metrics, the report and a checkpoint path, but no model: the registry (a promotion
    gate) had nothing to promote. Now `model/` is an MLflow pyfunc model (weights, id layout, labels) and the
    run is tagged with its MANIFEST.sha256."""

    import mlflow
    import yaml
    from mlflow.tracking import MlflowClient

    from mw_env.rundir.manifest import sha256_file

    run = tmp_path / "smoke"
    err = _train_smoke(run, "mlflow", capsys, monkeypatch)
    assert "logging the model to MLflow failed" not in err, err
    saved = json.loads((run / "mlflow-run.json").read_text())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(saved["tracking_uri"])
    client = MlflowClient(tracking_uri=saved["tracking_uri"])
    tags = client.get_run(saved["run_id"]).data.tags
    assert tags["mw-env.manifest_sha256"] == sha256_file(run / "MANIFEST.sha256")
    assert tags["mw-env.model"] == f"runs:/{saved['run_id']}/model"
    files = {f.path for f in client.list_artifacts(saved["run_id"], "model/data")}
    assert files == {"model/data/weights.pt", "model/data/tagger.json"}

    local = Path(client.download_artifacts(saved["run_id"], "model", str(tmp_path / "dl")))
    assert yaml.safe_load((local / "MLmodel").read_text())["flavors"]["python_function"]["loader_module"] == (
        "mw_env.trainer.mlflow_model"
    )
    if importlib.util.find_spec("pandas") is not None:  # mlflow.pyfunc needs it (mlflow-skinny lacks it)
        model = mlflow.pyfunc.load_model(f"runs:/{saved['run_id']}/model")
    else:  # the hook mlflow.pyfunc.load_model calls, called directly
        from mw_env.trainer.mlflow_model import _load_pyfunc

        model = _load_pyfunc(str(local / "data"))
    addresses = ["10 Downing Street London SW1A 2AA", ["221B", "Baker", "Street"]]
    tagged = model.predict(addresses)
    meta = json.loads((run / "report" / "data_card.json").read_text())
    assert [len(t) for t in tagged] == [6, 3] and all(
        label in meta["labels"] for row in tagged for label in row
    )
    version = mlflow.register_model(f"runs:/{saved['run_id']}/model", "address-tagger")
    assert int(version.version) == 1
    if not hasattr(client, "create_logged_model"):
        return  # MLflow 2: the run's model/ artifact is the model
    # MLflow 3 (issue 30 #7): a LoggedModel, READY, linked to the run as its output, with the same files.
    model_id = tags["mw-env.logged_model"].removeprefix("models:/")
    logged = client.get_logged_model(model_id)
    from mlflow.entities import LoggedModelStatus

    assert logged.status == LoggedModelStatus.READY
    assert logged.source_run_id == saved["run_id"] and logged.name == "model"
    assert logged.tags["mw-env.manifest_sha256"] == sha256_file(run / "MANIFEST.sha256")
    outputs = client.get_run(saved["run_id"]).outputs
    assert [m.model_id for m in outputs.model_outputs] == [model_id]
    found = client.search_logged_models(experiment_ids=[logged.experiment_id])
    assert [m.model_id for m in found] == [model_id]
    got = Path(mlflow.artifacts.download_artifacts(f"models:/{model_id}", dst_path=str(tmp_path / "dl3")))
    assert yaml.safe_load((got / "MLmodel").read_text())["model_id"] == model_id
    assert {p.name for p in (got / "data").iterdir()} == {"weights.pt", "tagger.json"}
    version = mlflow.register_model(f"models:/{model_id}", "address-tagger")
    assert int(version.version) == 2
