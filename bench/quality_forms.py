"""The clean forms of a US address, labelled with usaddress's kinds: the vocabulary and the generators that
quality_data.py builds its splits (and messes) from.

Source of the words: the Faker package's en_US lists (PyPI `faker`, MIT): 1,000 surnames and 690 first
names (Faker takes them from US Census name frequencies), the 225 USPS street suffixes, the city
prefixes/suffixes, the states and their abbreviations, the company suffixes. Abbreviations are USPS
Publication 28's (street suffixes, C1; secondary unit designators, C2). No address here is a real one and
none comes from usaddress's training files (kept aside to verify issue 31).

Tags: BIO over words, with the label set of usaddress (the widely used US address CRF), so the kinds are
the ones real US address data is labelled with: Recipient, AddressNumber, StreetNamePreDirectional,
StreetNamePreType ("County Road" 7), StreetName, StreetNamePostType, StreetNamePostDirectional,
OccupancyType/OccupancyIdentifier (apt, ste, unit, #, fl), SubaddressType/SubaddressIdentifier (bldg,
dept), USPSBoxType/USPSBoxID (PO Box 12), USPSBoxGroupType/USPSBoxGroupID (RR 2 in "RR 2 Box 152"),
IntersectionSeparator and SecondStreetName* (Main St & 5th Ave), PlaceName, StateName, ZipCode,
CountryName. A punctuation-only word (a lone "," or "-") is O. Tokens are whitespace-split words with
their punctuation attached (`St.,`), as users type them; a word takes its field's tag (B- on a field's
first word).
"""

from __future__ import annotations

import random
import zlib

TYPES = (
    "Recipient", "AddressNumber", "StreetNamePreDirectional", "StreetNamePreType", "StreetName",
    "StreetNamePostType", "StreetNamePostDirectional", "SubaddressType", "SubaddressIdentifier",
    "OccupancyType", "OccupancyIdentifier", "USPSBoxGroupType", "USPSBoxGroupID", "USPSBoxType", "USPSBoxID",
    "IntersectionSeparator", "SecondStreetNamePreDirectional", "SecondStreetName", "SecondStreetNamePostType",
    "PlaceName", "StateName", "ZipCode", "CountryName",
)  # fmt: skip
LABELS = ("O", *(f"{p}-{t}" for t in TYPES for p in ("B", "I")))
# The messes, by name: row() draws from these (MESS_NAMES is what tests check each of).
# USPS Publication 28, C1 (the common ones) and C2.
SUFFIX_ABBR = {
    "Street": "St", "Avenue": "Ave", "Road": "Rd", "Drive": "Dr", "Lane": "Ln", "Court": "Ct",
    "Boulevard": "Blvd", "Place": "Pl", "Circle": "Cir", "Parkway": "Pkwy", "Highway": "Hwy",
    "Terrace": "Ter", "Trail": "Trl", "Square": "Sq", "Heights": "Hts", "Mountain": "Mtn", "Ridge": "Rdg",
    "Crossing": "Xing", "Expressway": "Expy", "Freeway": "Fwy", "Junction": "Jct", "Meadows": "Mdws",
    "Village": "Vlg", "Valley": "Vly", "Station": "Sta", "Springs": "Spgs", "Point": "Pt", "Creek": "Crk",
    "Center": "Ctr", "Estates": "Est", "Gardens": "Gdns", "Harbor": "Hbr", "Island": "Is", "Lake": "Lk",
    "Plaza": "Plz", "River": "Riv", "Route": "Rte", "Summit": "Smt", "Turnpike": "Tpke", "Way": "Way",
}  # fmt: skip
COMMON_SUFFIXES = (
    "Street",
    "Avenue",
    "Road",
    "Drive",
    "Lane",
    "Court",
    "Boulevard",
    "Way",
    "Place",
    "Circle",
)
OCCUPANCY = {"Apartment": "Apt", "Suite": "Ste", "Unit": "Unit", "Floor": "Fl", "Room": "Rm", "Space": "Spc"}
SUBADDRESS = {"Building": "Bldg", "Department": "Dept", "Wing": "Wing", "Lot": "Lot"}
DIRECTIONS = {"N": "North", "S": "South", "E": "East", "W": "West", "NE": "Northeast", "NW": "Northwest",
              "SE": "Southeast", "SW": "Southwest"}  # fmt: skip
