"""Labelled US addresses for bench_quality.py, made reproducibly from public name lists; and a messy held-out set.

Source of the words: the Faker package's en_US lists (PyPI `faker`, MIT): 1,000 surnames and 690 first
names (Faker takes them from US Census name frequencies), the 225 USPS street suffixes, the city
prefixes/suffixes, the states and their abbreviations. Abbreviations are USPS Publication 28's (street
suffixes, C1; secondary unit designators, C2). No address here is a real one and none comes from
usaddress's training files (kept aside to verify issue 31).

Splits (row i of a split is a pure function of (seed, split, i), like trainspec/synthetic.py):
- `train`: clean addresses over the "seen" names (4 in 5 names, chosen by a CRC of the name), 1 row in 10
  with one mess from the list below, so both systems meet some of it;
- `clean`: clean addresses over the seen names;
- `messy`: every row made with the *unseen* names (street and city) and given 2-4 messes: lower case, upper
  case, commas dropped, suffixes and states abbreviated or spelled out, other unit designators (`#12`,
  `Ste 4`, `Apt4`), a PO box in another spelling (`P.O. Box`, `POB`, `Post Office Box`), typos in
  street and city words (a letter dropped, doubled or swapped), reordered parts (the unit first, the unit
  last).

Tokens are whitespace-split words with their punctuation attached (`St.,`), as users type them; a word
takes its part's tag (BIO: B- on a part's first word).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable

LABELS = ("O", *(f"{p}-{e}" for e in ("house_number", "street", "unit", "po_box", "locality", "region",
                                      "postcode", "country") for p in ("B", "I")))  # fmt: skip

# USPS Publication 28, C1 (the common ones) and C2.
SUFFIX_ABBR = {
    "Street": "St", "Avenue": "Ave", "Road": "Rd", "Drive": "Dr", "Lane": "Ln", "Court": "Ct",
    "Boulevard": "Blvd", "Place": "Pl", "Circle": "Cir", "Parkway": "Pkwy", "Highway": "Hwy",
    "Terrace": "Ter", "Trail": "Trl", "Square": "Sq", "Heights": "Hts", "Mountain": "Mtn", "Ridge": "Rdg",
    "Crossing": "Xing", "Expressway": "Expy", "Freeway": "Fwy", "Junction": "Jct", "Meadows": "Mdws",
    "Village": "Vlg", "Valley": "Vly", "Station": "Sta", "Springs": "Spgs", "Point": "Pt", "Creek": "Crk",
    "Center": "Ctr", "Estates": "Est", "Gardens": "Gdns", "Harbor": "Hbr", "Island": "Is", "Lake": "Lk",
    "Park": "Park", "Plaza": "Plz", "River": "Riv", "Route": "Rte", "Summit": "Smt", "Turnpike": "Tpke",
}  # fmt: skip
UNIT_DESIGNATORS = (("Apt", "Apartment"), ("Suite", "Ste"), ("Unit",), ("Bldg", "Building"), ("Fl", "Floor"),
                    ("Rm", "Room"), ("Dept",), ("#",))  # fmt: skip
DIRECTIONS = {"N": "North", "S": "South", "E": "East", "W": "West", "NE": "Northeast", "NW": "Northwest",
              "SE": "Southeast", "SW": "Southwest"}  # fmt: skip
PO_BOX = ("PO Box", "P.O. Box", "POB", "Post Office Box", "PO BOX", "Box")

Part = tuple[str, list[str]]  # (entity, words)


class Names:
    """Faker's en_US lists, split into seen (training) and unseen (messy held-out) names by CRC32."""

    def __init__(self) -> None:
        from faker.providers.address.en_US import Provider as Address
        from faker.providers.person.en_US import Provider as Person

        def split(names: object) -> tuple[list[str], list[str]]:
            uniq = sorted(set(names))  # type: ignore[call-overload]
            unseen = [n for n in uniq if zlib.crc32(n.encode()) % 5 == 0]
            return [n for n in uniq if zlib.crc32(n.encode()) % 5 != 0], unseen

        self.last = split(Person.last_names)
        self.first = split(Person.first_names)
        self.suffixes = sorted(set(Address.street_suffixes))
        self.city_prefixes = list(Address.city_prefixes)
        self.city_suffixes = list(Address.city_suffixes)
        # states_abbr also holds DC, which states (the names) does not: the other 50 pair up in order.
        abbrs = [a for a in Address.states_abbr if a != "DC"]
        self.states = dict(zip(abbrs, Address.states, strict=True))


