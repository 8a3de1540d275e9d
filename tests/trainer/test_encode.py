"""The vectorised encoder gives the ids, labels and card counts of the per-row reference
(`encode_row`), for the byte tokenizer and SentencePiece; bad rows are marked, not raised; sharded
evaluation sums to the single-process metrics."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from .helpers import files_config, synthetic_rows, write_parquet_corpus

pytestmark = pytest.mark.torch
pa = pytest.importorskip("pyarrow")


def _rows() -> list[dict]:
    rows = synthetic_rows(120)
    rows[3]["tokens"][1] = ""  # an empty word: UNK
    rows[4] = {"tokens": ["Straße", "ÅÄ", "x" * 50], "tags": ["O", "B-street", "I-street"]}
    rows[5]["tags"][0] = "B-nope"  # outside the label set
    rows[6]["tags"] = rows[6]["tags"][:-1]  # one tag short
    rows[7] = {"tokens": [], "tags": []}
    rows[8]["tags"] = ["I-street" if t == "B-street" else t for t in rows[8]["tags"]]  # BIO slip
    return rows


def _check(tok, rows: list[dict], spm_proto: bytes | None) -> None:
    from mw_env.trainer.data import BUNDLED, encode_row
    from mw_env.trainer.data.encode import BAD_ROW, BAD_TAG, VectorEncoder

    typ = pa.list_(pa.string())
    tokens = pa.array([r["tokens"] for r in rows], typ)
    tags = pa.array([r["tags"] for r in rows], typ)
    for max_len in (8, 24, 128):
        for policy in ("ignore", "error"):
            enc = VectorEncoder(
                kind=tok.kind,
                spm_proto=spm_proto,
                label_names=BUNDLED.names,
                max_len=max_len,
                unknown_tags=policy,
            ).encode(tokens, tags)
            assert enc.problem[6] == BAD_ROW and enc.problem[5] == (BAD_TAG if policy == "error" else 0)
            for i, r in enumerate(rows):
                if enc.problem[i]:
                    continue
                ids, labels, dropped = encode_row(tok, r["tokens"], r["tags"], max_len, BUNDLED.index)
                a, b = enc.offsets[i], enc.offsets[i + 1]
                assert enc.ids[a:b].tolist() == ids and enc.labels[a:b].tolist() == labels, (i, max_len)
                kept = [k for k in labels if k != -100]
                unknown = sum(1 for t in r["tags"][: len(r["tokens"]) - dropped] if t not in BUNDLED.index)
                assert (enc.truncated[i], enc.unknown[i], enc.kept[i]) == (
                    dropped,
                    unknown,
                    len(kept) + unknown,
                )
                assert enc.bio[i] == BUNDLED.bio_errors(kept)


def test_byte_encoder_matches_the_reference() -> None:
    from mw_env.trainer.data import ByteTokenizer

    _check(ByteTokenizer(), _rows(), None)


def test_sentencepiece_encoder_matches_the_reference() -> None:
    spm = pytest.importorskip("sentencepiece")
    from mw_env.trainer.data import SentencePieceTokenizer

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(" ".join(r["tokens"]) for r in synthetic_rows(300, start=500)),
        model_writer=model,
        vocab_size=150,
        model_type="unigram",
        minloglevel=2,
    )
    tok = SentencePieceTokenizer(model.getvalue())
    _check(tok, _rows(), tok.proto)


def test_invalid_utf8_is_a_row_error_not_a_crash(tmp_path: Path) -> None:
    from mw_env.trainer.data import BUNDLED
    from mw_env.trainer.data.encode import BAD_TEXT, VectorEncoder

    words = pa.array([b"12", b"Oak\xff", b"Leeds"], pa.binary()).cast(pa.string(), safe=False)
    tokens = pa.ListArray.from_arrays(pa.array([0, 1, 3], pa.int32()), words)
    tags = pa.array([["O"], ["O", "O"]], pa.list_(pa.string()))
    for kind in ("byte",):
        enc = VectorEncoder(
            kind=kind, spm_proto=None, label_names=BUNDLED.names, max_len=64, unknown_tags="error"
        ).encode(tokens, tags)
        assert enc.problem.tolist() == [0, BAD_TEXT]


def test_sharded_evaluation_equals_one_process(tmp_path: Path) -> None:
    from dataclasses import astuple

    import torch

    from mw_env.trainer.data import open_corpus
    from mw_env.trainer.evaluate import EvalSums, evaluate_share
    from mw_env.trainer.model import build_model
    from mw_env.trainer.runtime import resolve_precision

    corpus_dir = tmp_path / "corpus"
    write_parquet_corpus(corpus_dir)
    cfg = files_config(tmp_path / "run", corpus_dir, "data.val_fraction=0.3").config
    torch.manual_seed(0)
    one = open_corpus(cfg)
    model = build_model(cfg, vocab_size=one.tokenizer.vocab_size, n_labels=len(one.labels))
    kw = {
        "batch_size": 8,
        "max_batches": 0,
        "device": torch.device("cpu"),
        "precision": resolve_precision("fp32", torch.device("cpu")),
        "sdpa_backend": "auto",
        "n_samples": 2,
    }
    whole, samples = evaluate_share(model, one.val, one.labels.names, **kw)
    parts = [
        evaluate_share(model, open_corpus(cfg, rank=r, world=2).val, one.labels.names, **kw) for r in (0, 1)
    ]
    summed = EvalSums(*(sum(x) for x in zip(*(astuple(p) for p, _ in parts), strict=True)))
    assert parts[0][0].rows and parts[1][0].rows and summed.rows == whole.rows == one.val.rows
    assert astuple(summed)[1:] == astuple(whole)[1:]  # counts, spans: exactly
    assert summed.loss == pytest.approx(whole.loss, rel=1e-9)  # a float sum in another order
    a, b = summed.result(samples), whole.result(samples)
    assert (a.entity_f1, a.token_acc, a.rows) == (b.entity_f1, b.token_acc, b.rows)
    strict = whole.result(samples, "strict")
    assert (strict.f1_mode, strict.entity_f1) == ("strict", b.entity_f1_strict)
    assert b.f1_mode == "conlleval" and b.entity_f1 == b.entity_f1_conlleval
    assert parts[0][1] == samples  # rank 0 prints the same samples


def test_a_killed_rank_leaves_no_worker(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from mw_env.trainer.data import BUNDLED

    # A process that starts a one-worker pool, prints the worker's pid, then waits to be killed.
    script = (
        "import sys, time\n"
        "from mw_env.trainer.data.workers import WorkerPool\n"
        f"spec = dict(kind='byte', spm_proto=None, label_names={tuple(BUNDLED.names)!r}, max_len=64, "
        "unknown_tags='error')\n"
        "pool = WorkerPool(1, spec)\n"
        "print(pool._procs[0].pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    rank = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": src},
    )
    worker = int(rank.stdout.readline())
    rank.send_signal(signal.SIGKILL)  # no cleanup runs in the rank: the worker must notice on its own
    rank.wait()
    deadline = time.monotonic() + 60
    while True:  # the worker is our grandchild's child: reaped by init once it exits
        try:
            os.kill(worker, 0)
            if Path(f"/proc/{worker}/stat").read_text().split()[2] == "Z":
                break  # exited, not yet reaped by its new parent
        except (ProcessLookupError, FileNotFoundError):
            break
        assert time.monotonic() < deadline, "the worker outlived its rank"
        time.sleep(0.05)
