"""Constrained decoding (mw_env.trainer.decoding): never an invalid IOB2 transition, the best valid sequence
(brute force on small cases), the argmax wherever the argmax is valid; the trainer's word-score path agrees
with the export's runtime helper, whose Viterbi both use."""

from __future__ import annotations

import itertools

import pytest
from tests.trainer.helpers import is_valid

from mw_env.trainer.decoding import Decoder
from mw_env.trainer.export import runtime as helper
from mw_env.trainer.export.runtime import transitions

np = pytest.importorskip("numpy")

LABELS = ("O", "B-Street", "I-Street", "B-Place", "I-Place", "B-Zip")  # B-Zip has no I-


def _brute_force(scores: np.ndarray, labels: tuple[str, ...]) -> tuple[float, list[tuple[int, ...]]]:
    """The best total score over every valid sequence, and the sequences that reach it."""
    best, paths = -np.inf, []
    for path in itertools.product(range(len(labels)), repeat=scores.shape[0]):
        if not is_valid([labels[i] for i in path]):
            continue
        total = float(sum(scores[t, i] for t, i in enumerate(path)))
        if total > best + 1e-12:
            best, paths = total, [path]
        elif abs(total - best) <= 1e-12:
            paths.append(path)
    return best, paths


def test_transitions_follow_iob2() -> None:
    start, step = transitions(LABELS)
    i = {label: k for k, label in enumerate(LABELS)}
    assert [start[k] == 0 for k in range(len(LABELS))] == [True, True, False, True, False, True]
    assert step[i["B-Street"], i["I-Street"]] == 0 and step[i["I-Street"], i["I-Street"]] == 0
    assert step[i["O"], i["I-Street"]] < 0 and step[i["B-Place"], i["I-Street"]] < 0
    assert (step[:, i["B-Place"]] == 0).all() and (step[:, i["O"]] == 0).all()


def test_equals_brute_force_on_small_cases() -> None:
    rng = np.random.default_rng(0)
    start, step = transitions(LABELS)
    for n in range(1, 5):
        for _ in range(15):
            # The log-softmax subtracts one number per word: the best path over the logits is the same.
            scores = rng.normal(scale=3.0, size=(n, len(LABELS)))
            best, paths = _brute_force(scores, LABELS)
            got = helper.viterbi(scores, start, step)
            assert tuple(got) in paths
            assert float(sum(scores[t, k] for t, k in enumerate(got))) == pytest.approx(best)


def test_never_an_invalid_transition_and_the_argmax_where_it_is_valid() -> None:
    rng = np.random.default_rng(1)
    labels = ("O", *(f"{p}-{t}" for t in ("A", "B", "C", "D") for p in ("B", "I")))
    decoder = Decoder(labels)
    argmax = Decoder(labels, "argmax")
    invalid_argmax = 0
    for _ in range(300):
        # Scores that favour I- labels, so the argmax is often invalid.
        logits = rng.normal(size=(int(rng.integers(1, 12)), len(labels))) + np.array([0.0] + [0.0, 1.5] * 4)
        tags = decoder.tags(logits)
        assert is_valid(tags) and len(tags) == logits.shape[0]
        plain = argmax.tags(logits)
        assert plain == [labels[k] for k in logits.argmax(-1)]
        if is_valid(plain):
            assert tags == plain
        else:
            invalid_argmax += 1
    assert invalid_argmax > 50  # the case the decoder exists for was exercised


def test_edge_cases() -> None:
    decoder = Decoder(LABELS)
    assert decoder.decode(np.zeros((0, len(LABELS)))) == []
    # -inf logits (a masked label) do not turn into NaN paths.
    logits = np.full((3, len(LABELS)), -np.inf)
    logits[:, LABELS.index("I-Street")] = 0.0
    logits[0, LABELS.index("O")] = -5.0
    assert is_valid(decoder.tags(logits))
    # Labels outside the B-/I- scheme are free to follow anything.
    plain = Decoder(("O", "X", "I-Y"))
    assert plain.tags(np.array([[0.0, 5.0, 0.0], [0.0, 0.0, 5.0]])) == ["X", "O"]
    with pytest.raises(ValueError, match="decode mode"):
        Decoder(LABELS, "beam")  # type: ignore[arg-type]


@pytest.mark.torch
def test_the_torch_word_scores_path_agrees_with_numpy() -> None:
    """Evaluation and `train predict` pick each word's logits on the device (evaluate.word_scores); the
    runtime helper indexes the numpy logits at the words' first sub-tokens: the same rows, the same tags."""
    torch = pytest.importorskip("torch")
    from mw_env.trainer.data import IGNORE
    from mw_env.trainer.evaluate import word_scores

    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 10, len(LABELS), generator=gen) * 3
    labels = torch.full((4, 10), IGNORE)
    starts = [[1, 3, 4, 8], [1], [], [2, 5, 6, 7, 9]]
    for r, row in enumerate(starts):
        labels[r, row] = 0
    rows = word_scores(logits, labels)
    start, step = helper.transitions(LABELS)
    for r, row in enumerate(starts):
        assert rows[r].shape == (len(row), len(LABELS))
        expected = helper.viterbi(logits[r].numpy()[row], start, step)
        assert Decoder(LABELS).decode(rows[r]) == expected


def test_model_decode_is_a_config_key_and_older_checkpoints_read_the_argmax(tmp_path) -> None:
    from mw_env.base.errors import InputError
    from mw_env.trainspec.config import config_from_dict

    from .helpers import tiny_config

    cfg = tiny_config(tmp_path).config
    assert cfg.model.decode == "viterbi"
    assert tiny_config(tmp_path, "model.decode=argmax").config.model.decode == "argmax"
    with pytest.raises(InputError, match=r"model\.decode = 'beam'") as err:
        tiny_config(tmp_path, "model.decode=beam")
    assert "viterbi, argmax" in (err.value.hint or "")
    # A checkpoint config written before the key: its model was evaluated, and is read, by argmax.
    old = cfg.to_dict()
    del old["model"]["decode"]
    assert config_from_dict(old).model.decode == "argmax"
