"""model.attend: words (trainer/network.py, WordPool): the blocks over word positions; shapes, padding, the static width
an export traces, the parameter formula, resume refusal, checkpoints from before the key, ONNX parity."""

from __future__ import annotations

from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.trainspec.config import architecture_diff, config_from_dict

from .helpers import tiny_config

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")


def _ids(*texts: str) -> tuple[torch.Tensor, torch.Tensor]:
    from mw_env.trainer.data import CLS, N_SPECIAL, PAD, SEP

    rows = [[CLS, *(b + N_SPECIAL for b in t.encode()), SEP] for t in texts]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
    return ids, ids != PAD


def _model(tmp_path: Path, *extra: str) -> torch.nn.Module:
    from mw_env.trainer.model import build_model

    cfg = tiny_config(tmp_path, "model.attend=words", "model.dropout=0", *extra).config
    return build_model(cfg, vocab_size=260, n_labels=7).eval()


def test_each_word_gets_one_row_of_logits_and_padding_is_inert(tmp_path: Path) -> None:
    from mw_env.trainer.data import N_SPECIAL
    from mw_env.trainer.network import SPACE

    model = _model(tmp_path)
    ids, mask = _ids("12 Oak St, Apt 4", "PO Box 7", "")
    with torch.no_grad():
        out = model(ids, mask)
    assert out.shape == (3, ids.shape[1], 7) and torch.isfinite(out).all()
    word_byte = (ids >= N_SPECIAL) & (ids != SPACE)
    assert (out[~word_byte] == 0).all()  # CLS, SEP, spaces, padding: no logits
    # Every byte of a word carries its word's logits: "Oak" is bytes 4-6 of row 0.
    assert torch.equal(out[0, 4], out[0, 5]) and torch.equal(out[0, 4], out[0, 6])
    assert not torch.equal(out[0, 4], out[0, 8])  # "St," is another word
    with torch.no_grad():
        alone = model(*_ids("PO Box 7"))
        padded = model(
            torch.cat([ids, torch.zeros(3, 5, dtype=torch.long)], 1),
            torch.cat([mask, torch.zeros(3, 5, dtype=torch.bool)], 1),
        )
    torch.testing.assert_close(out[1, : alone.shape[1]], alone[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(padded[:, : ids.shape[1]], out, rtol=1e-5, atol=1e-5)


def test_the_static_width_an_export_traces_gives_the_same_logits(tmp_path: Path, monkeypatch) -> None:
    from mw_env.trainer import network as wordpool

    model = _model(tmp_path)
    ids, mask = _ids("1600 Pennsylvania Avenue NW, Washington, DC 20500", "a b c d e f g h", "x")
    with torch.no_grad():
        eager = model(ids, mask)
        monkeypatch.setattr(wordpool, "_static_shapes", lambda: True)
        static = model(ids, mask)
    torch.testing.assert_close(static, eager, rtol=1e-5, atol=1e-5)
    # No sequence of T ids holds more than (T + 1) // 2 words: one byte each, separated by single spaces.
    dense = torch.tensor([[4 + ord("a") if i % 2 == 0 else 4 + ord(" ") for i in range(9)]])
    with torch.no_grad():
        assert torch.isfinite(model(dense, torch.ones_like(dense, dtype=torch.bool))).all()


def test_the_parameter_formula_and_the_config_key(tmp_path: Path) -> None:
    from tests.trainer.helpers import parameter_table

    from mw_env.trainspec.summary import parameter_counts

    model = _model(tmp_path)
    cfg = tiny_config(tmp_path, "model.attend=words", "model.dropout=0").config
    assert parameter_table(model) == parameter_counts(cfg, n_labels=7)
    assert dict(parameter_table(model))["word pooling"] > 0
    with pytest.raises(InputError, match=r"model\.attend = 'tokens'"):
        tiny_config(tmp_path, "model.attend=tokens")


def test_a_resume_refuses_a_changed_attend_and_older_checkpoints_are_byte_models(tmp_path: Path) -> None:
    from mw_env.trainer.model import TaggerNet

    words = tiny_config(tmp_path, "model.attend=words").config
    old = tiny_config(tmp_path).config.to_dict()
    del old["model"]["attend"]  # a checkpoint written before the key
    before = config_from_dict(old)
    assert before.model.attend == "bytes"
    assert architecture_diff(before, words) == {"model.attend": "model.attend: 'bytes' -> 'words'"}
    model = TaggerNet(before.model, vocab_size=260, n_labels=7, words=before.word_features)
    assert model.pool is None and not any(k.startswith("pool.") for k in model.state_dict())


@pytest.mark.slow
def test_onnx_export_agrees_with_torch(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    import numpy as np
    import onnxruntime as ort

    from mw_env.trainer.export.onnx_export import DEFAULT_OPSET, _export

    model = _model(tmp_path)
    onnx_path = tmp_path / "model.onnx"
    assert _export(
        model, _ids("1 Main St"), onnx_path, opset=DEFAULT_OPSET, max_len=96, exporter="torchscript"
    )
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    # Another batch size and length than the example's, padding, more words than it had.
    ids, mask = _ids("12345 oak st, apt 4b", "PO Box 77", "9-11 Rue de la Paix, 75002 Paris France")
    got = session.run(["logits"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    with torch.no_grad():
        want = model(ids, mask).numpy()
    real = mask.numpy()
    assert np.abs(got - want)[real].max() < 1e-4
