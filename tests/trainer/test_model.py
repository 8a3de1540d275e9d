"""The model: parameter counts match summary's formula, padding is inert, SDPA backends agree."""

from __future__ import annotations

import pytest

from mw_env.trainspec.config import find_config, resolve_config
from mw_env.trainspec.summary import parameter_counts, summarize

pytestmark = pytest.mark.torch


def test_parameter_counts_match_formula() -> None:
    import torch
    from tests.trainer.helpers import parameter_table

    from mw_env.trainer.model import build_model

    for name in ("smoke", "address-tagger"):
        cfg = resolve_config(path=find_config(name)).config
        with torch.device("meta"):  # no memory for the 30M model
            model = build_model(cfg, vocab_size=260, n_labels=15)
        assert parameter_table(model) == parameter_counts(cfg)
        assert sum(n for _, n in parameter_table(model)) == sum(p.numel() for p in model.parameters())
    tagger = resolve_config(path=find_config("address-tagger")).config
    total = summarize(tagger)["model"]["total_parameters"]
    words = dict(parameter_counts(tagger))["word features"]
    assert 28_000_000 < total - words < 32_000_000  # "a ~30M-parameter encoder"
    assert 10_000_000 < words < 13_000_000  # "plus ~12M rows of word tables, looked up"


def test_padding_does_not_change_real_tokens_and_backends_agree() -> None:
    import torch

    from mw_env.trainer.model import build_model, sdpa_context

    cfg = resolve_config(path=find_config("smoke")).config
    model = build_model(cfg, vocab_size=260, n_labels=15).eval()
    ids = torch.randint(4, 260, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.bool)
    with torch.no_grad():
        base = model(ids, mask)
        padded = model(
            torch.cat([ids, torch.zeros(2, 5, dtype=torch.long)], 1),
            torch.cat([mask, torch.zeros(2, 5, dtype=torch.bool)], 1),
        )
        torch.testing.assert_close(padded[:, :10], base, rtol=1e-5, atol=1e-5)
        for backend in ("math", "efficient", "flash", "auto"):
            with sdpa_context(backend):
                torch.testing.assert_close(model(ids, mask), base, rtol=1e-5, atol=1e-5)
    assert build_model(cfg, vocab_size=260, n_labels=15).state_dict().keys() == model.state_dict().keys()
    a = build_model(cfg, vocab_size=260, n_labels=15).state_dict()
    assert all(torch.equal(a[k], v) for k, v in model.state_dict().items())  # init depends on seed only
