"""Reading a row's tags out of the model's per-word scores: the argmax, or the best *valid* IOB2 sequence.

The model scores each word's labels independently, so its argmax may hold sequences no gold row has (`O
I-StreetName`); model.decode: viterbi picks the label sequence of the highest total log-probability among those
whose every transition is valid IOB2 (docs/training.md, Decoding, says why and at what cost). numpy only; the
algorithm is the exported model's runtime helper's (export/runtime.py, shipped alone beside the model, so it
holds it): the trainer decodes with that very code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mw_env.trainer.export.runtime import transitions, viterbi
from mw_env.trainspec.schema import DECODE_MODES, DecodeChoice

if TYPE_CHECKING:
    import numpy as np


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
        return viterbi(scores, self.start, self.step)

    def tags(self, scores: np.ndarray) -> list[str]:
        return [self.labels[i] for i in self.decode(scores)]
