"""The row trace: which rows each step of each rank read, for proving the data order end to end.

Opt-in (`MW_ENV_TRACE_ROWS=1` in the trainer's environment, a write per step): every rank appends one line per
step to `<run>/row-trace/rank-<r>.jsonl` (docs/runs.md has the format), the rows in the order the step read
them. A resumed run appends the steps it runs again; the last line of a step is what was trained.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np

from mw_env.rundir.contract import ROW_TRACE_DIR, row_trace_name
from mw_env.trainer.data.reader import SYNTHETIC
from mw_env.trainer.data.shards import Shard

if TYPE_CHECKING:
    from mw_env.trainer.data.stream import Rows

ENV = "MW_ENV_TRACE_ROWS"


def enabled() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


class RowIds:
    """(shard, row in file) of rows read from a shard list."""

    def __init__(self, shards: Sequence[Shard]) -> None:
        # Each Parquet row group's first row in its file (a shard's block list holds its non-empty groups).
        self.first: dict[tuple[int, int], int] = {}
        for s, shard in enumerate(shards):
            at = 0
            for b in sorted(shard.blocks, key=lambda b: b.part):
                self.first[(s, b.part)] = at
                at += b.rows

    def of(self, parts: Sequence[tuple[Rows, np.ndarray]]) -> list[list[int]]:
        out = []
        for rows, idx in parts:
            for s, part, local in zip(
                rows.shard[idx].tolist(), rows.part[idx].tolist(), rows.local[idx].tolist(), strict=True
            ):
                row = local if part < 0 or part == SYNTHETIC else self.first.get((s, part), 0) + local
                out.append([s, row])
        return out


class TraceWriter:
    """Appends one rank's steps to its trace file."""

    def __init__(self, run_dir: Path, rank: int) -> None:
        folder = Path(run_dir) / ROW_TRACE_DIR
        folder.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = (folder / row_trace_name(rank)).open("a", encoding="utf-8")

    def write(self, step: int, ids: list[list[int]] | None) -> None:
        self._fh.write(json.dumps({"step": step, "rows": ids or []}) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()
