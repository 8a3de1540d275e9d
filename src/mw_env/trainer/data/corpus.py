"""Opening a corpus: shards and blocks from footers, the label set, the train/val split, the card.

Nothing here reads the training data itself: a streamed corpus opens from its footers (plus, when
`data.labels` is unset, the tags column of each shard's first row group). The rows are read by the
rank's producer (stream.py), which `Corpus.producer` builds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from mw_env.errors import InputError
from mw_env.trainer.data import card as card_mod
from mw_env.trainer.data.batches import Batch, Encoder, Split, collate, pad_batch
from mw_env.trainer.data.card import Counts
from mw_env.trainer.data.labels import BUNDLED, LabelSet, from_config, label_order
from mw_env.trainer.data.order import RankOrder, assign_blocks
from mw_env.trainer.data.shards import Block, Shard, expand_files, open_shards
from mw_env.trainer.data.stream import FileProducer, MemoryProducer, iter_val_blocks
from mw_env.trainer.data.tokenize import Tokenizer, encode_row, make_tokenizer
from mw_env.trainspec.config import TrainConfig
from mw_env.trainspec.synthetic import check_countries, generate_row


@dataclass
class ValSource:
    """The validation split, read from the start at every evaluation."""

    rows: int
    _batches: Any  # (batch_size, max_batches) -> Iterator[(Batch, list[list[str]])]
    counts: Counts | None = None  # what the last full evaluation read

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
    split: Split | None = None  # in-memory train split (synthetic)
    shards: list[Shard] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    owned: list[list[int]] = field(default_factory=list)  # block indices per rank

    def rank_rows(self, rank: int) -> int:
        if self.split is not None:
            return len(self.split)
        return sum(self.blocks[b].rows for b in self.owned[rank])

    def producer(self) -> FileProducer | MemoryProducer:
        c, o = self.config, self.config.optim
        if self.split is not None:
            return MemoryProducer(
                split=self.split,
                labels=self.labels,
                seed=c.runtime.seed,
                rank=self.rank,
                world=self.world,
                batch_size=o.batch_size,
                accumulation=o.accumulation_steps,
            )
        order = RankOrder(
            self.blocks,
            self.owned[self.rank],
            seed=c.runtime.seed,
            rank=self.rank,
            window=c.data.shuffle_window,
        )
        return FileProducer(
            order=order,
            shards=self.shards,
            blocks=self.blocks,
            columns=_columns(c),
            encoder=_encoder(self.tokenizer, self.labels, c),
            batch_size=o.batch_size,
            accumulation=o.accumulation_steps,
        )

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
                "block": "row group (Parquet) / ~4 MiB of lines (JSONL)" if self.source == "files" else "row",
                "window_blocks": self.config.data.shuffle_window if self.source == "files" else None,
            },
            "ranks": [
                {"rank": r, "rows_per_epoch": self.rank_rows(r), **pos} for r, pos in enumerate(positions)
            ],
            "sources": self.sources,
        }


def _columns(c: TrainConfig) -> tuple[str, str]:
    return (c.data.tokens_column, c.data.tags_column)


def _encoder(tok: Tokenizer, labels: LabelSet, c: TrainConfig) -> Encoder:
    return Encoder(tok, labels, c.model.max_len, c.data.unknown_tags)


def _in_val(seed: int, shard: Shard, block: Block, fraction: float) -> float:
    digest = hashlib.blake2b(f"{seed}:{shard.path.name}:{block.part}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _discover_labels(shards: list[Shard], columns: tuple[str, str]) -> LabelSet:
    """Every tag in the first block of every shard (Parquet: the tags column of row group 0 only)."""
    from mw_env.trainer.data.shards import read_block

    seen: set[str] = set()
    for shard in shards:
        first = shard.blocks[0]
        if shard.kind == "parquet":
            import pyarrow.compute as pc
            import pyarrow.parquet as pq

            try:
                col = pq.ParquetFile(shard.path).read_row_group(first.part, columns=[columns[1]]).column(0)
                seen.update(t for t in pc.unique(pc.list_flatten(col)).to_pylist() if t is not None)
            except Exception as exc:
                raise InputError(
                    f"{shard.path} row group {first.part}: unreadable ({type(exc).__name__}: {exc})",
                    hint="the shard is damaged: re-export it, or drop it from the file list",
                ) from None
        else:
            rb = read_block(shard, first, columns)
            for _words, tags in rb.take(range(len(rb))):
                seen.update(tags)
    where = f"discovered in the first row group of {len(shards)} shard(s)"
    return LabelSet(label_order(seen), where)


def _val_batches(encoder: Encoder, shards: list[Shard], blocks: list[Block], columns: tuple[str, str]) -> Any:
    def batches(src: ValSource, batch_size: int, max_batches: int) -> Iterator[tuple[Batch, list[list[str]]]]:
        counts = Counts(len(encoder.labels))
        rows: list[tuple[list[int], list[int]]] = []
        words_rows: list[list[str]] = []
        done = 0
        for words, tags, where in iter_val_blocks(shards, blocks, columns):
            rows.append(encoder.encode(words, tags, where, counts))
            words_rows.append(words)
            if len(rows) == batch_size:
                yield pad_batch(rows), words_rows
                rows, words_rows, done = [], [], done + 1
                if max_batches and done >= max_batches:
                    break
        else:
            if rows:
                yield pad_batch(rows), words_rows
        src.counts = counts

    return batches


def _memory_val(split: Split, labels: LabelSet) -> ValSource:
    def batches(src: ValSource, batch_size: int, max_batches: int) -> Iterator[tuple[Batch, list[list[str]]]]:
        counts = Counts(len(labels))
        n = len(split)
        limit = n if not max_batches else min(n, max_batches * batch_size)
        for start in range(0, limit, batch_size):
            idx = range(start, min(start + batch_size, limit))
            words = [split.preview[i] if i < len(split.preview) else [] for i in idx]
            yield collate(split, idx, counts, labels), words
        src.counts = counts

    return ValSource(len(split), batches)


def open_corpus(config: TrainConfig, *, rank: int = 0, world: int = 1) -> Corpus:
    """The corpus as this rank sees it; reads footers only (plus label discovery, see above)."""
    data = config.data
    tok = make_tokenizer(data)
    order_key = {
        "runtime_seed": config.runtime.seed,
        "data_seed": data.seed,
        "world_size": world,
        "batch_size": config.optim.batch_size,
        "accumulation_steps": config.optim.accumulation_steps,
    }
    if data.source == "synthetic":
        return _synthetic(config, tok, order_key, rank, world)
    columns = _columns(config)
    train_shards = open_shards(
        expand_files(data.train_files, "data.train_files"), columns, key="data.train_files"
    )
    val_shards = (
        open_shards(expand_files(data.val_files, "data.val_files"), columns, key="data.val_files")
        if data.val_files
        else []
    )
    labels = from_config(data.labels) if data.labels else _discover_labels(train_shards + val_shards, columns)
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
    if len(train_blocks) < world:
        raise InputError(
            f"the training split has {len(train_blocks)} row group(s), fewer than the {world} processes: "
            "each process reads whole row groups of its own",
            hint="write the shards with smaller row groups (pyarrow.parquet.write_table(..., row_group_size=N)), "
            "or use fewer processes",
        )
    order_key.update(
        {"shuffle_window": data.shuffle_window, "tokens_column": columns[0], "tags_column": columns[1]}
    )
    encoder = _encoder(tok, labels, config)
    val = ValSource(sum(b.rows for b in val_blocks), _val_batches(encoder, val_from, val_blocks, columns))
    identity = {
        "source": "files",
        "order": order_key,
        "shards": [s.identity() for s in train_shards],
        "val_shards": [s.identity() for s in val_shards],
    }
    sources = [{"kind": "train", **s.identity()} for s in train_shards]
    sources += [{"kind": "val", **s.identity()} for s in val_shards]
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
        owned=assign_blocks(train_blocks, world, config.runtime.seed),
    )


def _synthetic(
    config: TrainConfig, tok: Tokenizer, order_key: dict[str, Any], rank: int, world: int
) -> Corpus:
    data, max_len = config.data, config.model.max_len
    check_countries(data.countries)
    splits = {"train": Split(), "val": Split()}
    for name, n in (("train", data.synthetic_rows), ("val", data.synthetic_val_rows)):
        for i in range(n):
            words, tags = generate_row(
                seed=data.seed, split=name, index=i, countries=data.countries, noise=data.noise
            )
            ids, labels, dropped = encode_row(tok, words, tags, max_len, BUNDLED.index)
            splits[name].add(ids, labels, words, dropped)
    source = {
        "kind": "synthetic",
        "generator": "mw_env.trainspec.synthetic",
        "seed": data.seed,
        "rows": data.synthetic_rows,
        "val_rows": data.synthetic_val_rows,
        "countries": list(data.countries),
        "noise": data.noise,
    }
    return Corpus(
        source="synthetic",
        tokenizer=tok,
        labels=BUNDLED,
        train_rows=data.synthetic_rows,
        val=_memory_val(splits["val"], BUNDLED),
        identity={"source": "synthetic", "order": order_key, "shards": [source], "val_shards": []},
        sources=[source],
        config=config,
        rank=rank,
        world=world,
        split=splits["train"],
    )
