"""Data: tokenizers, corpora (synthetic in memory, or JSONL/Parquet shards streamed), the resumable order.

- tokenize.py  tokenizers and row encoding (a word's label on its first sub-token)
- labels.py    the label set and the BIO consistency count
- shards.py    shard discovery, identity from footers, reading one block (row group) at a time
- order.py     which row every (step, micro-batch, rank) reads: a pure function of the step
- batches.py   encoding with the label set, collation, the packed in-memory split
- stream.py    the per-rank producers and the background reader (bounded prefetch queue)
- card.py      counts of what was read, for the data card
- corpus.py    opening a corpus (footers only) and building the card
"""

from __future__ import annotations

from mw_env.trainer.data.batches import Batch, Split, collate, pad_batch
from mw_env.trainer.data.card import Counts, sum_counts
from mw_env.trainer.data.corpus import Corpus, ValSource, open_corpus
from mw_env.trainer.data.labels import BUNDLED, LabelSet, label_order
from mw_env.trainer.data.order import Order, micro_batch_indices
from mw_env.trainer.data.shards import expand_files, identity_diff
from mw_env.trainer.data.stream import Prefetcher, StepData
from mw_env.trainer.data.tokenize import (
    CLS,
    IGNORE,
    N_SPECIAL,
    PAD,
    SEP,
    UNK,
    ByteTokenizer,
    SentencePieceTokenizer,
    Tokenizer,
    encode_row,
    make_tokenizer,
    tokenizer_from_state,
)

__all__ = [
    "BUNDLED",
    "CLS",
    "IGNORE",
    "N_SPECIAL",
    "PAD",
    "SEP",
    "UNK",
    "Batch",
    "ByteTokenizer",
    "Corpus",
    "Counts",
    "LabelSet",
    "Order",
    "Prefetcher",
    "SentencePieceTokenizer",
    "Split",
    "StepData",
    "Tokenizer",
    "ValSource",
    "collate",
    "encode_row",
    "expand_files",
    "identity_diff",
    "label_order",
    "make_tokenizer",
    "micro_batch_indices",
    "open_corpus",
    "pad_batch",
    "sum_counts",
    "tokenizer_from_state",
]
