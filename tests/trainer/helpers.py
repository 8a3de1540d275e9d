"""Shared helpers for the trainer tests: tiny configs, reading runs back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mw_env.trainspec.config import ResolvedConfig, find_config, resolve_config

# A smoke run shrunk further: enough steps to see the loss fall, small enough for 2 shared cores.
TINY = (
    "data.synthetic_rows=192",
    "data.synthetic_val_rows=24",
    "optim.batch_size=8",
    "runtime.max_steps=8",
    "runtime.eval_every=4",
    "runtime.checkpoint_every=4",
    "runtime.log_every=4",
    "runtime.eval_samples=1",
    "runtime.threads=1",
)


def tiny_config(out_dir: Path, *extra: str) -> ResolvedConfig:
    return resolve_config(path=find_config("smoke"), overrides=(*TINY, f"runtime.out_dir={out_dir}", *extra))


def events(run_dir: Path, kind: str | None = None) -> list[dict[str, Any]]:
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    out = [json.loads(line) for line in lines]
    return [e for e in out if kind is None or e["event"] == kind]


def step_losses(run_dir: Path) -> dict[int, float]:
    """Last logged loss per step (a resumed run re-logs steps after its checkpoint)."""
    return {e["step"]: e["loss"] for e in events(run_dir, "step")}
