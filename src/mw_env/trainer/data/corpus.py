"""Opening a corpus: shards and blocks from footers, the label set, the units and the validation split, the
lanes, the card.

Nothing here reads the training data itself: a streamed corpus opens from its index (index.py:
footers, built once by rank 0 and cached; plus, when `data.labels` is unset, a bounded sample of
the tags column). The rows are read by the rank's producer (producer.py), which `Corpus.producer`
builds. Validation is sharded: each rank evaluates its contiguous share of the held-out rows.

The index is independent of the lanes; the units (split.py), their assignment to lanes and the layout of a
step (lanes.py) are computed from it on every rank, with no exchange, so `with_lanes` re-lays the same corpus
for a checkpoint's lanes (a resume on another world size) at the cost of that arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mw_env.base.errors import InputError
from mw_env.trainer.data import index as index_mod
from mw_env.trainer.data.encode import VectorEncoder
from mw_env.trainer.data.labels import BUNDLED, LabelSet, discovered, from_config
from mw_env.trainer.data.lanes import Layout
from mw_env.trainer.data.memshard import recut, synthetic_block_rows, synthetic_shards
from mw_env.trainer.data.order import RankOrder, assign_blocks
from mw_env.trainer.data.producer import FileProducer, LaneStream
from mw_env.trainer.data.reader import PieceReader
from mw_env.trainer.data.shards import Block, Shard
from mw_env.trainer.data.sources import WeightedSources, index_train
from mw_env.trainer.data.split import split_files, units_record
from mw_env.trainer.data.stream import ENCODE_ROWS, Encoding, ValSource
from mw_env.trainer.data.tokenize import Tokenizer, make_tokenizer
from mw_env.trainspec.config import TrainConfig
from mw_env.trainspec.files import expand_files
from mw_env.trainspec.schema import order_record
from mw_env.trainspec.splitscan import UnitsRecord
from mw_env.trainspec.synthetic import check_countries

__all__ = ["Corpus", "ValSource", "encoder_for", "open_corpus", "ranks_per_node"]


@dataclass
class _Opened:
    """What a corpus is laid out from, lanes aside: the index (files) or the generated shards (synthetic)."""

    config: TrainConfig
    tokenizer: Tokenizer
    labels: LabelSet
    rank: int
    world: int
    train: list[Shard]
    val: list[Shard]
    source_of: list[int] = field(default_factory=list)
    described: dict[str, object] | None = None  # synthetic: the generator's settings


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
    layout: Layout
    units: UnitsRecord  # what the console and the card say about the units and the validation split
    rank: int = 0
    shards: list[Shard] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)  # the training units
    owned: list[list[int]] = field(default_factory=list)  # unit indices per lane
    weighted: WeightedSources | None = None  # data.sources: the mix and each source's units per lane
    opened: _Opened | None = None

    @property
    def lanes(self) -> int:
        return self.layout.lanes

    def lane_rows(self, lane: int) -> int:
        """A lane's rows per epoch."""
        return sum(self.blocks[b].rows for b in self.owned[lane])

    def with_lanes(self, lanes: int, lane_rows: int) -> Corpus:
        """The same corpus laid out for `lanes` lanes of `lane_rows` rows a step (a checkpoint's)."""
        if (lanes, lane_rows) == (self.lanes, self.layout.lane_rows) or self.opened is None:
            return self
        return _assemble(self.opened, lanes, lane_rows)

    def producer(self, stop: int | None = None) -> FileProducer:
        """This rank's producer; `stop`: the step the run ends before (nothing is read ahead past it)."""
        from mw_env.trainer.data import trace

        c = self.config
        w = self.weighted
        several = w is not None and len(w.names) > 1
        auto = c.data.workers < 0  # the automatic count starts workers only for windows worth splitting
        columns = _columns(c)
        encoding = Encoding(
            PieceReader(self.shards, self.blocks, columns),
            encoder_for(self.tokenizer, self.labels, c),
            self.labels,
            self.workers,
            min_rows=ENCODE_ROWS if auto else 0,
        )
        end = None if stop is None else stop * self.layout.lane_rows
        lanes = {}
        for lane in self.layout.lanes_of(self.rank):
            orders = [
                RankOrder(
                    self.blocks,
                    owned[lane],
                    seed=c.runtime.seed,
                    rank=lane,
                    window_rows=c.data.shuffle_rows,
                    salt=(k,) if several else (),  # one source reads exactly as data.train_files does
                )
                for k, owned in enumerate(w.owned if w is not None else [self.owned])
            ]
            # Each lane its own reader (its own cursors: two lanes' ranges of one row group do not rewind
            # each other), sharing the rank's encoder and worker pool.
            reader = PieceReader(self.shards, self.blocks, columns)
            lanes[lane] = LaneStream(
                orders, encoding.for_reader(reader), mix=w.mix if w is not None and several else None, end=end
            )
        return FileProducer(
            lanes=lanes,
            layout=self.layout,
            rank=self.rank,
            encoding=encoding,
            labels=self.labels,
            ids=trace.RowIds(self.shards) if trace.enabled() else None,
        )

    @property
    def workers(self) -> int:
        """data.workers, or (-1) one per core a rank has beyond its own (ranks per node from torchrun); never
        more than the rank's share of the CPUs it may use (workers.rank_workers)."""
        from mw_env.trainer.data.workers import rank_workers

        return rank_workers(self.config.data.workers, ranks_per_node())[0]


