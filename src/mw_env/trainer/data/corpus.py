"""Opening a corpus: shards and blocks from footers, the label set, the train/val split, the card.

Nothing here reads the training data itself: a streamed corpus opens from its index (index.py:
footers, built once by rank 0 and cached; plus, when `data.labels` is unset, a bounded sample of
the tags column). The rows are read by the rank's producer (stream.py), which `Corpus.producer`
builds. Validation is sharded: each rank evaluates its contiguous share of the held-out rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mw_env.base.errors import InputError
from mw_env.trainer.data import card as card_mod
from mw_env.trainer.data import index as index_mod
from mw_env.trainer.data.batches import Batch
from mw_env.trainer.data.card import Counts
from mw_env.trainer.data.encode import VectorEncoder
from mw_env.trainer.data.labels import BUNDLED, LabelSet, discovered, from_config
from mw_env.trainer.data.order import RankOrder, assign_blocks
from mw_env.trainer.data.reader import PieceReader
from mw_env.trainer.data.shards import Block, Shard
from mw_env.trainer.data.sources import WeightedSources, index_train, weighted
from mw_env.trainer.data.stream import ENCODE_ROWS, Encoding, FileProducer, gather, iter_val_rows
from mw_env.trainer.data.tokenize import Tokenizer, make_tokenizer
from mw_env.trainspec.config import TrainConfig
from mw_env.trainspec.files import expand_files
from mw_env.trainspec.synthetic import check_countries, generate_row

# (source, batch_size, max_batches) -> the (batch, words) pairs of a validation pass
ValBatches = Callable[["ValSource", int, int], Iterator[tuple[Batch, list[list[str]]]]]


@dataclass
class ValSource:
    """The validation split, read from the start at every evaluation."""

    rows: int
    _batches: ValBatches
    counts: Counts | None = None  # what the last full evaluation read
    rank: int = 0  # this process's share of the rows: rank r of world evaluates rows [r*n/world, ...)
    world: int = 1

    def share(self) -> tuple[int, int]:
        return self.rows * self.rank // self.world, self.rows * (self.rank + 1) // self.world

    def batches(self, batch_size: int, max_batches: int) -> Iterator[tuple[Batch, list[list[str]]]]:
        return self._batches(self, batch_size, max_batches)


@dataclass
class Corpus:
    source: str
    tokenizer: Tokenizer
    labels: LabelSet
    train_rows: int
    val: ValSource
    identity: dict[str, Any]  # stored in the checkpoint's `data`; compared on resume
    sources: list[dict[str, Any]]
    config: TrainConfig
    rank: int = 0
    world: int = 1
    shards: list[Shard] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    owned: list[list[int]] = field(default_factory=list)  # block indices per rank
    weighted: WeightedSources | None = None  # data.sources: the mix and each source's blocks per rank

    def rank_rows(self, rank: int) -> int:
        return sum(self.blocks[b].rows for b in self.owned[rank])

    def producer(self, stop: int | None = None) -> FileProducer:
        """This rank's producer; `stop`: the step the run ends before (nothing is read ahead past it)."""
        c, o = self.config, self.config.optim
        w = self.weighted
        several = w is not None and len(w.names) > 1
        orders = [
            RankOrder(
                self.blocks,
                owned[self.rank],
                seed=c.runtime.seed,
                rank=self.rank,
                window_rows=c.data.shuffle_rows,
                salt=(k,) if several else (),  # one source reads exactly as data.train_files does
            )
            for k, owned in enumerate(w.owned if w is not None else [self.owned])
        ]
        reader = PieceReader(self.shards, self.blocks, _columns(c))
        auto = c.data.workers < 0  # the automatic count starts workers only for windows worth splitting
        encoding = Encoding(
            reader,
            _encoder(self.tokenizer, self.labels, c),
            self.labels,
            self.workers,
            min_rows=ENCODE_ROWS if auto else 0,
        )
        return FileProducer(
            order=orders,
            mix=w.mix if w is not None and several else None,
            encoding=encoding,
            labels=self.labels,
            batch_size=o.batch_size,
            accumulation=o.accumulation_steps,
            stop=stop,
        )

    @property
    def workers(self) -> int:
        """data.workers, or (-1) one per core a rank has beyond its own (ranks per node from torchrun); never
        more than the rank's share of the CPUs it may use (workers.rank_workers)."""
        from mw_env.trainer.data.workers import rank_workers

        return rank_workers(self.config.data.workers, ranks_per_node())[0]

    def card(self, train: Counts, positions: list[dict[str, Any]]) -> dict[str, Any]:
        """The data card (report/data_card.json); its structure is documented in docs/training.md."""
        val = self.val.counts or Counts(len(self.labels))
        names = self.labels.names
        return {
            "source": self.source,
            "tokenizer": self.tokenizer.kind,
            "labels": list(names),
            "labels_from": self.labels.origin,
            "rows": {"train": self.train_rows, "val": self.val.rows},
            "consumed": {
                "rows": train.rows,
                "tokens": train.tokens,
                "words": train.words,
                "epochs": train.rows / self.train_rows if self.train_rows else 0.0,
            },
            "tag_distribution": {
                "train": card_mod.tag_distribution(train, names),
                "val": card_mod.tag_distribution(val, names),
            },
            "token_lengths": {
                "train": card_mod.length_distribution(train),
                "val": card_mod.length_distribution(val),
            },
            "truncated_words": train.truncated_words,
            "unknown_tag_words": {"train": train.unknown_tag_words, "val": val.unknown_tag_words},
            "bio_inconsistencies": {
                "train": train.bio_errors,
                "val": val.bio_errors,
                "examples": train.bio_examples + val.bio_examples,
            },
            "shuffle": {
                "seed": self.config.runtime.seed,
                "block": "row group (Parquet) / ~4 MiB of lines (JSONL)"
                if self.source == "files"
                else f"{synthetic_block_rows(self.config.data.synthetic_rows, self.world)} generated rows",
                "window_rows": self.config.data.shuffle_rows,
            },
            "ranks": [
                {"rank": r, "rows_per_epoch": self.rank_rows(r), **pos} for r, pos in enumerate(positions)
            ],
            "sources": self.sources,
            **({"mix": self.weighted.card(positions)} if self.weighted is not None else {}),
        }