PRE_TYPES = (
    ["County", "Road"],
    ["State", "Route"],
    ["Highway"],
    ["Route"],
    ["US", "Highway"],
    ["Farm", "Road"],
)
PRE_TYPE_ABBR = {"County Road": "CR", "State Route": "SR", "Highway": "Hwy", "Route": "Rte", "US Highway": "US Hwy",
                 "Farm Road": "FM"}  # fmt: skip
COMMON_STREETS = ("Main", "Oak", "Maple", "Cedar", "Pine", "Elm", "Washington", "Park", "Church", "Mill",
                  "Spring", "Hill", "Center", "Lincoln", "Jackson", "Walnut", "Cherry", "Highland")  # fmt: skip
# Words that name places and streets alike (and are street types too, some of them): "Oak Park", "Spring
# Creek Rd", "Park Ave", "Cedar Rapids": the ambiguity real addresses have.
PLACE_WORDS = ("Park", "Lake", "Spring", "Mill", "Forest", "Hill", "Ridge", "Creek", "Valley", "Grove", "Oak",
               "Cedar", "Pine", "Bay", "River", "Falls", "Rapids", "Springs", "Heights", "Meadow", "Harbor",
               "Village", "Beach", "Point", "Rock", "Green", "Grand", "Palm", "Glen", "Wood", "Brook", "City")  # fmt: skip
LONG_STREETS = ("Martin Luther King Jr", "Old Mill", "Lake Shore", "Old Post Office", "Avenue of the",
                "Old Country", "Twin Oaks", "Stony Brook", "Deer Run", "Fox Hollow")  # fmt: skip
PO_BOX = ("PO Box", "P.O. Box", "POB", "Post Office Box", "PO BOX", "Box", "P O Box", "PO Drawer")
BOX_GROUPS = ("RR", "Rural Route", "R.R.", "HC", "Star Route", "RR#")
SEPARATORS = ("&", "and", "at", "@", "/")
CITY_PREFIX_ABBR = {"North": "N.", "South": "S.", "East": "E.", "West": "W.", "Fort": "Ft", "Saint": "St.",
                    "Mount": "Mt", "Port": "Pt", "Lake": "Lk"}  # fmt: skip
COUNTRIES = (["USA"], ["United", "States"], ["US"], ["U.S.A."])

Field = tuple[str, list[str]]  # (usaddress type, words)
Group = tuple[str, list[Field]]  # (part of the address: recipient, street, unit, place, ...; its fields)


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


class Names:
    """Faker's en_US lists, split into seen (training) and unseen (messy held-out) names by CRC32."""

    def __init__(self) -> None:
        from faker.providers.address.en_US import Provider as Address
        from faker.providers.company.en_US import Provider as Company
        from faker.providers.person.en_US import Provider as Person

        def split(names: object) -> tuple[list[str], list[str]]:
            uniq = sorted(set(names))  # type: ignore[call-overload]
            unseen = [n for n in uniq if zlib.crc32(n.encode()) % 5 == 0]
            return [n for n in uniq if zlib.crc32(n.encode()) % 5 != 0], unseen

        self.last = split(Person.last_names)
        self.first = split(Person.first_names)
        self.suffixes = sorted(set(Address.street_suffixes))
        self.city_prefixes = [*Address.city_prefixes, "Fort", "Saint", "Mount"]
        self.city_suffixes = list(Address.city_suffixes)
        self.company_suffixes = list(Company.company_suffixes)
        # states_abbr also holds DC, which states (the names) does not: the other 50 pair up in order.
        abbrs = [a for a in Address.states_abbr if a != "DC"]
        self.states = dict(zip(abbrs, Address.states, strict=True))
        self.state_names = {v: k for k, v in self.states.items()}


