"""Range and cross-field checks of a TrainConfig; each failure names the key, the value and what is allowed."""

from __future__ import annotations

from typing import Any

from mw_env.errors import InputError
from mw_env.trainspec.schema import (
    DIST_BACKENDS,
    PRECISIONS,
    SCHEDULES,
    SDPA_BACKENDS,
    SOURCES,
    TOKENIZERS,
    TRACKING,
    UNKNOWN_TAGS,
    TrainConfig,
)


def _check(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise InputError(f"config: {key} = {value!r} is not allowed", hint=f"allowed: {allowed}")


def validate(config: TrainConfig) -> None:
    """Cross-field and range checks; each failure names the key, the value and what is allowed."""
    m, d, o, r, dist = config.model, config.data, config.optim, config.runtime, config.dist
    for key, value in (
        ("model.d_model", m.d_model),
        ("model.n_layers", m.n_layers),
        ("model.n_heads", m.n_heads),
        ("model.d_ff", m.d_ff),
        ("optim.batch_size", o.batch_size),
        ("optim.accumulation_steps", o.accumulation_steps),
        ("runtime.max_steps", r.max_steps),
        ("runtime.log_every", r.log_every),
        ("runtime.eval_every", r.eval_every),
        ("runtime.checkpoint_every", r.checkpoint_every),
        ("runtime.max_nonfinite", r.max_nonfinite),
        ("dist.timeout_s", dist.timeout_s),
    ):
        _check(value >= 1, key, value, "an integer >= 1")
    _check(m.max_len >= 8, "model.max_len", m.max_len, "an integer >= 8")
    _check(
        m.d_model % m.n_heads == 0, "model.n_heads", m.n_heads, f"a divisor of model.d_model ({m.d_model})"
    )
    _check(0.0 <= m.dropout < 1.0, "model.dropout", m.dropout, "0 <= dropout < 1")
    _check(d.source in SOURCES, "data.source", d.source, ", ".join(SOURCES))
    _check(d.tokenizer in TOKENIZERS, "data.tokenizer", d.tokenizer, ", ".join(TOKENIZERS))
    _check(0.0 <= d.val_fraction < 1.0, "data.val_fraction", d.val_fraction, "0 <= val_fraction < 1")
    _check(0.0 <= d.noise <= 1.0, "data.noise", d.noise, "0 <= noise <= 1")
    from mw_env.trainspec.synthetic import FORMATS  # torch-free

    bad = [c for c in d.countries if c not in FORMATS]
    _check(bool(d.countries) and not bad, "data.countries", list(d.countries), ", ".join(FORMATS))
    _check(d.synthetic_rows >= 1, "data.synthetic_rows", d.synthetic_rows, "an integer >= 1")
    _check(d.synthetic_val_rows >= 1, "data.synthetic_val_rows", d.synthetic_val_rows, "an integer >= 1")
    if d.source == "files" and not d.train_files:
        raise InputError("config: data.source is 'files' but data.train_files is empty", hint="list shards")
    _check(d.unknown_tags in UNKNOWN_TAGS, "data.unknown_tags", d.unknown_tags, ", ".join(UNKNOWN_TAGS))
    _check(d.shuffle_window >= 1, "data.shuffle_window", d.shuffle_window, "an integer >= 1 (blocks)")
    _check(d.prefetch_steps >= 1, "data.prefetch_steps", d.prefetch_steps, "an integer >= 1 (steps)")
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
        raise InputError("config: data.tokenizer is 'sentencepiece' but data.spm_model is not set")
    _check(o.lr > 0, "optim.lr", o.lr, "a number > 0")
    _check(o.weight_decay >= 0, "optim.weight_decay", o.weight_decay, "a number >= 0")
    _check(0 <= o.beta1 < 1 and 0 <= o.beta2 < 1, "optim.beta1/beta2", (o.beta1, o.beta2), "[0, 1)")
    _check(o.eps > 0, "optim.eps", o.eps, "a number > 0")
    _check(o.grad_clip >= 0, "optim.grad_clip", o.grad_clip, "a number >= 0 (0 = off)")
    _check(0 <= o.label_smoothing < 1, "optim.label_smoothing", o.label_smoothing, "0 <= x < 1")
    _check(o.schedule in SCHEDULES, "optim.schedule", o.schedule, ", ".join(SCHEDULES))
    _check(o.warmup_steps >= 0, "optim.warmup_steps", o.warmup_steps, "an integer >= 0")
    _check(0 <= o.min_lr_ratio <= 1, "optim.min_lr_ratio", o.min_lr_ratio, "0 <= x <= 1")
    _check(r.precision in PRECISIONS, "runtime.precision", r.precision, ", ".join(PRECISIONS))
    _check(r.sdpa_backend in SDPA_BACKENDS, "runtime.sdpa_backend", r.sdpa_backend, ", ".join(SDPA_BACKENDS))
    _check(r.tracking in TRACKING, "runtime.tracking", r.tracking, ", ".join(TRACKING))
    dev = r.device
    _check(
        dev in ("auto", "cpu", "cuda") or (dev.startswith("cuda:") and dev[5:].isdigit()),
        "runtime.device",
        dev,
        "auto, cpu, cuda, cuda:N (ROCm GPUs are cuda too)",
    )
    _check(
        r.keep_last >= 2, "runtime.keep_last", r.keep_last, "an integer >= 2 (the newest may be mid-write)"
    )
    _check(r.threads >= 0, "runtime.threads", r.threads, "an integer >= 0")
    _check(r.eval_batches >= 0, "runtime.eval_batches", r.eval_batches, "an integer >= 0")
    _check(r.eval_samples >= 0, "runtime.eval_samples", r.eval_samples, "an integer >= 0")
    _check(r.early_stop_patience >= 0, "runtime.early_stop_patience", r.early_stop_patience, ">= 0")
    _check(dist.backend in DIST_BACKENDS, "dist.backend", dist.backend, ", ".join(DIST_BACKENDS))
    if not r.out_dir:
        raise InputError("config: runtime.out_dir is empty", hint="name the run folder")
