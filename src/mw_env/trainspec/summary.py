"""`train summary`: the model (parameters per block, total), the data and the schedule - without torch.

Parameter counts are computed from the config by formula; tests check them against the torch model.
The vocabulary is 260 ids for the byte tokenizer; for SentencePiece it is the model file's piece count
plus the 4 special ids (read from data.spm_model, see formats.spm_vocab).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mw_env.trainspec.advice import config_warnings
from mw_env.trainspec.config import TrainConfig
from mw_env.trainspec.formats.spm_vocab import spm_piece_count
from mw_env.trainspec.schedule import lr_factor
from mw_env.trainspec.splitscan import summary_split
from mw_env.trainspec.synthetic import LABELS

N_SPECIAL = 4  # PAD, CLS, SEP, UNK before every tokenizer's own ids (mw_env.trainer.data)
BYTE_VOCAB = 256 + N_SPECIAL


def tokenizer_vocab_size(config: TrainConfig) -> int:
    """The embedding rows the trainer will build for this config's tokenizer."""
    d = config.data
    if d.tokenizer == "sentencepiece":
        return spm_piece_count(str(d.spm_model)) + N_SPECIAL
    return BYTE_VOCAB


def parameter_counts(
    config: TrainConfig, *, vocab_size: int = BYTE_VOCAB, n_labels: int = len(LABELS)
) -> list[tuple[str, int]]:
    m = config.model
    d, ff = m.d_model, m.d_ff
    # per block: two LayerNorms (4d), qkv (3d^2 + 3d), out proj (d^2 + d), ff1 (d*ff + ff), ff2 (ff*d + d)
    block = 4 * d + 3 * d * d + 3 * d + d * d + d + d * ff + ff + ff * d + d
    rows = [("embeddings", vocab_size * d + m.max_len * d)]
    if (
        config.word_features
    ):  # trainer/network.py WordFeatures: n-gram, shape, length, first-class rows + proj
        rows.append(("word features", (m.word_buckets + 12**3 + 17 + 12) * d + d * d + d))
    if m.attend == "words":  # trainer/network.py WordPool: in-word position (16 rows) + the mix layer
        rows.append(("word pooling", 16 * d + d * d + d))
    rows += [(f"block {i}", block) for i in range(m.n_layers)]
    rows.append(("head", 2 * d + d * n_labels + n_labels))
    return rows


def _labels(
    config: TrainConfig, base: Path | None, venv: Path | None, warnings: list[str]
) -> tuple[list[str] | str, str]:
    """(the labels the trainer will use, or a sentence when they cannot be known here; where they come from).
    What the trainer would refuse or only sample is added to `warnings`."""
    from mw_env.trainspec.labelscan import LABEL_SAMPLE_ROWS, flow_list, label_order, not_bio, not_bio_error

    d = config.data
    if d.source != "files" or d.labels:
        names = list(d.labels or LABELS)
        if plain := not_bio(names):
            warnings.append(not_bio_error(plain, "data.labels").message)
        return names, "data.labels" if d.labels else "bundled"
    from mw_env.base.errors import InputError
    from mw_env.trainspec.files import expand_files
    from mw_env.trainspec.labelscan import corpus_found

    where = base or Path.cwd()
    try:
        shards = [p for key, globs in d.train_globs() for p in expand_files(globs, key, where)]
        shards += expand_files(d.val_files, "data.val_files", where)
    except InputError:
        shards = []
    found = corpus_found(shards, d.tags_column, venv=venv) if shards else None
    if found is None:
        return "discovered at start (every row group's tags of each shard)", "unknown here"
    names = list(label_order(found.tags))
    origin = f"discovered in {len(shards)} shard(s): all of their tags"
    if plain := not_bio(names):
        warnings.append(not_bio_error(plain, "the corpus's tags").message + "; the run would stop at start")
    if found.sampled:
        n = len(found.sampled)
        origin += f", but only the first {LABEL_SAMPLE_ROWS:,} rows of {n} of them"
        warnings.append(
            f"the labels of {', '.join(found.sampled[:3])}{f' and {n - 3} more' if n > 3 else ''} are from "
            f"their first {LABEL_SAMPLE_ROWS:,} rows only (no tags dictionary to read): a tag first met after "
            "them stops the run there (exit 2); to be sure, list every tag of the corpus in the config "
            f"(data: labels: {flow_list(names)}, with the missing ones added)"
        )
    return names, origin


