"""The run's end: the `finished` event, the data card, the report and the manifest, and what the run returns.

The loop calls `finish` once, on every rank, after its last step (max_steps, early stop, a stop request or
too many non-finite steps); the state moves to `finishing`, then `finished` once the report is written.

The data card (report/data_card.json; docs/training.md lists its keys): positions are arithmetic on the step,
every lane's stream stands at row step·Q (Q: a lane's rows a step) whatever the world size, so the card of a
run resumed on another world size reads as an uninterrupted one's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mw_env.base.errors import StepFailed
from mw_env.rundir.contract import MANIFEST
from mw_env.trainer.ckpt import checkpoint as ckpt_mod
from mw_env.trainer.data import Corpus, Counts, sum_counts
from mw_env.trainer.data.card import length_distribution, tag_distribution
from mw_env.trainer.distributed import gather_objects
from mw_env.trainer.evaluate import evaluation_card
from mw_env.trainer.lifecycle import hold, mark
from mw_env.trainer.session import Session


@dataclass(frozen=True)
class RunResult:
    out_dir: Path
    step: int
    reason: str  # max_steps | early_stop | stopped | nonfinite
    last_checkpoint: Path | None
    best_f1: float
    skipped_steps: int
    precision: str
    losses: tuple[float, ...] = field(default=())


def finish(
    s: Session, *, reason: str, last_ckpt: Path | None, losses: list[float], doctor_json: Path | None
) -> RunResult:
    """End the run on every rank: the `finished` event, then (rank 0) the data card and the report."""
    rt, state = s.resolved.config.runtime, s.state
    assert s.counts is not None  # set before the first step
    parts = gather_objects({"counts": s.counts.to_dict(), "position": s.position()}, s.dist)
    last_ckpt = last_ckpt or ckpt_mod.latest_valid_checkpoint(s.ckpt_dir)
    ended: dict[str, Any] = {
        "reason": reason,
        "step": state.step,
        "last_checkpoint": str(last_ckpt) if last_ckpt else None,
    }
    # `finished` in metrics.jsonl is the loop's end (the manifest covers it); the run is finished only
    # when state.json says so, after the report and the manifest.
    mark(s.out_dir, "finishing", main=s.dist.main, **ended)
    s.metrics.log("finished", step=state.step, reason=reason)
    s.metrics.close()
    hold("report")
    if s.dist.main:
        from mw_env.trainer.report.report import write_report

        total = sum_counts([p["counts"] for p in parts], len(s.corpus.labels))
        card = data_card(s.corpus, total, state.step)
        # The venv as it was (issue 30 #3), the weights it started from and the nodes' environments (issue 38).
        for key in ("venv_drift", "init_from", "env_mismatch"):
            if s.facts.get(key):
                card[key] = s.facts[key]
        card["evaluation"] = evaluation_card(s.corpus.val.rows, s.resolved.config, s.dist.world)
        if s.hasher is not None:
            card["sources"] = s.hasher.annotate(card["sources"])
        report = write_report(
            s.out_dir, resolved=s.resolved, card=card, facts=s.facts, doctor_json=doctor_json, pool=s.figures
        )
        s.say(f"report: {report}")
        mark(s.out_dir, "finished", report=str(report), manifest=str(s.out_dir / MANIFEST), **ended)
    if reason == "nonfinite":
        raise StepFailed(
            f"stopped at step {state.step}: {rt.max_nonfinite} optimizer steps in a row had a non-finite "
            f"loss or gradient norm (updates skipped, weights unchanged)",
            hint=f"the last good checkpoint is {last_ckpt}; lower optim.lr or raise optim.warmup_steps, "
            "and check the data; then resume",
        )
    s.say(f"finished at step {state.step} ({reason})")
    return RunResult(
        s.out_dir,
        state.step,
        reason,
        last_ckpt,
        state.best_f1,
        state.skipped_steps,
        s.trainer.precision.name,
        tuple(losses),
    )


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
            "train": tag_distribution(train, names),
            "val": tag_distribution(val, names),
        },
        "token_lengths": {
            "train": length_distribution(train),
            "val": length_distribution(val),
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
