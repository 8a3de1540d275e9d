"""Optional experiment tracking: TensorBoard or MLflow (tracking.mlflow_tracker), fed with the metrics events.

metrics.jsonl stays the source of truth; a tracker is a view of it. So a tracker that fails in the
middle of a run (a full disk under mlruns/, a broken plugin) says so once on stderr and goes quiet
rather than ending hours of training. A tracker that cannot start is an error: it was asked for.
MLflow also gets the finished run's report (report.write_report calls tracking.mlflow_tracker.log_run_artifacts).
Runs inside the venv's python (TensorBoard's writer comes with torch).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from mw_env.base.errors import InputError, MwEnvError
from mw_env.rundir.contract import TENSORBOARD_DIR
from mw_env.trainer.tracking.values import Guarded, metric_values
from mw_env.trainspec.extras import bootstrap_hint

KINDS = ("none", "tensorboard", "mlflow")


class Tracker(Protocol):
    def log(self, event: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class NullTracker:
    def log(self, event: dict[str, Any]) -> None:
        return None

    def close(self) -> None:
        return None


class TensorBoardTracker(Guarded):
    """Scalars in <run_dir>/tensorboard (`tensorboard --logdir <run_dir>/tensorboard`)."""

    def __init__(self, run_dir: Path, hparams: Mapping[str, object]) -> None:
        super().__init__("tensorboard")
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise _missing_tensorboard(exc) from exc
        self.log_dir = Path(run_dir) / TENSORBOARD_DIR
        self.writer = SummaryWriter(log_dir=str(self.log_dir), flush_secs=30)
        self.writer.add_text(
            "config", "```json\n" + json.dumps(dict(hparams), indent=2, default=str) + "\n```"
        )

    def log(self, event: dict[str, Any]) -> None:
        step = event.get("step")
        if not isinstance(step, int):
            return
        for tag, value in metric_values(event).items():
            self.guard("add_scalar", self.writer.add_scalar, tag, value, step, walltime=event.get("time"))
        if event.get("event") == "finished":
            self.guard(
                "add_text", self.writer.add_text, "finished", f"step {step}: {event.get('reason')}", step
            )

    def close(self) -> None:
        self.guard("close", self.writer.close)


def _missing_tensorboard(exc: ImportError) -> MwEnvError:
    return MwEnvError(
        f"runtime.tracking is 'tensorboard' but tensorboard cannot be imported in this venv ({exc})",
        hint=f"add the `tracking` extra: {bootstrap_hint(sys.prefix, 'tracking')}, or set runtime.tracking=none",
    )


def open_trackers(kind: str, run_dir: Path, hparams: dict[str, Any]) -> Tracker:
    """The tracker for `kind` ("none" | "tensorboard" | "mlflow"), logging under `run_dir`."""
    if kind == "none":
        return NullTracker()
    if kind == "tensorboard":
        return TensorBoardTracker(Path(run_dir), hparams)
    if kind == "mlflow":
        from mw_env.trainer.tracking.mlflow_tracker import MLflowTracker

        return MLflowTracker(Path(run_dir), hparams)
    raise InputError(f"runtime.tracking: unknown tracker {kind!r}", hint=f"allowed: {', '.join(KINDS)}")
