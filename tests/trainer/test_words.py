"""Issue 31, words as well as bytes: the word path's features (shape, n-grams, pooling), a checkpoint that
carries it and loads back, an older checkpoint (no word path) met with a sentence, and the ONNX export
agreeing with torch on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mw_env.base.errors import InputError

from .helpers import tiny_config

pytestmark = pytest.mark.torch


def _ids(*texts: str) -> tuple[Any, Any]:
    """Byte-tokenizer rows (CLS, words joined by spaces, SEP), right-padded; (input_ids, attention_mask)."""
    import torch

    rows = [[1, *(b + 4 for b in t.encode()), 2] for t in texts]
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
    return ids, ids != 0


def _module(**zeroed: bool) -> Any:
    import torch

    from mw_env.trainer.network import WordFeatures

    torch.manual_seed(0)
    wf = WordFeatures(8, 512)
    with torch.no_grad():
        for name in zeroed:
            getattr(wf, name).weight.zero_()
    return wf.eval()


def _word(out: Any, row: int, text: str, word: str) -> Any:
    """The vector at `word`'s first byte (text's words are space-separated, position 0 is CLS)."""
    start = 1 + text.index(word)
    return out[row, start]


def test_layout_windows_and_marks() -> None:
    from mw_env.trainer.network import BEGIN, NONE, WordFeatures, word_layout

    ids, mask = _ids("12 Oak")
    same, in_word = word_layout(ids, mask)
    assert in_word[0].tolist() == [False, True, True, False, True, True, True, False]
    # "12" is one word, "Oak" another: each byte's word holds exactly its word's bytes.
    assert same[0, 1].tolist() == [False, True, True, False, False, False, False, False]
    assert same[0, 5].tolist() == [False] * 4 + [True] * 3 + [False]
    window, last = WordFeatures(8, 64).windows(ids, same)
    o = ord("o") + 4  # lower-cased: "Oak" reads as "oak"
    assert [w[0, 4].item() for w in window] == [NONE, NONE, BEGIN, o]
    assert [w[0, 6].item() for w in window] == [BEGIN, o, ord("a") + 4, ord("k") + 4]
    assert last[0].tolist() == [False, False, True, False, False, False, True, False]


def test_pooling_one_vector_per_word_none_outside_words() -> None:
    import torch

    text = "12 Oak St, Apt 4"
    ids, mask = _ids(text, "9 Elm")
    with torch.no_grad():
        out = _module()(ids, mask)
    # Every byte of "Oak" carries the same vector; CLS, the spaces, SEP and padding carry none.
    oak = _word(out, 0, text, "Oak")
    for k in range(3):
        assert torch.equal(out[0, 1 + text.index("Oak") + k], oak)
    assert not out[0, 0].any() and not out[0, 1 + text.index(" Oak")].any() and not out[0, -1].any()
    assert not out[1, 7:].any()  # row 2's SEP (position 6) and its padding
    # A word's vector is its own: the same word elsewhere, in another row, with padding, is the same.
    other = "Oak Lane 7"
    ids2, mask2 = _ids(other, text)
    with torch.no_grad():
        out2 = _module()(ids2, mask2)
    assert torch.allclose(_word(out2, 0, other, "Oak"), oak, atol=1e-6)
    assert torch.allclose(_word(out2, 1, text, "Apt"), _word(out, 0, text, "Apt"), atol=1e-6)


def test_digit_strings_share_their_shape_and_letters_fold_case() -> None:
    import torch

    # Only the shape tables left: two unseen digit strings of a length look alike, a trailing comma does not.
    text = "12345 67890 123 Main Main,"
    ids, mask = _ids(text)
    with torch.no_grad():
        shape_only = _module(ngram_emb=True)(ids, mask)
        grams_only = _module(shape_emb=True, first_emb=True)(ids, mask)
    a, b = _word(shape_only, 0, text, "12345"), _word(shape_only, 0, text, "67890")
    assert torch.allclose(a, b, atol=1e-6)
    assert not torch.allclose(a, _word(shape_only, 0, text, "123 "), atol=1e-4)  # another length
    main, comma = _word(shape_only, 0, text, "Main "), _word(shape_only, 0, text, "Main,")
    assert not torch.allclose(main, comma, atol=1e-4)
    # Only the n-gram table left: the case of a letter does not change the word's n-grams.
    upper = "MAIN Main"
    ids, mask = _ids(upper)
    with torch.no_grad():
        grams = _module(shape_emb=True, first_emb=True)(ids, mask)
    assert torch.allclose(grams[0, 1], grams[0, 6], atol=1e-6)
    assert not torch.allclose(_word(grams_only, 0, text, "12345"), _word(grams_only, 0, text, "67890"))


def test_config_resolves_words_and_refuses_ngrams_without_bytes(tmp_path: Path) -> None:
    from mw_env.trainspec.config import config_from_dict

    cfg = tiny_config(tmp_path).config
    assert cfg.model.words == "auto" and cfg.word_features
    spm = tiny_config(tmp_path, "data.tokenizer=sentencepiece", f"data.spm_model={tmp_path / 'x.model'}")
    assert not spm.config.word_features  # auto: SentencePiece pieces are word pieces already
    with pytest.raises(InputError, match=r"model\.words is 'ngrams' but data\.tokenizer") as err:
        tiny_config(
            tmp_path,
            "data.tokenizer=sentencepiece",
            f"data.spm_model={tmp_path / 'x.model'}",
            "model.words=ngrams",
        )
    assert "model.words: auto" in (err.value.hint or "")
    # A checkpoint config written before the key describes a model without the word path.
    old = cfg.to_dict()
    del old["model"]["words"]
    assert config_from_dict(old).model.words == "none" and not config_from_dict(old).word_features


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny run with the word path and one without (what an older mw-env trained), 4 steps each."""
    from mw_env.trainer.loop import train

    base = tmp_path_factory.mktemp("words")
    out = {}
    for name, words in (("words", "auto"), ("bytes", "none")):
        run = base / name
        train(resolved=tiny_config(run, f"model.words={words}", "runtime.max_steps=4"), echo=lambda _m: None)
        out[name] = run
    return out