def _columns(c: TrainConfig) -> tuple[str, str]:
    return (c.data.tokens_column, c.data.tags_column)


def encoder_for(tok: Tokenizer, labels: LabelSet, c: TrainConfig) -> VectorEncoder:
    """The encoder a run's rows go through (train predict/evaluate encode their input with it too)."""
    return VectorEncoder(
        kind=tok.kind,
        spm_proto=getattr(tok, "proto", None),
        label_names=labels.names,
        max_len=c.model.max_len,
        unknown_tags=c.data.unknown_tags,
    )


def _index(config: TrainConfig) -> dict[str, Any]:
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


def open_corpus(
    config: TrainConfig, *, rank: int = 0, world: int = 1, lanes: int = 0, lane_rows: int = 0
) -> Corpus:
    """The corpus as this rank sees it: rank 0 reads the footers (once, cached); the others get its index.
    Laid out for `lanes` lanes of `lane_rows` rows a step (0: a fresh run's, the world size and optim.batch_size
    x optim.accumulation_steps)."""
    data = config.data
    tok = make_tokenizer(data)
    lanes = lanes or world
    lane_rows = lane_rows or config.optim.batch_size * config.optim.accumulation_steps
    if data.source == "synthetic":
        check_countries(data.countries)
        train, val, described = synthetic_shards(config, lanes)
        opened = _Opened(config, tok, BUNDLED, rank, world, [train], [val], described=described)
        return _assemble(opened, lanes, lane_rows)
    index = index_mod.from_rank0(lambda: _index(config), world)
    train_shards, val_shards = index["train"], index["val"]
    labels = (
        from_config(data.labels)
        if data.labels
        else discovered(index["tags"], index["tags_sampled"], len(train_shards) + len(val_shards))
    )
    opened = _Opened(config, tok, labels, rank, world, train_shards, val_shards, index["source_of"])
    return _assemble(opened, lanes, lane_rows)


