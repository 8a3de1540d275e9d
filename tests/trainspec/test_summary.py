"""`train summary` counts parameters for every tokenizer: SentencePiece's vocab is read from the .model file."""

from __future__ import annotations

import io
import struct
import sys
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.trainspec.config import find_config, resolve_config
from mw_env.trainspec.formats.spm_vocab import count_pieces_wire, spm_piece_count
from mw_env.trainspec.summary import summarize


def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def _model_proto(n_pieces: int) -> bytes:
    """A ModelProto by hand: n pieces (field 1: piece string, score float), then a trainer_spec (field 2)."""
    body = b""
    for i in range(n_pieces):
        text = f"▁p{i}".encode()
        piece = b"\x0a" + _varint(len(text)) + text + b"\x15" + struct.pack("<f", -float(i))
        body += b"\x0a" + _varint(len(piece)) + piece
    spec = b"\x18" + _varint(n_pieces)  # trainer_spec.vocab_size: a varint inside field 2
    return body + b"\x12" + _varint(len(spec)) + spec


@pytest.mark.parametrize("reader", ["sentencepiece", "wire"])
def test_the_readers_count_pieces_and_refuse_what_is_not_a_model(tmp_path: Path, monkeypatch, reader) -> None:
    if reader == "wire":
        monkeypatch.setitem(sys.modules, "sentencepiece", None)
    else:
        pytest.importorskip("sentencepiece")
    assert count_pieces_wire(_model_proto(3)) == 3
    assert count_pieces_wire(_model_proto(300)) == 300  # multi-byte lengths and counts
    with pytest.raises(ValueError):
        count_pieces_wire(_model_proto(3)[:-1])  # truncated
    vocab = tmp_path / "m.vocab"
    vocab.write_text("<unk>\t0\n▁the\t-1.5\n")
    for path in (vocab, tmp_path / "missing.model"):
        with pytest.raises(InputError, match=r"data\.spm_model") as err:
            spm_piece_count(path)
        assert err.value.hint


def test_summary_without_sentencepiece_counts_a_48k_tokenizer(tmp_path: Path, monkeypatch) -> None:
    """mw-env's own interpreter may lack sentencepiece: the wire reader alone gives the count."""
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    path = tmp_path / "addresses.model"
    path.write_bytes(_model_proto(48_000))
    cfg = resolve_config(
        path=find_config("address-tagger"),
        overrides=["data.tokenizer=sentencepiece", f"data.spm_model={path}"],
    ).config
    model = summarize(cfg)["model"]
    assert model["vocab_size"] == 48_004
    byte_total = summarize(
        resolve_config(path=find_config("address-tagger"), overrides=["model.words=none"]).config
    )["model"]
    # model.words "auto" is none with SentencePiece, so only the token embedding grows:
    # (48,004 - 260) x d_model 640 more parameters (~60M in all).
    assert model["total_parameters"] - byte_total["total_parameters"] == (48_004 - 260) * 640
    assert 59_000_000 < model["total_parameters"] < 61_000_000


def test_summary_matches_the_torch_model_for_a_real_sentencepiece_model(tmp_path: Path, monkeypatch) -> None:
    spm = pytest.importorskip("sentencepiece")
    torch = pytest.importorskip("torch")
    from mw_env.trainer.model import build_model

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(f"{i} Oak Street Springfield {i * 7} Main Road" for i in range(300)),
        model_writer=buf,
        vocab_size=120,
        minloglevel=2,
    )
    path = tmp_path / "tok.model"
    path.write_bytes(buf.getvalue())
    cfg = resolve_config(
        path=find_config("smoke"), overrides=["data.tokenizer=sentencepiece", f"data.spm_model={path}"]
    ).config
    with_package = summarize(cfg)["model"]
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    assert summarize(cfg)["model"] == with_package  # both readers agree
    with torch.device("meta"):
        model = build_model(cfg, vocab_size=120 + 4, n_labels=15)
    assert with_package["vocab_size"] == 124
    assert with_package["total_parameters"] == sum(p.numel() for p in model.parameters())
