"""Streaming shards: footers-only opening, the resumable block order, rank shares, labels, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mw_env.base.errors import InputError

from .helpers import files_config, synthetic_rows, write_parquet_corpus

pytestmark = pytest.mark.torch
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _open(tmp_path: Path, *extra: str, corpus: Path | None = None, rank: int = 0, world: int = 1):
    from mw_env.trainer.data import open_corpus

    corpus = corpus or tmp_path / "corpus"
    if not corpus.exists():
        write_parquet_corpus(corpus)
    return open_corpus(files_config(tmp_path / "run", corpus, *extra).config, rank=rank, world=world)


def _rows_of(producer, step: int) -> list[list[int]]:
    return [b.input_ids.tolist() for b in producer(step).micro]


def test_opening_reads_footers_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mw_env.trainer.data.reader as reader

    write_parquet_corpus(tmp_path / "corpus")
    calls = []
    monkeypatch.setattr(reader.PieceReader, "read", lambda *a, **k: calls.append(a) or None)
    labels = "data.labels=[O, B-street, I-street]"
    corpus = _open(tmp_path, labels, "data.unknown_tags=ignore")
    assert calls == []  # no row was read
    assert corpus.train_rows + corpus.val.rows == 360
    assert corpus.labels.names == ("O", "B-street", "I-street") and corpus.labels.origin == "config"
    ident = corpus.identity["shards"][0]
    assert ident["rows"] == 120 and ident["row_groups"] == 4 and len(ident["footer_sha256"]) == 64


def test_labels_discovered_once_footers_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mw_env.trainer.data.index as index
    import mw_env.trainer.data.shards as shards

    calls: list[str] = []  # list.append is atomic: the shards are indexed by several threads

    def counted(name, real):
        def wrapper(*a, **k):
            calls.append(name)
            return real(*a, **k)

        return wrapper

    def reads() -> dict[str, int]:
        return {"footer": calls.count("footer"), "sample": calls.count("sample")}

    monkeypatch.setattr(shards, "_read_footer", counted("footer", shards._read_footer))
    monkeypatch.setattr(index, "sample_tags", counted("sample", index.sample_tags))
    corpus = _open(tmp_path)
    assert reads() == {"footer": 3, "sample": 3}  # each shard's footer once, one tags sample per shard
    assert corpus.labels.names[0] == "O" and "B-street" in corpus.labels.names
    assert corpus.labels.origin.startswith("discovered")
    # Every entity comes with both its B- and I- tag, in a fixed order.
    assert all(f"I-{n[2:]}" in corpus.labels.names for n in corpus.labels.names if n.startswith("B-"))
    # The other ranks read nothing (rank 0's index is broadcast), and a resume reads nothing (cached).
    monkeypatch.setattr(index, "from_rank0", lambda build, world: build())
    for rank in (0, 1):
        again = _open(tmp_path, rank=rank, world=2)
        assert again.labels == corpus.labels and again.identity["shards"] == corpus.identity["shards"]
    assert reads() == {"footer": 3, "sample": 3}
    # A rewritten shard is read again (its file identity changed), the others are not.
    first = tmp_path / "corpus" / "shard-00.parquet"
    pq.write_table(pq.read_table(first).slice(0, 100), first, row_group_size=32)
    _open(tmp_path)
    assert reads() == {"footer": 4, "sample": 4}


def test_labels_come_from_the_first_row_groups_dictionary_without_decoding_a_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mw_env.trainer.data.index as index

    rows = synthetic_rows(96)
    rows[30]["tags"][0] = "B-galaxy"  # row group 0 (32 rows), past a 10-row sample
    folder = tmp_path / "corpus"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), folder / "a.parquet", row_group_size=32)
    decoded: list[object] = []
    real = pq.ParquetFile.iter_batches
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", lambda *a, **k: decoded.append(a) or real(*a, **k))
    monkeypatch.setattr(index, "LABEL_SAMPLE_ROWS", 10)
    corpus = _open(tmp_path, "data.val_fraction=0.01", corpus=folder)
    assert decoded == []  # the tags dictionary page only
    assert {"B-galaxy", "I-galaxy"} <= set(corpus.labels.names)
    assert "all of their tags" in corpus.labels.origin and corpus.labels.note == ""


def test_a_tag_outside_the_sample_names_where_it_is(tmp_path: Path) -> None:
    import mw_env.trainer.data.index as index

    rows = synthetic_rows(96)
    rows[80]["tags"][0] = "B-galaxy"  # past the sampled rows
    bad = tmp_path / "corpus"
    bad.mkdir()
    # Tags not dictionary-encoded: the first rows are sampled (every row group's dictionary would find it).
    pq.write_table(
        pa.Table.from_pylist(rows), bad / "a.parquet", row_group_size=32, use_dictionary=["tokens"]
    )
    real = index.LABEL_SAMPLE_ROWS
    index.LABEL_SAMPLE_ROWS = 40
    try:
        corpus = _open(tmp_path, "data.val_fraction=0.01", corpus=bad)
    finally:
        index.LABEL_SAMPLE_ROWS = real
    assert "B-galaxy" not in corpus.labels.names
    producer = corpus.producer()
    try:
        with pytest.raises(
            InputError,
            match=r"a.parquet row 80 \(df.iloc\[80\]: counted from 0 at the file's first row\): "
            r"tag 'B-galaxy' is not in",
        ) as exc:
            for s in range(20):
                producer(s)
    finally:
        producer.close()
    assert "data.labels" in exc.value.hint


def test_order_is_a_pure_function_of_the_step(tmp_path: Path) -> None:
    corpus = _open(tmp_path, "data.shuffle_rows=50", "data.workers=0")
    a, b = corpus.producer(), corpus.producer()
    try:
        sequential = [_rows_of(a, s) for s in range(48)]  # 48 x 8 rows: more than one epoch
        assert [_rows_of(b, s) for s in reversed(range(48))][::-1] == sequential  # random access agrees
    finally:
        a.close()
        b.close()
    # Worker processes encode the same rows into the same batches.
    w = _open(tmp_path, "data.shuffle_rows=50", "data.workers=2").producer()
    try:
        assert [_rows_of(w, s) for s in range(48)] == sequential
    finally:
        w.close()


def test_each_epoch_reads_every_row_once_and_reshuffles(tmp_path: Path) -> None:
    from mw_env.trainer.data.order import RankOrder

    corpus = _open(tmp_path)
    order = RankOrder(corpus.blocks, corpus.owned[0], seed=0, rank=0, window_rows=50)  # cuts row groups
    n = order.epoch_rows
    seen = []
    for epoch in range(2):
        rows = []
        for p in range(epoch * n, (epoch + 1) * n):
            w, off = order.locate(p)
            assert w.rows <= 50  # memory is bounded in rows, not row groups
            g = int(w.permutation()[off])
            for piece in order.pieces(w):  # row g of the window -> (block, row in block)
                if g < piece.rows:
                    rows.append((piece.block, piece.first + g))
                    break
                g -= piece.rows
        seen.append(rows)
    for rows in seen:
        assert len(set(rows)) == n  # a permutation of the rank's rows
    assert seen[0] != seen[1]


def test_ranks_read_disjoint_balanced_shares(tmp_path: Path) -> None:
    corpus = _open(tmp_path, world=2)
    owned = corpus.owned
    assert set(owned[0]).isdisjoint(owned[1]) and sorted(owned[0] + owned[1]) == list(
        range(len(corpus.blocks))
    )
    rows = [sum(corpus.blocks[b].rows for b in o) for o in owned]
    assert abs(rows[0] - rows[1]) <= max(b.rows for b in corpus.blocks)
    # Rank 1's producer only ever opens its own row groups.
    import mw_env.trainer.data.reader as reader

    r1 = _open(tmp_path, world=2, rank=1)
    opened = []
    real = reader.PieceReader.read

    def spy(self, pieces):
        opened.extend(p.block for p in pieces)
        return real(self, pieces)

    reader.PieceReader.read = spy
    producer = r1.producer()
    try:
        for s in range(10):
            producer(s)
    finally:
        producer.close()
        reader.PieceReader.read = real
    assert opened and set(opened) <= set(owned[1])


def test_val_fraction_holds_out_the_share_asked(tmp_path: Path) -> None:
    """3 shards x 120 rows in row groups of 32, data.val_fraction 0.1: 36 rows asked; a whole row group (32) is more
    than 10% off, so validation is row ranges (of ~9 rows) holding out 36 rows or within half a range of it, the same
    at every open."""
    corpus = _open(tmp_path)
    held = next(s for s in corpus.sources if "held_out" in s)["held_out"]
    assert abs(corpus.val.rows - 36) <= 4 and corpus.train_rows + corpus.val.rows == 360
    assert corpus.units["val_share"] == corpus.val.rows / 360 and corpus.units["unit"] == "row ranges"
    assert all(" rows " in h for h in held)  # `shard-01.parquet row group 2 rows 9-17`
    # Training units never overlap a held-out range.
    for b in corpus.blocks:
        name = f"{corpus.shards[b.shard].path.name} row group {b.part} rows "
        for h in held:
            if h.startswith(name):
                lo, hi = map(int, h[len(name) :].split("-"))
                assert hi < b.offset or lo >= b.offset + b.rows
    again = _open(tmp_path)
    assert next(s for s in again.sources if "held_out" in s)["held_out"] == held  # seeded, stable
    whole = _open(tmp_path, "data.val_fraction=0.09")  # 32 of 360 rows asked: one whole row group serves
    assert whole.val.rows == 32 and whole.units["unit"] == "row groups"


def test_jsonl_shards_stream_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mw_env.trainer.data.shards as shards
    from mw_env.trainer.data import open_corpus

    scans: list[Path] = []
    real_scan = shards._open_jsonl
    monkeypatch.setattr(shards, "_open_jsonl", lambda path, i: scans.append(path) or real_scan(path, i))

    corpus_dir = tmp_path / "j"
    corpus_dir.mkdir()
    rows = synthetic_rows(50)
    (corpus_dir / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:30]))
    (corpus_dir / "v.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[30:]))
    cfg = files_config(
        tmp_path / "run",
        corpus_dir,
        f"data.train_files=[{corpus_dir}/a.jsonl]",
        f"data.val_files=[{corpus_dir}/v.jsonl]",
    ).config
    corpus = open_corpus(cfg)
    assert (corpus.train_rows, corpus.val.rows) == (30, 20)
    producer = corpus.producer()
    try:
        data = producer(0)
    finally:
        producer.close()
    assert data.counts.rows == 8 and data.micro[0].input_ids.shape[0] == 8
    batches = list(corpus.val.batches(8, 0))
    assert sum(b.input_ids.shape[0] for b, _ in batches) == 20 and corpus.val.counts.rows == 20
    # Each JSONL shard's line offsets were indexed once; a second open (a resume) takes them from the cache.
    assert len(scans) == 2
    again = open_corpus(cfg)
    assert len(scans) == 2 and again.identity == corpus.identity


def _write(path: Path, table) -> Path:
    pq.write_table(table, path)
    return path


def _expect(tmp_path: Path, pattern: str, *extra: str, read_steps: int = 0) -> InputError:
    from mw_env.trainer.data import open_corpus

    cfg = files_config(tmp_path / "run", tmp_path / "bad", *extra).config
    with pytest.raises(InputError) as exc:
        corpus = open_corpus(cfg)
        producer = corpus.producer()
        try:
            for s in range(read_steps):
                producer(s)
        finally:
            producer.close()
    assert pattern in exc.value.message, exc.value.message
    assert exc.value.hint
    return exc.value


def test_bad_inputs_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    good = pa.Table.from_pylist(synthetic_rows(64))
    _write(bad / "a.parquet", good)
    _expect(tmp_path, "no file matches", f"data.train_files=[{tmp_path}/nothing-*.parquet]")

    _write(bad / "b.parquet", pa.table({"tokens": [1, 2], "tags": [["O"], ["O"]]}))
    _expect(tmp_path, "b.parquet: column 'tokens' is int64, not a list of strings")
    (bad / "b.parquet").unlink()

    _write(bad / "c.parquet", pa.table({"words": [["a"]], "tags": [["O"]]}))
    _expect(tmp_path, "c.parquet: missing column(s) ['tokens']")
    (bad / "c.parquet").unlink()

    (bad / "d.parquet").write_bytes((bad / "a.parquet").read_bytes()[:-20])  # torn at the end
    _expect(tmp_path, "d.parquet: corrupt Parquet footer")
    (bad / "d.parquet").write_bytes(b"not parquet at all, long enough")
    _expect(tmp_path, "d.parquet")
    (bad / "d.parquet").unlink()

    (bad / "e.parquet").mkdir()  # unreadable as a file
    _expect(tmp_path, "e.parquet")
    (bad / "e.parquet").rmdir()

    _write(bad / "f.parquet", good.slice(0, 0))
    _expect(tmp_path, "f.parquet has no rows")


def test_bad_rows_are_reported_when_reached(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    rows = synthetic_rows(96)
    rows[70]["tags"] = rows[70]["tags"][:-1]  # row group 2 (32 rows each), row 6
    pq.write_table(pa.Table.from_pylist(rows), bad / "a.parquet", row_group_size=32)
    labels = "data.labels=[" + ", ".join(sorted({t for r in rows for t in r["tags"]})) + "]"
    err = _expect(tmp_path, "a.parquet row 70 (df.iloc[70]", labels, "data.val_fraction=0.01", read_steps=12)
    assert "tokens but" in err.message


def test_unknown_tags_error_or_are_counted(tmp_path: Path) -> None:
    corpus_dir = tmp_path / "corpus"
    write_parquet_corpus(corpus_dir)
    labels = "data.labels=[O, B-street, I-street]"
    from mw_env.trainer.data import open_corpus

    cfg = files_config(tmp_path / "run", corpus_dir, labels).config
    producer = open_corpus(cfg).producer()
    with pytest.raises(
        InputError, match=r"row \d+ \(df.iloc\[\d+\]: .*\): tag '.*' is not in the label set"
    ) as exc:
        producer(0)
    producer.close()
    assert "data.labels" in exc.value.hint
    cfg = files_config(tmp_path / "run", corpus_dir, labels, "data.unknown_tags=ignore").config
    producer = open_corpus(cfg).producer()
    try:
        counts = producer(0).counts
    finally:
        producer.close()
    assert counts.unknown_tag_words > 0 and counts.words == sum(counts.labels) + counts.unknown_tag_words


def test_bio_inconsistencies_are_counted_not_fatal(tmp_path: Path) -> None:
    from mw_env.trainer.data import BUNDLED, label_order

    ids = [BUNDLED.index[t] for t in ["O", "I-street", "B-street", "I-street", "I-locality"]]
    assert BUNDLED.bio_errors(ids) == 2
    # In a corpus: counted with the row's location, the run goes on.
    bad = tmp_path / "bad"
    bad.mkdir()
    rows = synthetic_rows(64)
    for r in rows:
        r["tags"] = ["I-street" if t == "B-street" else t for t in r["tags"]]
    pq.write_table(pa.Table.from_pylist(rows), bad / "a.parquet", row_group_size=32)
    from mw_env.trainer.data import open_corpus

    producer = open_corpus(files_config(tmp_path / "run", bad, "data.val_fraction=0.01").config).producer()
    try:
        counts = producer(0).counts
    finally:
        producer.close()
    assert counts.bio_errors >= 8 and counts.bio_examples[0].startswith(f"{bad / 'a.parquet'} row ")
    assert label_order(["I-unit", "O", "B-po_box"]) == ("O", "B-po_box", "I-po_box", "B-unit", "I-unit")


def test_full_file_sha256_once_in_the_background(tmp_path: Path) -> None:
    import hashlib
    import time

    from mw_env.rundir.contract import SHARD_DIGESTS as CACHE
    from mw_env.trainer.data.digest import ShardHasher

    corpus = _open(tmp_path)
    hasher = ShardHasher(corpus.sources, tmp_path)
    deadline = time.monotonic() + 60
    while any(s.get("sha256") == "pending" for s in hasher.annotate(corpus.sources)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    hasher.close()
    done = [s for s in hasher.annotate(corpus.sources) if "sha256" in s]
    assert len(done) == 3
    for s in done:
        assert s["sha256"] == hashlib.sha256(Path(s["path"]).read_bytes()).hexdigest()
    # A restart reads the cache and hashes nothing again.
    again = ShardHasher(corpus.sources, tmp_path)
    assert again._todo == [] and (tmp_path / CACHE).is_file()
    again.close()


def test_windows_are_read_in_slices_and_not_past_the_last_step(tmp_path: Path) -> None:
    import mw_env.trainer.data.reader as reader
    import mw_env.trainer.data.stream as stream

    corpus = _open(tmp_path, "data.shuffle_rows=50", "data.workers=0")
    read: list[int] = []
    real = reader.PieceReader.read

    def spy(self, pieces):
        read.append(sum(p.rows for p in pieces))
        return real(self, pieces)

    reader.PieceReader.read = spy
    old, stream.ENCODE_ROWS = stream.ENCODE_ROWS, 16
    try:
        producer = corpus.producer(stop=2)  # steps 0 and 1: rows 0..15 of window 0
        for s in range(2):
            producer(s)
        producer.close()
    finally:
        reader.PieceReader.read = real
        stream.ENCODE_ROWS = old
    assert read == [16, 16, 16, 2]  # window 0 only (50 rows), 16 rows at a time
