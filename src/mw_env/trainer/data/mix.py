"""Weighted sources (data.sources): which source each row of a rank's stream comes from.

The weights fix each source's share, a small source repeated (Mosaic streaming's `proportion`, with no end),
but the source of row p is not drawn at random: it is read from a fixed schedule, a period of PERIOD rows in
which source k has exactly quota[k] rows (largest remainders, at least one), each row going to the source
furthest behind its share. The shares hold exactly over every period and to within a row or two over any
prefix, and nothing random needs resuming: row p's (source, row in that source's stream) is arithmetic on p.
docs/training.md (Weighted sources) compares it with Mosaic's and Hugging Face's semantics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

PERIOD = 10_000  # rows of one schedule period: shares are exact to 1/PERIOD


def quotas(weights: Sequence[float], period: int = PERIOD) -> list[int]:
    """Rows of each source in one period: period * w / sum(w), largest remainders, at least 1 each."""
    total = math.fsum(weights)
    exact = [period * w / total for w in weights]
    out = [max(1, math.floor(x)) for x in exact]
    left = period - sum(out)
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(exact[i] - math.floor(exact[i])), i))
    for i in by_remainder:
        if left <= 0:
            break
        out[i] += 1
        left -= 1
    while left < 0:  # the at-least-one rule took rows: give them back from the largest
        i = max(range(len(out)), key=lambda k: (out[k], -k))
        out[i] -= 1
        left += 1
    return out


class Mix:
    """Stream row p -> (source k, row q of source k's own stream), a pure function of p."""

    def __init__(self, weights: Sequence[float], period: int = PERIOD) -> None:
        import numpy as np

        self.weights = list(weights)
        self.period = period
        self.quota = np.asarray(quotas(weights, period), dtype=np.int64)
        k = len(self.quota)
        source = np.empty(period, dtype=np.int64)
        nth = np.empty(period, dtype=np.int64)  # the row's index among its source's rows of the period
        taken = [0] * k
        for j in range(period):
            # The source furthest behind its share after this row; ties to the lower index.
            s = max(range(k), key=lambda i: ((j + 1) * int(self.quota[i]) - taken[i] * period, -i))
            source[j], nth[j] = s, taken[s]
            taken[s] += 1
        self.source, self.nth = source, nth

    def locate(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stream rows -> (their sources, their rows in each source's stream)."""
        turn, j = rows // self.period, rows % self.period
        k = self.source[j]
        return k, turn * self.quota[k] + self.nth[j]

    def counts(self, n: int) -> list[int]:
        """Rows of each source among the first n rows of the stream."""
        import numpy as np

        turn, j = divmod(n, self.period)
        head = np.bincount(self.source[:j], minlength=len(self.quota))
        return [int(x) for x in turn * self.quota + head]

    def shares(self) -> list[float]:
        """Each source's share of the rows (exact over every period)."""
        return [int(q) / self.period for q in self.quota]
