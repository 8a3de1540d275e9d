"""Range and cross-field checks of a TrainConfig; each failure names the key, the value and what is allowed."""

from __future__ import annotations

import math
import os
import re
from typing import Any

from mw_env.base.errors import InputError
from mw_env.trainspec.schema import (
    ATTEND_CHOICES,
    DECODE_MODES,
    DIST_BACKENDS,
    PRECISIONS,
    SCHEDULES,
    SDPA_BACKENDS,
    SOURCES,
    TOKENIZERS,
    TRACKING,
    UNKNOWN_TAGS,
    WORD_FEATURES,
    DataConfig,
    TrainConfig,
)

# Checkpoint files are named step-XXXXXXXXX.pt (nine digits): a longer run could not be listed or resumed.
MAX_STEPS = 999_999_999
# Seeds: the dropout seed of a step is seed * 1_000_003 + step * world + rank (runtime.step_seed), and
# torch.manual_seed takes at most 2**64 - 1; 2**40 leaves room for any step and world size.
MAX_SEED = 2**40
INT32_MAX = 2**31 - 1

# Every int field: (lowest, highest) allowed. torch takes sizes as int64 and most counts as int32, and a
# model this code builds must fit one device: the bounds are far above any real run, far below an overflow.
INT_RANGES: dict[str, tuple[int, int]] = {
    "model.d_model": (1, 65_536),
    "model.n_layers": (1, 1_024),
    "model.n_heads": (1, 1_024),
    "model.d_ff": (1, 1_048_576),
    "model.max_len": (8, 1_048_576),  # rows of the positional table (max_len x d_model floats)
    "model.word_buckets": (1, 16_777_216),  # rows of the hashed n-gram table (x d_model floats)
    "data.synthetic_rows": (1, 100_000_000),
    "data.synthetic_val_rows": (1, 10_000_000),
    "data.seed": (0, MAX_SEED),
    "data.shuffle_rows": (1, 1 << 28),  # rows shuffled together: ~2 windows encoded in memory per process
    "data.workers": (-1, 256),
    "data.prefetch_steps": (1, 1_024),  # steps of batches the background reader holds ahead
    "optim.batch_size": (1, 1_048_576),
    "optim.accumulation_steps": (1, 65_536),
    "optim.warmup_steps": (0, MAX_STEPS),
    "runtime.max_steps": (1, MAX_STEPS),
    "runtime.seed": (0, MAX_SEED),
    "runtime.threads": (0, 4_096),  # torch.set_num_threads takes an int32; no machine has more cores
    "runtime.log_every": (1, MAX_STEPS),
    "runtime.eval_every": (1, MAX_STEPS),
    "runtime.eval_batches": (0, INT32_MAX),
    "runtime.eval_samples": (0, 10_000),
    "runtime.checkpoint_every": (1, MAX_STEPS),
    "runtime.keep_last": (2, 100_000),  # >= 2: the newest may be mid-write
    "runtime.early_stop_patience": (0, INT32_MAX),
    "runtime.max_nonfinite": (1, INT32_MAX),
    "dist.timeout_s": (1, 30 * 86_400),  # a timedelta for the process group; a month is already absurd
}

# Every float field: (lowest, highest, lowest excluded, highest excluded); NaN and infinities never pass.
FLOAT_RANGES: dict[str, tuple[float, float, bool, bool]] = {
    "model.dropout": (0.0, 1.0, False, True),
    "data.val_fraction": (0.0, 1.0, False, True),
    "data.noise": (0.0, 1.0, False, False),
    "optim.lr": (0.0, 10.0, True, False),
    "optim.weight_decay": (0.0, 100.0, False, False),
    "optim.beta1": (0.0, 1.0, False, True),
    "optim.beta2": (0.0, 1.0, False, True),
    "optim.eps": (0.0, 1.0, True, False),
    "optim.grad_clip": (0.0, 1e9, False, False),  # 0 = off
    "optim.label_smoothing": (0.0, 1.0, False, True),
    "optim.min_lr_ratio": (0.0, 1.0, False, False),
    "optim.label_balance": (0.0, 1.0, False, False),  # 0 = off, 1 = inverse frequency
    # F1 is in [0, 1], so a delta above 1 means "never good enough": stop after the patience (tests use it).
    "runtime.early_stop_min_delta": (0.0, 1e9, False, False),
}


