"""A deterministic synthetic address generator with word-level BIO tags.

Row `i` of split `s` is a pure function of (seed, s, i): it is drawn from `random.Random(f"{seed}:{s}:{i}")`
(string seeds go through SHA-512, independent of PYTHONHASHSEED), so any row can be regenerated on its
own and two processes always agree. Formats cover several countries, with order variants (unit
before/after the street, region present or not), units, postcodes, and noise (case, dropped commas,
abbreviations, typos, dropped country).
"""

from __future__ import annotations

import random
from collections.abc import Callable

ENTITIES = ("house_number", "street", "unit", "locality", "region", "postcode", "country")
LABELS: tuple[str, ...] = ("O", *(f"{p}-{e}" for e in ENTITIES for p in ("B", "I")))

Fragment = tuple[str, str | None]  # (text, entity) - text may hold several words; None = punctuation, O

_FIRST = ["Oak", "Maple", "Cedar", "Elm", "Pine", "Washington", "Lincoln", "Park", "Lake", "Hill", "Church"]
_FIRST += ["Mill", "River", "Spring", "Sunset", "Highland", "Victoria", "King", "Queen", "Station", "Bridge"]
_US_SUFFIX = ["Street", "St", "Avenue", "Ave", "Road", "Rd", "Boulevard", "Blvd", "Lane", "Ln", "Drive", "Dr"]
_US_CITIES = [("Springfield", "IL"), ("Portland", "OR"), ("Austin", "TX"), ("Madison", "WI"), ("Salem", "MA")]
_US_CITIES += [("Columbus", "OH"), ("Denver", "CO"), ("Raleigh", "NC"), ("Boise", "ID"), ("New York", "NY")]
_GB_SUFFIX = ["Road", "Street", "Lane", "Close", "Crescent", "Gardens", "Way", "Terrace"]
_GB_TOWNS = [("London", None), ("Leeds", "West Yorkshire"), ("Bristol", None), ("Oxford", "Oxfordshire")]
_GB_TOWNS += [("York", "North Yorkshire"), ("Bath", "Somerset"), ("Norwich", "Norfolk")]
_DE_STREETS = ["Haupt", "Bahnhof", "Schiller", "Goethe", "Linden", "Berg", "Garten", "Kirch", "Wald", "Ring"]
_DE_SUFFIX = ["straße", "str.", "weg", "allee", "gasse"]
_DE_CITIES = [("Berlin", "Berlin"), ("München", "Bayern"), ("Köln", "Nordrhein-Westfalen")]
_DE_CITIES += [("Hamburg", "Hamburg"), ("Leipzig", "Sachsen"), ("Freiburg im Breisgau", "Baden-Württemberg")]
_FR_TYPES = ["rue", "avenue", "boulevard", "place", "chemin", "allée"]
_FR_NAMES = ["de la Paix", "Victor Hugo", "des Lilas", "du Moulin", "Jean Jaurès", "de l'Église", "Pasteur"]
_FR_CITIES = ["Paris", "Lyon", "Marseille", "Toulouse", "Nantes", "Lille", "Bordeaux", "Saint-Étienne"]
_NL_STREETS = ["Kerkstraat", "Dorpsstraat", "Molenweg", "Stationsplein", "Prinsengracht", "Schoolstraat"]
_NL_CITIES = ["Amsterdam", "Utrecht", "Rotterdam", "Den Haag", "Eindhoven", "Groningen"]
_AU_CITIES = [("Sydney", "NSW", "2000"), ("Melbourne", "VIC", "3000"), ("Brisbane", "QLD", "4000")]
_AU_CITIES += [("Perth", "WA", "6000"), ("Adelaide", "SA", "5000"), ("Hobart", "TAS", "7000")]
_CA_CITIES = [
    ("Toronto", "ON"),
    ("Montréal", "QC"),
    ("Vancouver", "BC"),
    ("Calgary", "AB"),
    ("Halifax", "NS"),
]
_COUNTRY_NAMES = {
    "US": ["USA", "United States", "US"],
    "GB": ["United Kingdom", "UK", "England"],
    "DE": ["Deutschland", "Germany"],
    "FR": ["France"],
    "NL": ["Nederland", "Netherlands"],
    "AU": ["Australia"],
    "CA": ["Canada"],
}
_ABBREV = {"Street": "St.", "Avenue": "Ave.", "Road": "Rd.", "straße": "str.", "Boulevard": "Blvd."}


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(n))


