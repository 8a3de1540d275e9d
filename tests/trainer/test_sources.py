"""Weighted sources (data.sources): exact proportions from a fixed schedule, every rank its share, the
order a pure function of the step (what exact resume needs), the data card's shares, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from mw_env.base.errors import InputError

from .helpers import tiny_config

pytestmark = pytest.mark.torch
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def test_the_schedule_gives_exact_shares_over_a_long_draw() -> None:
    import numpy as np

    from mw_env.trainer.data.mix import PERIOD, Mix, quotas

    assert quotas([1, 9]) == [1000, 9000] and quotas([1, 1, 1]) == [3334, 3333, 3333]
    assert quotas([1e-9, 1]) == [1, PERIOD - 1]  # a source with a weight is never starved
    for weights in ([1, 9], [0.3, 0.3, 0.4], [5, 1, 1, 3], [1, 99]):
        mix = Mix(weights)
        n = 3 * PERIOD + 1234  # a long draw: three whole periods and a part
        k, q = mix.locate(np.arange(n, dtype=np.int64))
        counts = np.bincount(k, minlength=len(weights))
        assert counts.tolist() == mix.counts(n) and counts.sum() == n
        for s in range(len(weights)):  # each source's rows are its own stream's 0, 1, 2, ... in order
            assert q[k == s].tolist() == list(range(int(counts[s])))
        shares = np.asarray(weights) / sum(weights)
        # Exact over whole periods; within a period, every prefix stays within 2 rows of its share.
        assert mix.counts(3 * PERIOD) == [3 * int(x) for x in mix.quota]
        assert np.all(np.abs(mix.quota / PERIOD - shares) <= 1 / PERIOD)
        prefix = np.stack([np.cumsum(k == s) for s in range(len(weights))], axis=1)
        expected = np.arange(1, n + 1)[:, None] * (mix.quota / PERIOD)[None, :]
        assert np.abs(prefix - expected).max() < 2


def _shard(path: Path, rows: list[dict], row_group: int) -> None:
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small source whose rows are one word of one byte, a large one whose rows are three: a row's source is
    read off its length in a batch."""
    folder = tmp_path_factory.mktemp("sources")
    (folder / "small").mkdir()
    (folder / "large").mkdir()
    small = [{"tokens": [str(i % 10)], "tags": ["B-house_number"]} for i in range(40)]
    large = [
        {"tokens": ["bb", "cc", f"d{i}"], "tags": ["B-street", "I-street", "B-locality"]} for i in range(300)
    ]
    _shard(folder / "small" / "s.parquet", small, 10)
    _shard(folder / "large" / "l-0.parquet", large[:150], 25)
    _shard(folder / "large" / "l-1.parquet", large[150:], 25)
    _shard(folder / "val.parquet", small[:4] + large[:4], 4)
    return folder


def _config(corpus: Path, out: Path, *extra: str, weights: tuple[float, float] = (1, 3)):
    sources = (
        f"data.sources=[{{name: small, files: ['{corpus}/small/*.parquet'], weight: {weights[0]}}}, "
        f"{{name: large, files: ['{corpus}/large/*.parquet'], weight: {weights[1]}}}]"
    )
    return tiny_config(
        out,
        "data.source=files",
        sources,
        f"data.val_files=[{corpus}/val.parquet]",
        "data.workers=0",
        "data.shuffle_rows=16",
        *extra,
    ).config


def _small_rows(producer, step: int) -> int:
    # CLS a SEP: a small-source row has 3 real tokens; a large-source row has more.
    return sum(int((b.attention_mask.sum(-1) == 3).sum()) for b in producer(step).micro)


@pytest.mark.parametrize("world", [1, 2])
def test_every_rank_draws_in_proportion_and_repeats_the_small_source(
    corpus: Path, tmp_path: Path, world: int
) -> None:
    from mw_env.trainer.data import Counts, open_corpus
    from mw_env.trainer.finish import data_card

    cfg = _config(corpus, tmp_path / "run")
    for rank in range(world):
        c = open_corpus(cfg, rank=rank, world=world)
        assert c.weighted is not None and c.weighted.train_rows[0] == 40
        owned = c.weighted.owned
        assert all(owned[k][rank] for k in range(2))  # a share of every source
        producer = c.producer()
        try:
            steps = 60  # 60 x 8 = 480 rows: the 40 small rows (or a rank's 20) are read many times over
            small = sum(_small_rows(producer, s) for s in range(steps))
        finally:
            producer.close()
        assert small == c.weighted.mix.counts(steps * 8)[0] == 120  # exactly 1 row in 4
    card = data_card(c, Counts(len(c.labels)), steps)  # every lane at stream row 60 x 8 = 480
    assert c.weighted.describe() == "small 25.0% (40 rows), large 75.0% (300 rows)"
    mix = {s["name"]: s for s in card["mix"]}
    assert mix["small"]["configured_share"] == mix["small"]["realised_share"] == 0.25
    assert mix["small"]["rows_drawn"] == 120 * world and mix["small"]["epochs"] == 3.0 * world
    assert mix["large"]["weight"] == 3.0


