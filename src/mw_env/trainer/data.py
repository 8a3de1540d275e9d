"""Data: tokenizers, corpora (synthetic or JSONL/Parquet shards), the exact-resume batch order.

Rows are word lists with word-level BIO tags. The tokenizer turns words into ids and puts each
word's label on its first sub-token (-100 elsewhere, so the loss ignores continuation bytes and
separators). Shards are streamed row by row and packed into flat int arrays, so memory is a few bytes
per token, not a Python object per word.

Data order: the sample at global position p is `perm(seed + p // n)[p % n]`, with perm a
`torch.randperm` under a fresh generator. Step s of rank r, micro-batch m, therefore reads a pure
function of (seed, s, m, r): a resume recomputes its position instead of replaying a loader.
"""

from __future__ import annotations

import glob
import hashlib
import json
from array import array
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mw_env.errors import InputError
from mw_env.trainspec.config import DataConfig, TrainConfig
from mw_env.trainspec.synthetic import LABELS, check_countries, generate_row

if TYPE_CHECKING:
    import torch

PAD, CLS, SEP, UNK = 0, 1, 2, 3
N_SPECIAL = 4
SPM_MAX_BYTES = 512 * 1024 * 1024  # SentencePiece models are KiB to tens of MiB
IGNORE = -100
LABEL_ID = {label: i for i, label in enumerate(LABELS)}


class ByteTokenizer:
    """UTF-8 bytes + 4 specials: 260 ids. Words are joined by a space byte, as in the raw address."""

    kind = "byte"
    vocab_size = 256 + N_SPECIAL

    def encode_word(self, word: str) -> list[int]:
        return [b + N_SPECIAL for b in word.encode("utf-8")] or [UNK]

    def separator(self) -> list[int]:
        return [ord(" ") + N_SPECIAL]

    def to_state(self) -> dict[str, Any]:
        return {"kind": "byte"}


class SentencePieceTokenizer:
    """A SentencePiece model; its ids are shifted by the 4 specials. Words are encoded one by one."""

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes, source: str = "<checkpoint>") -> None:
        try:
            import sentencepiece as spm
        except ModuleNotFoundError:
            raise InputError(
                "data.tokenizer is 'sentencepiece' but the sentencepiece package is not installed",
                hint="install mw-env[spm] into the training venv, or use data.tokenizer=byte",
            ) from None
        self.proto = model_proto
        self.sp = spm.SentencePieceProcessor()
        try:
            self.sp.LoadFromSerializedProto(model_proto)
        except Exception as exc:
            raise InputError(f"{source}: not a SentencePiece model ({exc})") from None
        self.vocab_size = self.sp.get_piece_size() + N_SPECIAL

    @classmethod
    def from_file(cls, path: str) -> SentencePieceTokenizer:
        from mw_env import userfile

        # Bounded and non-blocking like every user file: a FIFO or /dev/zero here is an error, not a hang.
        proto = userfile.read_bytes(Path(path).expanduser(), what="data.spm_model", max_bytes=SPM_MAX_BYTES)
        return cls(proto, source=path)

    def encode_word(self, word: str) -> list[int]:
        return [i + N_SPECIAL for i in self.sp.encode(word)] or [UNK]

    def separator(self) -> list[int]:
        return []  # SentencePiece marks word starts itself

    def to_state(self) -> dict[str, Any]:
        import torch

        return {
            "kind": "sentencepiece",
            "model_proto": torch.frombuffer(bytearray(self.proto), dtype=torch.uint8),
        }


Tokenizer = ByteTokenizer | SentencePieceTokenizer


def make_tokenizer(data: DataConfig) -> Tokenizer:
    if data.tokenizer == "sentencepiece":
        return SentencePieceTokenizer.from_file(str(data.spm_model))
    return ByteTokenizer()


def tokenizer_from_state(state: dict[str, Any]) -> Tokenizer:
    if state.get("kind") == "sentencepiece":
        return SentencePieceTokenizer(state["model_proto"].numpy().tobytes())
    return ByteTokenizer()


def encode_row(
    tok: Tokenizer, words: Sequence[str], tags: Sequence[str] | None, max_len: int
) -> tuple[list[int], list[int], int]:
    """ids, labels (first sub-token of each word, else -100), words that did not fit."""
    ids, labels = [CLS], [IGNORE]
    kept = 0
    for i, word in enumerate(words):
        sep = tok.separator() if i else []
        word_ids = tok.encode_word(word)
        if len(ids) + len(sep) + len(word_ids) + 1 > max_len:
            break  # drop whole words: a word is never cut in half with its label on the first half
        ids += sep
        labels += [IGNORE] * len(sep)
        if tags is not None:
            labels.append(LABEL_ID[tags[i]])
            labels += [IGNORE] * (len(word_ids) - 1)
        else:
            labels += [IGNORE] * len(word_ids)
        ids += word_ids
        kept += 1
    ids.append(SEP)
    labels.append(IGNORE)
    return ids, labels, len(words) - kept