# -- the clean forms --------------------------------------------------------------------------------------
def _street_fields(rng: random.Random, names: Names, unseen: bool, prefix: str = "") -> list[Field]:
    """A street: [pre-direction] (pre-type + name | name [+ post-type]) [post-direction]. Names of one to
    three words, some of them words that are street types or place words elsewhere ("Spring Creek" Rd)."""
    pool = names.last[unseen] + names.first[unseen]
    out: list[Field] = []
    if rng.random() < 0.15:
        d = rng.choice(list(DIRECTIONS))
        out.append((f"{prefix}StreetNamePreDirectional", [d if rng.random() < 0.7 else DIRECTIONS[d]]))
    if not prefix and rng.random() < 0.05:
        out.append(("StreetNamePreType", list(rng.choice(PRE_TYPES))))
        out.append(("StreetName", [str(rng.randint(1, 999))]))
        return out
    form = rng.random()
    if form < 0.15:
        name = [_ordinal(rng.randint(1, 120))]
    elif form < 0.27:
        name = [rng.choice(COMMON_STREETS)]
    elif form < 0.37:  # a place word with a name or another place word: "Spring Creek", "Johnson Mill"
        name = rng.choice(
            ([rng.choice(PLACE_WORDS), rng.choice(pool)], [rng.choice(pool), rng.choice(PLACE_WORDS)])
        )
        name = name if rng.random() < 0.5 else [rng.choice(PLACE_WORDS), rng.choice(PLACE_WORDS)]
    elif form < 0.40:
        name = rng.choice(LONG_STREETS).split()
    else:
        name = [rng.choice(pool)] + ([rng.choice(pool)] if rng.random() < 0.08 else [])
    out.append((f"{prefix}StreetName", name))
    if rng.random() < 0.07 and not name[0][0].isdigit():  # "45 Broadway", "12 Johnson": no type
        return out
    suffix = rng.choice(COMMON_SUFFIXES) if rng.random() < 0.6 else rng.choice(names.suffixes)
    if suffix in SUFFIX_ABBR and rng.random() < 0.5:
        suffix = SUFFIX_ABBR[suffix] + ("." if rng.random() < 0.2 else "")
    out.append((f"{prefix}StreetNamePostType", [suffix]))
    if not prefix and rng.random() < 0.06:
        out.append(("StreetNamePostDirectional", [rng.choice(list(DIRECTIONS))]))
    return out


def _city(rng: random.Random, names: Names, unseen: bool) -> list[str]:
    """One to three words: "Jamesville", "North Amy", "Oak Park", "Miller Creek", "Saint Kim", "Port Lee Falls"."""
    first, last = names.first[unseen], names.last[unseen]
    form = rng.randrange(8)
    if form == 0:
        return [rng.choice(names.city_prefixes), rng.choice(first) + rng.choice(names.city_suffixes)]
    if form == 1:
        return [rng.choice(names.city_prefixes), rng.choice(first + last)]
    if form == 2:
        return [rng.choice(PLACE_WORDS), rng.choice(PLACE_WORDS)]
    if form == 3:
        return [rng.choice(last), rng.choice(PLACE_WORDS)]
    if form == 4 and rng.random() < 0.5:
        return [rng.choice(names.city_prefixes), rng.choice(last), rng.choice(PLACE_WORDS)]
    return [rng.choice(first if form % 2 else last) + rng.choice(names.city_suffixes)]


def unit(rng: random.Random) -> Group:
    number = str(rng.randint(1, 999)) + (rng.choice("ABCD") if rng.random() < 0.15 else "")
    if rng.random() < 0.2:
        return ("unit", [("OccupancyIdentifier", [f"#{number}"])])
    kind = rng.choice(list(OCCUPANCY))
    word = OCCUPANCY[kind] if rng.random() < 0.7 else kind
    if kind == "Floor" and rng.random() < 0.4:  # "2nd Floor": the identifier first
        return ("unit", [("OccupancyIdentifier", [_ordinal(rng.randint(1, 40))]), ("OccupancyType", [word])])
    return ("unit", [("OccupancyType", [word]), ("OccupancyIdentifier", [number])])


def subaddress(rng: random.Random) -> Group:
    kind = rng.choice(list(SUBADDRESS))
    word = SUBADDRESS[kind] if rng.random() < 0.6 else kind
    ident = str(rng.randint(1, 40)) if rng.random() < 0.6 else rng.choice("ABCDEFGH")
    return ("subaddress", [("SubaddressType", [word]), ("SubaddressIdentifier", [ident])])


def po_box(rng: random.Random) -> Group:
    return ("box", [("USPSBoxType", rng.choice(PO_BOX).split()), ("USPSBoxID", [str(rng.randint(1, 99999))])])


def rural_route(rng: random.Random) -> Group:
    group = rng.choice(BOX_GROUPS)
    number = str(rng.randint(1, 12))
    if group == "RR#" or (group == "RR" and rng.random() < 0.3):  # "RR2" / "RR#2": one word
        group_fields: list[Field] = [("USPSBoxGroupID", [f"{group}{number}"])]
    else:
        group_fields = [("USPSBoxGroupType", group.split()), ("USPSBoxGroupID", [number])]
    box = [("USPSBoxType", [rng.choice(("Box", "BOX", "Bx"))]), ("USPSBoxID", [str(rng.randint(1, 999))])]
    return ("box", [*group_fields, *box])


