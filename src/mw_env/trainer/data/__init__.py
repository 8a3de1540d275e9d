"""Data: tokenizers, corpora (JSONL/Parquet shards streamed; the synthetic one an in-memory shard read the same
way), the resumable order.

- tokenize.py   tokenizers and the per-row reference encoding (a word's label on its first sub-token)
- encode.py     the vectorised encoder: Arrow columns of many rows -> flat id/label buffers
- labels.py     the label set and the BIO consistency count
- shards.py     shard discovery, identity from footers (each read once)
- index.py      the corpus index built once by rank 0, broadcast, cached; the label sample
- split.py      the training units and the validation split (trainspec/units.py's plan) for a number of lanes
- memshard.py   the synthetic corpus as in-memory shards
- reader.py     reading ranges of rows (pieces of row groups or of row ranges) as Arrow columns
- lanes.py      the global batch of a step as lanes' rows, and each rank's share of it, whatever the world size
- order.py      which row each position of a lane's stream holds: a pure function of the position
- mix.py        weighted sources: which source each row of a lane's stream comes from (a fixed schedule)
- sources.py    the training sources (data.train_files, or data.sources with weights) and their units per lane
- batches.py    the Batch and padding
- stream.py     encoded rows, gather/pad/count, the background reader, the validation split (ValSource)
- producer.py   a rank's steps: its lanes' windows and each step's micro-batches
- trace.py      the opt-in row trace (MW_ENV_TRACE_ROWS): the rows each step of each rank read
- workers.py    encoder worker processes
- card.py       the data card, and the counts of what was read for it
- corpus.py     opening a corpus (its index), laying it out in lanes
"""

from __future__ import annotations

from mw_env.trainer.data.batches import Batch
from mw_env.trainer.data.card import Counts, sum_counts
from mw_env.trainer.data.corpus import Corpus, ValSource, open_corpus
from mw_env.trainer.data.labels import BUNDLED
from mw_env.trainer.data.shards import identity_diff
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
    tokenizer_from_state,
)
from mw_env.trainspec.labelscan import label_order

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
    "Prefetcher",
    "SentencePieceTokenizer",
    "StepData",
    "Tokenizer",
    "ValSource",
    "encode_row",
    "identity_diff",
    "label_order",
    "open_corpus",
    "sum_counts",
    "tokenizer_from_state",
]
