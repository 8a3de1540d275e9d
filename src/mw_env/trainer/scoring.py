"""Tagging metrics over words: word accuracy, exact-address rate, entity P/R/F1 in two modes, per type,
and the most frequent confusions. Pure Python (no torch, no numpy): the trainer's evaluation and
`mw-env train evaluate` both count with it.

Two ways to read entities out of BIO tags, because they disagree on ill-formed sequences:
- `conlleval` (the CoNLL-2000 conlleval script's rule, seqeval's default mode): an I-X that does not
  continue an entity of type X starts one, so `O I-LOC I-LOC` holds one LOC entity.
- `strict` (IOB2 as seqeval's `mode="strict", scheme=IOB2` reads it): an entity starts only at B-X and
  runs over the I-X that follow; an I-X with no B-X before it belongs to no entity, so `O I-LOC` holds
  none. A model that emits I- without B- is not credited for it.
Both count an entity as right only when its type, start and end all match the gold one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from mw_env.trainspec.schema import F1_MODES, F1Mode

Span = tuple[int, int, str]  # (first word, end word exclusive, entity type)


def spans(tags: Sequence[str], mode: F1Mode = "conlleval") -> set[Span]:
    """The entity spans of one row's BIO tags, read the way `mode` says."""
    out: set[Span] = set()
    start, kind = -1, ""
    for i, tag in enumerate([*tags, "O"]):
        prefix, _, typ = tag.partition("-")
        continues = prefix == "I" and typ == kind and start >= 0
        if start >= 0 and not continues:
            out.add((start, i, kind))
            start, kind = -1, ""
        if prefix == "B" or (prefix == "I" and not continues and mode == "conlleval"):
            start, kind = i, typ
    return out


@dataclass
class Tally:
    """Counts that add up over rows (and over processes: every field is a sum)."""

    words: int = 0
    correct_words: int = 0
    rows: int = 0
    exact_rows: int = 0
    # per mode, per entity type: [true positives, gold entities, predicted entities]
    entities: dict[str, dict[str, list[int]]] = field(default_factory=lambda: {m: {} for m in F1_MODES})
    confusions: Counter[tuple[str, str]] = field(default_factory=Counter)

    def add(self, gold: Sequence[str], pred: Sequence[str]) -> None:
        """One row: its gold and predicted tag per word (the same length)."""
        if len(gold) != len(pred):
            raise ValueError(f"a row has {len(gold)} gold tags and {len(pred)} predicted ones")
        right = sum(g == p for g, p in zip(gold, pred, strict=True))
        self.words += len(gold)
        self.correct_words += right
        self.rows += 1
        self.exact_rows += right == len(gold)
        for g, p in zip(gold, pred, strict=True):
            if g != p:
                self.confusions[(g, p)] += 1
        for mode in F1_MODES:
            gs, ps = spans(gold, mode), spans(pred, mode)
            per = self.entities[mode]
            for s in gs | ps:
                c = per.setdefault(s[2], [0, 0, 0])
                c[0] += s in gs and s in ps
                c[1] += s in gs
                c[2] += s in ps

    def merge(self, other: Tally) -> None:
        self.words += other.words
        self.correct_words += other.correct_words
        self.rows += other.rows
        self.exact_rows += other.exact_rows
        self.confusions.update(other.confusions)
        for mode, per in other.entities.items():
            mine = self.entities.setdefault(mode, {})
            for typ, c in per.items():
                m = mine.setdefault(typ, [0, 0, 0])
                for i in range(3):
                    m[i] += c[i]

    def prf(self, mode: F1Mode, typ: str | None = None) -> tuple[float, float, float]:
        """Micro precision, recall, F1 over all types (or one type's)."""
        per = self.entities[mode]
        counts = [per.get(typ, [0, 0, 0])] if typ is not None else list(per.values())
        tp, gold, pred = (sum(c[i] for c in counts) for i in range(3))
        return prf(tp, gold, pred)

    def report(self, *, top_confusions: int = 10) -> dict[str, object]:
        """The whole evaluation as JSON-ready data (`mw-env train evaluate --json`)."""
        entity = {}
        for mode in F1_MODES:
            p, r, f = self.prf(mode)
            per_type = {}
            for typ in sorted(self.entities[mode]):
                _tp, gold, pred = self.entities[mode][typ]
                tp, tr, tf = self.prf(mode, typ)
                per_type[typ] = {"precision": tp, "recall": tr, "f1": tf, "support": gold, "predicted": pred}
            entity[mode] = {"precision": p, "recall": r, "f1": f, "per_type": per_type}
        return {
            "rows": self.rows,
            "words": self.words,
            "word_accuracy": self.correct_words / self.words if self.words else 0.0,
            "exact_address_rate": self.exact_rows / self.rows if self.rows else 0.0,
            "entity": entity,
            "confusions": [
                {"gold": g, "predicted": p, "count": n}
                for (g, p), n in sorted(self.confusions.items(), key=lambda kv: (-kv[1], kv[0]))[
                    :top_confusions
                ]
            ],
        }


def prf(tp: int, gold: int, pred: int) -> tuple[float, float, float]:
    precision = tp / pred if pred else 0.0
    recall = tp / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def entity_counts(gold: Sequence[str], pred: Sequence[str], mode: F1Mode) -> tuple[int, int, int]:
    """(true positives, gold entities, predicted entities) of one row."""
    gs, ps = spans(gold, mode), spans(pred, mode)
    return len(gs & ps), len(gs), len(ps)


def evaluated_rows(val_rows: int, *, world: int, batch_size: int, eval_batches: int) -> int:
    """The validation rows an evaluation reads: each of `world` processes its contiguous share, at most
    `eval_batches` batches of it (0: all of it), as trainer/data/stream.py's ValSource reads them."""
    total = 0
    for r in range(world):
        share = val_rows * (r + 1) // world - val_rows * r // world
        total += min(share, eval_batches * batch_size) if eval_batches else share
    return total


def eval_scope(rows: int, val_rows: int) -> str:
    """What an F1 was measured on, said wherever it is shown (console, report, data card): a score on 256 of
    500 validation rows is not a score on the split, and a reader must not take it for one."""
    if val_rows <= 0:
        return "no validation rows"
    if rows >= val_rows:
        return f"on all {val_rows:,} validation rows"
    return (
        f"on {rows:,} of {val_rows:,} validation rows ({rows / val_rows:.0%}: runtime.eval_batches limits "
        "each evaluation; 0 reads them all)"
    )
