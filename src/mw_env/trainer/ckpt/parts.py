"""What a checkpoint holds, in one table (`PARTS`): each key, whether it must be there, what it must be, how
a run writes it and how it is restored. Nothing else lists the keys (to add one: ckpt/__init__.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

if TYPE_CHECKING:
    from mw_env.trainer.data import Corpus, Counts
    from mw_env.trainer.distributed import DistInfo
    from mw_env.trainer.state import LoopState
    from mw_env.trainer.step import Trainer
    from mw_env.trainspec.config import ResolvedConfig

FORMAT_VERSION = 1


class Held(Protocol):
    """What the parts write from and restore into: trainer.session.Session (which imports this module, so a
    Protocol here, not an import)."""

    resolved: ResolvedConfig
    dist: DistInfo
    corpus: Corpus
    trainer: Trainer
    facts: dict[str, Any]
    state: LoopState
    counts: Counts | None
    accepted_changes: list[str]


def is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: object) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _tensor_dict(v: object) -> bool:
    import torch

    return isinstance(v, Mapping) and all(
        isinstance(k, str) and isinstance(t, torch.Tensor) for k, t in v.items()
    )


def _optimizer_ok(v: object) -> bool:
    return (
        isinstance(v, Mapping)
        and isinstance(v.get("state"), Mapping)
        and isinstance(v.get("param_groups"), list)
        and all(isinstance(g, Mapping) and isinstance(g.get("params"), list) for g in v["param_groups"])
    )


def _loop_ok(v: object) -> bool:
    from mw_env.trainer.state import LoopState

    if not isinstance(v, Mapping) or set(v) - set(LoopState().to_dict()):
        return False
    types = {"best_f1": is_number}
    return all(types.get(k, is_int)(x) for k, x in v.items()) and is_int(v.get("step"))


def _data_ok(v: object) -> bool:
    """The corpus record (source, order, shards, val_shards, per-rank position and counts): what the resume and
    the data card read."""
    if not isinstance(v, Mapping):
        return False
    lists = ("shards", "val_shards", "position", "counts")
    if not all(isinstance(v.get(k, []), list) for k in lists) or not isinstance(v.get("order", {}), Mapping):
        return False
    if not all(isinstance(x, Mapping) for k in lists for x in v.get(k, [])):
        return False
    ints = ("next_step", "stream_row", "epoch", "rows_consumed")
    return all(is_int(p[k]) and p[k] >= 0 for p in v.get("position", []) for k in ints if k in p)


# What a run writes once per rank and gathers before rank 0 writes the checkpoint (Session.save).
Gathered = list[dict[str, Any]]
OMIT = object()  # a writer's answer for a part this run does not write (the scaler outside fp16)


@dataclass(frozen=True)
class Part:
    """One key of a checkpoint: whether it must be there, what it must be (checked on every load), how the
    run writes it (`write(session, gathered)`) and restores it (`restore(session, value)`; None: read where it
    is used, e.g. the config by the resume checks and the export)."""

    key: str
    required: bool
    test: Callable[[Any], bool]
    what: str
    write: Callable[[Held, Gathered], object]
    restore: Callable[[Held, Any], None] | None = None


def _restore_loop(s: Held, v: Any) -> None:
    from mw_env.trainer.state import LoopState

    s.state = LoopState(**v)


def _restore_rng(s: Held, v: Any) -> None:
    from mw_env.trainer.runtime import restore_rng_states

    if s.dist.rank < len(v or []):
        restore_rng_states(v[s.dist.rank])


def _restore_counts(s: Held, v: Any) -> None:
    from mw_env.trainer.data import Counts, sum_counts

    saved = (v or {}).get("counts") or []
    if s.accepted_changes or not saved:  # a changed corpus counts afresh
        return
    if len(saved) == s.dist.world:
        s.counts = Counts.from_dict(saved[s.dist.rank])
    elif s.dist.rank == 0:  # another world size: rank 0 carries the sum, so the card's total is kept
        s.counts = sum_counts(saved, len(s.corpus.labels))


def _data(s: Held, g: Gathered) -> dict[str, Any]:
    return {**s.corpus.identity, "position": [p["position"] for p in g], "counts": [p["counts"] for p in g]}


def _is_fp16(s: Held) -> bool:
    return bool(s.trainer.precision.name == "fp16")


# Validated in this order.
PARTS: tuple[Part, ...] = (
    Part(
        "format_version",
        True,
        lambda v: v == FORMAT_VERSION,
        f"{FORMAT_VERSION}",
        lambda s, g: FORMAT_VERSION,
    ),
    Part("step", True, lambda v: is_int(v) and v >= 0, "an integer >= 0", lambda s, g: s.state.step),
    Part(
        "model",
        True,
        _tensor_dict,
        "a state dict of tensors",
        lambda s, g: s.trainer.model.state_dict(),
        lambda s, v: s.trainer.model.load_state_dict(v),
    ),
    Part(
        "optimizer",
        True,
        _optimizer_ok,
        "an optimizer state dict (state, param_groups)",
        lambda s, g: s.trainer.optimizer.state_dict(),
        lambda s, v: s.trainer.optimizer.load_state_dict(v),
    ),
    Part(
        "scheduler",
        True,
        lambda v: isinstance(v, Mapping) and is_int(v.get("last_epoch")),
        "a scheduler state dict",
        lambda s, g: s.trainer.scheduler.state_dict(),
        lambda s, v: s.trainer.scheduler.load_state_dict(v),
    ),
    Part(
        "loop",
        True,
        _loop_ok,
        "the loop counters (step, best_f1, best_step, bad_evals, ...)",
        lambda s, g: s.state.to_dict(),
        _restore_loop,
    ),
    Part("world_size", True, lambda v: is_int(v) and v >= 1, "an integer >= 1", lambda s, g: s.dist.world),
    Part(
        "config",
        True,
        lambda v: isinstance(v, Mapping) and all(isinstance(s, Mapping) for s in v.values()),
        "a config dict",
        lambda s, g: s.resolved.config.to_dict(),
    ),
    Part(
        "tokenizer",
        True,
        lambda v: isinstance(v, Mapping) and v.get("kind") in ("byte", "sentencepiece"),
        "a tokenizer state",
        lambda s, g: s.corpus.tokenizer.to_state(),
    ),
    Part(
        "labels",
        True,
        lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, str) for x in v),
        "a list of label names",
        lambda s, g: list(s.corpus.labels.names),
    ),
    Part(
        "rng",
        False,
        lambda v: isinstance(v, list) and all(isinstance(r, Mapping) for r in v),
        "a list of RNG states",
        lambda s, g: [p["rng"] for p in g],
        _restore_rng,
    ),
    Part(
        "scaler",
        False,
        lambda v: isinstance(v, Mapping),
        "a GradScaler state dict",
        lambda s, g: s.trainer.scaler.state_dict() if _is_fp16(s) else OMIT,
        lambda s, v: s.trainer.scaler.load_state_dict(v),
    ),
    Part(
        "data",
        False,
        _data_ok,
        "the data record (source, order, shards, per-rank position and counts)",
        _data,
        _restore_counts,
    ),
    Part(
        "config_sha256",
        False,
        lambda v: isinstance(v, str),
        "a string",
        lambda s, g: s.resolved.config.sha256(),
    ),
    Part(
        "config_sources",
        False,
        lambda v: isinstance(v, Mapping),
        "a mapping",
        lambda s, g: dict(s.resolved.sources),
    ),
    # Plain types only (a weights_only load refuses anything else).
    Part(
        "meta",
        False,
        lambda v: isinstance(v, Mapping),
        "a mapping",
        lambda s, g: json.loads(json.dumps(s.facts, default=str)),
    ),
)
REQUIRED_KEYS = tuple(p.key for p in PARTS if p.required)
# Key -> (required, test, what it must be): the validation view of PARTS.
CHECKS: dict[str, tuple[bool, Callable[[Any], bool], str]] = {
    p.key: (p.required, p.test, p.what) for p in PARTS
}


def payload(session: Held, gathered: Gathered) -> dict[str, object]:
    """What rank 0 writes: every part this run has (`gathered`: each rank's rng, position and counts)."""
    out = {p.key: p.write(session, gathered) for p in PARTS}
    return {k: v for k, v in out.items() if v is not OMIT}


def restore(session: Held, ckpt: Mapping[str, object]) -> None:
    """Load a validated checkpoint's parts into the session (the model, optimizer, loop counters, RNG...)."""
    for part in PARTS:
        if part.restore is not None and part.key in ckpt:
            part.restore(session, ckpt[part.key])
