"""The metrics events of a run folder (metrics.jsonl) as typed records: what the trainer writes and what the
host's readers (runstatus, anomalies, stop, foreground) and the trainer's report and trackers read.

One JSON object per line; every event has `event` (one of `EventName`) and `time` (unix seconds). The fields
below are what the trainer writes; a reader must still treat each as possibly missing or of another type (a
run folder is a file anyone can edit, and older runs lack newer fields): `total=False`. The writer's
signature (`MetricsWriter.log(event: EventName, ...)`) and tests/runs/test_rundir_events.py (every event name a
reader compares with is one of these) keep the two sides agreeing. docs/design.md ("Run folder") and
docs/runs.md list the same fields for people.
"""

from __future__ import annotations

from typing import Literal, TypedDict, get_args

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

# Why a run ended (`finished.reason`), and where a checkpoint write is (`checkpoint.phase`).
FinishReason = Literal["max_steps", "early_stop", "stopped", "nonfinite"]
FINISH_REASONS: tuple[str, ...] = get_args(FinishReason)
CheckpointPhase = Literal["start", "done"]


class StepEvent(TypedDict, total=False):
    event: Literal["step"]
    step: int
    loss: float | None  # None: not finite (written as JSON null)
    lr: float
    grad_norm: float | None
    tokens_per_s: float  # input tokens of all processes per second
    words_per_s: float  # labelled words per second
    data_wait_s: float
    step_s: float
    time: float


class EvalEvent(TypedDict, total=False):
    event: Literal["eval"]
    step: int
    loss: float | None
    token_acc: float
    entity_f1: float  # in `f1_mode`; both modes follow
    entity_precision: float
    entity_recall: float
    f1_mode: str  # "conlleval" | "strict" (runtime.f1_mode)
    entity_f1_conlleval: float
    entity_f1_strict: float
    rows: int
    val_rows: int
    samples: list[str]
    time: float


class CheckpointEvent(TypedDict, total=False):
    event: Literal["checkpoint"]
    step: int
    path: str
    phase: CheckpointPhase
    time: float


class WeightsEvent(TypedDict, total=False):
    """A portable weights folder written beside a checkpoint (runtime.portable_weights; trainer/weights/)."""

    event: Literal["weights"]
    step: int
    path: str  # <run>/weights/step-XXXXXXXXX
    time: float


class SkippedStepEvent(TypedDict, total=False):
    event: Literal["skipped_step"]
    step: int
    reason: str
    time: float


class FinishedEvent(TypedDict, total=False):
    event: Literal["finished"]
    step: int
    reason: FinishReason
    phase: str  # "start-up": stopped before the first step
    time: float


class ResumedEvent(TypedDict, total=False):
    event: Literal["resumed"]
    step: int
    path: str
    time: float


class CorpusChangedEvent(TypedDict, total=False):
    event: Literal["corpus_changed"]
    step: int
    changes: list[str]
    time: float


class DataWaitEvent(TypedDict, total=False):
    event: Literal["data_wait"]
    step: int
    first_fill_s: float
    seconds: float  # the loop's wait for the background reader, every step after the first
    share: float
    time: float


MetricsEvent = (
    StepEvent
    | EvalEvent
    | CheckpointEvent
    | WeightsEvent
    | SkippedStepEvent
    | FinishedEvent
    | ResumedEvent
    | CorpusChangedEvent
    | DataWaitEvent
)
