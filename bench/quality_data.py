"""Labelled US addresses for bench_quality.py, made reproducibly (quality_forms.py: the words, the clean forms
and usaddress's label set): a training split, a clean held-out set, and a messy one as messy as the real
rows users bring (issue 37).

Splits (row i of a split is a pure function of (seed, split, i), like trainspec/synthetic.py):
- `train` / `val`: addresses over the "seen" names (4 in 5 names, chosen by a CRC of the name): the
  common forms, with the rare ones at the rates real lists have them (a recipient 3%, a PO box 7%, a rural
  route 2%, an intersection 3%), and 1 row in 10 given one or two messes from the list below, so both
  systems meet some of each;
- `clean`: the same clean forms over the seen names, no mess;
- `messy`: every row made with the *unseen* names (streets, cities, recipients, companies) and given
  2-4 messes: recipients and company names before the address; PO boxes and rural routes; units and
  subaddresses anywhere (first, after the street, after the city, last), as `#12`, `Apt4`, `Ste 4`,
  `2nd Fl`; intersections; lower/upper case runs (the whole row or one part); punctuation glued to
  words (`fl,`, `St.,`, `(Apt 4)`) or standing alone; commas missing or extra; street types, directions,
  states, city prefixes (`Ft`, `St.`, `N.`) and unit designators abbreviated or spelled out; typos
  (a letter dropped, doubled or swapped); a part missing (no ZIP, no state).
Each row also says which messes it was given (`messes`; not a training column).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from quality_forms import (
    CITY_PREFIX_ABBR,
    DIRECTIONS,
    LABELS,
    OCCUPANCY,
    PRE_TYPE_ABBR,
    SUBADDRESS,
    SUFFIX_ABBR,
    TYPES,
    Field,
    Group,
    Names,
    address,
    intersection,
    po_box,
    recipient,
    render,
    rural_route,
    subaddress,
    unit,
)

__all__ = ["LABELS", "MESS_NAMES", "TYPES", "Names", "row", "rows"]

MESS_NAMES = (
    "recipient", "po_box", "rural_route", "intersection", "unit_anywhere", "subaddress", "lower", "upper",
    "case_run", "glued", "no_commas", "extra_commas", "abbreviate", "spell_out", "typos", "missing",
)  # fmt: skip


# -- messes: each takes (rng, groups, names, unseen) and returns new groups, or None where it does not apply --
Mess = Callable[[random.Random, list[Group], Names, bool], "list[Group] | None"]


def _map_words(groups: list[Group], fn: Callable[[str, str], str]) -> list[Group]:
    return [(g, [(t, [fn(t, w) for w in ws]) for t, ws in fields]) for g, fields in groups]


def _case(fn: Callable[[str], str]) -> Mess:
    return lambda rng, groups, names, unseen: _map_words(groups, lambda _t, w: fn(w))


def _case_run(rng: random.Random, groups: list[Group], names: Names, unseen: bool) -> list[Group]:
    k = rng.randrange(len(groups))
    fn = rng.choice((str.upper, str.lower, str.title))
    return [_map_words([gr], lambda _t, w: fn(w))[0] if i == k else gr for i, gr in enumerate(groups)]


def _replace_main(groups: list[Group], new: Group) -> list[Group]:
    """`new` in place of the street (and its units), or first after a recipient."""
    rest = [gr for gr in groups if gr[0] not in ("street", "box", "unit", "subaddress")]
    at = 1 if rest and rest[0][0] == "recipient" else 0
    return [*rest[:at], new, *rest[at:]]


def _unit_anywhere(rng: random.Random, groups: list[Group], names: Names, unseen: bool) -> list[Group] | None:
    units = [gr for gr in groups if gr[0] in ("unit", "subaddress")] or [unit(rng)]
    rest = [gr for gr in groups if gr[0] not in ("unit", "subaddress")]
    where = rng.randrange(4)
    at = {0: 0, 1: len(rest), 2: next((i + 1 for i, g in enumerate(rest) if g[0] == "place"), 0)}.get(where)
    if at is None:  # right after the street
        at = next((i + 1 for i, g in enumerate(rest) if g[0] in ("street", "box")), 0)
    return [*rest[:at], *units, *rest[at:]]


def _glued(rng: random.Random, groups: list[Group], names: Names, unseen: bool) -> list[Group]:
    """Punctuation glued to words or standing alone: `fl,` `St.` `(Apt 4)` `- ` `;`."""
    out = []
    for g, fields in groups:
        fields = [(t, list(ws)) for t, ws in fields]
        roll = rng.random()
        ws = fields[-1][1]
        if roll < 0.25:
            ws[-1] += rng.choice((",", ".", ";", ".,", ",,"))
        elif roll < 0.35 and g in ("unit", "subaddress"):
            fields[0][1][0] = "(" + fields[0][1][0]
            ws[-1] += ")"
        elif roll < 0.45 and g != "recipient":
            fields.append(("O", [rng.choice((",", "-", "/", ";"))]))  # a lone mark: O
        out.append((g, fields))
    return out


def _commas(extra: bool) -> Mess:
    def mess(rng: random.Random, groups: list[Group], names: Names, unseen: bool) -> list[Group]:
        if not extra:
            return _map_words(groups, lambda _t, w: w.rstrip(",") or w)  # a lone "," a glued mess added stays
        return [(g, [(t, [w + "," if rng.random() < 0.3 and w[-1:] != "," else w for w in ws]) for t, ws in fs])
                for g, fs in groups]  # fmt: skip

    return mess


def _abbreviate(short: bool) -> Mess:
    suffix = {v: k for k, v in SUFFIX_ABBR.items()} if not short else SUFFIX_ABBR
    direction = DIRECTIONS if not short else {v: k for k, v in DIRECTIONS.items()}
    occ = (
        ({v: k for k, v in {**OCCUPANCY, **SUBADDRESS}.items()}) if not short else {**OCCUPANCY, **SUBADDRESS}
    )
    prefix = CITY_PREFIX_ABBR if short else {v: k for k, v in CITY_PREFIX_ABBR.items()}

    def mess(rng: random.Random, groups: list[Group], names: Names, unseen: bool) -> list[Group]:
        states = names.states if not short else names.state_names
        out = []
        for g, fields in groups:
            new: list[Field] = []
            for t, ws in fields:
                text = " ".join(ws).rstrip(".")
                if t.endswith("PostType"):
                    ws = [suffix.get(text, text) + ("." if short and rng.random() < 0.3 else "")]
                elif t.endswith("Directional"):
                    ws = direction.get(text, text).split()
                elif t in ("OccupancyType", "SubaddressType"):
                    ws = occ.get(text, text).split()
                elif t == "StateName":
                    ws = states.get(text, text).split()
                elif t == "StreetNamePreType":
                    full = {v: k for k, v in PRE_TYPE_ABBR.items()}
                    ws = (PRE_TYPE_ABBR if short else full).get(text, text).split()
                elif t == "PlaceName" and len(ws) > 1:
                    ws = [prefix.get(ws[0], ws[0]), *ws[1:]]
                new.append((t, ws))
            out.append((g, new))
        return out

    return mess


def _typo(word: str, rng: random.Random) -> str:
    if len(word) < 4 or not word.isalpha():
        return word
    i = rng.randrange(1, len(word) - 1)
    kind = rng.randrange(3)
    if kind == 0:
        return word[:i] + word[i + 1 :]
    if kind == 1:
        return word[:i] + word[i] + word[i:]
    return word[: i - 1] + word[i] + word[i - 1] + word[i + 1 :]


def _typos(rng: random.Random, groups: list[Group], names: Names, unseen: bool) -> list[Group]:
    kinds = ("StreetName", "PlaceName", "StreetNamePostType", "StateName", "SecondStreetName", "Recipient")
    return _map_words(groups, lambda t, w: _typo(w, rng) if t in kinds and rng.random() < 0.5 else w)


def _missing(rng: random.Random, groups: list[Group], names: Names, unseen: bool) -> list[Group] | None:
    gone = rng.choice(("zip", "state", "country"))
    kept = [gr for gr in groups if gr[0] != gone]
    return kept if len(kept) > 2 and len(kept) < len(groups) else None


def _new_main(make: Callable[[random.Random, Names, bool], Group]) -> Mess:
    return lambda rng, groups, names, unseen: _replace_main(groups, make(rng, names, unseen))


def _add_recipient(rng: random.Random, groups: list[Group], names: Names, unseen: bool) -> list[Group] | None:
    return None if groups[0][0] == "recipient" else [recipient(rng, names, unseen), *groups]


def _add_subaddress(
    rng: random.Random, groups: list[Group], names: Names, unseen: bool
) -> list[Group] | None:
    at = next((i + 1 for i, g in enumerate(groups) if g[0] == "street"), None)
    return None if at is None else [*groups[:at], subaddress(rng), *groups[at:]]


MESSES: dict[str, Mess] = {
    "recipient": _add_recipient,
    "po_box": _new_main(lambda rng, names, unseen: po_box(rng)),
    "rural_route": _new_main(lambda rng, names, unseen: rural_route(rng)),
    "intersection": _new_main(intersection),
    "unit_anywhere": _unit_anywhere,
    "subaddress": _add_subaddress,
    "lower": _case(str.lower),
    "upper": _case(str.upper),
    "case_run": _case_run,
    "glued": _glued,
    "no_commas": _commas(extra=False),
    "extra_commas": _commas(extra=True),
    "abbreviate": _abbreviate(short=True),
    "spell_out": _abbreviate(short=False),
    "typos": _typos,
    "missing": _missing,
}
# Applied after the others (they act on words the structural messes may add).
_LATE = ("lower", "upper", "case_run", "glued", "no_commas", "extra_commas", "typos")
# How often each is drawn: lower case and recipients are common in real lists, upper case less so.
_EXCLUSIVE = (("lower", "upper"), ("no_commas", "extra_commas"), ("abbreviate", "spell_out"),
              ("po_box", "rural_route", "intersection"))  # fmt: skip
_WEIGHT = {"lower": 3, "recipient": 2, "unit_anywhere": 2, "upper": 1, "glued": 2, "no_commas": 2}


def row(seed: int, split: str, index: int, names: Names) -> dict[str, list[str]]:
    rng = random.Random(f"{seed}:{split}:{index}")
    unseen = split == "messy"
    groups = address(rng, names, unseen=unseen)
    if split == "messy":
        n_mess = rng.randint(2, 4)
    elif split in ("train", "val") and rng.random() < 0.1:
        n_mess = rng.randint(1, 2)
    else:
        n_mess = 0
    chosen: list[str] = []
    pool = list(MESS_NAMES)
    while len(chosen) < n_mess:
        name = rng.choices(pool, weights=[_WEIGHT.get(n, 1) for n in pool])[0]
        pool.remove(name)
        chosen.append(name)
        for exclusive in _EXCLUSIVE:  # one of each of these at most: the second would undo the first
            if name in exclusive:
                pool = [n for n in pool if n not in exclusive]
    for name in sorted(chosen, key=lambda n: n in _LATE):
        changed = MESSES[name](rng, groups, names, unseen)
        groups = changed if changed is not None else groups
    tokens, tags = render(groups, commas="no_commas" not in chosen)
    return {"tokens": tokens, "tags": tags, "messes": chosen}


def rows(seed: int, split: str, n: int, names: Names | None = None) -> list[dict[str, list[str]]]:
    names = names or Names()
    return [row(seed, split, i, names) for i in range(n)]
