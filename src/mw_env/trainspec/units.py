"""Which rows are validation and which are the training units: whole blocks where they serve, else row ranges.

A block is what a shard's footer (or one scan of a JSONL file) gives: a Parquet row group, a ~4 MiB run of
JSONL lines, a block of generated rows. Training rows are assigned to lanes (trainer/data/order.py) in units,
and validation (data.val_fraction, without data.val_files) is held out in units:
- validation: units are taken in a seeded order (blake2b of data.seed, the shard's file name, the block and,
  for a range, its first row) until the asked share is reached, each one if it brings the count closer to it.
  Whole blocks when they come within VAL_TOLERANCE of it; else the source's blocks are cut into ranges of about 1/VAL_RANGES of the asked rows
  and those are taken the same way (a one-row-group file holds out 5% as a few ranges spread over it, where a
  whole row group would be 0% or 100%). The rows held out are counted, and that count is what the summary,
  the console and the data card say;
- training: whole blocks when every lane can have one of its own; else, and whenever validation was cut into
  ranges, the training rows (each block's rows that are not validation) are cut into about RANGES_PER_LANE
  ranges per lane of even size, so each lane has rows of its own and the lanes' shares are even.
Each source (data.sources) is split on its own. The plan depends on the footers' row counts, the seed, the
fraction and the number of lanes only, never on the current world size, so a resume on another world size
sees the same units. Standard library only: `train summary` shows the split the trainer will make.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from mw_env.base.errors import InputError

VAL_TOLERANCE = 0.1  # whole blocks serve validation when they hold out within 10% of the asked rows
VAL_RANGES = 4  # validation in ranges: about this many ranges (each ~1/4 of the asked rows)
RANGES_PER_LANE = 4  # training in ranges: about this many per lane (even lanes when blocks are uneven)


@dataclass(frozen=True)
class BlockRows:
    """One block as the plan sees it."""

    source: int  # data.sources index (0 for data.train_files)
    name: str  # the shard's file name: the seeded order's key (stable when the folder moves)
    part: int  # row group, or JSONL block number
    rows: int


@dataclass(frozen=True)
class Unit:
    """Rows [offset, offset + rows) of one block."""

    block: int  # index into the blocks the plan was made from
    offset: int
    rows: int


@dataclass(frozen=True)
class SourceSplit:
    """How one source was split (what the summary and the data card say)."""

    rows: int
    blocks: int
    target: int  # validation rows asked for (round(fraction x rows)); 0: no validation from it
    val_rows: int
    val_units: int
    val_ranges: bool  # validation cut into row ranges (whole blocks could not come close)
    train_units: int
    range_rows: int  # the training ranges' size; 0: training in whole blocks

    @property
    def train_rows(self) -> int:
        return self.rows - self.val_rows


@dataclass(frozen=True)
class UnitPlan:
    train: tuple[Unit, ...]  # in corpus order (block, offset)
    val: tuple[Unit, ...]
    sources: tuple[SourceSplit, ...]
    lanes: int
    fraction: float  # data.val_fraction as applied (0: no validation held out of the training shards)

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.sources)

    @property
    def val_rows(self) -> int:
        return sum(s.val_rows for s in self.sources)

    @property
    def train_rows(self) -> int:
        return self.rows - self.val_rows

    @property
    def ranges(self) -> bool:
        """Whether any unit is a row range rather than a whole block."""
        return any(s.val_ranges or s.range_rows for s in self.sources)

    @property
    def val_share(self) -> float:
        return self.val_rows / self.rows if self.rows else 0.0

    def key(self) -> str:
        """A digest of every unit: part of the data order a checkpoint records."""
        units = (
            [[u.block, u.offset, u.rows] for u in self.train]
            + [[-1]]
            + [[u.block, u.offset, u.rows] for u in self.val]
        )
        return hashlib.sha256(json.dumps(units).encode()).hexdigest()[:16]


def _score(seed: int, name: str, part: int, offset: int | None = None) -> bytes:
    key = f"{seed}:{name}:{part}" if offset is None else f"{seed}:{name}:{part}:{offset}"
    return hashlib.blake2b(key.encode(), digest_size=8).digest()


def cut(rows: int, most: int) -> list[tuple[int, int]]:
    """[0, rows) as (offset, rows) ranges of at most `most` rows, of even size (they differ by one at most)."""
    n = max(1, -(-rows // max(1, most)))
    return [(rows * j // n, rows * (j + 1) // n - rows * j // n) for j in range(n)]


def _take(units: list[Unit], order: list[int], target: int) -> list[Unit]:
    """Units in `order` until the target is reached, each one taken if it brings the total closer to it."""
    held, total = [], 0
    for i in order:
        if total >= target:
            break
        if units[i].rows < 2 * (target - total):
            held.append(units[i])
            total += units[i].rows
    return held


def _targets(blocks: Sequence[BlockRows], n_sources: int, fraction: float) -> list[int]:
    rows = [sum(b.rows for b in blocks if b.source == k) for k in range(n_sources)]
    if fraction <= 0:
        return [0] * n_sources
    out = [math.floor(fraction * n + 0.5) for n in rows]
    if not any(out):  # a tiny corpus: one row held out, from the largest source
        out[max(range(n_sources), key=lambda k: (rows[k], -k))] = 1
    return out


def plan_units(
    blocks: Sequence[BlockRows], *, lanes: int, fraction: float, seed: int, where: Sequence[str] = ()
) -> UnitPlan:
    """The split of `blocks` (every training shard's, in corpus order) into training and validation units.
    `fraction`: data.val_fraction (0: no validation from these shards); `where`: each source's key for errors
    (data.train_files, or `data.sources[k] (name)`)."""
    n_sources = max((b.source for b in blocks), default=0) + 1
    targets = _targets(blocks, n_sources, fraction)
    train: list[Unit] = []
    val: list[Unit] = []
    splits = []
    for k in range(n_sources):
        mine = [i for i, b in enumerate(blocks) if b.source == k]
        label = where[k] if k < len(where) else "data.train_files"
        t, v, split = _split_source(blocks, mine, targets[k], lanes=lanes, seed=seed, where=label)
        train += t
        val += v
        splits.append(split)
    order = lambda u: (u.block, u.offset)  # noqa: E731
    return UnitPlan(
        tuple(sorted(train, key=order)), tuple(sorted(val, key=order)), tuple(splits), lanes, fraction
    )


def _split_source(
    blocks: Sequence[BlockRows], mine: list[int], target: int, *, lanes: int, seed: int, where: str
) -> tuple[list[Unit], list[Unit], SourceSplit]:
    rows = sum(blocks[i].rows for i in mine)
    if rows - target < lanes:
        raise InputError(
            f"{where}: {rows:,} row(s), of which {rows - target:,} would train: fewer than the {lanes} lane(s) "
            "(the processes of the run's first start), and each lane needs rows of its own",
            hint="add rows, lower data.val_fraction (or name data.val_files), or start on fewer processes",
        )
    whole = [Unit(i, 0, blocks[i].rows) for i in mine]
    by_score = lambda u: (_score(seed, blocks[u.block].name, blocks[u.block].part), u.block)  # noqa: E731
    val: list[Unit] = []
    val_ranges = False
    if target:
        val = _take(whole, sorted(range(len(whole)), key=lambda j: by_score(whole[j])), target)
        held = sum(u.rows for u in val)
        if abs(held - target) > target * VAL_TOLERANCE or len(val) == len(whole):
            val_ranges = True
            pieces = [Unit(u.block, a, n) for u in whole for a, n in cut(u.rows, -(-target // VAL_RANGES))]
            score = lambda u: (_score(seed, blocks[u.block].name, blocks[u.block].part, u.offset), u.block)  # noqa: E731
            val = _take(pieces, sorted(range(len(pieces)), key=lambda j: score(pieces[j])), target)
    runs = _remainder(whole, val)
    train_rows = sum(u.rows for u in runs)
    range_rows = 0
    if len(runs) < lanes or (val_ranges and lanes > 1):
        range_rows = -(-train_rows // (RANGES_PER_LANE * lanes))
        runs = [Unit(u.block, u.offset + a, n) for u in runs for a, n in cut(u.rows, range_rows)]
    split = SourceSplit(
        rows=rows,
        blocks=len(mine),
        target=target,
        val_rows=rows - train_rows,
        val_units=len(val),
        val_ranges=val_ranges,
        train_units=len(runs),
        range_rows=range_rows,
    )
    return runs, val, split


def _remainder(whole: list[Unit], val: list[Unit]) -> list[Unit]:
    """Each block's rows outside `val`, as maximal runs."""
    held: dict[int, list[Unit]] = {}
    for u in val:
        held.setdefault(u.block, []).append(u)
    out = []
    for w in whole:
        start = 0
        for u in sorted(held.get(w.block, []), key=lambda u: u.offset):
            if u.offset > start:
                out.append(Unit(w.block, start, u.offset - start))
            start = u.offset + u.rows
        if start < w.rows:
            out.append(Unit(w.block, start, w.rows - start))
    return out


def many(noun: str) -> str:
    """`row group` -> `row groups`, `block of lines` -> `blocks of lines`."""
    head, of, tail = noun.partition(" of ")
    return f"{head}s{of}{tail}"


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun if n == 1 else many(noun)}"


