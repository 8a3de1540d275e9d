"""A files corpus's training units and validation split for a number of lanes: trainspec/units.py's plan
applied to the shards' blocks (a unit is a whole block, or a row range of one: Block.offset), and the units
assigned to lanes (each source's on their own with data.sources)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mw_env.trainer.data.order import assign_blocks
from mw_env.trainer.data.shards import Block, Shard
from mw_env.trainer.data.sources import WeightedSources, weighted
from mw_env.trainspec.config import TrainConfig
from mw_env.trainspec.splitscan import UnitsRecord, noun_of, record, source_keys
from mw_env.trainspec.units import BlockRows, UnitPlan, plan_units


@dataclass
class FilesSplit:
    units: list[Block]  # the training units, in corpus order
    val: list[Block]  # the validation units: held out of the training shards, or the val_files' blocks
    val_from: list[Shard]  # the shards `val` indexes into
    plan: UnitPlan
    owned: list[list[int]]  # unit indices per lane
    weighted: WeightedSources | None
    noun: str  # a block of these shards: `row group`, `block of lines`, `block`

    def held_out(self, shards: list[Shard]) -> list[str]:
        """Each held-out unit, as the data card lists it: `one.parquet row group 0 rows 187-249`."""
        out = []
        for b in self.val:
            shard = shards[b.shard]
            what = "row group" if shard.kind == "parquet" else "block"
            whole = b.offset == 0 and b.rows == sum(x.rows for x in shard.blocks if x.part == b.part)
            rows = "" if whole else f" rows {b.offset}-{b.offset + b.rows - 1}"
            out.append(f"{shard.path.name} {what} {b.part}{rows}")
        return out


def split_files(
    config: TrainConfig, train: list[Shard], val: list[Shard], source_of: list[int], lanes: int
) -> FilesSplit:
    """The units of `train` (validation held out of them unless data.val_files names `val`) for `lanes` lanes."""
    data = config.data
    blocks = [b for s in train for b in s.blocks]
    plan = plan_units(
        [BlockRows(source_of[b.shard], train[b.shard].path.name, b.part, b.rows) for b in blocks],
        lanes=lanes,
        fraction=0.0 if val else data.val_fraction,
        seed=data.seed,
        where=source_keys(config),
    )
    units = [dataclasses.replace(blocks[u.block], offset=u.offset, rows=u.rows) for u in plan.train]
    held = [dataclasses.replace(blocks[u.block], offset=u.offset, rows=u.rows) for u in plan.val]
    mixed = weighted(config, units, source_of, lanes)
    owned = (
        assign_blocks(units, lanes, config.runtime.seed)
        if mixed is None
        else [sorted(b for per in mixed.owned for b in per[r]) for r in range(lanes)]
    )
    noun = noun_of({s.kind for s in train})
    return FilesSplit(
        units=units,
        val=[b for s in val for b in s.blocks] if val else held,
        val_from=val or train,
        plan=plan,
        owned=owned,
        weighted=mixed,
        noun=noun,
    )


def units_record(
    split: FilesSplit, train: list[Shard], source_of: list[int], config: TrainConfig
) -> UnitsRecord:
    """What the console, the data card and `train summary` say about the units and the validation split."""
    names = [
        [s.path.name for s, k in zip(train, source_of, strict=True) if k == j]
        for j in range(len(split.plan.sources))
    ]
    val_rows = sum(b.rows for b in split.val) if config.data.val_files else None
    return record(split.plan, noun=split.noun, names=names, config=config, val_rows=val_rows)