@dataclass
class Split:
    """A packed split: example k is ids[offsets[k]:offsets[k+1]] (and the same slice of labels)."""

    ids: array = field(default_factory=lambda: array("i"))
    labels: array = field(default_factory=lambda: array("i"))
    offsets: array = field(default_factory=lambda: array("q", [0]))
    preview: list[list[str]] = field(default_factory=list)  # the first rows' words, for printed samples

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def add(self, ids: list[int], labels: list[int], words: list[str]) -> None:
        self.ids.extend(ids)
        self.labels.extend(labels)
        self.offsets.append(len(self.ids))
        if len(self.preview) < 16:
            self.preview.append(list(words))

    def example(self, k: int) -> tuple[array, array]:
        a, b = self.offsets[k], self.offsets[k + 1]
        return self.ids[a:b], self.labels[a:b]


@dataclass
class Corpus:
    train: Split
    val: Split
    tokenizer: Tokenizer
    card: dict[str, Any]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def expand_files(patterns: Sequence[str], key: str) -> list[Path]:
    out: list[Path] = []
    for pattern in patterns:
        matches = sorted(glob.glob(str(Path(pattern).expanduser())))
        if not matches:
            raise InputError(f"{key}: no file matches {pattern!r}", hint="check the path (globs are allowed)")
        for m in matches:
            path = Path(m)
            if path.suffix not in (".jsonl", ".parquet"):
                raise InputError(
                    f"{key}: {path} is neither .jsonl nor .parquet", hint="data files are .jsonl or .parquet"
                )
            out.append(path)
    return out


def _check_row(
    path: Path, row: int, tokens: Any, tags: Any, *, unit: str = "row"
) -> tuple[list[str], list[str]]:
    where = f"{path} {unit} {row}"
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise InputError(
            f"{where}: 'tokens' must be a list of strings", hint="each row: {tokens: [...], tags: [...]}"
        )
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise InputError(
            f"{where}: 'tags' must be a list of strings", hint="each row: {tokens: [...], tags: [...]}"
        )
    if len(tokens) != len(tags):
        raise InputError(
            f"{where}: {len(tokens)} tokens but {len(tags)} tags",
            hint="every token needs exactly one BIO tag",
        )
    for t in tags:
        if t not in LABEL_ID:
            raise InputError(f"{where}: unknown tag {t!r}", hint=f"allowed: {', '.join(LABELS)}")
    return tokens, tags


