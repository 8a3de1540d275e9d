"""Data: the synthetic generator, shard streaming and its errors, tokenisation, the batch order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.trainer.data import BUNDLED, IGNORE, ByteTokenizer, encode_row, open_corpus
from mw_env.trainer.scoring import Tally, spans
from mw_env.trainspec.config import resolve_config
from mw_env.trainspec.synthetic import FORMATS, generate_row

LABEL_ID = BUNDLED.index


def load_corpus(cfg):
    """Open the corpus and read every row once (validation, then one epoch of train), as training would."""
    corpus = open_corpus(cfg)
    list(corpus.val.batches(64, 0))
    producer = corpus.producer()
    try:
        for s in range(-(-corpus.train_rows // cfg.optim.batch_size)):
            producer(s)
    finally:
        producer.close()
    return corpus


def _row(i: int, split: str = "train", seed: int = 1) -> tuple[list[str], list[str]]:
    return generate_row(seed=seed, split=split, index=i, countries=tuple(FORMATS), noise=0.3)


def test_synthetic_is_deterministic_and_well_formed() -> None:
    rows = [_row(i) for i in range(300)]
    assert rows == [_row(i) for i in range(300)]
    assert _row(0, seed=2) != _row(0, seed=1) and _row(0, "val") != _row(0, "train")
    entities = set()
    for words, tags in rows:
        assert len(words) == len(tags) and words
        assert all(t in LABEL_ID for t in tags)
        for prev, tag in zip(["O", *tags], tags, strict=False):
            if tag.startswith("I-"):  # every I- continues an entity of its own type
                assert prev[2:] == tag[2:], (words, tags)
        entities |= {t[2:] for t in tags if t != "O"}
    assert entities == {"house_number", "street", "unit", "locality", "region", "postcode", "country"}
    # Several countries' formats: a German row puts the street before the number.
    de = [generate_row(seed=3, split="train", index=i, countries=("DE",), noise=0.0) for i in range(20)]
    assert all(tags[0] == "B-street" for _, tags in de)
    us = [generate_row(seed=3, split="train", index=i, countries=("US",), noise=0.0) for i in range(20)]
    assert all(tags[0] == "B-house_number" for _, tags in us)


def test_byte_tokenizer_labels_first_subtoken() -> None:
    tok = ByteTokenizer()
    ids, labels, dropped = encode_row(tok, ["12", "Straße"], ["B-house_number", "B-street"], 64)
    text = bytes(i - 4 for i in ids[1:-1]).decode()
    assert text == "12 Straße" and dropped == 0
    assert labels[1] == LABEL_ID["B-house_number"] and labels[2] == IGNORE  # '2' is a continuation
    assert labels[3] == IGNORE  # the space between words
    assert labels[4] == LABEL_ID["B-street"]
    assert sum(1 for x in labels if x != IGNORE) == 2
    ids, labels, dropped = encode_row(tok, ["aaaa"] * 10, ["O"] * 10, 16)
    assert len(ids) <= 16 and dropped > 0  # truncation drops whole words, never half a label


def test_entity_spans_and_f1() -> None:
    assert spans(["B-street", "I-street", "O", "I-locality"]) == {(0, 2, "street"), (3, 4, "locality")}
    assert spans(["B-street", "I-street", "O", "I-locality"], "strict") == {(0, 2, "street")}
    gold = ["B-street", "I-street", "B-postcode"]
    same = Tally()
    same.add(gold, gold)
    assert same.prf("conlleval") == same.prf("strict") == (1.0, 1.0, 1.0)
    half = Tally()
    half.add(gold, ["B-street", "O", "B-postcode"])
    p, r, f1 = half.prf("conlleval")
    assert (p, r) == (0.5, 0.5) and f1 == 0.5


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_and_parquet_shards(tmp_path: Path) -> None:
    rows = [dict(zip(("tokens", "tags"), _row(i), strict=True)) for i in range(60)]
    _jsonl(tmp_path / "a.jsonl", rows[:30])
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows[30:]), tmp_path / "b.parquet", row_group_size=10)
    cfg = resolve_config(
        overrides=[
            "data.source=files",
            f"data.train_files=[{tmp_path}/*.jsonl, {tmp_path}/b.parquet]",
            "data.val_fraction=0.2",
            f"runtime.out_dir={tmp_path / 'run'}",
        ]
    ).config
    corpus = open_corpus(cfg)
    assert corpus.train_rows + corpus.val.rows == 60 and corpus.val.rows > 0
    assert [s["path"].rsplit("/", 1)[1] for s in corpus.sources if "path" in s] == ["a.jsonl", "b.parquet"]
    assert all(len(s["footer_sha256"]) == 64 for s in corpus.sources if "path" in s)
    assert [s["rows"] for s in corpus.sources if "path" in s] == [30, 30]
    # Held out: whole blocks, a function of (data.seed, shard name, block): the same split again.
    again = open_corpus(cfg)
    assert (again.train_rows, again.val.rows) == (corpus.train_rows, corpus.val.rows)


def test_explicit_val_files(tmp_path: Path) -> None:
    _jsonl(tmp_path / "t.jsonl", [dict(zip(("tokens", "tags"), _row(i), strict=True)) for i in range(10)])
    _jsonl(
        tmp_path / "v.jsonl", [dict(zip(("tokens", "tags"), _row(i, "val"), strict=True)) for i in range(4)]
    )
    cfg = resolve_config(
        overrides=[
            "data.source=files",
            f"data.train_files={tmp_path}/t.jsonl",
            f"data.val_files={tmp_path}/v.jsonl",
            f"runtime.out_dir={tmp_path / 'run'}",
        ]
    ).config
    corpus = load_corpus(cfg)
    assert (corpus.train_rows, corpus.val.rows) == (10, 4)


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        ({"tokens": ["12", "Oak"], "tags": ["B-house_number"]}, "line 2: 2 tokens but 1 tags"),
        ({"tokens": ["12"], "tags": ["B-house"]}, "line 2: tag 'B-house' is not in the label set (config"),
        ({"tokens": "12 Oak", "tags": ["O"]}, "'tokens' must be a list of strings"),
        (
            {"words": ["12"]},
            "line 2: expected an object with the tokens 'tokens' (data.tokens_column) and the "
            "tags 'tags' (data.tags_column) (its keys: 'words')",
        ),
        (b'{"tokens": ["M\xfcnchen"], "tags": ["B-locality"]}', "line 2: not UTF-8 (byte 0xfc"),
        (b"{not json", "line 2: not valid JSON"),
    ],
)
def test_bad_shards(tmp_path: Path, line: dict | bytes, expect: str) -> None:
    good = {"tokens": ["1"], "tags": ["B-house_number"]}
    if isinstance(line, bytes):  # raw bytes: a line that is not JSON, or not UTF-8
        shard = tmp_path / "s.jsonl"
        shard.write_bytes(json.dumps(good).encode() + b"\n" + line + b"\n")
    else:
        shard = _jsonl(tmp_path / "s.jsonl", [good, line])
    cfg = resolve_config(
        overrides=[
            "data.source=files",
            f"data.train_files={shard}",
            f"data.val_files={shard}",
            "data.labels=[O, B-house_number, I-house_number, B-locality, I-locality]",
            f"runtime.out_dir={tmp_path / 'run'}",
        ]
    ).config
    with pytest.raises(InputError) as exc:
        load_corpus(cfg)
    assert str(shard) in exc.value.message and expect in exc.value.message and exc.value.hint


def test_bad_parquet_and_missing_files(tmp_path: Path) -> None:
    run = f"runtime.out_dir={tmp_path / 'run'}"  # the corpus index of each open: here, not in the checkout
    cfg = resolve_config(
        overrides=["data.source=files", f"data.train_files={tmp_path}/nope.jsonl", run]
    ).config
    with pytest.raises(InputError, match="no file matches"):
        load_corpus(cfg)
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"tokens": [["a", "b"]], "tags": [["O"]]}), tmp_path / "m.parquet")
    m = tmp_path / "m.parquet"
    cfg = resolve_config(
        overrides=["data.source=files", f"data.train_files={m}", f"data.val_files={m}", run]
    ).config
    with pytest.raises(InputError, match=r"m.parquet row 0 \(df.iloc\[0\]: .*\): 2 tokens but 1 tags"):
        load_corpus(cfg)
    pq.write_table(pa.table({"tokens": [["a"]]}), tmp_path / "n.parquet")
    cfg = resolve_config(
        overrides=["data.source=files", f"data.train_files={tmp_path}/n.parquet", run]
    ).config
    with pytest.raises(InputError, match=r"missing column\(s\) \['tags'\]"):
        load_corpus(cfg)
    (tmp_path / "x.jsonl").write_text("{not json\n")
    cfg = resolve_config(overrides=["data.source=files", f"data.train_files={tmp_path}/x.jsonl", run]).config
    with pytest.raises(InputError, match="not valid JSON"):
        load_corpus(cfg)


@pytest.mark.torch
def test_the_synthetic_corpus_is_an_in_memory_shard_read_like_files(tmp_path: Path) -> None:
    """One data path (issue 28): generated rows are a shard of 64-row blocks, assigned to ranks, windowed and
    shuffled by the file path's order; every epoch reads every row once."""
    from mw_env.trainer.data import open_corpus
    from mw_env.trainer.data.producer import FileProducer

    cfg = resolve_config(
        overrides=[
            "data.synthetic_rows=200",
            "data.synthetic_val_rows=24",
            "optim.batch_size=10",
            "data.shuffle_rows=64",
            f"runtime.out_dir={tmp_path}",
        ]
    ).config
    corpus = open_corpus(cfg)
    assert [s.kind for s in corpus.shards] == ["memory"] and [b.rows for b in corpus.blocks] == [
        64,
        64,
        64,
        8,
    ]
    producer = corpus.producer()
    assert isinstance(producer, FileProducer)
    try:
        first = [producer(s) for s in range(40)]  # 2 epochs of 200 rows
        again = [producer(s) for s in reversed(range(40))][::-1]
    finally:
        producer.close()

    def rows(steps):  # each row's ids without the batch's padding
        return [tuple(x for x in r if x) for d in steps for b in d.micro for r in b.input_ids.tolist()]

    assert rows(first) == rows(again)  # a pure function of the step: what exact resume needs
    epoch0, epoch1 = rows(first)[:200], rows(first)[200:]
    assert len(set(epoch0)) == len(set(epoch1)) and sorted(epoch0) == sorted(epoch1) and epoch0 != epoch1
    assert sum(d.counts.rows for d in first) == 400
    two = [open_corpus(cfg, rank=r, world=2) for r in (0, 1)]
    assert set(two[0].owned[0]).isdisjoint(two[1].owned[1])  # each lane its own blocks
    assert corpus.val.rows == 24 and corpus.identity["shards"][0]["kind"] == "synthetic"


