"""The label set: names, ids, and the BIO structure used to count inconsistencies.

Where it comes from (corpus.py decides): `data.labels` when set; else the bundled 15 for the
synthetic source; else discovered from a sample of each shard's first rows (index.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from mw_env.errors import InputError
from mw_env.trainspec.synthetic import LABELS


@dataclass(frozen=True)
class LabelSet:
    names: tuple[str, ...]
    origin: str  # "config" | "bundled" | "discovered: ..."
    index: dict[str, int] = field(init=False, compare=False)
    # For the BIO check: for label k, inside_of[k] = the entity type when k is an I- label, else "".
    inside_of: tuple[str, ...] = field(init=False, compare=False)
    type_of: tuple[str, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if len(set(self.names)) != len(self.names):
            dup = sorted({n for n in self.names if self.names.count(n) > 1})
            raise InputError(f"data.labels lists {', '.join(dup)} more than once", hint="list each tag once")
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
