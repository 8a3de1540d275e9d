"""The optimizer's levers (issue 37): optim.label_balance weights rare labels up without changing the loss's
scale; optim.fused picks AdamW's fused kernel, and a checkpoint's optimizer keeps the implementation it had."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import tiny_config

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")


def test_balance_weights_favour_rare_labels_and_keep_the_scale() -> None:
    from mw_env.trainer.data import IGNORE
    from mw_env.trainer.step import balance_weights

    labels = torch.tensor([0, 0, 0, 0, 1, 2, IGNORE, 2])
    for power in (0.25, 0.5, 1.0):
        w = balance_weights(labels, 4, power)
        assert w[6] == 0 and w.sum().item() == pytest.approx(7.0)
        assert w[4] > w[5] > w[0]  # 1 of label 1, 2 of label 2, 4 of label 0
        assert w[5] == w[7] and w[0] == w[3]
    assert torch.allclose(balance_weights(labels, 4, 0.0), (labels != IGNORE).float())
    none = torch.full((5,), IGNORE)
    assert (balance_weights(none, 4, 0.5) == 0).all()  # a batch with no labelled word: no NaN


def test_word_loss_is_the_plain_sum_when_off_and_weighted_when_on(tmp_path: Path) -> None:
    import torch.nn.functional as F

    from mw_env.trainer.data import IGNORE
    from mw_env.trainer.step import word_loss

    logits = torch.randn(2, 6, 5, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([[IGNORE, 0, 0, 0, 3, IGNORE], [IGNORE, 0, 0, 1, IGNORE, IGNORE]])
    off = tiny_config(tmp_path).config.optim
    assert off.label_balance == 0
    want = F.cross_entropy(
        logits.flatten(0, 1),
        labels.flatten(),
        ignore_index=IGNORE,
        reduction="sum",
        label_smoothing=off.label_smoothing,
    )
    assert torch.equal(word_loss(logits, labels, off), want)
    on = tiny_config(tmp_path, "optim.label_balance=1.0").config.optim
    per = F.cross_entropy(
        logits.flatten(0, 1),
        labels.flatten(),
        ignore_index=IGNORE,
        reduction="none",
        label_smoothing=on.label_smoothing,
    )
    # 5 of label 0, 1 each of labels 1 and 3: weights 1/5, 1, 1, rescaled to sum to 7.
    flat = labels.flatten()
    raw = torch.where(flat == 0, 0.2, 1.0) * (flat != IGNORE)
    torch.testing.assert_close(word_loss(logits, labels, on), (per * raw * 7 / raw.sum()).sum())


def test_label_balance_range_is_checked(tmp_path: Path) -> None:
    from mw_env.base.errors import InputError

    with pytest.raises(InputError, match=r"optim\.label_balance"):
        tiny_config(tmp_path, "optim.label_balance=1.5")


def test_fused_adamw_by_default_and_a_loaded_state_keeps_its_implementation(tmp_path: Path) -> None:
    from mw_env.trainer.model import build_model
    from mw_env.trainer.setup import optimizer_for

    resolved = tiny_config(tmp_path)
    model = build_model(resolved.config, vocab_size=260, n_labels=5)
    fused = optimizer_for(model, resolved)
    assert all(g["fused"] for g in fused.param_groups)
    plain = optimizer_for(model, tiny_config(tmp_path, "optim.fused=false"))
    assert not any(g["fused"] for g in plain.param_groups)
    # A checkpoint written by the loop implementation resumes with it (its param groups say so).
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    plain.step()
    fused.load_state_dict(plain.state_dict())
    assert not any(g["fused"] for g in fused.param_groups)
    fused.step()