def _columns(c: TrainConfig) -> tuple[str, str]:
    return (c.data.tokens_column, c.data.tags_column)


def encoder_for(tok: Tokenizer, labels: LabelSet, c: TrainConfig) -> VectorEncoder:
    """The encoder a run's rows go through (train predict/evaluate encode their input with it too)."""
    return _encoder(tok, labels, c)


def _encoder(tok: Tokenizer, labels: LabelSet, c: TrainConfig) -> VectorEncoder:
    proto = getattr(tok, "proto", None)
    return VectorEncoder(
        kind=tok.kind,
        spm_proto=proto,
        label_names=labels.names,
        max_len=c.model.max_len,
        unknown_tags=c.data.unknown_tags,
    )


def _in_val(seed: int, shard: Shard, block: Block, fraction: float) -> float:
    digest = hashlib.blake2b(f"{seed}:{shard.path.name}:{block.part}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


VAL_CHUNK = 4096  # validation rows read and encoded at a time
SAMPLE_ROWS = 16  # rows whose words are kept for the printed samples


def _val_batches(encoding: Encoding, blocks: list[Block]) -> ValBatches:
    def batches(src: ValSource, batch_size: int, max_batches: int) -> Iterator[tuple[Batch, list[list[str]]]]:
        import numpy as np

        counts = Counts(len(encoding.labels))
        first, stop = src.share()
        if max_batches:
            stop = min(stop, first + max_batches * batch_size)
        done = 0
        for rows in iter_val_rows(encoding, blocks, first, stop, max(VAL_CHUNK, batch_size), SAMPLE_ROWS):
            for a in range(0, len(rows.enc), batch_size):
                idx = np.arange(a, min(a + batch_size, len(rows.enc)))
                head = rows.head if done < SAMPLE_ROWS and src.rank == 0 else []
                words = [head[i] if i < len(head) else [] for i in idx.tolist()]
                yield gather([(rows, idx)], counts), words
                done += len(idx)
        src.counts = counts

    return batches


def _index(config: TrainConfig, world: int) -> dict[str, Any]:
    """Rank 0: the shards of both lists and the tags sample, from the run's cache where it holds them."""
    data, columns = config.data, _columns(config)
    run_dir = Path(config.runtime.out_dir).expanduser()
    cache = index_mod.load_cache(run_dir)
    before = dict(cache)
    sample = not data.labels
    train, source_of = index_train(config, columns, labels=sample, cache=cache)
    val = (
        index_mod.index_shards(
            expand_files(data.val_files, "data.val_files"),
            columns,
            key="data.val_files",
            labels=sample,
            cache=cache,
        )
        if data.val_files
        else []
    )
    if cache != before:
        index_mod.save_cache(run_dir, cache)
    tags: set[str] = set()
    for _shard, t in train + val:
        tags.update(t[0] if t else ())
    return {
        "train": [s for s, _ in train],
        "val": [s for s, _ in val],
        "tags": sorted(tags),
        "tags_sampled": [str(s.path) for s, t in train + val if t and t[1]],
        "source_of": source_of,
    }


def open_corpus(config: TrainConfig, *, rank: int = 0, world: int = 1) -> Corpus:
    """The corpus as this rank sees it: rank 0 reads the footers (once, cached); the others get its index."""
    data = config.data
    tok = make_tokenizer(data)
    order_key: dict[str, Any] = {
        "runtime_seed": config.runtime.seed,
        "data_seed": data.seed,
        "world_size": world,
        "batch_size": config.optim.batch_size,
        "accumulation_steps": config.optim.accumulation_steps,
    }
    if data.source == "synthetic":
        return _synthetic(config, tok, order_key, rank, world)
    columns = _columns(config)
    index = index_mod.from_rank0(lambda: _index(config, world), world)
    train_shards, val_shards = index["train"], index["val"]
    n_shards = len(train_shards) + len(val_shards)
    labels = (
        from_config(data.labels)
        if data.labels
        else discovered(index["tags"], index["tags_sampled"], n_shards)
    )
    all_blocks = [b for s in train_shards for b in s.blocks]
    if val_shards:
        train_blocks, val_blocks = all_blocks, [b for s in val_shards for b in s.blocks]
        val_from = val_shards
    else:
        if len(all_blocks) < 2:
            jsonl = all(s.kind == "jsonl" for s in train_shards)
            unit = "~4 MiB blocks of lines" if jsonl else "row groups"
            raise InputError(
                f"data.val_fraction holds out whole {unit}, but the training shards have {len(all_blocks)}",
                hint="name validation shards in data.val_files, or "
                + (
                    "split the JSONL file in two or more files"
                    if jsonl
                    else "write the shards with smaller row groups"
                ),
            )
        score = {b: _in_val(data.seed, train_shards[b.shard], b, data.val_fraction) for b in all_blocks}
        held = [b for b in all_blocks if score[b] < data.val_fraction] or [
            min(all_blocks, key=score.__getitem__)
        ]
        if len(held) == len(all_blocks):
            held = held[:-1]
        held_set = set(held)
        train_blocks = [b for b in all_blocks if b not in held_set]
        val_blocks, val_from = held, train_shards
        order_key["val_fraction"] = data.val_fraction
    mixed = weighted(config, train_blocks, index["source_of"], world)
    if mixed is not None:
        order_key["sources"] = mixed.order_key()
    if len(train_blocks) < world:
        raise InputError(
            f"the training split has {len(train_blocks)} row group(s), fewer than the {world} processes: "
            "each process reads whole row groups of its own",
            hint="write the shards with smaller row groups (pyarrow.parquet.write_table(..., row_group_size=N)), "
            "or use fewer processes",
        )
    order_key.update(
        {"shuffle_rows": data.shuffle_rows, "tokens_column": columns[0], "tags_column": columns[1]}
    )
    val_encoding = Encoding(PieceReader(val_from, val_blocks, columns), _encoder(tok, labels, config), labels)
    val = ValSource(
        sum(b.rows for b in val_blocks), _val_batches(val_encoding, val_blocks), rank=rank, world=world
    )
    train_ids, val_ids = [s.identity() for s in train_shards], [s.identity() for s in val_shards]
    if mixed is not None:  # a shard moved to another source is a changed corpus
        train_ids = [
            {**i, "source": mixed.names[k]} for i, k in zip(train_ids, index["source_of"], strict=True)
        ]
    identity = {"source": "files", "order": order_key, "shards": train_ids, "val_shards": val_ids}
    sources = [{"kind": "train", **i} for i in train_ids] + [{"kind": "val", **i} for i in val_ids]
    if not val_shards:
        sources.append(
            {
                "kind": "val",
                "held_out": [f"{train_shards[b.shard].path.name} row group {b.part}" for b in val_blocks],
            }
        )
    return Corpus(
        source="files",
        tokenizer=tok,
        labels=labels,
        train_rows=sum(b.rows for b in train_blocks),
        val=val,
        identity=identity,
        sources=sources,
        config=config,
        rank=rank,
        world=world,
        shards=train_shards,
        blocks=train_blocks,
        owned=(
            assign_blocks(train_blocks, world, config.runtime.seed)
            if mixed is None
            else [sorted(b for per in mixed.owned for b in per[r]) for r in range(world)]
        ),
        weighted=mixed,
    )


SYNTHETIC_BLOCK_ROWS = 64  # the synthetic corpus's blocks: what is assigned to ranks, as a row group is


def synthetic_block_rows(rows: int, world: int) -> int:
    """SYNTHETIC_BLOCK_ROWS, smaller where that would leave a process without a block of its own (64 rows on
    2 processes: 32-row blocks). The world size is part of the order's key, so a block size that depends on it
    changes nothing a resume relies on."""
    return max(1, min(SYNTHETIC_BLOCK_ROWS, rows // max(1, world)))


def _memory_shard(
    name: str, rows: Iterator[tuple[list[str], list[str]]], described: dict[str, object], block_rows: int
) -> Shard:
    """Generated rows as an in-memory shard of `block_rows`-row blocks, read by the file path."""
    import pyarrow as pa

    words, tags = [], []
    for w, t in rows:
        words.append(w)
        tags.append(t)
    typ = pa.list_(pa.string())
    n, b = len(words), block_rows
    blocks = [Block(0, k, min(b, n - k * b), start=k * b) for k in range(-(-n // b))]
    return Shard(
        Path(f"synthetic {name}"),
        "memory",
        0,
        "",
        blocks,
        memory=(pa.array(words, typ), pa.array(tags, typ)),
        described=described,
    )


def _synthetic(
    config: TrainConfig, tok: Tokenizer, order_key: dict[str, Any], rank: int, world: int
) -> Corpus:
    """The generated corpus as two in-memory shards (train, val), opened and read like files."""
    data = config.data
    check_countries(data.countries)
    source = {
        "kind": "synthetic",
        "generator": "mw_env.trainspec.synthetic",
        "seed": data.seed,
        "rows": data.synthetic_rows,
        "val_rows": data.synthetic_val_rows,
        "countries": list(data.countries),
        "noise": data.noise,
    }
    block_rows = synthetic_block_rows(data.synthetic_rows, world)
    train, val = (
        _memory_shard(
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
    if len(train.blocks) < world:
        raise InputError(
            f"data.synthetic_rows = {data.synthetic_rows} is fewer rows than the {world} processes: each "
            "process reads rows of its own",
            hint=f"--set data.synthetic_rows={world} or more (a few hundred to learn anything), or use fewer "
            "processes",
        )
    order_key.update({"shuffle_rows": data.shuffle_rows, "block_rows": block_rows})
    columns = _columns(config)
    val_encoding = Encoding(PieceReader([val], val.blocks, columns), _encoder(tok, BUNDLED, config), BUNDLED)
    return Corpus(
        source="synthetic",
        tokenizer=tok,
        labels=BUNDLED,
        train_rows=data.synthetic_rows,
        val=ValSource(val.rows, _val_batches(val_encoding, val.blocks), rank=rank, world=world),
        identity={"source": "synthetic", "order": order_key, "shards": [source], "val_shards": []},
        sources=[source],
        config=config,
        rank=rank,
        world=world,
        shards=[train],
        blocks=train.blocks,
        owned=assign_blocks(train.blocks, world, config.runtime.seed),
    )


def ranks_per_node() -> int:
    """The ranks sharing this node's CPUs (torchrun's LOCAL_WORLD_SIZE; 1 without torchrun)."""
    import os

    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    except ValueError:
        return 1
