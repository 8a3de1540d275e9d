"""The metrics events of a run folder (metrics.jsonl): the names the trainer writes and the host's readers
(runstatus, anomalies, stop, foreground) and the trainer's report and trackers compare with.

One JSON object per line; every event has `event` (one of `EventName`) and `time` (unix seconds). A reader must
treat each other field as possibly missing or of another type (a run folder is a file anyone can edit, and older
runs lack newer fields). The writer's signature (`MetricsWriter.log(event: EventName, ...)`) and
tests/runs/test_rundir_events.py (every event name a reader compares with is one of these) keep the two sides
agreeing; docs/design.md ("Run folder") and docs/runs.md list each event's fields.
"""

from __future__ import annotations

from typing import Literal, get_args

EventName = Literal[
    "step",
    "eval",
    "checkpoint",
    "weights",
    "skipped_step",
    "finished",
    "resumed",
    "corpus_changed",
    "data_wait",
]
EVENT_NAMES: tuple[str, ...] = get_args(EventName)

# Why a run ended (`finished.reason`).
FINISH_REASONS = ("max_steps", "early_stop", "stopped", "nonfinite")