def _check(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise InputError(f"config: {key} = {value!r} is not allowed", hint=f"allowed: {allowed}")


def _value(config: TrainConfig, key: str) -> Any:
    section, _, name = key.partition(".")
    return getattr(getattr(config, section), name)


def _check_ranges(config: TrainConfig) -> None:
    for key, (lo, hi) in INT_RANGES.items():
        v = _value(config, key)
        _check(lo <= v <= hi, key, v, f"an integer from {lo} to {hi}")
    for key, (low, high, lo_open, hi_open) in FLOAT_RANGES.items():
        v = _value(config, key)
        above = v > low if lo_open else v >= low
        below = v < high if hi_open else v <= high
        interval = f"{'(' if lo_open else '['}{low:g}, {high:g}{')' if hi_open else ']'}"
        _check(math.isfinite(v) and above and below, key, v, f"a number in {interval}")


def validate(config: TrainConfig) -> None:
    """Cross-field and range checks; each failure names the key, the value and what is allowed."""
    m, d, o, r, dist = config.model, config.data, config.optim, config.runtime, config.dist
    _check_ranges(config)
    _check(
        m.d_model % m.n_heads == 0, "model.n_heads", m.n_heads, f"a divisor of model.d_model ({m.d_model})"
    )
    _check(d.source in SOURCES, "data.source", d.source, ", ".join(SOURCES))
    _check(d.tokenizer in TOKENIZERS, "data.tokenizer", d.tokenizer, ", ".join(TOKENIZERS))
    _check(m.words in WORD_FEATURES, "model.words", m.words, ", ".join(WORD_FEATURES))
    _check(m.decode in DECODE_MODES, "model.decode", m.decode, ", ".join(DECODE_MODES))
    _check(m.attend in ATTEND_CHOICES, "model.attend", m.attend, ", ".join(ATTEND_CHOICES))
    if m.words == "ngrams" and d.tokenizer != "byte":
        raise InputError(
            f"config: model.words is 'ngrams' but data.tokenizer is {d.tokenizer!r} (words are read from bytes)",
            hint="set model.words: auto (or none) with SentencePiece; its pieces are already word pieces",
        )
    from mw_env.trainspec.synthetic import FORMATS  # torch-free

    bad = [c for c in d.countries if c not in FORMATS]
    _check(bool(d.countries) and not bad, "data.countries", list(d.countries), ", ".join(FORMATS))
    if d.sources:
        _check_sources(d)
    elif d.source == "files" and not d.train_files:
        raise InputError(
            "config: data.source is 'files' but data.train_files is empty",
            hint="list shards in data.train_files, or several weighted globs in data.sources",
        )
    if d.source == "files" and not d.val_files and d.val_fraction == 0 and r.early_stop_patience:
        raise InputError(
            f"config: runtime.early_stop_patience = {r.early_stop_patience} watches the held-out F1, but there is "
            "no validation split (data.val_fraction is 0 and data.val_files is empty)",
            hint="name validation shards in data.val_files, set data.val_fraction (e.g. 0.05), or "
            "runtime.early_stop_patience=0",
        )
    _check(d.unknown_tags in UNKNOWN_TAGS, "data.unknown_tags", d.unknown_tags, ", ".join(UNKNOWN_TAGS))
    for key, col in (("data.tokens_column", d.tokens_column), ("data.tags_column", d.tags_column)):
        _check(bool(col), key, col, "a column name")
    _check(
        d.tokens_column != d.tags_column,
        "data.tags_column",
        d.tags_column,
        "a column other than tokens_column",
    )
    if d.labels and d.source != "files":
        raise InputError(
            "config: data.labels is set but data.source is 'synthetic' (its labels are the bundled 15)",
            hint="data.labels applies to data.source=files",
        )
    if d.tokenizer == "sentencepiece" and not d.spm_model:
        raise InputError(
            "config: data.tokenizer is 'sentencepiece' but data.spm_model is not set",
            hint="--set data.spm_model=PATH/TO/tokenizer.model, or data.tokenizer=byte",
        )
    _check(o.schedule in SCHEDULES, "optim.schedule", o.schedule, ", ".join(SCHEDULES))
    _check(r.precision in PRECISIONS, "runtime.precision", r.precision, ", ".join(PRECISIONS))
    _check(r.sdpa_backend in SDPA_BACKENDS, "runtime.sdpa_backend", r.sdpa_backend, ", ".join(SDPA_BACKENDS))
    _check(r.tracking in TRACKING, "runtime.tracking", r.tracking, ", ".join(TRACKING))
    dev = r.device
    _check(
        dev in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:[0-9]{1,4}", dev) is not None,
        "runtime.device",
        dev,
        "auto, cpu, cuda, cuda:N (ROCm GPUs are cuda too)",
    )
    _check(dist.backend in DIST_BACKENDS, "dist.backend", dist.backend, ", ".join(DIST_BACKENDS))
    if not r.out_dir:
        raise InputError("config: runtime.out_dir is empty", hint="name the run folder")
    # Paths reach open()/mkdir(), which refuse a NUL byte with a ValueError deep in the trainer.
    for key, paths in (
        ("runtime.out_dir", (r.out_dir,)),
        ("data.spm_model", (d.spm_model or "",)),
        *d.train_globs(),
        ("data.val_files", d.val_files),
    ):
        for path in paths:
            _check("\x00" not in path, key, path, "a path without NUL characters")
            _check_path_length(key, path)


MAX_SOURCES = 1_000  # trainer/data/mix.py gives each source >= 1 row of its 10,000-row schedule


def _check_sources(d: DataConfig) -> None:
    """data.sources: files mode, not beside data.train_files, each entry with globs and a finite weight > 0."""
    if d.source != "files":
        raise InputError(
            f"config: data.sources is set but data.source is {d.source!r}",
            hint="weighted sources are shards: --set data.source=files",
        )
    if d.train_files:
        raise InputError(
            "config: data.train_files and data.sources are both set",
            hint="list every training glob under data.sources (each with its weight), and leave data.train_files empty",
        )
    if len(d.sources) > MAX_SOURCES:
        raise InputError(
            f"config: data.sources lists {len(d.sources)} sources, more than {MAX_SOURCES:,}",
            hint="the mix gives every source at least one row in 10,000: merge small sources into one glob list",
        )
    for i, s in enumerate(d.sources):
        if not s.files:
            raise InputError(
                f"config: data.sources[{i}].files is empty",
                hint="each source names its shards: files: [/data/real/*.parquet]",
            )
        _check(
            math.isfinite(s.weight) and s.weight > 0,
            f"data.sources[{i}].weight",
            s.weight,
            "a number > 0 (the source's rows are drawn in proportion to it)",
        )
    names = [s.name or s.files[0] for s in d.sources]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError(
            f"config: data.sources: two sources are named {twice[0]!r}",
            hint="give each source its own name (data.sources[i].name): the data card tells them apart by it",
        )


# Linux's NAME_MAX and PATH_MAX (and those of every filesystem mw-env runs on): a longer name fails with
# ENAMETOOLONG at the first stat, deep in a lock or a mkdir; said here, naming the key.
NAME_MAX, PATH_MAX = 255, 4095


def _check_path_length(key: str, path: str) -> None:
    raw = os.fsencode(os.path.expanduser(path))
    long_names = [n for n in raw.split(b"/") if len(n) > NAME_MAX]
    if long_names or len(raw) > PATH_MAX:
        what = (
            f"a name of {len(long_names[0])} bytes ({long_names[0][:40].decode(errors='replace')}…)"
            if long_names
            else f"{len(raw)} bytes in all"
        )
        raise InputError(
            f"config: {key}: the path is too long: {what}",
            hint=f"names in a path are at most {NAME_MAX} bytes each, the whole path at most {PATH_MAX}",
        )
