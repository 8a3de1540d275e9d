"""The vectorised encoder: Arrow columns of many rows -> flat id/label buffers, no per-row Python.

Same ids and labels as `tokenize.encode_row` (tests/trainer/test_encode.py holds them equal): CLS,
the words (byte tokenizer: joined by a space byte; SentencePiece: each word encoded on its own),
SEP; whole words that do not fit in `max_len` are dropped; a word's label sits on its first id.

How: the words of all rows are one Arrow string array. Byte tokenizer: a word's ids are its UTF-8
bytes + 4, read straight from the array's data buffer. SentencePiece: the distinct words of the
chunk (Arrow's dictionary encoding) go to SentencePiece in one batched call, and every word takes
its distinct word's ids. Placing words, separators and labels in the output is numpy index
arithmetic over the whole chunk. A row that cannot be encoded (null, tokens/tags lengths differ, a
tag outside the label set under `data.unknown_tags: error`) is marked, not raised: the reader raises
when a step consumes that row, naming where it is (the caller keeps the location).

No torch here: the data worker processes import this module only.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from mw_env.trainer.data.tokenize import CLS, IGNORE, N_SPECIAL, SEP, UNK
from mw_env.trainspec.rows import BAD_ROW, BAD_TAG, BAD_TEXT, OK, shape_problems

if TYPE_CHECKING:
    import pyarrow as pa
    import sentencepiece as spm

__all__ = ["BAD_ROW", "BAD_TAG", "BAD_TEXT", "OK", "Encoded", "VectorEncoder"]  # the codes: trainspec/rows.py


@dataclass
class Encoded:
    """Rows encoded into flat buffers: row r is ids[offsets[r]:offsets[r+1]] (labels alike)."""

    ids: np.ndarray  # int32
    labels: np.ndarray  # int16, IGNORE where no label
    offsets: np.ndarray  # int64, rows + 1
    kept: np.ndarray  # int32 per row: words that fit (labelled or unknown-tag)
    truncated: np.ndarray  # int32 per row: words dropped at max_len
    unknown: np.ndarray  # int32 per row: kept words whose tag is outside the label set
    bio: np.ndarray  # int32 per row: I-X without its B-X
    problem: np.ndarray  # int8 per row: OK / BAD_ROW / BAD_TAG / BAD_TEXT

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @staticmethod
    def concat(parts: list[Encoded]) -> Encoded:
        if len(parts) == 1:
            return parts[0]
        lens = np.concatenate([p.lengths for p in parts])
        offsets = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        cat = {
            f.name: np.concatenate([getattr(p, f.name) for p in parts])
            for f in fields(Encoded)
            if f.name != "offsets"
        }
        return Encoded(**cat, offsets=offsets)


def _string_buffers(words: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets[len+1], data bytes) of an Arrow string / large_string array, slice offset applied."""
    import pyarrow as pa

    large = pa.types.is_large_string(words.type)
    bufs = words.buffers()
    off = np.frombuffer(bufs[1], dtype=np.int64 if large else np.int32)
    off = off[words.offset : words.offset + len(words) + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return off, data


def _invalid_utf8(words: pa.Array) -> np.ndarray:
    """Words that are not valid UTF-8 (Arrow does not check Parquet strings on read)."""
    import pyarrow as pa

    try:
        words.validate(full=True)
        return np.zeros(len(words), dtype=bool)
    except pa.ArrowInvalid:
        out = []
        for b in words.cast(pa.binary()).to_pylist():
            try:
                (b or b"").decode("utf-8")
                out.append(False)
            except UnicodeDecodeError:
                out.append(True)
        return np.array(out, dtype=bool)


def _excl_cumsum(x: np.ndarray) -> np.ndarray:
    out = np.zeros(len(x), dtype=np.int64)
    if len(x) > 1:
        np.cumsum(x[:-1], out=out[1:])
    return out


def _ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenated ranges [starts[i], starts[i] + lens[i]) as one index array."""
    total = int(lens.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    return np.repeat(starts - _excl_cumsum(lens), lens) + np.arange(total, dtype=np.int64)


class VectorEncoder:
    """Encodes chunks of rows for one run: tokenizer, label set, max_len, unknown-tag policy."""

    def __init__(
        self,
        *,
        kind: str,
        spm_proto: bytes | None,
        label_names: tuple[str, ...],
        max_len: int,
        unknown_tags: str,
        threads: int = 1,
    ) -> None:
        self.kind, self.max_len, self.unknown_tags, self.threads = kind, max_len, unknown_tags, threads
        self.label_names = label_names
        self._sp: spm.SentencePieceProcessor | None = None
        if kind == "sentencepiece":
            import sentencepiece as spm

            self._sp = spm.SentencePieceProcessor()
            self._sp.LoadFromSerializedProto(spm_proto)
        # BIO structure as arrays: inside[k] = type id when k is I-X, type[k] = type id of B-X / I-X.
        types: dict[str, int] = {}
        inside, typ = [], []
        for n in label_names:
            prefix, sep, t = n.partition("-")
            tid = types.setdefault(t, len(types)) if sep and prefix in ("B", "I") else -1
            typ.append(tid)
            inside.append(tid if prefix == "I" and sep else -1)
        self._inside = np.array(inside or [-1], dtype=np.int32)
        self._type = np.array(typ or [-1], dtype=np.int32)

    def spec(self) -> dict[str, object]:
        """What a worker process needs to build the same encoder (picklable)."""
        return {
            "kind": self.kind,
            "spm_proto": self._sp.serialized_model_proto() if self._sp is not None else None,
            "label_names": self.label_names,
            "max_len": self.max_len,
            "unknown_tags": self.unknown_tags,
        }

    # -- the pieces of each word ------------------------------------------------------------------
    def _pieces(self, words: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(pool, start, count, bad_word): word i's ids are pool[start[i]:start[i]+count[i]]."""
        if self.kind == "byte":
            off, data = _string_buffers(words)
            pool = np.concatenate([data.astype(np.int32) + N_SPECIAL, np.array([UNK], np.int32)])
            start, count = off[:-1].copy(), np.diff(off)
            empty = count == 0
            start[empty], count[empty] = len(pool) - 1, 1
            return pool, start, count, np.zeros(len(words), dtype=bool)
        return self._spm_pieces(words)

    def _spm_pieces(self, words: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        import pyarrow as pa
        import pyarrow.compute as pc

        enc = pc.dictionary_encode(words)
        if isinstance(enc, pa.ChunkedArray):
            enc = enc.combine_chunks()
        index = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        bad_word = np.zeros(len(words), dtype=bool)
        try:
            distinct = enc.dictionary.to_pylist()
        except UnicodeDecodeError:  # invalid UTF-8 in the shard: those words' rows are marked, not raised
            distinct, bad_distinct = [], []
            for b in enc.dictionary.cast(pa.binary()).to_pylist():
                try:
                    distinct.append(b.decode("utf-8"))
                    bad_distinct.append(False)
                except UnicodeDecodeError:
                    distinct.append("")
                    bad_distinct.append(True)
            bad_word = np.array(bad_distinct, dtype=bool)[index]
        assert self._sp is not None  # kind "sentencepiece": loaded in __init__
        pieces = self._sp.encode(distinct, num_threads=self.threads) if distinct else []
        counts = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
        flat = np.fromiter((i for p in pieces for i in p), dtype=np.int32, count=int(counts.sum()))
        pool = np.concatenate([flat + N_SPECIAL, np.array([UNK], np.int32)])
        starts = _excl_cumsum(counts)
        empty = counts == 0
        starts[empty], counts[empty] = len(pool) - 1, 1
        return pool, starts[index], counts[index], bad_word

    # -- a chunk of rows --------------------------------------------------------------------------
    def encode(self, tokens: pa.Array | pa.ChunkedArray, tags: pa.Array | pa.ChunkedArray) -> Encoded:
        """tokens, tags: Arrow list<string> arrays of the same rows."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if isinstance(tokens, pa.ChunkedArray):
            tokens, tags = tokens.combine_chunks(), tags.combine_chunks()
        n_rows = len(tokens)
        # A null, or tokens and tags of different lengths: the row rule shared with `train check`.
        problem, n_words, n_tags = shape_problems(tokens, tags)
        words, tag_words = pc.list_flatten(tokens), pc.list_flatten(tags)
        good = problem == OK
        # Keep the words and tags of good rows only: there, words and tags line up one to one.
        word_good = np.repeat(good, np.maximum(n_words, 0))
        tag_good = np.repeat(good, np.maximum(n_tags, 0))
        count = np.where(good, n_words, 0)
        if not word_good.all():
            words = words.filter(pa.array(word_good))
        if not tag_good.all():
            tag_words = tag_words.filter(pa.array(tag_good))
        pool, start, n_ids, bad_word = self._pieces(words)
        bad_word |= _invalid_utf8(words)
        bad_tag = _invalid_utf8(tag_words)
        label = pc.index_in(tag_words, value_set=pa.array(self.label_names, type=pa.string()))
        label_id = label.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        row = np.repeat(np.arange(n_rows), count)
        if bad_word.any() or bad_tag.any():
            problem[np.unique(np.concatenate([row[bad_word], row[bad_tag]]))] = BAD_TEXT
        first = np.zeros(len(row), dtype=bool)
        word_start = _excl_cumsum(count)
        first[word_start[count > 0]] = True
        sep = 1 if self.kind == "byte" else 0
        unit = n_ids + np.where(first, 0, sep)
        # Cumulative length of the row up to and including each word; a word is kept while CLS + that +
        # SEP fit. Lengths are positive, so "kept" is a prefix of each row: whole words are dropped.
        csum = np.cumsum(unit)
        base = np.zeros(n_rows, dtype=np.int64)
        has = count > 0
        base[has] = csum[word_start[has]] - unit[word_start[has]]
        before = np.repeat(base, count)
        upto = csum - before
        kept = upto + 2 <= self.max_len
        unknown = label_id < 0
        row_unknown = np.bincount(row[unknown], minlength=n_rows) if len(row) else np.zeros(n_rows, np.int64)
        if self.unknown_tags == "error":
            problem[(row_unknown > 0) & (problem == OK)] = BAD_TAG
        kept_per_row = np.bincount(row[kept], minlength=n_rows) if len(row) else np.zeros(n_rows, np.int64)
        lengths = 2 + (np.bincount(row[kept], weights=unit[kept], minlength=n_rows).astype(np.int64))
        offsets = np.zeros(n_rows + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.empty(int(offsets[-1]), dtype=np.int32)
        labels = np.full(int(offsets[-1]), IGNORE, dtype=np.int16)
        ids[offsets[:-1]] = CLS
        ids[offsets[1:] - 1] = SEP
        # Output position of each kept word's first id: row start + CLS + what came before it (+ the space).
        pos = np.repeat(offsets[:-1], count) + 1 + upto - n_ids
        kpos, kstart, kn = pos[kept], start[kept], n_ids[kept]
        ids[_ranges(kpos, kn)] = pool[_ranges(kstart, kn)]
        if sep:
            ids[kpos[~first[kept]] - 1] = ord(" ") + N_SPECIAL
        klabel = label_id[kept]
        labels[kpos[klabel >= 0]] = klabel[klabel >= 0]
        # BIO check over each row's labelled kept words, in order: I-X whose previous one is not B-X/I-X.
        lab_rows = row[kept][klabel >= 0]
        lab = klabel[klabel >= 0]
        if len(lab):
            inside, typ = self._inside[lab], self._type[lab]
            prev = np.concatenate([[-1], typ[:-1]])
            new_row = np.concatenate([[True], lab_rows[1:] != lab_rows[:-1]])
            prev[new_row] = -1
            bad = (inside >= 0) & (prev != inside)
            bio = np.bincount(lab_rows[bad], minlength=n_rows)
        else:
            bio = np.zeros(n_rows, dtype=np.int64)
        unknown_kept = np.bincount(row[kept & unknown], minlength=n_rows) if len(row) else bio * 0
        return Encoded(
            ids=ids,
            labels=labels,
            offsets=offsets,
            kept=kept_per_row.astype(np.int32),
            truncated=(count - kept_per_row).astype(np.int32),
            unknown=unknown_kept.astype(np.int32),
            bio=bio.astype(np.int32),
            problem=problem,
        )
