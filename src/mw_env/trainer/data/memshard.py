"""The synthetic corpus as in-memory shards: generated rows as Arrow arrays, cut into blocks read like files.

The training shard's blocks are what is assigned to lanes, as a row group is. Their size depends on the
number of lanes (fixed at the run's first start), never on the current world size, so a resume on another
world size reads the same blocks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

from mw_env.trainer.data.shards import Block, Shard
from mw_env.trainspec.config import TrainConfig
from mw_env.trainspec.synthetic import generate_row

SYNTHETIC_BLOCK_ROWS = 64  # the synthetic corpus's blocks: what is assigned to lanes, as a row group is


def synthetic_block_rows(rows: int, lanes: int) -> int:
    """SYNTHETIC_BLOCK_ROWS, smaller where that would leave a lane without a block of its own (64 rows on
    2 lanes: 32-row blocks). The lanes are part of the order's key, so a block size that depends on them
    changes nothing a resume relies on."""
    return max(1, min(SYNTHETIC_BLOCK_ROWS, rows // max(1, lanes)))


def memory_shard(
    name: str, rows: Iterator[tuple[list[str], list[str]]], described: dict[str, object], block_rows: int
) -> Shard:
    """Generated rows as an in-memory shard of `block_rows`-row blocks, read by the file path."""
    import pyarrow as pa

    words, tags = [], []
    for w, t in rows:
        words.append(w)
        tags.append(t)
    typ = pa.list_(pa.string())
    shard = Shard(
        Path(f"synthetic {name}"),
        "memory",
        0,
        "",
        [],
        memory=(pa.array(words, typ), pa.array(tags, typ)),
        described=described,
    )
    return recut(shard, block_rows)


def recut(shard: Shard, block_rows: int) -> Shard:
    """The same generated rows in blocks of `block_rows` rows (a block's `start`: its first row)."""
    assert shard.memory is not None
    n, b = len(shard.memory[0]), block_rows
    blocks = [Block(0, k, min(b, n - k * b), start=k * b) for k in range(-(-n // b))]
    return dataclasses.replace(shard, blocks=blocks)


def synthetic_shards(config: TrainConfig, lanes: int) -> tuple[Shard, Shard, dict[str, object]]:
    """The train and validation shards, and the train shard's description (its identity: the generator's
    settings)."""
    data = config.data
    source = {"kind": "synthetic", "generator": "mw_env.trainspec.synthetic", **data.generator()}
    block_rows = synthetic_block_rows(data.synthetic_rows, lanes)
    train, val = (
        memory_shard(
            name,
            (
                generate_row(seed=data.seed, split=name, index=i, countries=data.countries, noise=data.noise)
                for i in range(n)
            ),
            source if name == "train" else {"kind": "synthetic", "split": "val", "rows": n},
            block_rows,
        )
        for name, n in (("train", data.synthetic_rows), ("val", data.synthetic_val_rows))
    )
    return train, val, source
