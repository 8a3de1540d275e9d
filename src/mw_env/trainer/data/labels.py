"""The label set: names, ids, and the BIO structure used to count inconsistencies.

Where it comes from (corpus.py decides): `data.labels` when set; else the bundled 15 for the
synthetic source; else discovered from every row group's tags dictionary of each shard, or a sample of
a shard's first rows where it has none (index.py). Tags must be IOB2 (`O`, `B-X`, `I-X`): a plain
`StreetName` is refused here, whichever way the set came (issue 30 #10).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mw_env.base.errors import InputError
from mw_env.trainspec.labelscan import LABEL_SAMPLE_ROWS, flow_list, label_order, not_bio, not_bio_error
from mw_env.trainspec.synthetic import LABELS


@dataclass(frozen=True)
class LabelSet:
    names: tuple[str, ...]
    origin: str  # "config" | "bundled" | "discovered: ..."
    note: str = ""  # said at start: the labels were sampled, and what to paste to be sure
    index: dict[str, int] = field(init=False, compare=False)
    # For the BIO check: for label k, inside_of[k] = the entity type when k is an I- label, else "".
    inside_of: tuple[str, ...] = field(init=False, compare=False)
    type_of: tuple[str, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if len(set(self.names)) != len(self.names):
            dup = sorted({n for n in self.names if self.names.count(n) > 1})
            raise InputError(f"data.labels lists {', '.join(dup)} more than once", hint="list each tag once")
        plain = not_bio(self.names)
        if plain:
            where = "data.labels" if self.origin == "config" else f"the corpus's tags ({self.origin})"
            raise not_bio_error(plain, where)
        object.__setattr__(self, "index", {n: i for i, n in enumerate(self.names)})
        inside, types = [], []
        for n in self.names:
            prefix, sep, typ = n.partition("-")
            inside.append(typ if sep and prefix == "I" else "")
            types.append(typ if sep and prefix in ("B", "I") else "")
        object.__setattr__(self, "inside_of", tuple(inside))
        object.__setattr__(self, "type_of", tuple(types))

    def __len__(self) -> int:
        return len(self.names)

    def bio_errors(self, label_ids: Sequence[int]) -> int:
        """I-X whose previous labelled word is neither B-X nor I-X (an I- without its B-)."""
        bad, prev_type = 0, ""
        for k in label_ids:
            inside = self.inside_of[k]
            if inside and prev_type != inside:
                bad += 1
            prev_type = self.type_of[k]
        return bad


BUNDLED = LabelSet(LABELS, "bundled")


def from_config(names: Sequence[str]) -> LabelSet:
    if "O" not in names:
        raise InputError(
            f"data.labels {list(names)} has no 'O'",
            hint="list every BIO tag of the corpus, 'O' included, e.g. [O, B-street, I-street]",
        )
    return LabelSet(tuple(names), "config")


def discovered(tags: Iterable[str], sampled: Sequence[str], n_shards: int) -> LabelSet:
    """The corpus's own labels (corpus.py's index: `tags`, and `tags_sampled`: the shards whose tags were
    only sampled), with a plain note for those: a tag first met after the sample stops the run there."""
    names = label_order(tags)
    origin = f"discovered in {n_shards} shard(s): all of their tags"
    note = ""
    if sampled:
        origin += f", but only the first {LABEL_SAMPLE_ROWS:,} rows of {len(sampled)} of them"
        shown = ", ".join(sampled[:3]) + (f" and {len(sampled) - 3} more" if len(sampled) > 3 else "")
        note = (
            f"the labels of {shown} are from their first {LABEL_SAMPLE_ROWS:,} rows only (no tags dictionary "
            "to read): a tag first met after them stops the run there (exit 2). To be sure, list every tag "
            f"of the corpus in the config (data: labels: {flow_list(names)}, with the missing ones added), "
            "or --set data.unknown_tags=ignore"
        )
    return LabelSet(names, origin, note)