def _street(rng: random.Random, names: Names, unseen: bool) -> list[str]:
    pool = (names.last[1] + names.first[1]) if unseen else (names.last[0] + names.first[0])
    words = []
    if rng.random() < 0.15:
        d = rng.choice(list(DIRECTIONS))
        words.append(d if rng.random() < 0.7 else DIRECTIONS[d])
    words.append(rng.choice(pool))
    if rng.random() < 0.08:
        words.append(rng.choice(pool))
    suffix = rng.choice(names.suffixes)
    if suffix in SUFFIX_ABBR and rng.random() < 0.4:
        suffix = SUFFIX_ABBR[suffix] + ("." if rng.random() < 0.3 else "")
    words.append(suffix)
    if rng.random() < 0.05:
        words.append(rng.choice(list(DIRECTIONS)))
    return words


def _city(rng: random.Random, names: Names, unseen: bool) -> list[str]:
    first, last = names.first[unseen], names.last[unseen]
    form = rng.randrange(4)
    if form == 0:
        return [rng.choice(names.city_prefixes), rng.choice(first) + rng.choice(names.city_suffixes)]
    if form == 1:
        return [rng.choice(names.city_prefixes), rng.choice(first)]
    return [rng.choice(first if form == 2 else last) + rng.choice(names.city_suffixes)]


def _unit(rng: random.Random) -> list[str]:
    kind = rng.choice(UNIT_DESIGNATORS)
    number = str(rng.randint(1, 999)) + (rng.choice("ABCD") if rng.random() < 0.15 else "")
    return [kind[0], number] if kind[0] != "#" or rng.random() < 0.5 else [f"#{number}"]


def address(rng: random.Random, names: Names, *, unseen: bool, po_box: float = 0.1) -> list[Part]:
    """A clean address as parts, commas attached later."""
    parts: list[Part] = []
    if rng.random() < po_box:
        parts.append(("po_box", [*rng.choice(PO_BOX[:2]).split(), str(rng.randint(1, 99999))]))
    else:
        house = str(rng.choice([rng.randint(1, 99), rng.randint(100, 9999), rng.randint(10000, 99999)]))
        parts.append(("house_number", [house + (rng.choice("ABC") if rng.random() < 0.04 else "")]))
        parts.append(("street", _street(rng, names, unseen)))
        if rng.random() < 0.3:
            parts.append(("unit", _unit(rng)))
    parts.append(("locality", _city(rng, names, unseen)))
    abbr, full = rng.choice(list(names.states.items()))
    parts.append(("region", [abbr] if rng.random() < 0.85 else full.split()))
    zipcode = f"{rng.randint(501, 99950):05d}" + (
        f"-{rng.randint(0, 9999):04d}" if rng.random() < 0.1 else ""
    )
    parts.append(("postcode", [zipcode]))
    if rng.random() < 0.05:
        parts.append(("country", rng.choice([["USA"], ["United", "States"], ["US"]])))
    return parts


# Parts after which a comma usually follows in a clean address (before the next part).
_COMMA_AFTER = {"street", "unit", "po_box", "locality", "postcode"}


def render(parts: list[Part], *, commas: bool = True) -> tuple[list[str], list[str]]:
    tokens, tags = [], []
    for k, (entity, words) in enumerate(parts):
        words = list(words)
        nxt = parts[k + 1][0] if k + 1 < len(parts) else None
        if (
            commas
            and nxt is not None
            and entity in _COMMA_AFTER
            and not (entity == "street" and nxt == "unit")
        ):
            words[-1] += ","
        tokens += words
        tags += [f"{'B' if i == 0 else 'I'}-{entity}" for i in range(len(words))]
    return tokens, tags


