"""One run's state between setup and the report, and the checkpoint it writes.

Checkpoint payload keys (checkpoint.py validates the required ones): format_version, step, model,
optimizer, scheduler, scaler (fp16 only), loop, world_size, rng (a list by rank: torch, numpy,
python, cuda), data (resume.DATA_KEYS: source, order, shards, val_shards, and by rank position and
counts), config, config_sha256, config_sources, tokenizer, labels, meta.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mw_env.trainer import checkpoint as ckpt_mod
from mw_env.trainer.data import Corpus, Counts
from mw_env.trainer.distributed import DistInfo, barrier, gather_objects
from mw_env.trainer.metrics import MetricsWriter
from mw_env.trainer.runtime import rng_states
from mw_env.trainer.state import LoopState
from mw_env.trainer.step import Trainer
from mw_env.trainspec.config import ResolvedConfig

Echo = Callable[[str], None]


@dataclass
class Session:
    """Everything one run holds between setup and the report."""

    resolved: ResolvedConfig
    dist: DistInfo
    out_dir: Path
    say: Echo
    corpus: Corpus
    trainer: Trainer
    metrics: MetricsWriter
    facts: dict[str, Any]
    state: LoopState = field(default_factory=LoopState)
    counts: Counts | None = None
    accepted_changes: list[str] = field(default_factory=list)
    hasher: Any = None  # data.digest.ShardHasher on rank 0 with data.hash_shards

    @property
    def ckpt_dir(self) -> Path:
        return self.out_dir / "checkpoints"

    def position(self) -> dict[str, Any]:
        """Where this rank's stream stands before step `state.step` (arithmetic on row counts)."""
        o = self.resolved.config.optim
        rows = self.state.step * o.batch_size * o.accumulation_steps
        if self.corpus.split is not None:
            rows *= self.dist.world  # the in-memory order is one global stream
        per_epoch = self.corpus.rank_rows(self.dist.rank)
        return {
            "next_step": self.state.step,
            "stream_row": rows,
            "epoch": rows // per_epoch,
            "rows_consumed": rows,
        }

    def save(self) -> Path | None:
        """All ranks: gather RNG states, positions and counts; rank 0 writes the checkpoint."""
        t = self.trainer
        assert self.counts is not None  # set before the first step, so before any checkpoint
        parts = gather_objects(
            {"rng": rng_states(), "position": self.position(), "counts": self.counts.to_dict()}, self.dist
        )
        barrier(self.dist)
        path = None
        if self.dist.main:
            config, state = self.resolved.config, self.state
            path = ckpt_mod.checkpoint_path(self.ckpt_dir, state.step)
            self.metrics.log("checkpoint", step=state.step, path=str(path), phase="start")
            payload = {
                "format_version": ckpt_mod.FORMAT_VERSION,
                "step": state.step,
                "model": t.model.state_dict(),
                "optimizer": t.optimizer.state_dict(),
                "scheduler": t.scheduler.state_dict(),
                "loop": state.to_dict(),
                "world_size": self.dist.world,
                "rng": [p["rng"] for p in parts],
                "data": {
                    **self.corpus.identity,
                    "position": [p["position"] for p in parts],
                    "counts": [p["counts"] for p in parts],
                },
                "config": config.to_dict(),
                "config_sha256": config.sha256(),
                "config_sources": dict(self.resolved.sources),
                "tokenizer": self.corpus.tokenizer.to_state(),
                "labels": list(self.corpus.labels.names),
                "meta": json.loads(json.dumps(self.facts, default=str)),  # plain types only (weights_only)
            }
            if t.precision.name == "fp16":
                payload["scaler"] = t.scaler.state_dict()
            ckpt_mod.save_checkpoint(payload, self.ckpt_dir, keep_last=config.runtime.keep_last)
            self.metrics.log("checkpoint", step=state.step, path=str(path), phase="done")
        barrier(self.dist)
        return path
