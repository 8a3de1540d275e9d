"""Counts of what was actually read, for the data card: rows, tokens, labels, lengths, BIO problems.

Counted when a step consumes its rows (not when the reader prefetches them), kept per rank in the
checkpoint and summed over ranks for the card, so a resumed run's card equals an uninterrupted one's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

LENGTH_BIN = 8  # token-length histogram: bin k counts rows of [8k, 8k + 8) input tokens
MAX_EXAMPLES = 5


@dataclass
class Counts:
    n_labels: int
    rows: int = 0
    tokens: int = 0  # input tokens, CLS/SEP included
    words: int = 0  # words kept after max_len truncation, i.e. labelled positions (+ unknown tags)
    truncated_words: int = 0
    unknown_tag_words: int = 0
    bio_errors: int = 0
    labels: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    bio_examples: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.labels:
            self.labels = [0] * self.n_labels

    def add_rows(
        self,
        n_tokens: np.ndarray,
        label_ids: np.ndarray,
        kept: np.ndarray,
        truncated: np.ndarray,
        unknown: np.ndarray,
        bio: np.ndarray,
        bio_where: list[str],
    ) -> None:
        """Rows read (numpy arrays, one entry per row; label_ids: every position, IGNORE included)."""
        import numpy as np

        self.rows += len(n_tokens)
        self.tokens += int(n_tokens.sum())
        self.words += int(kept.sum())
        self.truncated_words += int(truncated.sum())
        self.unknown_tag_words += int(unknown.sum())
        labelled = label_ids[label_ids >= 0]
        if len(labelled):
            hist = np.bincount(labelled, minlength=self.n_labels)
            self.labels = [a + int(b) for a, b in zip(self.labels, hist, strict=True)]
        if len(n_tokens):
            bins = np.bincount(n_tokens // LENGTH_BIN)
            if len(bins) > len(self.lengths):
                self.lengths.extend([0] * (len(bins) - len(self.lengths)))
            for k in np.flatnonzero(bins):
                self.lengths[k] += int(bins[k])
        for n, here in zip(bio[bio > 0], bio_where, strict=False):
            self.add_bio(int(n), here)
        self.bio_errors += int(bio[bio > 0][len(bio_where) :].sum())

    def add_bio(self, n: int, where: str) -> None:
        self.bio_errors += n
        if n and len(self.bio_examples) < MAX_EXAMPLES:
            self.bio_examples.append(where)

    def merge(self, other: Counts) -> None:
        for name in ("rows", "tokens", "words", "truncated_words", "unknown_tag_words", "bio_errors"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.labels = [a + b for a, b in zip(self.labels, other.labels, strict=True)]
        n = max(len(self.lengths), len(other.lengths))
        pad = lambda xs: xs + [0] * (n - len(xs))  # noqa: E731
        self.lengths = [a + b for a, b in zip(pad(self.lengths), pad(other.lengths), strict=True)]
        room = MAX_EXAMPLES - len(self.bio_examples)
        self.bio_examples += other.bio_examples[: max(room, 0)]

    def to_dict(self) -> dict[str, object]:
        return {k: (list(v) if isinstance(v, list) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Counts:
        fields: dict[str, Any] = {k: (list(v) if isinstance(v, list) else v) for k, v in d.items()}
        return cls(**fields)


def sum_counts(parts: list[dict[str, Any]], n_labels: int) -> Counts:
    total = Counts(n_labels)
    for p in parts:
        total.merge(Counts.from_dict(p))
    return total


def length_distribution(c: Counts) -> dict[str, object]:
    return {
        "bin_width": LENGTH_BIN,
        "counts": list(c.lengths),  # counts[k]: rows with 8k..8k+7 input tokens
        "mean": c.tokens / c.rows if c.rows else 0.0,
    }


def tag_distribution(c: Counts, names: tuple[str, ...]) -> dict[str, int]:
    return {n: c.labels[i] for i, n in enumerate(names) if c.labels[i]}
