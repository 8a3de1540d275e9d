"""The loop's resumable counters (a leaf: the loop and evaluation both update it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LoopState:
    """Everything besides tensors that a resume must restore."""

    step: int = 0
    best_f1: float = -1.0
    best_step: int = 0
    bad_evals: int = 0
    skipped_steps: int = 0
    consecutive_nonfinite: int = 0

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)