def _letters(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("ABCDEFGHJKLMNPRSTUVWXYZ") for _ in range(n))


def _house(rng: random.Random) -> str:
    num = str(rng.randint(1, 9999) if rng.random() < 0.7 else rng.randint(1, 99))
    return num + (rng.choice("ABC") if rng.random() < 0.08 else "")


def _us(rng: random.Random) -> list[Fragment]:
    city, state = rng.choice(_US_CITIES)
    street = f"{rng.choice(_FIRST)} {rng.choice(_US_SUFFIX)}"
    if rng.random() < 0.2:
        street = f"{rng.choice('NSEW')} {street}"
    unit = rng.choice(
        [f"Apt {rng.randint(1, 40)}{rng.choice(['', 'B', 'C'])}", f"Suite {rng.randint(100, 990)}"]
    )
    unit = (
        unit
        if rng.random() < 0.35
        else rng.choice([f"#{rng.randint(1, 99)}", ""])
        if rng.random() < 0.2
        else ""
    )
    zipc = _digits(rng, 5) + (f"-{_digits(rng, 4)}" if rng.random() < 0.2 else "")
    parts: list[Fragment] = [(_house(rng), "house_number"), (street, "street")]
    if unit:
        parts += [(",", None), (unit, "unit")]
    parts += [(",", None), (city, "locality"), (",", None), (state, "region"), (zipc, "postcode")]
    return parts


def _gb(rng: random.Random) -> list[Fragment]:
    town, county = rng.choice(_GB_TOWNS)
    pc = f"{_letters(rng, rng.choice([1, 2]))}{rng.randint(1, 20)} {rng.randint(1, 9)}{_letters(rng, 2)}"
    parts: list[Fragment] = []
    if rng.random() < 0.3:
        parts += [(f"Flat {rng.randint(1, 30)}", "unit"), (",", None)]
    parts += [(_house(rng), "house_number"), (f"{rng.choice(_FIRST)} {rng.choice(_GB_SUFFIX)}", "street")]
    parts += [(",", None), (town, "locality"), (",", None)]
    if county and rng.random() < 0.5:
        parts += [(county, "region"), (",", None)]
    parts += [(pc, "postcode")]
    return parts


def _de(rng: random.Random) -> list[Fragment]:
    city, state = rng.choice(_DE_CITIES)
    street = rng.choice(_DE_STREETS) + rng.choice(_DE_SUFFIX)
    parts: list[Fragment] = [(street, "street"), (_house(rng), "house_number")]
    if rng.random() < 0.25:
        parts += [
            (",", None),
            (rng.choice([f"Wohnung {rng.randint(1, 20)}", f"{rng.randint(1, 5)}. OG"]), "unit"),
        ]
    parts += [(",", None), (_digits(rng, 5), "postcode"), (city, "locality")]
    if rng.random() < 0.2:
        parts += [(",", None), (state, "region")]
    return parts


def _fr(rng: random.Random) -> list[Fragment]:
    parts: list[Fragment] = [(_house(rng), "house_number")]
    if rng.random() < 0.1:
        parts[0] = (parts[0][0] + " bis", "house_number")
    parts += [(f"{rng.choice(_FR_TYPES)} {rng.choice(_FR_NAMES)}", "street")]
    if rng.random() < 0.25:
        parts += [
            (",", None),
            (rng.choice([f"Apt {rng.randint(1, 60)}", f"Bât {rng.choice('ABCD')}"]), "unit"),
        ]
    parts += [(",", None), (_digits(rng, 5), "postcode"), (rng.choice(_FR_CITIES), "locality")]
    return parts


