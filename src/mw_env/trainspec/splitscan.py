"""The units and the validation split a files corpus will have, as the trainer and `train summary` say them.

The plan itself is trainspec/units.py's; the summary makes it from the shards' row counts, read here with the
standard library (Parquet footers: formats/footer.py; JSONL: one scan of its lines, formats/jsonlblocks.py), and
the trainer from its corpus index (trainer/data/split.py). Both describe it with `record`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

from mw_env.base.errors import InputError
from mw_env.trainspec.config import TrainConfig
from mw_env.trainspec.files import expand_files
from mw_env.trainspec.units import BlockRows, UnitPlan, describe, plan_units, unit_name


class UnitsRecord(TypedDict):
    """What the console, the data card and the summary say about the units and the validation split."""

    unit: str  # `row groups`, `blocks of lines`, `row ranges`, `generated blocks of 64 rows`
    why: str
    lanes: int
    val_from: str  # where validation comes from, in words
    val_rows: int
    val_share: float | None  # of the train shards' rows (None: data.val_files, or synthetic)
    train_rows: int


def source_keys(config: TrainConfig) -> list[str]:
    """Each training source as errors and the card name it: data.train_files, or `data.sources[k] (name)`."""
    d = config.data
    return [
        f"data.sources[{k}] ({s.name or (s.files[0] if s.files else '?')})" for k, s in enumerate(d.sources)
    ] or ["data.train_files"]


def noun_of(kinds: set[str]) -> str:
    """A block of shards of these kinds (`parquet`, `jsonl`)."""
    return "row group" if kinds == {"parquet"} else "block of lines" if kinds == {"jsonl"} else "block"


def record(
    plan: UnitPlan,
    *,
    noun: str,
    names: Sequence[Sequence[str]],
    config: TrainConfig,
    val_rows: int | None = None,
) -> UnitsRecord:
    """What the console, the data card and the summary say about the units and the validation split
    (`val_rows`: the rows of data.val_files, when they are the validation)."""
    d = config.data
    if d.val_files:
        val_from = "data.val_files"
    elif plan.fraction:
        val_from = f"held out of the training shards (data.val_fraction {plan.fraction:g})"
    else:
        val_from = "none (data.val_fraction is 0 and no data.val_files)"
    return {
        "unit": unit_name(plan, noun),
        "why": describe(plan, noun=noun, shard_names=names, where=source_keys(config)),
        "lanes": plan.lanes,
        "val_from": val_from,
        "val_rows": plan.val_rows if val_rows is None else val_rows,
        "val_share": None if d.val_files else plan.val_share,
        "train_rows": plan.train_rows,
    }


def block_rows(path: Path) -> list[tuple[int, int]]:
    """(block number, rows) of a shard's non-empty blocks, as the trainer numbers them."""
    if path.suffix == ".parquet":
        from mw_env.trainspec.formats.footer import parquet_row_counts

        counts = parquet_row_counts(path)
    else:
        from mw_env.trainspec.formats.jsonlblocks import scan_blocks

        with path.open("rb") as fh:
            counts = [rows for _a, _b, rows, _f in scan_blocks(fh)[0]]
    return [(k, n) for k, n in enumerate(counts) if n]


def summary_split(config: TrainConfig, base: Path, *, lanes: int = 1) -> UnitsRecord | None:
    """The split of a files corpus for `lanes` lanes, or None where its shards cannot be read here (the
    trainer says why when it starts)."""
    from mw_env.trainspec.formats.footer import FooterError

    d = config.data
    if d.source != "files":
        return None
    blocks: list[BlockRows] = []
    names: list[list[str]] = []
    kinds: set[str] = set()
    try:
        for k, (key, globs) in enumerate(d.train_globs()):
            names.append([])
            for path in expand_files(globs, key, base):
                names[-1].append(path.name)
                kinds.add("parquet" if path.suffix == ".parquet" else "jsonl")
                blocks += [BlockRows(k, path.name, part, rows) for part, rows in block_rows(path)]
        val_rows = (
            sum(rows for p in expand_files(d.val_files, "data.val_files", base) for _k, rows in block_rows(p))
            if d.val_files
            else None
        )
    except (InputError, FooterError, OSError):
        return None
    plan = plan_units(
        blocks,
        lanes=lanes,
        fraction=0.0 if d.val_files else d.val_fraction,
        seed=d.seed,
        where=source_keys(config),
    )
    return record(plan, noun=noun_of(kinds), names=names, config=config, val_rows=val_rows)