def unit_name(plan: UnitPlan, noun: str) -> str:
    """What the training and validation units are: `row groups` (the blocks' noun), or `row ranges`."""
    return "row ranges" if plan.ranges else many(noun)


def _lanes(n: int) -> str:
    return "the one lane" if n == 1 else f"each of the {n} lanes"


def describe(
    plan: UnitPlan, *, noun: str, shard_names: Sequence[Sequence[str]], where: Sequence[str] = ()
) -> str:
    """Why these units, a sentence per source (`noun`: `row group`, `block of lines`; `shard_names`: each
    source's shard file names; `where`: each source's key, named when there are several)."""
    out = []
    for k, s in enumerate(plan.sources):
        names = shard_names[k] if k < len(shard_names) else ()
        head = f"{where[k]}: " if len(plan.sources) > 1 and k < len(where) else ""
        has = f"{names[0]} has" if len(names) == 1 else f"the {len(names)} shards have"
        parts = [f"{has} {_plural(s.blocks, noun)} ({s.rows:,} rows)"]
        if s.target:
            share = f"{s.val_rows:,} rows, {s.val_rows / s.rows:.2%}"
            if s.val_ranges:
                parts.append(
                    f"whole {many(noun)} cannot hold out {s.target:,} rows ({plan.fraction:g}) closely, so "
                    f"validation is {_plural(s.val_units, 'range')} of ~{-(-s.target // VAL_RANGES):,} rows ({share})"
                )
            else:
                parts.append(
                    f"validation is {s.val_units:,} whole {noun if s.val_units == 1 else many(noun)} ({share})"
                )
        if s.range_rows:
            parts.append(
                f"the {s.train_rows:,} training rows are split into {_plural(s.train_units, 'range')} of "
                f"up to {s.range_rows:,} rows so that {_lanes(plan.lanes)} has rows of its own and an even share"
            )
        elif s.val_ranges:
            parts.append(f"training reads the other {s.train_rows:,} rows")
        else:
            parts.append(f"{_lanes(plan.lanes)} reads whole {many(noun)} of its own")
        out.append(head + "; ".join(parts))
    return ". ".join(out)