def _assemble(o: _Opened, lanes: int, lane_rows: int) -> Corpus:
    config, data = o.config, o.config.data
    layout = Layout(lanes, lane_rows, o.world, config.optim.batch_size)
    layout.check()
    # The declared order settings (schema.setting's `order`) and the layout: a resume compares this record.
    order_key = {**order_record(config, data.source), "lanes": lanes, "lane_rows": lane_rows}
    columns = _columns(config)
    if o.described is not None:
        return _assemble_synthetic(o, layout, order_key)
    split = split_files(config, o.train, o.val, o.source_of, lanes)
    plan, mixed = split.plan, split.weighted
    if o.val:  # named validation shards: no share is held out, whatever data.val_fraction says
        del order_key["val_fraction"]
    if plan.ranges or plan.val:  # the units themselves (a whole-block corpus: the footers say them)
        order_key["units"] = plan.key()
    if mixed is not None:
        order_key["sources"] = mixed.order_key()
    val_encoding = Encoding(
        PieceReader(split.val_from, split.val, columns), encoder_for(o.tokenizer, o.labels, config), o.labels
    )
    val = ValSource(sum(b.rows for b in split.val), val_encoding, split.val, rank=o.rank, world=o.world)
    train_ids, val_ids = [s.identity() for s in o.train], [s.identity() for s in o.val]
    if mixed is not None:  # a shard moved to another source is a changed corpus
        train_ids = [{**i, "source": mixed.names[k]} for i, k in zip(train_ids, o.source_of, strict=True)]
    sources = [{"kind": "train", **i} for i in train_ids] + [{"kind": "val", **i} for i in val_ids]
    if not o.val and split.val:
        sources.append({"kind": "val", "held_out": split.held_out(o.train)})
    return Corpus(
        source="files",
        tokenizer=o.tokenizer,
        labels=o.labels,
        train_rows=plan.train_rows,
        val=val,
        identity={"source": "files", "order": order_key, "shards": train_ids, "val_shards": val_ids},
        sources=sources,
        config=config,
        layout=layout,
        units=units_record(split, o.train, o.source_of, config),
        rank=o.rank,
        shards=o.train,
        blocks=split.units,
        owned=split.owned,
        weighted=mixed,
        opened=o,
    )


def _assemble_synthetic(o: _Opened, layout: Layout, order_key: dict[str, Any]) -> Corpus:
    """The generated corpus as two in-memory shards (train, val), opened and read like files."""
    config, data = o.config, o.config.data
    lanes = layout.lanes
    if data.synthetic_rows < lanes:
        raise InputError(
            f"data.synthetic_rows = {data.synthetic_rows} is fewer rows than the {lanes} lane(s) (the processes "
            "of the run's first start): each lane reads rows of its own",
            hint=f"--set data.synthetic_rows={lanes} or more (a few hundred to learn anything), or use fewer "
            "processes",
        )
    block_rows = synthetic_block_rows(data.synthetic_rows, lanes)
    train = recut(o.train[0], block_rows)
    val = o.val[0]
    order_key["block_rows"] = block_rows
    val_encoding = Encoding(
        PieceReader([val], val.blocks, _columns(config)), encoder_for(o.tokenizer, BUNDLED, config), BUNDLED
    )
    assert o.described is not None
    return Corpus(
        source="synthetic",
        tokenizer=o.tokenizer,
        labels=BUNDLED,
        train_rows=data.synthetic_rows,
        val=ValSource(val.rows, val_encoding, val.blocks, rank=o.rank, world=o.world),
        identity={"source": "synthetic", "order": order_key, "shards": [o.described], "val_shards": []},
        sources=[dict(o.described)],
        config=config,
        layout=layout,
        units={
            "unit": f"generated blocks of {block_rows} rows",
            "why": f"{data.synthetic_rows:,} generated rows in {len(train.blocks):,} blocks of {block_rows} "
            f"rows, {'the one lane reads' if lanes == 1 else f'each of the {lanes} lanes reads'} whole blocks "
            "of its own",
            "lanes": lanes,
            "val_from": "generated (data.synthetic_val_rows)",
            "val_rows": val.rows,
            "val_share": None,
            "train_rows": data.synthetic_rows,
        },
        rank=o.rank,
        shards=[train],
        blocks=train.blocks,
        owned=assign_blocks(train.blocks, lanes, config.runtime.seed),
        opened=o,
    )


def ranks_per_node() -> int:
    """The ranks sharing this node's CPUs (torchrun's LOCAL_WORLD_SIZE; 1 without torchrun)."""
    import os

    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    except ValueError:
        return 1
