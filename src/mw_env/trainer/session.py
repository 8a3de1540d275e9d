"""One run's state between setup and the report, and the checkpoint it writes (what it holds: ckpt/parts.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mw_env.rundir.contract import checkpoints_dir
from mw_env.trainer.ckpt import checkpoint as ckpt_mod
from mw_env.trainer.ckpt.parts import payload
from mw_env.trainer.data import Corpus, Counts
from mw_env.trainer.distributed import DistInfo, barrier, gather_objects
from mw_env.trainer.metrics import MetricsWriter
from mw_env.trainer.runtime import rng_states
from mw_env.trainer.state import LoopState
from mw_env.trainer.step import Trainer
from mw_env.trainspec.config import ResolvedConfig

if TYPE_CHECKING:
    from mw_env.trainer.data.digest import ShardHasher
    from mw_env.trainer.report.figure_pool import FigurePool

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
    hasher: ShardHasher | None = None  # on rank 0 with data.hash_shards
    figures: FigurePool | None = None  # on rank 0: the report's figure processes (report/figure_pool.py)

    @property
    def ckpt_dir(self) -> Path:
        return checkpoints_dir(self.out_dir)

    def position(self) -> dict[str, Any]:
        """Where this rank stands before step `state.step` (arithmetic on row counts): the lanes it reads, their
        stream row (the same in every lane) and the first one's epoch, and the rows it read."""
        layout, step = self.corpus.layout, self.state.step
        lanes = layout.lanes_of(self.dist.rank)
        row = step * layout.lane_rows
        return {
            "next_step": step,
            "lanes": lanes,
            "stream_row": row,
            "epoch": row // max(1, self.corpus.lane_rows(lanes[0])),
            "rows_consumed": step * layout.share,
        }

    def save(self, *, final: bool = False) -> Path | None:
        """All ranks: gather RNG states, positions and counts; rank 0 writes the checkpoint, and beside it the
        portable weights when runtime.portable_weights asks (`final`: the run's last checkpoint)."""
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
            ckpt_mod.save_checkpoint(payload(self, parts), self.ckpt_dir, keep_last=config.runtime.keep_last)
            self.metrics.log("checkpoint", step=state.step, path=str(path), phase="done")
            mode = config.runtime.portable_weights
            if mode == "every" or (mode == "final" and final):
                self._write_weights(path, every=mode == "every")
        barrier(self.dist)
        return path

    def _write_weights(self, checkpoint: Path, *, every: bool) -> None:
        import importlib.util

        from mw_env.trainer.weights.folder import write_run_weights

        if importlib.util.find_spec("safetensors") is None:  # `mw-env train` said so at the start too
            self.say(
                "warning: no portable weights written: this venv lacks safetensors (the train extra has it)"
            )
            return
        step = self.state.step
        folder = write_run_weights(
            self.out_dir,
            model=self.trainer.model,
            config=self.resolved.config,
            tokenizer=self.corpus.tokenizer,
            labels=list(self.corpus.labels.names),
            step=step,
            checkpoint=checkpoint,
            every=every,
        )
        self.metrics.log("weights", step=step, path=str(folder))

    def init_from(self) -> None:
        """model.init_from at step 0: the trained weights into the fresh model, the source into the report."""
        from mw_env.trainer.weights.initfrom import start_from

        self.facts["init_from"] = start_from(
            self.trainer.model,
            config=self.resolved.config,
            tokenizer=self.corpus.tokenizer,
            labels=list(self.corpus.labels.names),
            say=self.say,
        )
