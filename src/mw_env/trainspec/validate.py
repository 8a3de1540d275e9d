"""Range and cross-field checks of a TrainConfig; each failure names the key, the value and what is allowed."""

from __future__ import annotations

import math
import os
import re
import typing
from typing import Any

from mw_env.base import typed
from mw_env.base.errors import InputError
from mw_env.trainspec.schema import SETTINGS, DataConfig, TrainConfig, value_of

# The declared ranges (schema.setting's `bounds`): torch takes sizes as int64 and most counts as int32, and a
# model this code builds must fit one device: the bounds are far above any real run, far below an overflow.
INT_RANGES: dict[str, tuple[int, int]] = {s.key: s.bounds for s in SETTINGS if isinstance(s.bounds, tuple)}
# Float intervals as (lowest, highest, lowest excluded, highest excluded), from "[0, 1)".
FLOAT_RANGES: dict[str, tuple[float, float, bool, bool]] = {
    s.key: (float(lo[1:]), float(hi[:-1]), lo[0] == "(", hi[-1] == ")")
    for s in SETTINGS
    if isinstance(s.bounds, str)
    for lo, hi in [s.bounds.split(",")]
}
# Every Literal-typed key -> its allowed values, in the type's order.
CHOICES: dict[str, tuple[Any, ...]] = {
    key: typed.choices(tp)
    for key, tp in typed.leaf_types(TrainConfig).items()
    if typing.get_origin(tp) is typing.Literal
}


def _check(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise InputError(f"config: {key} = {value!r} is not allowed", hint=f"allowed: {allowed}")


def _check_ranges(config: TrainConfig) -> None:
    for key, (lo, hi) in INT_RANGES.items():
        v = value_of(config, key)
        _check(lo <= v <= hi, key, v, f"an integer from {lo} to {hi}")
    for key, (low, high, lo_open, hi_open) in FLOAT_RANGES.items():
        v = value_of(config, key)
        above = v > low if lo_open else v >= low
        below = v < high if hi_open else v <= high
        interval = f"{'(' if lo_open else '['}{low:g}, {high:g}{')' if hi_open else ']'}"
        _check(math.isfinite(v) and above and below, key, v, f"a number in {interval}")
    for key, allowed in CHOICES.items():
        v = value_of(config, key)
        _check(v in allowed, key, v, ", ".join(allowed))


def validate(config: TrainConfig) -> None:
    """Cross-field and range checks; each failure names the key, the value and what is allowed."""
    m, d, r = config.model, config.data, config.runtime
    _check_ranges(config)
    _check(
        m.d_model % m.n_heads == 0, "model.n_heads", m.n_heads, f"a divisor of model.d_model ({m.d_model})"
    )
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
    dev = r.device
    _check(
        dev in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:[0-9]{1,4}", dev) is not None,
        "runtime.device",
        dev,
        "auto, cpu, cuda, cuda:N (ROCm GPUs are cuda too)",
    )
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
