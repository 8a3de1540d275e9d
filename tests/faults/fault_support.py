"""The fault harness's shared parts: one tiny config, the trainer run in-process, the documented outcomes.

Every case ends in one of the outcomes docs/reliability.md lists, checked by `documented()`:
- "finished": exit 0, a complete report, `train verify` passes;
- "stopped": exit 0, a stop checkpoint, the command that resumes;
- "failed": exit 1, `error:`/`hint:` naming the fault and where, every earlier checkpoint intact, no temporary
  file left, and the same command then finishes the run.
Each case records its cell (fault, phase, single/DDP, foreground/detached, outcome) in OUTCOMES; the
docs' fault table is made from these records (tests/faults/test_fault_table.py writes them with
MW_FAULT_TABLE=path).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mw_env.rundir.manifest import sha256_file

# One tiny config for every fault case: 4 steps, a checkpoint and an eval every 2, small batches.
TINY = (
    "--config",
    "smoke",
    "--set",
    "data.synthetic_rows=96",
    "--set",
    "data.synthetic_val_rows=16",
    "--set",
    "optim.batch_size=8",
    "--set",
    "runtime.max_steps=4",
    "--set",
    "runtime.checkpoint_every=2",
    "--set",
    "runtime.eval_every=2",
    "--set",
    "runtime.eval_batches=1",
    "--set",
    "runtime.eval_samples=1",
    "--set",
    "runtime.log_every=1",
    "--set",
    "runtime.threads=1",
    "--set",  # no figures (tests/trainer/helpers.py TINY); the figure write's fault turns them on
    "runtime.report_figures=false",
)

WORDS = {"ENOSPC": "the disk is full", "EIO": "I/O error", "EACCES": "permission denied", "EDQUOT": "quota"}


def run_args(run: Path, *extra: str) -> list[str]:
    return [*TINY, "--set", f"runtime.out_dir={run}", *extra]


def checkpoints_intact(run: Path) -> list[str]:
    """Names of the complete checkpoints; asserts each matches its sidecar and no temporary is left."""
    ckpts = sorted((run / "checkpoints").glob("step-*.pt")) if (run / "checkpoints").is_dir() else []
    for p in ckpts:
        side = p.with_name(p.name + ".sha256")
        if (
            side.exists()
        ):  # a fault at the sidecar leaves a complete checkpoint without one (checked by structure)
            assert side.read_text().split()[0] == sha256_file(p), p
    leftovers = [str(p) for p in run.rglob("*") if ".tmp-" in p.name]
    assert not leftovers, leftovers
    return [p.name for p in ckpts]


def record(table: Path | None, **cell: str) -> None:
    """Append one measured cell to the fault table's data (one JSON line per case)."""
    if table is None:
        return
    with open(table, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(cell, sort_keys=True) + "\n")


def table_path() -> Path | None:
    value = os.environ.get("MW_FAULT_TABLE")
    return Path(value) if value else None