def intersection(rng: random.Random, names: Names, unseen: bool) -> Group:
    first = _street_fields(rng, names, unseen)
    second = _street_fields(rng, names, unseen, prefix="Second")
    return ("street", [*first, ("IntersectionSeparator", [rng.choice(SEPARATORS)]), *second])


def recipient(rng: random.Random, names: Names, unseen: bool) -> Group:
    first, last = rng.choice(names.first[unseen]), rng.choice(names.last[unseen])
    form = rng.randrange(7)
    if form == 0:
        words = [first, last]
    elif form == 1:
        words = [first, rng.choice("ABCDEFGHJKLMRSTW") + ".", last]
    elif form == 2:
        words = [last + ",", first]
    elif form == 3:
        words = [rng.choice(("Attn:", "ATTN", "Attn", "c/o", "C/O")), first, last]
    elif form == 4:
        words = [last, *rng.choice(names.company_suffixes).split()]
    elif form == 5:
        words = [last + ",", rng.choice(names.last[unseen]), "and", rng.choice(names.last[unseen])]
    else:
        words = [f"{last}-{rng.choice(names.last[unseen])}", rng.choice(("Inc", "LLC", "Co.", "Corp"))]
    return ("recipient", [("Recipient", words)])


def address(rng: random.Random, names: Names, *, unseen: bool) -> list[Group]:
    """A clean address as groups of fields; commas are added by render()."""
    groups: list[Group] = []
    if rng.random() < 0.03:
        groups.append(recipient(rng, names, unseen))
    form = rng.random()
    if form < 0.07:
        groups.append(po_box(rng))
    elif form < 0.09:
        groups.append(rural_route(rng))
    elif form < 0.12:
        groups.append(intersection(rng, names, unseen))
    else:
        house = str(rng.choice([rng.randint(1, 99), rng.randint(100, 9999), rng.randint(10000, 99999)]))
        house += rng.choice("ABC") if rng.random() < 0.03 else ""
        house += f"-{int(house.rstrip('ABC')) + 2}" if rng.random() < 0.02 else ""  # "12-14"
        groups.append(("street", [("AddressNumber", [house]), *_street_fields(rng, names, unseen)]))
        if rng.random() < 0.03:
            groups.append(subaddress(rng))
        if rng.random() < 0.25:
            groups.append(unit(rng))
    groups.append(("place", [("PlaceName", _city(rng, names, unseen))]))
    abbr, full = rng.choice(list(names.states.items()))
    groups.append(("state", [("StateName", [abbr] if rng.random() < 0.85 else full.split())]))
    zipcode = f"{rng.randint(501, 99950):05d}" + (
        f"-{rng.randint(0, 9999):04d}" if rng.random() < 0.1 else ""
    )
    groups.append(("zip", [("ZipCode", [zipcode])]))
    if rng.random() < 0.04:
        groups.append(("country", [("CountryName", list(rng.choice(COUNTRIES)))]))
    return groups


# Groups after which a comma usually follows in a clean address (when another group follows).
_COMMA_AFTER = {"recipient", "street", "box", "unit", "subaddress", "place", "zip"}


def render(groups: list[Group], *, commas: bool = True) -> tuple[list[str], list[str]]:
    tokens: list[str] = []
    tags: list[str] = []
    for k, (group, fields) in enumerate(groups):
        nxt = groups[k + 1][0] if k + 1 < len(groups) else None
        comma = commas and nxt is not None and group in _COMMA_AFTER
        comma = comma and not (group == "street" and nxt in ("unit", "subaddress"))
        for f, (typ, words) in enumerate(fields):
            words = list(words)
            if comma and f == len(fields) - 1 and words[-1][-1:] not in (",", ";"):
                words[-1] += ","
            tokens += words
            tags += [
                "O" if typ == "O" or _bare(w) else f"{'B' if i == 0 else 'I'}-{typ}"
                for i, w in enumerate(words)
            ]
    # A field's first real word carries its B- (a word of punctuation alone is O, and no I- follows an O).
    fixed, prev_type = [], ""
    for tag in tags:
        prefix, _, typ = tag.partition("-")
        fixed.append(f"B-{typ}" if prefix == "I" and typ != prev_type else tag)
        prev_type = typ
    return tokens, fixed


def _bare(word: str) -> bool:
    return not any(ch.isalnum() for ch in word) and word not in ("&", "@", "/", "#")
