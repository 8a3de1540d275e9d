"""Lanes: the data order as a function of the global sample position, not of the world size.

A run fixes at its first start L lanes (its world size then) and Q rows per lane and step; the global batch of
step s is lane 0's stream rows [s·Q, (s+1)·Q), then lane 1's, and so on (G = L·Q rows whatever the world size),
and rank r of W takes the contiguous slice [r·G/W, (r+1)·G/W), cut into micro-batches of at most
optim.batch_size rows. docs/design.md (The data order) says why. Plain arithmetic (no numpy, no torch): tests
check it for every W against every L.
"""

from __future__ import annotations

from dataclasses import dataclass

from mw_env.base.errors import InputError

LaneRun = tuple[int, int, int]  # (lane, first stream row, stop): consecutive rows of one lane's stream


@dataclass(frozen=True)
class Layout:
    lanes: int  # L: fixed at the run's first start
    lane_rows: int  # Q: each lane's rows per step, fixed at the run's first start
    world: int  # W: this start's processes
    batch_size: int  # the most rows a micro-batch holds (this start's optim.batch_size)

    @property
    def global_rows(self) -> int:
        return self.lanes * self.lane_rows

    @property
    def share(self) -> int:
        """Each rank's rows per step."""
        return self.global_rows // self.world

    @property
    def micro_batches(self) -> int:
        return max(1, -(-self.share // self.batch_size))

    def check(self) -> None:
        """Refuse a world size the global batch does not split over, with the sizes that work."""
        g = self.global_rows
        if g % self.world == 0:
            return
        fits = [n for n in range(1, min(g, 4096) + 1) if g % n == 0]
        shown = ", ".join(map(str, fits[:12])) + (", ..." if len(fits) > 12 else "")
        raise InputError(
            f"the run's global batch is {g:,} rows a step ({plural(self.lanes, 'lane')} x {self.lane_rows} rows: "
            "optim.batch_size x optim.accumulation_steps at its first start), which does not split evenly over "
            f"{self.world} processes",
            hint=f"resume on a number of processes that divides {g:,} ({shown}); the global batch and the "
            "row order are fixed for the run, or start over with --fresh",
        )

    def micro_bounds(self) -> list[tuple[int, int]]:
        """The micro-batches as [start, stop) offsets in a rank's share, of even size (at most batch_size)."""
        s, n = self.share, self.micro_batches
        return [(s * m // n, s * (m + 1) // n) for m in range(n)]

    def runs(self, rank: int, step: int) -> list[list[LaneRun]]:
        """Rank `rank`'s micro-batches of step `step`: each as the runs of lane stream rows it holds, in the
        global batch's order."""
        base = rank * self.share
        return [self._runs(step, base + a, base + b) for a, b in self.micro_bounds()]

    def _runs(self, step: int, first: int, stop: int) -> list[LaneRun]:
        """Global positions [first, stop) of step `step` as lane runs."""
        q, out = self.lane_rows, []
        g = first
        while g < stop:
            lane, offset = divmod(g, q)
            take = min(stop - g, q - offset)
            out.append((lane, step * q + offset, step * q + offset + take))
            g += take
        return out

    def lanes_of(self, rank: int) -> list[int]:
        """The lanes rank `rank` reads (in order)."""
        first, stop = rank * self.share, (rank + 1) * self.share
        return list(range(first // self.lane_rows, (stop - 1) // self.lane_rows + 1))

    def ranks_of(self, lane: int) -> list[int]:
        """The ranks that read lane `lane` (more than one when the world is larger than the lanes)."""
        return [r for r in range(self.world) if lane in self.lanes_of(r)]

    def describe(self) -> str:
        """`2 lanes x 32 rows = 64 rows a step; the one process takes 64 rows in 2 micro-batches of 32`."""
        n = self.micro_batches
        sizes = sorted({b - a for a, b in self.micro_bounds()})
        size = str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
        who = "the one process takes" if self.world == 1 else f"each of the {self.world} processes takes"
        return (
            f"{plural(self.lanes, 'lane')} x {self.lane_rows} rows = {self.global_rows:,} rows a step; {who} "
            f"{self.share:,} rows in {plural(n, 'micro-batch')} of {size}"
        )


def plural(n: int, noun: str) -> str:
    """`1 lane`, `2 lanes`, `3 micro-batches`."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}{'es' if noun.endswith('ch') else 's'}"
