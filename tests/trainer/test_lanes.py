"""Lanes (trainer/data/lanes.py): the global batch of a step is a function of the step alone, and every world
size that divides it reads exactly that batch - the arithmetic for every W against every L, then real producers
over a one-row-group file laid out in L lanes and read by W processes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.trainer.data.lanes import Layout

from .helpers import files_config, synthetic_rows, tiny_config

pytest.importorskip("numpy")


def _global_batch(lanes: int, q: int, step: int) -> list[tuple[int, int]]:
    """(lane, stream row) of each row of the step's global batch, in order."""
    return [(k, step * q + i) for k in range(lanes) for i in range(q)]


@pytest.mark.parametrize("lanes", [1, 2, 3, 4])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_every_world_size_reads_the_global_batch_of_every_step(lanes: int, world: int) -> None:
    for q, batch in ((12, 4), (12, 5), (6, 64), (1, 1)):
        layout = Layout(lanes, q, world, batch)
        if (lanes * q) % world:
            with pytest.raises(InputError):
                layout.check()
            continue
        layout.check()
        for step in (0, 1, 7):
            read: list[tuple[int, int]] = []
            for rank in range(world):
                micro = layout.runs(rank, step)
                assert len(micro) == layout.micro_batches
                sizes = [sum(b - a for _k, a, b in runs) for runs in micro]
                assert max(sizes) <= batch and max(sizes) - min(sizes) <= 1  # even, never above batch_size
                assert sum(sizes) == layout.share
                mine = [(k, p) for runs in micro for k, a, b in runs for p in range(a, b)]
                assert {k for k, _p in mine} == set(layout.lanes_of(rank))
                read += mine
            # The ranks' shares, in rank order, are the global batch: the same rows in the same order.
            assert read == _global_batch(lanes, q, step)
        for k in range(lanes):
            assert layout.ranks_of(k) == [r for r in range(world) if k in layout.lanes_of(r)]


def test_one_lane_per_rank_reads_exactly_the_micro_batches_of_before() -> None:
    """W = L: rank r's micro-batch m of step s is its stream rows [(s·A + m)·B, +B), as before lanes existed."""
    b, a = 8, 3
    layout = Layout(4, b * a, 4, b)
    for rank in range(4):
        for step in range(3):
            runs = layout.runs(rank, step)
            assert runs == [[(rank, (step * a + m) * b, (step * a + m + 1) * b)] for m in range(a)]


def test_a_world_size_that_does_not_divide_the_global_batch_is_refused_naming_the_ones_that_do() -> None:
    with pytest.raises(InputError) as exc:
        Layout(2, 6, 5, 6).check()
    assert "global batch is 12 rows a step (2 lanes x 6 rows" in exc.value.message
    assert "does not split evenly over 5 processes" in exc.value.message
    assert exc.value.hint and "divides 12 (1, 2, 3, 4, 6, 12)" in exc.value.hint


@pytest.fixture(scope="module")
def one_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One Parquet file of 300 rows in one row group (pyarrow's and pandas' defaults)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path_factory.mktemp("one")
    pq.write_table(pa.Table.from_pylist(synthetic_rows(300)), folder / "one.parquet")
    return folder


def _rows_of(
    corpus_dir: Path, run: Path, *, lanes: int, world: int, steps: int
) -> list[Counter[tuple[int, int]]]:
    """The multiset of (shard, row) of each step's global batch, read by `world` producers of a corpus laid
    out in `lanes` lanes of 6 rows a step (batch size 3: micro-batches of up to 3 rows)."""
    from mw_env.trainer.data import open_corpus

    cfg = files_config(run, corpus_dir, "optim.batch_size=3", "data.shuffle_rows=40", "data.workers=0").config
    out = [Counter[tuple[int, int]]() for _ in range(steps)]
    for rank in range(world):
        corpus = open_corpus(cfg, rank=rank, world=world, lanes=lanes, lane_rows=6)
        producer = corpus.producer(stop=steps)
        try:
            for s in range(steps):
                data = producer(s)
                assert data.ids is not None
                out[s].update((shard, row) for shard, row in data.ids)
        finally:
            producer.close()
    return out


@pytest.mark.torch
@pytest.mark.slow
def test_producers_on_any_world_size_read_the_same_global_batches(
    one_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-row-group file in L lanes: W producers together read, at each step, exactly the rows one producer
    per lane reads (the rows of 2 epochs: 270 training rows, 12 a step)."""
    monkeypatch.setenv("MW_ENV_TRACE_ROWS", "1")
    steps = 45
    for lanes in (1, 2):
        ref = _rows_of(one_file, tmp_path / f"ref{lanes}", lanes=lanes, world=lanes, steps=steps)
        assert all(sum(c.values()) == 6 * lanes for c in ref)
        for world in {1, 2, 3} - {lanes}:
            assert _rows_of(one_file, tmp_path / f"w{world}", lanes=lanes, world=world, steps=steps) == ref


@pytest.mark.torch
def test_one_jsonl_file_on_two_lanes_reads_each_training_row_once_an_epoch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One small JSONL file (one ~4 MiB block of lines) on 2 processes: row ranges, each lane its own rows, and
    an epoch of both lanes reads every training row once (validation held out by rows, never read)."""
    import json

    from mw_env.trainer.data import open_corpus

    monkeypatch.setenv("MW_ENV_TRACE_ROWS", "1")
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "one.jsonl").write_text("".join(json.dumps(r) + "\n" for r in synthetic_rows(200)))
    cfg = tiny_config(
        tmp_path / "run",
        "data.source=files",
        f"data.train_files=[{folder}/one.jsonl]",
        "data.val_fraction=0.1",
        "optim.batch_size=5",
        "data.workers=0",
    ).config
    seen: list[tuple[int, int]] = []
    for rank in (0, 1):
        corpus = open_corpus(cfg, rank=rank, world=2)
        assert corpus.units["unit"] == "row ranges" and corpus.val.rows == 20
        rows = corpus.lane_rows(rank)
        assert rows > 0 and corpus.lane_rows(0) + corpus.lane_rows(1) == 180
        steps = -(-rows // 5)
        producer = corpus.producer(stop=steps)
        try:
            ids = [(a, b) for s in range(steps) for a, b in producer(s).ids or []]
        finally:
            producer.close()
        seen += ids[:rows]  # an epoch of the rank's lane
    assert (
        len(seen) == len(set(seen)) == 180
    )  # the 180 training rows, once each; lines 1..200 minus validation
    assert all(1 <= line <= 200 for _s, line in seen)


@pytest.mark.torch
def test_a_checkpoint_from_before_lanes_reads_as_its_lanes() -> None:
    """A checkpoint's data order written before lanes keyed the order by its world size and batch layout: those
    are its lanes and a lane's rows a step, so a same-world-size resume of it reads as it did."""
    from mw_env.trainer.resume import saved_order

    old = {"runtime_seed": 0, "world_size": 2, "batch_size": 8, "accumulation_steps": 2, "shuffle_rows": 64}
    assert saved_order({"data": {"order": old}}) == {
        "runtime_seed": 0,
        "lanes": 2,
        "lane_rows": 16,
        "shuffle_rows": 64,
    }
    new = {"lanes": 1, "lane_rows": 8}
    assert saved_order({"data": {"order": new}}) == new and saved_order({}) == {}