@pytest.mark.slow
def test_a_checkpoint_carries_the_word_path_and_loads_back(runs: dict[str, Path]) -> None:
    import torch

    from mw_env.trainer.ckpt.checkpoint import load_checkpoint, model_from_checkpoint

    path = runs["words"] / "checkpoints" / "step-000000004.pt"
    ckpt = load_checkpoint(path)
    assert ckpt["config"]["model"]["words"] == "auto"
    assert any(k.startswith("words.ngram_emb") for k in ckpt["model"])
    model, _tok, _labels = model_from_checkpoint(ckpt)
    assert model.words is not None
    for key, tensor in model.state_dict().items():
        assert torch.equal(tensor, ckpt["model"][key]), key
    ids, mask = _ids("12 Oak St, Apt 4")
    with torch.no_grad():
        with_words = model(ids, mask)
        model.words = None  # the same weights without the word path answer otherwise: it is used
        assert not torch.allclose(with_words, model(ids, mask))


def _as_older_mw_env_wrote_it(run: Path) -> None:
    """The checkpoints of a byte-only run, rewritten without the keys this version added."""
    import torch

    from mw_env.trainer.ckpt.checkpoint import sha256_of, sidecar_path

    for path in sorted((run / "checkpoints").glob("step-*.pt")):
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        for key in ("words", "word_buckets"):
            del ckpt["config"]["model"][key]
        torch.save(ckpt, path)
        sidecar_path(path).write_text(f"{sha256_of(path)}  {path.name}\n")


@pytest.mark.slow
def test_an_older_checkpoint_loads_as_bytes_only_and_resume_meets_a_sentence(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    import shutil

    from mw_env.trainer.ckpt.checkpoint import model_from_checkpoint
    from mw_env.trainer.loop import train

    run = tmp_path / "old"
    shutil.copytree(runs["bytes"], run)
    _as_older_mw_env_wrote_it(run)
    model, _tok, _labels = model_from_checkpoint(run / "checkpoints" / "step-000000004.pt")
    assert model.words is None  # export / predict of an older checkpoint: handled, the model it was
    with pytest.raises(InputError, match="written before word features existed") as err:
        train(resolved=tiny_config(run, "runtime.max_steps=8"), echo=lambda _m: None)
    assert "--set model.words=none" in (err.value.hint or "") and "--fresh" in (err.value.hint or "")
    # The sentence's way out works: continued as it was, to step 8.
    result = train(resolved=tiny_config(run, "model.words=none", "runtime.max_steps=8"), echo=lambda _m: None)
    assert result.step == 8


@pytest.mark.slow
def test_onnx_export_agrees_with_torch_on_the_word_path(runs: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    import numpy as np
    import onnxruntime as ort
    import torch

    from mw_env.trainer.ckpt.checkpoint import model_from_checkpoint
    from mw_env.trainer.export.onnx_export import DEFAULT_OPSET, _export

    model, _tok, _labels = model_from_checkpoint(runs["words"] / "checkpoints" / "step-000000004.pt")
    onnx_path = tmp_path / "model.onnx"
    sample = _ids("1 Main St")
    used = _export(model, sample, onnx_path, opset=DEFAULT_OPSET, max_len=96, exporter="dynamo")
    assert used == "dynamo"
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    # Inputs the export never saw: another batch size and length, padding, digits, a comma, lower case.
    ids, mask = _ids("12345 oak st, apt 4b", "PO Box 77", "9-11 Rue de la Paix, 75002 Paris")
    got = session.run(["logits"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    with torch.no_grad():
        want = model(ids, mask).numpy()
    real = mask.numpy()
    assert np.abs(got - want)[real].max() < 1e-4
    assert (got.argmax(-1) == want.argmax(-1))[real].all()
