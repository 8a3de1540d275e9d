"""Resume: which checkpoint to continue from, and whether this run may continue it.

`pick_checkpoint` is the one place that chooses the checkpoint (multi-node agreement hooks in here);
`check_compatible` refuses a resume that would silently train something else: a changed model
shape, world size, label set, or corpus (shards, row counts, data-order settings), naming what changed.
A changed corpus may be accepted with `--set data.allow_changed_corpus=true`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mw_env.base.errors import InputError
from mw_env.trainer.agree import agree_on_checkpoint
from mw_env.trainer.data import Corpus, identity_diff
from mw_env.trainer.distributed import DistInfo
from mw_env.trainspec.config import TrainConfig, architecture_diff, config_from_dict
from mw_env.trainspec.earlier import elsewhere_hint

Echo = Callable[[str], None]


def pick_checkpoint(
    ckpt_dir: Path,
    dist: DistInfo,
    *,
    resume: Path | None,
    fresh: bool,
    config: TrainConfig,
    warn: Echo,
    check: Callable[[Path, dict[str, Any]], None] | None = None,
) -> tuple[Path, dict[str, Any]] | None:
    """The checkpoint this run continues from (None: start at step 0): --resume, else the newest one that
    loads and passes `check` (damaged newer ones warned about and skipped), the same file on every rank."""
    return agree_on_checkpoint(
        ckpt_dir, dist, resume=resume, fresh=fresh, config=config, warn=warn, check=check
    )


def corpus_changes(saved: dict[str, Any] | None, corpus: Corpus) -> list[str]:
    """What differs between the checkpoint's corpus record and this run's corpus (empty: nothing)."""
    if not saved:
        return ["the checkpoint records no corpus identity (written by an older mw-env)"]
    now = corpus.identity
    out = []
    if saved.get("source") != now["source"]:
        out.append(f"data.source {saved.get('source')} -> {now['source']}")
    out += identity_diff(saved.get("shards", []), now["shards"])
    out += [f"validation: {d}" for d in identity_diff(saved.get("val_shards", []), now["val_shards"])]
    old_order, new_order = saved.get("order", {}), now["order"]
    for key in sorted(old_order.keys() | new_order.keys()):
        if old_order.get(key) != new_order.get(key):
            out.append(f"{key} {old_order.get(key)} -> {new_order.get(key)}")
    return out


def check_compatible(
    path: Path, ckpt: dict[str, Any], *, config: TrainConfig, dist: DistInfo, corpus: Corpus
) -> list[str]:
    """Raise InputError when this run must not continue `ckpt`; return the corpus changes that
    data.allow_changed_corpus accepts (the caller says them)."""
    saved = config_from_dict(ckpt["config"])
    if saved.word_features != config.word_features and "words" not in ckpt["config"].get("model", {}):
        raise InputError(
            f"cannot resume from {path}: it was written before word features existed (model.words), so its "
            f"model reads bytes only, and this config's model also reads words (model.words: {config.model.words})",
            hint="continue it as it was with --set model.words=none, or start over with --fresh to train "
            "a model with word features",
        )
    diff = architecture_diff(saved, config)
    if diff:
        raise InputError(
            f"cannot resume from {path}: the config changed where it must not ({'; '.join(diff)})",
            hint=f"restore those settings to continue it; or {elsewhere_hint(config.runtime.out_dir)}",
        )
    if int(ckpt["world_size"]) != dist.world:
        raise InputError(
            f"cannot resume from {path}: it was written by {ckpt['world_size']} process(es), this run has {dist.world}",
            hint="the data order depends on the world size; launch with the same --nproc-per-node",
        )
    old, new = list(ckpt["labels"]), list(corpus.labels.names)
    if old != new:
        added = [x for x in new if x not in old]
        removed = [x for x in old if x not in new]
        what = f"added {added}, removed {removed}" if added or removed else "same labels, another order"
        raise InputError(
            f"cannot resume from {path}: the label set changed ({what}; now from {corpus.labels.origin})",
            hint=f"set data.labels to the checkpoint's labels {old} to continue it; or "
            f"{elsewhere_hint(config.runtime.out_dir)}",
        )
    changes = corpus_changes(ckpt.get("data"), corpus)
    if changes and not config.data.allow_changed_corpus:
        shown = "; ".join(changes[:8]) + (f"; and {len(changes) - 8} more" if len(changes) > 8 else "")
        raise InputError(
            f"cannot resume from {path}: the corpus changed since it was written ({shown})",
            hint=f"{elsewhere_hint(config.runtime.out_dir)}; or restore the shards to continue it, or "
            "--set data.allow_changed_corpus=true to continue that model on this corpus (the data order from "
            "here on is this corpus's, not a continuation)",
        )
    return changes
