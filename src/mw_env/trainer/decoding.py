"""Reading a row's tags out of the model's per-word scores: the argmax, or the best *valid* IOB2 sequence.

The model scores each word's labels independently, so its argmax may hold sequences no gold row has:
an I-X after O or after another type (`O I-StreetName`), or an entity's type changing mid-span. Strict
IOB2 scoring credits no entity for them, and a person reading the output sees a broken span. Constrained
decoding (model.decode: viterbi) picks, per row, the label sequence of the highest total log-probability
among those whose every transition is valid: the Viterbi algorithm over the model's log-softmax scores
with a 0 / -inf transition matrix. It adds no parameters and no training cost (Lester et al. 2020, "Constrained
Decoding for Computationally Efficient Named Entity Recognition Taggers": as good as a CRF layer on top of
an encoder, at a fraction of its cost).

Valid (IOB2, as `scoring.spans(mode="strict")` reads entities): a row may start with O or any B-; I-X may
follow only B-X or I-X. A label outside the B-/I- scheme (O, or any other name) may follow anything.

numpy only (no torch): the trainer's evaluation, `train evaluate`, `train predict` and bench/ call this module.
The exported model's runtime helper (export/runtime.py, shipped as one self-contained file) holds its own
copy of `viterbi`; tests/trainer/test_decoding.py proves the two agree on random inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mw_env.trainspec.schema import DECODE_MODES, DecodeChoice

if TYPE_CHECKING:
    import numpy as np

# A large finite penalty instead of -inf (no inf - inf = NaN), and a floor for the scores far above it (a
# -inf score, a masked label, stays above any invalid path): every valid path of under a million words
# beats every path with one invalid transition.
FORBIDDEN = -1e12
FLOOR = -1e6


def transitions(labels: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(start [L]: 0 where a row may begin with the label, FORBIDDEN where not;
    step [L, L]: step[prev, cur] likewise for the pair) under IOB2."""
    import numpy as np

    n = len(labels)
    start = np.zeros(n, dtype=np.float64)
    step = np.zeros((n, n), dtype=np.float64)
    for cur, label in enumerate(labels):
        prefix, _, typ = label.partition("-")
        if prefix != "I" or not typ:
            continue
        start[cur] = FORBIDDEN
        for prev, other in enumerate(labels):
            if other not in (f"B-{typ}", f"I-{typ}"):
                step[prev, cur] = FORBIDDEN
    return start, step


def log_softmax(scores: np.ndarray) -> np.ndarray:
    """Log-probabilities over the last axis, in float64, at least FLOOR."""
    import numpy as np

    x = np.asarray(scores, dtype=np.float64)
    top = x.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    return np.maximum(x - top - np.log(np.exp(x - top).sum(axis=-1, keepdims=True)), FLOOR)


def viterbi(scores: np.ndarray, start: np.ndarray, step: np.ndarray) -> list[int]:
    """The label index sequence of the highest total of scores [n, L] plus start/step penalties."""
    import numpy as np

    n = scores.shape[0]
    if n == 0:
        return []
    best = start + scores[0]
    back = np.zeros((n, scores.shape[1]), dtype=np.int64)
    for t in range(1, n):
        total = best[:, None] + step  # [prev, cur]
        back[t] = total.argmax(axis=0)
        best = total[back[t], np.arange(total.shape[1])] + scores[t]
    path = [int(best.argmax())]
    for t in range(n - 1, 0, -1):
        path.append(int(back[t, path[-1]]))
    return path[::-1]


class Decoder:
    """A label set's decoder: `decode(scores)` turns one row's per-word scores [words, labels] (logits or
    log-probabilities) into label indices, by `mode`."""

    def __init__(self, labels: Sequence[str], mode: DecodeChoice = "viterbi") -> None:
        if mode not in DECODE_MODES:
            raise ValueError(f"decode mode {mode!r}: expected one of {', '.join(DECODE_MODES)}")
        self.labels = list(labels)
        self.mode = mode
        self.start, self.step = transitions(self.labels)

    def decode(self, scores: np.ndarray) -> list[int]:
        import numpy as np

        scores = np.asarray(scores)
        if self.mode == "argmax" or scores.shape[0] == 0:
            return [int(i) for i in scores.argmax(axis=-1)]
        return viterbi(log_softmax(scores), self.start, self.step)

    def tags(self, scores: np.ndarray) -> list[str]:
        return [self.labels[i] for i in self.decode(scores)]


def is_valid(tags: Sequence[str]) -> bool:
    """Whether every transition of a row's tags is valid IOB2 (what viterbi never breaks)."""
    prev = "O"
    for tag in tags:
        prefix, _, typ = tag.partition("-")
        if prefix == "I" and typ and prev not in (f"B-{typ}", f"I-{typ}"):
            return False
        prev = tag
    return True