def summarize(config: TrainConfig, *, base: Path | None = None, venv: Path | None = None) -> dict[str, Any]:
    """A plain dict: model, data, schedule (the `summary` command renders it). A files corpus's labels are
    read from its shards as the trainer will (labelscan.py), so the head is counted for them."""
    m, d, o, r = config.model, config.data, config.optim, config.runtime
    vocab = tokenizer_vocab_size(config)
    label_warnings: list[str] = []
    labels, labels_from = _labels(config, base, venv, label_warnings)
    counted = isinstance(labels, list)
    n_labels = len(labels) if isinstance(labels, list) else len(LABELS)
    rows = parameter_counts(config, vocab_size=vocab, n_labels=n_labels)
    total = sum(n for _, n in rows)
    window = o.batch_size * o.accumulation_steps
    if d.source == "synthetic":
        data = {
            "source": "synthetic",
            "train_rows": d.synthetic_rows,
            "val_rows": d.synthetic_val_rows,
            "countries": list(d.countries),
            "noise": d.noise,
        }
    else:
        data = {
            "source": "files",
            "train_files": list(d.train_files),
            "sources": [
                {"name": s.name or s.files[0], "files": list(s.files), "weight": s.weight} for s in d.sources
            ],
            "val_files": list(d.val_files),
            "val_fraction": None if d.val_files else d.val_fraction,
            # the rows held out and the units, as the trainer will make them (on one process: trainspec/units.py)
            "split": summary_split(config, base or Path.cwd()),
            "columns": {"tokens": d.tokens_column, "tags": d.tags_column},
            "streaming": {
                "shuffle_rows": d.shuffle_rows,
                "workers": d.workers,
                "prefetch_steps": d.prefetch_steps,
                "unknown_tags": d.unknown_tags,
            },
        }
    data.update(
        {"tokenizer": d.tokenizer, "max_len": m.max_len, "labels": labels, "labels_from": labels_from}
    )
    checkpoints = [s for s in (250, 500, 1000) if s < r.max_steps]
    return {
        "model": {
            "architecture": f"{m.n_layers}-layer pre-LN transformer encoder over {m.attend}, d_model {m.d_model}, "
            f"{m.n_heads} heads, ff {m.d_ff}, vocab {vocab:,} ({d.tokenizer}), "
            + (
                f"{n_labels} BIO labels"
                if counted
                else f"BIO labels of the corpus (unreadable here: the head is counted for {n_labels})"
            )
            + f", tags by {m.decode}",
            "vocab_size": vocab,
            "parameters": [{"part": name, "parameters": n} for name, n in rows],
            "total_parameters": total,
        },
        "data": data,
        "schedule": {
            "optimizer": f"AdamW{', fused' if o.fused else ''} (betas {o.beta1}, {o.beta2}; weight decay "
            f"{o.weight_decay}{f'; label balance {o.label_balance:g}' if o.label_balance else ''})",
            "lr": o.lr,
            "schedule": o.schedule,
            "warmup_steps": o.warmup_steps,
            "min_lr_ratio": o.min_lr_ratio,
            "max_steps": r.max_steps,
            "rows_per_step_per_process": window,
            "accumulation_steps": o.accumulation_steps,
            "grad_clip": o.grad_clip,
            "label_smoothing": o.label_smoothing,
            "lr_at": {
                str(s): o.lr * lr_factor(s, o, r.max_steps) for s in (0, *checkpoints, r.max_steps - 1)
            },
            "eval_every": r.eval_every,
            "checkpoint_every": r.checkpoint_every,
            "early_stop_patience": r.early_stop_patience,
        },
        "warnings": config_warnings(config) + label_warnings,
    }
