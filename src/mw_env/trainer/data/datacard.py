"""The data card (report/data_card.json) from a corpus and what training read; docs/training.md lists its keys.

Positions are arithmetic on the step: every lane's stream stands at row step·Q (Q: a lane's rows a step),
whatever the world size, so the card of a run resumed on another world size reads as an uninterrupted one's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mw_env.trainer.data import card as card_mod
from mw_env.trainer.data.card import Counts

if TYPE_CHECKING:
    from mw_env.trainer.data.corpus import Corpus


def lane_positions(corpus: Corpus, step: int) -> list[dict[str, object]]:
    """Each lane's position before step `step`."""
    q = corpus.layout.lane_rows
    out = []
    for lane in range(corpus.lanes):
        row, per_epoch = step * q, corpus.lane_rows(lane)
        out.append(
            {
                "lane": lane,
                "rows_per_epoch": per_epoch,
                "next_step": step,
                "stream_row": row,
                **({"epoch": row // per_epoch} if corpus.weighted is None and per_epoch else {}),
                "ranks": corpus.layout.ranks_of(lane),
            }
        )
    return out


def data_card(corpus: Corpus, train: Counts, step: int) -> dict[str, Any]:
    c = corpus
    val = c.val.counts or Counts(len(c.labels))
    names = c.labels.names
    layout = c.layout
    lanes = lane_positions(c, step)
    return {
        "source": c.source,
        "tokenizer": c.tokenizer.kind,
        "labels": list(names),
        "labels_from": c.labels.origin,
        "rows": {"train": c.train_rows, "val": c.val.rows},
        "validation": {
            "rows": c.val.rows,
            "share": c.units["val_share"],
            "from": c.units["val_from"],
        },
        "units": {"unit": c.units["unit"], "why": c.units["why"]},
        "consumed": {
            "rows": train.rows,
            "tokens": train.tokens,
            "words": train.words,
            "epochs": train.rows / c.train_rows if c.train_rows else 0.0,
        },
        "tag_distribution": {
            "train": card_mod.tag_distribution(train, names),
            "val": card_mod.tag_distribution(val, names),
        },
        "token_lengths": {
            "train": card_mod.length_distribution(train),
            "val": card_mod.length_distribution(val),
        },
        "truncated_words": train.truncated_words,
        "unknown_tag_words": {"train": train.unknown_tag_words, "val": val.unknown_tag_words},
        "bio_inconsistencies": {
            "train": train.bio_errors,
            "val": val.bio_errors,
            "examples": train.bio_examples + val.bio_examples,
        },
        "shuffle": {
            "seed": c.config.runtime.seed,
            "block": c.units["unit"],
            "window_rows": c.config.data.shuffle_rows,
        },
        "batch": {
            "lanes": layout.lanes,
            "lane_rows": layout.lane_rows,
            "global_rows": layout.global_rows,
            "world_size": layout.world,
            "rows_per_process": layout.share,
            "micro_batches": layout.micro_batches,
        },
        "lanes": lanes,
        "ranks": [
            {"rank": r, "lanes": layout.lanes_of(r), "rows_per_step": layout.share, "next_step": step}
            for r in range(layout.world)
        ],
        "sources": c.sources,
        **({"mix": c.weighted.card(lanes)} if c.weighted is not None else {}),
    }
