"""Optional tracking: TensorBoard and MLflow (file backend) receive the metrics events."""

from __future__ import annotations

import importlib.util
import math
import sys

import pytest

from mw_env.errors import InputError, MwEnvError
from mw_env.trainer.tracking import NullTracker, flatten, metric_values, open_trackers

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
    assert "mw-env[mlflow]" in err.value.hint and "runtime.tracking=none" in err.value.hint
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(MwEnvError, match="tensorboard cannot be imported") as err:
        open_trackers("tensorboard", tmp_path, {})
    assert "mw-env[tracking]" in err.value.hint


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


@pytest.mark.skipif(not HAVE_MLFLOW, reason="mlflow is not installed (the `mlflow` extra)")
def test_mlflow_file_backend_round_trip_and_resume(tmp_path):
    from mlflow.tracking import MlflowClient

    tracker = open_trackers("mlflow", tmp_path, HPARAMS)
    for event in EVENTS[:2]:
        tracker.log(event)
    tracker.close()  # killed before `finished`: a resume continues the same MLflow run
    first_id = tracker.run_id
    again = open_trackers("mlflow", tmp_path, HPARAMS)
    assert again.run_id == first_id
    for event in EVENTS[2:]:
        again.log(event)
    again.close()
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").resolve().as_uri())
    run = client.get_run(first_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["optim.lr"] == "0.001"
    assert [(m.step, m.value) for m in client.get_metric_history(first_id, "train/loss")] == [
        (1, 2.5),
        (2, 2.0),
    ]
    assert run.data.metrics["eval/entity_f1"] == 0.25


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.skipif(not HAVE_TB, reason="tensorboard is not installed (the `tracking` extra)")
def test_the_trainer_feeds_tensorboard_when_enabled(tmp_path):
    import json
    import subprocess

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "smoke"
    argv = [sys.executable, "-m", "mw_env.trainer", "run", "--config", "smoke"]
    for item in (
        f"runtime.out_dir={run}",
        "runtime.max_steps=3",
        "runtime.eval_every=3",
        "runtime.tracking=tensorboard",
    ):
        argv += ["--set", item]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [(e["step"], e["loss"]) for e in steps if e["event"] == "step"]
    # The same numbers as metrics.jsonl, the source of truth (TensorBoard stores float32).
    assert [(s.step, pytest.approx(s.value, rel=1e-6)) for s in acc.Scalars("train/loss")] == losses
    assert [s.step for s in acc.Scalars("eval/entity_f1")] == [3]