@pytest.mark.torch
@pytest.mark.slow
def test_sentencepiece_tokenizer_round_trips_through_a_checkpoint(tmp_path: Path) -> None:
    import io

    spm = pytest.importorskip("sentencepiece")
    from mw_env.trainer.ckpt.checkpoint import model_from_checkpoint
    from mw_env.trainer.loop import train

    from .helpers import tiny_config

    model_bytes = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(" ".join(_row(i)[0]) for i in range(400)),
        model_writer=model_bytes,
        vocab_size=400,
        model_type="unigram",
        byte_fallback=True,
    )
    path = tmp_path / "addr.model"
    path.write_bytes(model_bytes.getvalue())
    cfg = tiny_config(
        tmp_path / "run",
        "data.tokenizer=sentencepiece",
        f"data.spm_model={path}",
        "runtime.max_steps=2",
        "runtime.eval_every=2",
    )
    corpus = open_corpus(cfg.config)
    assert corpus.tokenizer.vocab_size == 404 and corpus.tokenizer.kind == "sentencepiece"
    _ids, labels, _ = encode_row(corpus.tokenizer, ["12", "Oakwood"], ["B-house_number", "B-street"], 64)
    assert [x for x in labels if x != IGNORE] == [LABEL_ID["B-house_number"], LABEL_ID["B-street"]]
    train(resolved=cfg, echo=lambda _m: None)
    model, tok, _labels = model_from_checkpoint(tmp_path / "run" / "checkpoints" / "step-000000002.pt")
    assert tok.kind == "sentencepiece" and tok.encode_word("Oakwood") == corpus.tokenizer.encode_word(
        "Oakwood"
    )
    assert model.tok_emb.num_embeddings == 404
    with pytest.raises(InputError, match=r"data\.spm_model"):
        open_corpus(
            tiny_config(
                tmp_path / "r2", "data.tokenizer=sentencepiece", f"data.spm_model={tmp_path}/missing.model"
            ).config
        )


@pytest.mark.torch
def test_a_synthetic_checkpoint_from_the_in_memory_order_is_a_changed_data_order(tmp_path: Path) -> None:
    """A checkpoint written before the synthetic corpus was read by the file path recorded no window or block:
    its resume is refused as a changed data order (data.allow_changed_corpus continues it), never silently
    continued in another order."""
    from mw_env.trainer.resume import corpus_changes

    corpus = open_corpus(resolve_config(overrides=[f"runtime.out_dir={tmp_path}"]).config)
    old = {
        **corpus.identity,
        "order": {
            k: v for k, v in corpus.identity["order"].items() if k not in ("shuffle_rows", "block_rows")
        },
    }
    assert corpus_changes(old, corpus) == ["block_rows None -> 64", "shuffle_rows None -> 65536"]
    assert corpus_changes(corpus.identity, corpus) == []
