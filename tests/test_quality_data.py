"""bench/quality_data.py, the quality yardstick's generator: deterministic per seed, every messy form present,
the messy set over names the training split never holds, well-formed IOB2 tags in usaddress's label set."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("faker")
BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
import quality_data as qd  # noqa: E402
import quality_forms as qf  # noqa: E402
from tests.trainer.helpers import is_valid  # noqa: E402


@pytest.fixture(scope="module")
def names() -> qd.Names:
    return qd.Names()


@pytest.fixture(scope="module")
def splits(names: qd.Names) -> dict[str, list[dict[str, list[str]]]]:
    return {
        split: qd.rows(7, split, n, names) for split, n in (("train", 1500), ("clean", 300), ("messy", 800))
    }


def test_rows_are_a_pure_function_of_seed_split_and_index(names: qd.Names) -> None:
    assert qd.rows(7, "messy", 40, names) == qd.rows(7, "messy", 40, names)
    assert qd.row(7, "messy", 39, names) == qd.rows(7, "messy", 40, names)[39]
    assert qd.rows(8, "messy", 40, names) != qd.rows(7, "messy", 40, names)
    assert qd.rows(7, "clean", 40, names) != qd.rows(7, "train", 40, names)


def test_tags_are_iob2_over_the_label_set(splits: dict[str, list[dict[str, list[str]]]]) -> None:
    for rows in splits.values():
        for r in rows:
            assert len(r["tokens"]) == len(r["tags"]) > 0
            assert all(t and not any(c.isspace() for c in t) for t in r["tokens"])
            assert set(r["tags"]) <= set(qd.LABELS)
            assert is_valid(r["tags"]), r


def test_every_messy_form_and_every_kind_is_present(splits: dict[str, list[dict[str, list[str]]]]) -> None:
    messy, train = splits["messy"], splits["train"]
    assert all(2 <= len(r["messes"]) <= 4 for r in messy)
    drawn = Counter(m for r in messy for m in r["messes"])
    assert set(drawn) == set(qd.MESS_NAMES)
    # Each form shows in the words themselves.
    text = [" ".join(r["tokens"]) for r in messy]
    assert any(t == t.lower() and any(c.isalpha() for c in t) for t in text)  # lower case
    assert any(t == t.upper() and any(c.isalpha() for c in t) for t in text)  # upper case
    assert any("," not in t for t in text)  # commas missing
    assert any(",," in t or ", ," in t for t in text)  # commas extra
    words = {w for r in messy for w in r["tokens"]}
    for form in ("#", "Apt", "Ste", "Unit", "Fl", "RR", "&", "Attn"):
        assert any(w.lstrip("(").lower().startswith(form.lower()) for w in words), form
    for form in ("PO", "P.O.", "Rural"):
        assert form in words, form
    assert any(w.endswith(",") and w[:-1].isalpha() for w in words)  # punctuation glued to words
    # Every usaddress kind, in the messy set and (rarer) in the training split: each can be learned.
    kinds = {t[2:] for r in messy for t in r["tags"] if t != "O"}
    assert kinds == set(qd.TYPES)
    trained = Counter(t[2:] for r in train for t in r["tags"] if t.startswith("B-"))
    assert set(trained) == set(qd.TYPES)
    # Most training rows are clean; the clean split has no mess at all.
    assert 0.05 < sum(bool(r["messes"]) for r in train) / len(train) < 0.15
    assert not any(r["messes"] for r in splits["clean"])


def test_the_messy_set_holds_out_its_names(
    names: qd.Names, splits: dict[str, list[dict[str, list[str]]]]
) -> None:
    seen = set(names.first[0]) | set(names.last[0])
    unseen = set(names.first[1]) | set(names.last[1])
    assert seen and unseen and not seen & unseen
    # The shared street vocabulary (the commonest street names, the place words that are street types too,
    # the long multi-word names) is in every split on purpose, as real streets share it; the names made from
    # Faker's lists are what is held out.
    common = {
        *qf.COMMON_STREETS,
        *qf.PLACE_WORDS,
        *(w.title() for name in qf.LONG_STREETS for w in name.split()),
    }

    def name_words(rows: list[dict[str, list[str]]], kinds: tuple[str, ...]) -> set[str]:
        return {
            w.strip(",.;()").title()
            for r in rows
            if "typos" not in r["messes"]
            for w, t in zip(r["tokens"], r["tags"], strict=True)
            if t[2:] in kinds and w.strip(",.;()").isalpha()
        }

    messy_streets = name_words(splits["messy"], ("StreetName", "SecondStreetName")) - common
    messy_people = name_words(splits["messy"], ("Recipient",))
    assert messy_streets and not messy_streets & seen
    assert not messy_people & seen
    assert name_words(splits["train"], ("StreetName",)) - common <= seen