# -- messes: each takes (rng, parts) and returns new parts, or None where it does not apply ------------------
Mess = Callable[[random.Random, list[Part]], "list[Part] | None"]


def _case(fn: Callable[[str], str]) -> Mess:
    return lambda rng, parts: [(e, [fn(w) for w in ws]) for e, ws in parts]


def _abbreviations(rng: random.Random, parts: list[Part]) -> list[Part] | None:
    full = {v: k for k, v in SUFFIX_ABBR.items()}
    out = []
    for e, ws in parts:
        ws = list(ws)
        if e == "street":
            last = ws[-1].rstrip(".")
            ws[-1] = SUFFIX_ABBR.get(last, full.get(last, last))
            if rng.random() < 0.5:
                ws = [DIRECTIONS.get(w, w) if w in DIRECTIONS else w for w in ws]
        out.append((e, ws))
    return out


def _units(rng: random.Random, parts: list[Part]) -> list[Part] | None:
    if not any(e == "unit" for e, _ in parts):
        i = next((k for k, (e, _) in enumerate(parts) if e == "street"), None)
        if i is None:
            return None
        parts = [*parts[: i + 1], ("unit", _unit(rng)), *parts[i + 1 :]]
    out = []
    for e, ws in parts:
        if e == "unit":
            number = ws[-1].lstrip("#")
            kind = rng.choice(UNIT_DESIGNATORS)
            form = rng.randrange(3)
            ws = (
                [f"#{number}"]
                if form == 0
                else [f"{rng.choice(kind)}{number}"]
                if form == 1
                else [rng.choice(kind), number]
            )
        out.append((e, ws))
    return out


def _po_box(rng: random.Random, parts: list[Part]) -> list[Part]:
    rest = [(e, ws) for e, ws in parts if e not in ("house_number", "street", "unit", "po_box")]
    box = [*rng.choice(PO_BOX).split(), str(rng.randint(1, 9999))]
    return [("po_box", box), *rest]


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


def _typos(rng: random.Random, parts: list[Part]) -> list[Part]:
    return [(e, [_typo(w, rng) if e in ("street", "locality") and rng.random() < 0.5 else w for w in ws])
            for e, ws in parts]  # fmt: skip


def _reorder(rng: random.Random, parts: list[Part]) -> list[Part] | None:
    units = [p for p in parts if p[0] == "unit"]
    if not units:
        return None
    rest = [p for p in parts if p[0] != "unit"]
    return [*units, *rest] if rng.random() < 0.5 else [*rest, *units]


MESSES: dict[str, Mess] = {
    "lower": _case(str.lower),
    "upper": _case(str.upper),
    "abbreviations": _abbreviations,
    "units": _units,
    "po_box": _po_box,
    "typos": _typos,
    "reorder": _reorder,
}


def row(seed: int, split: str, index: int, names: Names) -> dict[str, list[str]]:
    rng = random.Random(f"{seed}:{split}:{index}")
    unseen = split == "messy"
    parts = address(rng, names, unseen=unseen, po_box=0.1)
    commas = True
    n_mess = rng.randint(2, 4) if split == "messy" else (1 if split == "train" and rng.random() < 0.1 else 0)
    for name in rng.sample([*MESSES, "no_commas"], k=n_mess):
        if name == "no_commas":
            commas = False
            continue
        if name == "upper" and rng.random() < 0.7:  # lower case is the common one
            name = "lower"
        changed = MESSES[name](rng, parts)
        parts = changed if changed is not None else parts
    tokens, tags = render(parts, commas=commas)
    return {"tokens": tokens, "tags": tags}


def rows(seed: int, split: str, n: int, names: Names | None = None) -> list[dict[str, list[str]]]:
    names = names or Names()
    return [row(seed, split, i, names) for i in range(n)]