def stream_rows(path: Path) -> Iterator[tuple[list[str], list[str]]]:
    """Rows of one shard, one at a time, each checked (the error names file and row)."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ModuleNotFoundError:
            raise InputError(f"{path}: reading Parquet needs pyarrow", hint="install mw-env[train]") from None
        try:
            pf = pq.ParquetFile(path)
        except Exception as exc:
            raise InputError(
                f"{path}: not a readable Parquet file ({exc})",
                hint="name a Parquet shard with 'tokens' and 'tags' list columns, or use .jsonl",
            ) from None
        missing = {"tokens", "tags"} - set(pf.schema_arrow.names)
        if missing:
            raise InputError(f"{path}: missing column(s) {sorted(missing)}", hint="columns: tokens, tags")
        row = 0
        for batch in pf.iter_batches(columns=["tokens", "tags"], batch_size=4096):
            for tokens, tags in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
                yield _check_row(path, row, tokens, tags)
                row += 1
        return
    try:
        # Bytes, decoded line by line: one bad line is an error naming it, never a traceback.
        fh = path.open("rb")
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror}", hint="name a JSONL or Parquet file") from None
    with fh:
        # JSONL problems are reported by 1-based line number, as an editor shows them.
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(
                    f"{path} line {lineno}: not UTF-8 (byte {raw[exc.start]:#04x} at column {exc.start + 1})",
                    hint="JSONL shards must be UTF-8 text; re-encode the file",
                ) from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(
                    f"{path} line {lineno}: not valid JSON ({exc.msg} at column {exc.colno})",
                    hint='one JSON object per line: {"tokens": [...], "tags": [...]}',
                ) from None
            if not isinstance(obj, dict) or "tokens" not in obj or "tags" not in obj:
                raise InputError(
                    f"{path} line {lineno}: expected an object with 'tokens' and 'tags'",
                    hint='one JSON object per line: {"tokens": [...], "tags": [...]}',
                )
            yield _check_row(path, lineno, obj["tokens"], obj["tags"], unit="line")


def _in_val(seed: int, ordinal: int, fraction: float) -> bool:
    digest = hashlib.blake2b(f"{seed}:{ordinal}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") < fraction * 2**32


class _Card:
    def __init__(self) -> None:
        self.rows = {"train": 0, "val": 0}
        self.tags = {"train": Counter(), "val": Counter()}
        self.truncated_words = 0

    def add(self, split: str, tags: Sequence[str], dropped: int) -> None:
        self.rows[split] += 1
        self.tags[split].update(tags)
        self.truncated_words += dropped

    def to_dict(self, sources: list[dict[str, Any]], tokenizer: str) -> dict[str, Any]:
        return {
            "rows": dict(self.rows),
            "tag_distribution": {s: {t: c[t] for t in LABELS if c[t]} for s, c in self.tags.items()},
            "truncated_words": self.truncated_words,
            "sources": sources,
            "tokenizer": tokenizer,
            "labels": list(LABELS),
        }


def load_corpus(config: TrainConfig) -> Corpus:
    """Build (or stream in) the train and validation splits and their data card."""
    data, max_len = config.data, config.model.max_len
    tok = make_tokenizer(data)
    train, val, card = Split(), Split(), _Card()

    def add(split_name: str, split: Split, words: list[str], tags: list[str]) -> None:
        ids, labels, dropped = encode_row(tok, words, tags, max_len)
        split.add(ids, labels, words)
        card.add(split_name, tags, dropped)

    sources: list[dict[str, Any]] = []
    if data.source == "synthetic":
        check_countries(data.countries)
        for split_name, split, n in (
            ("train", train, data.synthetic_rows),
            ("val", val, data.synthetic_val_rows),
        ):
            for i in range(n):
                words, tags = generate_row(
                    seed=data.seed, split=split_name, index=i, countries=data.countries, noise=data.noise
                )
                add(split_name, split, words, tags)
        sources.append(
            {
                "kind": "synthetic",
                "generator": "mw_env.trainspec.synthetic",
                "seed": data.seed,
                "countries": list(data.countries),
                "noise": data.noise,
            }
        )
    else:
        train_files = expand_files(data.train_files, "data.train_files")
        val_files = expand_files(data.val_files, "data.val_files") if data.val_files else []
        ordinal = 0
        for path in train_files:
            for words, tags in stream_rows(path):
                if not val_files and _in_val(data.seed, ordinal, data.val_fraction):
                    add("val", val, words, tags)
                else:
                    add("train", train, words, tags)
                ordinal += 1
            sources.append({"kind": "train", "path": str(path), "sha256": _sha256(path)})
        for path in val_files:
            for words, tags in stream_rows(path):
                add("val", val, words, tags)
            sources.append({"kind": "val", "path": str(path), "sha256": _sha256(path)})
    if len(train) == 0:
        raise InputError("the training split is empty", hint="check data.train_files / data.val_fraction")
    if len(val) == 0:
        raise InputError(
            "the validation split is empty",
            hint="raise data.val_fraction, add data.val_files, or use more rows",
        )
    return Corpus(train=train, val=val, tokenizer=tok, card=card.to_dict(sources, tok.kind))


# ---- batches (torch from here on: only called inside the venv's python) ----


@dataclass(frozen=True)
class Batch:
    input_ids: torch.Tensor  # [B, T] long
    labels: torch.Tensor  # [B, T] long, -100 = ignored
    attention_mask: torch.Tensor  # [B, T] bool, True = a real token

    def to(self, device: Any) -> Batch:
        return Batch(self.input_ids.to(device), self.labels.to(device), self.attention_mask.to(device))

    @property
    def n_tokens(self) -> int:
        return int(self.attention_mask.sum())


def collate(split: Split, indices: Sequence[int]) -> Batch:
    """Pad the examples to the longest one in this micro-batch."""
    import torch

    rows = [split.example(int(k)) for k in indices]
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    for i, (a, b) in enumerate(rows):
        ids[i, : len(a)] = torch.tensor(a, dtype=torch.long)
        labels[i, : len(b)] = torch.tensor(b, dtype=torch.long)
    return Batch(ids, labels, ids != PAD)


class Order:
    """The training order: position p -> example index, a pure function of (seed, p)."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed = n, seed
        self._epoch = -1
        self._perm: list[int] = []

    def index(self, position: int) -> int:
        epoch = position // self.n
        if epoch != self._epoch:
            import torch

            gen = torch.Generator().manual_seed(self.seed + epoch)
            self._perm = torch.randperm(self.n, generator=gen).tolist()
            self._epoch = epoch
        return self._perm[position % self.n]


def micro_batch_indices(
    order: Order, *, step: int, micro: int, rank: int, world: int, batch_size: int, accumulation: int
) -> list[int]:
    """Rows of (step, micro, rank). Micro m of rank r is slice m*world + r of the step's window, so
    `world` ranks x A micro-batches see exactly the rows of 1 rank x world*A micro-batches."""
    window = batch_size * accumulation * world
    start = step * window + (micro * world + rank) * batch_size
    return [order.index(p) for p in range(start, start + batch_size)]
