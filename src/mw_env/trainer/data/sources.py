"""The training sources of a streamed corpus: data.train_files as one source, or data.sources (several
globs, each with a weight: mix.py says how rows are drawn from them).

Every source's shards go into one shard list (one reader, one encoder and its worker pool for all); each
block knows its source through its shard. Each source's training units are assigned to lanes on their
own, so every lane reads a share of every source and draws from them in the configured proportions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mw_env.base.errors import InputError
from mw_env.trainer.data import index as index_mod
from mw_env.trainer.data.mix import Mix
from mw_env.trainer.data.order import assign_blocks
from mw_env.trainer.data.shards import Block, Shard
from mw_env.trainspec.config import TrainConfig
from mw_env.trainspec.files import expand_files


def index_train(
    config: TrainConfig, columns: tuple[str, str], *, labels: bool, cache: index_mod.Cache
) -> tuple[list[tuple[Shard, index_mod.Tags]], list[int]]:
    """Every training shard (with its tag sample) and the source each belongs to."""
    out: list[tuple[Shard, index_mod.Tags]] = []
    source_of: list[int] = []
    seen: dict[Path, str] = {}
    for k, (key, globs) in enumerate(config.data.train_globs()):
        found = index_mod.index_shards(expand_files(globs, key), columns, key=key, labels=labels, cache=cache)
        base = len(out)  # this source's shards follow the earlier sources' in the one list
        for shard, tags in found:
            if shard.path in seen:
                raise InputError(
                    f"{key}: {shard.path} is also one of {seen[shard.path]}",
                    hint="a shard belongs to one source: narrow the globs so each file matches one",
                )
            seen[shard.path] = key
            shard.blocks = [dataclasses.replace(b, shard=b.shard + base) for b in shard.blocks]
            out.append((shard, tags))
            source_of.append(k)
    return out, source_of


@dataclass
class WeightedSources:
    """The weighted sources as the trainer uses them (None for data.train_files)."""

    names: list[str]
    weights: list[float]
    mix: Mix
    owned: list[list[list[int]]]  # [source][lane] -> indices into the corpus's training units
    train_rows: list[int]  # each source's training rows (all lanes)

    def describe(self) -> str:
        """`messy 25.0% (600 rows), clean 75.0% (60,000 rows)`: each source's scheduled share."""
        return ", ".join(
            f"{n} {share:.1%} ({rows:,} rows)"
            for n, share, rows in zip(self.names, self.mix.shares(), self.train_rows, strict=True)
        )

    def order_key(self) -> list[dict[str, object]]:
        return [
            {"name": n, "weight": w, "quota": int(q)}
            for n, w, q in zip(self.names, self.weights, self.mix.quota, strict=True)
        ]

    def card(self, positions: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
        """Each source's share: configured (its weight's), scheduled (its quota a period) and realised
        (rows drawn from it by every lane so far, from each lane's stream position)."""
        drawn = [0] * len(self.names)
        for pos in positions:
            row = pos.get("stream_row", 0)
            for k, n in enumerate(self.mix.counts(row if isinstance(row, int) else 0)):
                drawn[k] += n
        total = sum(drawn)
        weight_sum = sum(self.weights)
        return [
            {
                "name": self.names[k],
                "weight": self.weights[k],
                "configured_share": self.weights[k] / weight_sum,
                "scheduled_share": self.mix.shares()[k],
                "realised_share": drawn[k] / total if total else 0.0,
                "rows_drawn": drawn[k],
                "train_rows": self.train_rows[k],
                "epochs": drawn[k] / self.train_rows[k] if self.train_rows[k] else 0.0,
            }
            for k in range(len(self.names))
        ]


def weighted(
    config: TrainConfig, blocks: Sequence[Block], source_of: Sequence[int], lanes: int
) -> WeightedSources | None:
    """data.sources over the training units: each source's units assigned to lanes on their own."""
    specs = config.data.sources
    if not specs:
        return None
    owned: list[list[list[int]]] = []
    rows: list[int] = []
    for k in range(len(specs)):
        # trainspec/units.py gave every source at least one unit per lane
        mine = [i for i, b in enumerate(blocks) if source_of[b.shard] == k]
        per_rank = assign_blocks([blocks[i] for i in mine], lanes, config.runtime.seed)
        owned.append([[mine[j] for j in r] for r in per_rank])
        rows.append(sum(blocks[i].rows for i in mine))
    weights = [s.weight for s in specs]
    return WeightedSources(
        names=[name_of(s.name, s.files) for s in specs],
        weights=weights,
        mix=Mix(weights),
        owned=owned,
        train_rows=rows,
    )


def name_of(name: str, files: Sequence[str]) -> str:
    return name or (files[0] if files else "?")
