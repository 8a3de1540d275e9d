"""Resume: which checkpoint to continue from, and whether this run may continue it.

trainer/agree.py's `agree_on_checkpoint` chooses the checkpoint (the same on every rank);
`check_compatible` refuses a resume that would silently train something else: a changed model
shape, label set, or corpus (shards, row counts, data-order settings), naming what changed.
A changed corpus may be accepted with `--set data.allow_changed_corpus=true`.

The world size may change (data/lanes.py): the checkpoint's lanes and global batch are kept
(`in_checkpoint_lanes` lays the corpus out in them), each process takes its share of every global batch, and
the micro-batches follow this start's optim.batch_size (`batch_note` says the split once). A world size the
global batch does not split over is refused, naming the sizes that work.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mw_env.base.errors import InputError
from mw_env.rundir.contract import CHECKPOINTS_DIR, METRICS_FILE, kept_aside
from mw_env.trainer.data import Corpus, identity_diff
from mw_env.trainer.data.lanes import plural
from mw_env.trainer.distributed import DistInfo
from mw_env.trainspec.config import TrainConfig, architecture_diff, config_from_dict
from mw_env.trainspec.earlier import elsewhere_hint

Echo = Callable[[str], None]


def move_aside(out_dir: Path, echo: Echo) -> None:
    """--fresh: keep the old checkpoints and metrics, renamed, so a later resume cannot pick them up."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for name in (CHECKPOINTS_DIR, METRICS_FILE):
        path = out_dir / name
        if path.exists():
            target = out_dir / kept_aside(name, stamp)
            path.rename(target)
            echo(f"--fresh: kept the previous {name} as {target}")


def saved_order(ckpt: Mapping[str, object]) -> dict[str, object]:
    """The checkpoint's data-order record, in today's terms: one written before lanes existed keyed the order by
    its world size and batch layout, which are its lanes and a lane's rows a step."""
    data = ckpt.get("data")
    order = dict(data.get("order") or {}) if isinstance(data, dict) else {}
    if "lanes" not in order and "world_size" in order:
        order["lanes"] = order.pop("world_size")
        batch, acc = order.pop("batch_size", None), order.pop("accumulation_steps", None)
        if isinstance(batch, int) and isinstance(acc, int):
            order["lane_rows"] = batch * acc
    return order


def in_checkpoint_lanes(ckpt: Mapping[str, object], corpus: Corpus) -> Corpus:
    """The corpus laid out in the checkpoint's lanes and global batch (this run's own when it records none)."""
    order = saved_order(ckpt)
    lanes, rows = order.get("lanes"), order.get("lane_rows")
    if not (isinstance(lanes, int) and isinstance(rows, int) and lanes >= 1 and rows >= 1):
        return corpus
    return corpus.with_lanes(lanes, rows)


def batch_note(corpus: Corpus, config: TrainConfig) -> list[str]:
    """One line when this start splits the run's global batch otherwise than its config would alone (another
    world size, batch size or accumulation than the run's first start)."""
    layout, o = corpus.layout, config.optim
    same = layout.lanes == layout.world and layout.lane_rows == o.batch_size * o.accumulation_steps
    if same and layout.micro_batches == o.accumulation_steps:
        return []
    asked = o.batch_size * o.accumulation_steps * layout.world
    who = "the one process takes" if layout.world == 1 else f"each of the {layout.world} processes takes"
    return [
        f"global batch kept at {layout.global_rows:,} rows a step, as the run started ({plural(layout.lanes, 'lane')} "
        f"x {layout.lane_rows} rows; this config's optim.batch_size x optim.accumulation_steps x processes is "
        f"{o.batch_size} x {o.accumulation_steps} x {layout.world} = {asked:,}): {who} {layout.share:,} rows a "
        f"step in {plural(layout.micro_batches, 'micro-batch')} of up to {o.batch_size} rows"
    ]


def corpus_lines(corpus: Corpus) -> list[str]:
    """What the start-up says about the units, the validation split and the lanes."""
    u, layout = corpus.units, corpus.layout
    if corpus.val.rows:
        share = f" ({u['val_share']:.2%} of the rows)" if u["val_share"] is not None else ""
        val = f"validation: {corpus.val.rows:,} rows{share}, {u['val_from']}"
    else:
        val = (
            f"validation: {u['val_from']}: evaluations are skipped, and the report has no held-out F1 (name "
            "data.val_files, or set data.val_fraction, to evaluate)"
        )
    lanes = "; ".join(
        f"lane {k} ({corpus.lane_rows(k):,} rows an epoch) read by {_ranks(layout.ranks_of(k))}"
        for k in range(layout.lanes)
        if layout.ranks_of(k) != [k]
    )
    return [
        val,
        f"units: {u['unit']}: {u['why']}",
        f"batch: {layout.describe()}" + (f"; {lanes}" if lanes else ""),
    ]


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


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
    old_order, new_order = saved_order({"data": saved}), now["order"]
    for key in sorted(old_order.keys() | new_order.keys()):
        if old_order.get(key) != new_order.get(key):
            if key == "units":
                out.append(
                    "the training units or the validation split (an older mw-env held out whole row groups by a "
                    "hash; the held-out share is now the one asked)"
                    if key not in old_order
                    else "the training units or the validation split"
                )
                continue
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
            f"cannot resume from {path}: the config changed where it must not ({'; '.join(diff.values())})",
            hint=f"restore those settings to continue it; or {elsewhere_hint(config.runtime.out_dir)}",
        )
    old, new = list(ckpt["labels"]), list(corpus.labels.names)
    if old != new:
        added = [x for x in new if x not in old]
        removed = [x for x in old if x not in new]
        what = f"added {added}, removed {removed}" if added or removed else "same labels, another order"
        raise InputError(
            f"cannot resume from {path}: the label set changed ({what}; now from {corpus.labels.origin})",
            hint=f"set data.labels to the checkpoint's labels {old} to continue it; or "
            f"{elsewhere_hint(config.runtime.out_dir, fine_tune=not removed)}",
        )
    changes = corpus_changes(ckpt.get("data"), corpus)
    if changes and not config.data.allow_changed_corpus:
        shown = "; ".join(changes[:8]) + (f"; and {len(changes) - 8} more" if len(changes) > 8 else "")
        raise InputError(
            f"cannot resume from {path}: the corpus changed since it was written ({shown})",
            hint=f"{elsewhere_hint(config.runtime.out_dir, fine_tune=True)}; or restore the shards to continue it, or "
            "--set data.allow_changed_corpus=true to continue that model on this corpus (the data order from "
            "here on is this corpus's, not a continuation)",
        )
    return changes
