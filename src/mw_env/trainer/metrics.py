"""metrics.jsonl (one JSON event per line, appended and flushed); the tagging metrics are scoring.py's.

Events (design.md): step, eval, checkpoint, skipped_step, finished - each with "time" (unix
seconds) - plus "resumed" (step, path) when a run continues from a checkpoint. Every event is also
handed to the experiment tracker chosen by runtime.tracking, when that module is present.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mw_env.base.atomic import fault_for, open_append
from mw_env.rundir.contract import METRICS_FILE
from mw_env.rundir.events import EventName


class MetricsWriter:
    """Appends events to <run_dir>/metrics.jsonl. Disabled (no file, no tracker) on ranks > 0."""

    def __init__(
        self,
        run_dir: Path,
        *,
        tracking: str = "none",
        hparams: dict[str, Any] | None = None,
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled
        self.path = Path(run_dir) / METRICS_FILE
        self._fh = None
        self._tracker = None
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open_append(self.path)  # a FIFO or a device here is refused, not hung on
        if tracking != "none":
            from mw_env.trainer.tracking.tracking import (
                open_trackers,  # its third-party packages are optional
            )

            self._tracker = open_trackers(tracking, Path(run_dir), dict(hparams or {}))

    def log(self, event: EventName, *, at: float | None = None, **fields: Any) -> dict[str, Any]:
        """Append one event; `at`: its time when it happened before it is written (a step's, steplog.py)."""
        record = {"event": event, **fields, "time": time.time() if at is None else at}
        if self._fh is not None:
            # NaN/inf are written as JSON null: a strict JSON reader must still parse every line.
            clean = {
                k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()
            }
            fault = fault_for(
                self.path
            )  # the tests' fault seam (mw_env.base.atomic): a disk full at this line
            if fault is not None:
                raise fault
            self._fh.write(json.dumps(clean) + "\n")
            self._fh.flush()
        if self._tracker is not None:
            self._tracker.log(record)
        return record

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._tracker is not None:
            self._tracker.close()
            self._tracker = None


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """All events; a torn last line (a killed writer) is skipped."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except (ValueError, RecursionError):  # torn by a kill, or valid JSON Python refuses (depth, digits)
            continue
    return out


def latest_by_step(events: Sequence[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """Events of one kind, the last one per step (a resumed run re-logs the steps after its checkpoint)."""
    by_step: dict[int, dict[str, Any]] = {}
    for e in events:
        if e.get("event") == kind and isinstance(e.get("step"), int):
            by_step[e["step"]] = e
    return [by_step[s] for s in sorted(by_step)]