def test_the_order_is_a_pure_function_of_the_step(corpus: Path, tmp_path: Path) -> None:
    from mw_env.trainer.data import open_corpus

    cfg = _config(corpus, tmp_path / "run", "optim.accumulation_steps=2")
    a, b = open_corpus(cfg).producer(), open_corpus(cfg).producer()
    try:
        seq = [[m.input_ids.tolist() for m in a(s).micro] for s in range(30)]
        back = [[m.input_ids.tolist() for m in b(s).micro] for s in reversed(range(30))][::-1]
        assert back == seq  # a resume at any step reads what an uninterrupted run reads
    finally:
        a.close()
        b.close()
    # Another weighting is another data order, recorded as such (a resume refuses it).
    other = open_corpus(_config(corpus, tmp_path / "run", weights=(1, 1)))
    assert other.identity["order"]["sources"] != open_corpus(cfg).identity["order"]["sources"]
    shards = open_corpus(cfg).identity["shards"]
    assert [s["source"] for s in shards] == ["small", "large", "large"]


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (
            ("data.sources=[{files: [x.parquet], weight: 0}]",),
            r"data.sources\[0\].weight = 0.0 is not allowed",
        ),
        (("data.sources=[{files: [], weight: 1}]",), r"data.sources\[0\].files is empty"),
        (("data.sources=[{files: [x.parquet]}]", "data.train_files=[y.parquet]"), "both set"),
        (("data.sources=[{files: [x.parquet], weight: .nan}]",), r"data.sources\[0\].weight"),
        (
            ("data.sources=[" + ", ".join(["{files: [x.parquet]}"] * 1001) + "]",),
            "1001 sources, more than 1,000",
        ),
    ],
)
def test_bad_sources_name_the_key(tmp_path: Path, sets: tuple[str, ...], message: str) -> None:
    with pytest.raises(InputError, match=message):
        tiny_config(tmp_path, "data.source=files", *sets)


def test_sources_that_overlap_or_are_too_small_are_refused_and_few_row_groups_are_cut(
    corpus: Path, tmp_path: Path
) -> None:
    from mw_env.trainer.data import open_corpus

    both = (
        f"data.sources=[{{files: ['{corpus}/large/l-0.parquet']}}, {{files: ['{corpus}/large/*.parquet']}}]"
    )
    cfg = tiny_config(
        tmp_path / "a", "data.source=files", both, f"data.val_files=[{corpus}/val.parquet]"
    ).config
    with pytest.raises(
        InputError, match=r"data.sources\[1\].files: .*l-0.parquet is also one of data.sources\[0\]"
    ):
        open_corpus(cfg)
    # The small source's 4 row groups on 5 lanes: cut into row ranges, every lane a share of every source.
    five = open_corpus(_config(corpus, tmp_path / "b"), world=5)
    assert five.units["unit"] == "row ranges" and five.weighted is not None
    assert all(five.weighted.owned[k][lane] for k in range(2) for lane in range(5))
    assert (
        "data.sources[0] (small): s.parquet has 4 row groups (40 rows); the 40 training rows are split into 20 ranges"
        in five.units["why"]
    )
    with pytest.raises(
        InputError, match=r"data.sources\[0\] \(small\): 40 row\(s\), of which 40 would train"
    ):
        open_corpus(_config(corpus, tmp_path / "c"), world=64)  # fewer rows than lanes


def test_summary_names_each_source_and_its_share(corpus: Path, tmp_path: Path, capsys) -> None:
    from mw_env.cli import main

    sources = (
        f"data.sources=[{{name: small, files: ['{corpus}/small/*.parquet'], weight: 1}}, "
        f"{{name: large, files: ['{corpus}/large/*.parquet'], weight: 3}}]"
    )
    common = ["train", "summary", "--config", "smoke", "--set", "data.source=files", "--set"]
    assert main([*common, sources]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "small" in out and "weight 1 = 25.0% of the rows" in out and "weight 3 = 75.0%" in out
    missing = (
        f"data.sources=[{{files: ['{corpus}/small/*.parquet']}}, {{files: ['{tmp_path}/none/*.parquet']}}]"
    )
    assert main([*common, missing]) == 2
    assert "error: data.sources[1].files: no file matches" in capsys.readouterr().err