def _nl(rng: random.Random) -> list[Fragment]:
    house = str(rng.randint(1, 400))
    parts: list[Fragment] = [(rng.choice(_NL_STREETS), "street"), (house, "house_number")]
    if rng.random() < 0.2:
        parts += [(rng.choice([f"{rng.choice('abc')}", "hs", f"{rng.randint(1, 3)}-hoog"]), "unit")]
    parts += [(",", None), (f"{rng.randint(1000, 9999)} {_letters(rng, 2)}", "postcode")]
    parts += [(rng.choice(_NL_CITIES), "locality")]
    return parts


def _au(rng: random.Random) -> list[Fragment]:
    city, state, pc = rng.choice(_AU_CITIES)
    pc = str(int(pc) + rng.randint(0, 99)).zfill(4)
    parts: list[Fragment] = []
    if rng.random() < 0.3:
        parts += [(f"Unit {rng.randint(1, 50)}", "unit"), (",", None)]
    parts += [(_house(rng), "house_number"), (f"{rng.choice(_FIRST)} {rng.choice(_US_SUFFIX)}", "street")]
    parts += [(",", None), (city, "locality"), (state, "region"), (pc, "postcode")]
    return parts


def _ca(rng: random.Random) -> list[Fragment]:
    city, prov = rng.choice(_CA_CITIES)
    pc = f"{_letters(rng, 1)}{rng.randint(0, 9)}{_letters(rng, 1)} {rng.randint(0, 9)}{_letters(rng, 1)}{rng.randint(0, 9)}"
    if prov == "QC":
        street = f"{rng.choice(['Rue', 'Boulevard', 'Avenue'])} {rng.choice(['Sainte-Catherine', 'Saint-Denis', 'Laurier'])}"
    else:
        street = f"{rng.choice(_FIRST)} {rng.choice(_US_SUFFIX)}"
    parts: list[Fragment] = [(_house(rng), "house_number"), (street, "street")]
    if rng.random() < 0.2:
        parts += [(",", None), (f"Suite {rng.randint(100, 2000)}", "unit")]
    parts += [(",", None), (city, "locality"), (prov, "region"), (pc, "postcode")]
    return parts


FORMATS: dict[str, Callable[[random.Random], list[Fragment]]] = {
    "US": _us,
    "GB": _gb,
    "DE": _de,
    "FR": _fr,
    "NL": _nl,
    "AU": _au,
    "CA": _ca,
}


def _typo(rng: random.Random, word: str) -> str:
    if len(word) < 4:
        return word
    i = rng.randrange(len(word) - 1)
    return word[:i] + word[i + 1] + word[i] + word[i + 2 :]


def generate_row(
    *, seed: int, split: str, index: int, countries: tuple[str, ...], noise: float
) -> tuple[list[str], list[str]]:
    """One address as (words, BIO tags); a pure function of its arguments."""
    rng = random.Random(f"{seed}:{split}:{index}")
    country = rng.choice(countries)
    parts = FORMATS[country](rng)
    if rng.random() >= noise * 0.5:  # the country name is often left out of real addresses
        parts += [(",", None), (rng.choice(_COUNTRY_NAMES[country]), "country")]
    words: list[str] = []
    tags: list[str] = []
    drop_commas = rng.random() < noise
    case = rng.random()
    for text, entity in parts:
        if entity is None:
            if not drop_commas:
                words.append(text)
                tags.append("O")
            continue
        for j, word in enumerate(text.split()):
            if rng.random() < noise * 0.3:
                word = _ABBREV.get(word, word)
            if rng.random() < noise * 0.1:
                word = _typo(rng, word)
            words.append(word)
            tags.append(("B-" if j == 0 else "I-") + entity)
    if case < noise * 0.5:
        words = [w.lower() for w in words]
    elif case < noise:
        words = [w.upper() for w in words]
    return words, tags


def check_countries(countries: tuple[str, ...]) -> None:
    from mw_env.base.errors import InputError

    unknown = [c for c in countries if c not in FORMATS]
    if unknown or not countries:
        raise InputError(
            f"config: data.countries has unknown {unknown or 'nothing'}",
            hint=f"allowed: {', '.join(FORMATS)}",
        )
