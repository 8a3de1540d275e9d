"""The tagging metrics (mw_env.trainer.scoring) against seqeval and against hand-counted cases."""

from __future__ import annotations

import random

import pytest

from mw_env.trainer.scoring import Tally, spans

TYPES = ("house_number", "street", "locality", "postcode")
TAGS = ("O", *(f"{p}-{t}" for t in TYPES for p in ("B", "I")))


def _random_rows(n: int, seed: int, p_noise: float) -> tuple[list[list[str]], list[list[str]]]:
    """Gold rows (well-formed IOB2) and predictions with ill-formed tags in them (I- after O, type switches)."""
    rng = random.Random(seed)
    gold, pred = [], []
    for _ in range(n):
        row: list[str] = []
        while len(row) < rng.randint(1, 12):
            t = rng.choice(TYPES)
            row += [f"B-{t}"] + [f"I-{t}"] * rng.randint(0, 2) if rng.random() < 0.7 else ["O"]
        guess = [rng.choice(TAGS) if rng.random() < p_noise else tag for tag in row]
        gold.append(row)
        pred.append(guess)
    return gold, pred


def test_the_modes_read_ill_formed_tags_differently() -> None:
    tags = ["O", "I-street", "I-street", "B-locality", "I-postcode"]
    assert spans(tags, "conlleval") == {(1, 3, "street"), (3, 4, "locality"), (4, 5, "postcode")}
    assert spans(tags, "strict") == {(3, 4, "locality")}
    # A hand-counted row: gold has street [0,2) and locality [2,3); the prediction starts street with I-.
    t = Tally()
    t.add(["B-street", "I-street", "B-locality"], ["I-street", "I-street", "B-locality"])
    assert t.prf("conlleval") == (1.0, 1.0, 1.0)
    assert t.prf("strict") == (1.0, 0.5, pytest.approx(2 / 3))
    report = t.report()
    assert report["word_accuracy"] == pytest.approx(2 / 3) and report["exact_address_rate"] == 0.0
    assert report["confusions"] == [{"gold": "B-street", "predicted": "I-street", "count": 1}]


def test_tally_matches_seqeval_in_both_modes() -> None:
    metrics = pytest.importorskip("seqeval.metrics")
    scheme = pytest.importorskip("seqeval.scheme")
    gold, pred = _random_rows(400, seed=7, p_noise=0.2)
    t = Tally()
    for g, p in zip(gold, pred, strict=True):
        t.add(g, p)
    for mode, kw in (("conlleval", {}), ("strict", {"mode": "strict", "scheme": scheme.IOB2})):
        p, r, f = t.prf(mode)  # type: ignore[arg-type]
        assert p == pytest.approx(metrics.precision_score(gold, pred, **kw))
        assert r == pytest.approx(metrics.recall_score(gold, pred, **kw))
        assert f == pytest.approx(metrics.f1_score(gold, pred, **kw))
        per = metrics.classification_report(gold, pred, output_dict=True, zero_division=0, **kw)
        for typ in TYPES:
            tp, tr, tf = t.prf(mode, typ)  # type: ignore[arg-type]
            assert (tp, tr, tf) == pytest.approx(
                (per[typ]["precision"], per[typ]["recall"], per[typ]["f1-score"])
            ), (mode, typ)
            assert t.entities[mode][typ][1] == per[typ]["support"]
    # Word accuracy is seqeval's accuracy_score: tags compared word by word.
    assert t.report()["word_accuracy"] == pytest.approx(metrics.accuracy_score(gold, pred))


def test_tallies_merge_to_the_whole() -> None:
    gold, pred = _random_rows(60, seed=3, p_noise=0.3)
    whole, a, b = Tally(), Tally(), Tally()
    for i, (g, p) in enumerate(zip(gold, pred, strict=True)):
        whole.add(g, p)
        (a if i % 2 else b).add(g, p)
    a.merge(b)
    assert a.report() == whole.report()


def test_a_row_of_mismatched_length_is_refused() -> None:
    with pytest.raises(ValueError, match="2 gold tags and 1 predicted"):
        Tally().add(["O", "O"], ["O"])
