"""DDP on the CPU (gloo) with torchrun: 2 processes x accumulation 2 (no_sync on the first micro-batch)
follow the same per-step losses as 1 process x accumulation 4 over the same rows.

Each rank reads its own blocks (the synthetic corpus is an in-memory shard read like files), so the one
process is handed, at step s, the 4 micro-batches the 2 ranks read at step s (rank 0's and rank 1's first,
then their second): `Corpus.producer` replaced for that run by one over both ranks' producers.

Tolerance: relative 1e-5 per step (measured: ~1e-7). The rows, the padding and the token normalisation are identical;
only the float32 summation order of the gradient all-reduce differs, which moves losses by ~1e-7
relative per step and compounds a little over 8 steps.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import TINY, events, step_losses, tiny_config

pytestmark = [pytest.mark.torch, pytest.mark.slow]

REL_TOL = 1e-5


def _train_on_both_ranks_rows(resolved, ddp_config, monkeypatch: pytest.MonkeyPatch) -> None:
    """One process, accumulation 4, whose step s is the 2 ranks' micro-batches of step s (in DDP's layout)."""
    from mw_env.trainer.data import Corpus, open_corpus
    from mw_env.trainer.data.stream import StepData
    from mw_env.trainer.loop import train

    ranks = [open_corpus(ddp_config, rank=r, world=2).producer() for r in (0, 1)]

    def both(step: int) -> StepData:
        parts = [p(step) for p in ranks]
        micro = [parts[r].micro[m] for m in range(2) for r in range(2)]
        counts = parts[0].counts
        counts.merge(parts[1].counts)
        return StepData(step, micro, counts, parts[0].position)

    both.close = lambda: [p.close() for p in ranks]  # type: ignore[attr-defined]
    monkeypatch.setattr(Corpus, "producer", lambda self, stop=None: both)
    train(resolved=resolved, echo=lambda _m: None)


def test_two_process_ddp_matches_single_process_accumulation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.exists():
        pytest.skip("no torchrun next to this python")
    repo = Path(__file__).resolve().parents[2]
    ddp_dir, single_dir = tmp_path / "ddp", tmp_path / "single"
    sets = [*TINY, f"runtime.out_dir={ddp_dir}", "optim.accumulation_steps=2", "runtime.checkpoint_every=8"]
    argv = [
        str(torchrun),
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "mw_env.trainer",
        "run",
        "--config",
        "smoke",
    ]
    for s in sets:
        argv += ["--set", s]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "world size 2" in proc.stdout

    _train_on_both_ranks_rows(
        tiny_config(single_dir, "optim.accumulation_steps=4", "runtime.checkpoint_every=8"),
        tiny_config(ddp_dir, "optim.accumulation_steps=2", "runtime.checkpoint_every=8").config,
        monkeypatch,
    )
    ddp, single = step_losses(ddp_dir), step_losses(single_dir)
    assert sorted(ddp) == sorted(single) == list(range(1, 9))
    worst = max(abs(ddp[s] - single[s]) / abs(single[s]) for s in ddp)
    print(f"largest relative per-step loss difference: {worst:.2e}")
    for step in ddp:
        assert ddp[step] == pytest.approx(single[step], rel=REL_TOL), step
    # Rank 0 alone writes metrics and checkpoints; the checkpoint records the world size.
    assert len(events(ddp_dir, "finished")) == 1
    from mw_env.trainer.ckpt.checkpoint import load_checkpoint

    ckpt = load_checkpoint(ddp_dir / "checkpoints" / "step-000000008.pt")
    assert ckpt["world_size"] == 2 and len(ckpt["rng"]) == 2
