"""Metrics events as tracker values: scalars named "<train|eval>/<field>", hyperparameters as flat strings;
and `Guarded`, a tracker's failure mid-run turned into one warning.

A leaf module: both trackers (tracking, tracking.mlflow_tracker) import it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping

# Event fields that are not metrics.
_NOT_METRICS = {"event", "step", "time", "phase", "path", "reason"}


def metric_values(event: Mapping[str, object]) -> dict[str, float]:
    """The numeric fields of an event under "<train|eval>/<name>" (NaN/inf kept: a tracker should show them)."""
    kind = event.get("event")
    prefix = {"step": "train", "eval": "eval"}.get(str(kind))
    if prefix is None:
        return {"train/skipped_step": 1.0} if kind == "skipped_step" else {}
    out = {}
    for key, value in event.items():
        if key in _NOT_METRICS or isinstance(value, bool):
            continue
        if value is None and key == "loss":
            out[f"{prefix}/loss"] = float("nan")  # the trainer writes a non-finite loss as null
        elif isinstance(value, int | float):
            out[f"{prefix}/{key}"] = float(value)
    return out


def flatten(hparams: Mapping[str, object], prefix: str = "") -> dict[str, str]:
    """{"optim": {"lr": 1e-3}} -> {"optim.lr": "0.001"}; values as short strings (MLflow params)."""
    out: dict[str, str] = {}
    for key, value in hparams.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, prefix=f"{name}."))
        else:
            text = json.dumps(value) if isinstance(value, list | tuple) else str(value)
            out[name] = text[:500]
    return out


class Guarded:
    """A tracker whose failure mid-run is one warning on stderr, then silence: metrics.jsonl keeps every event."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.failed = False

    def guard(self, action: str, func: Callable[..., object], *args: object, **kwargs: object) -> None:
        if self.failed:
            return
        try:
            func(*args, **kwargs)
        except Exception as exc:  # any tracker failure: metrics.jsonl already has the data
            self.failed = True
            print(
                f"mw-env: {self.name} tracking stopped ({action}: {exc.__class__.__name__}: {exc}); "
                "metrics.jsonl still has every event",
                file=sys.stderr,
                flush=True,
            )
