"""LR schedules (torch-free) and the precision decision (bf16 only where native)."""

from __future__ import annotations

import pytest

from mw_env.trainspec.config import resolve_config
from mw_env.trainspec.schedule import lr_factor
from mw_env.trainspec.schema import OptimConfig


def _optim(*sets: str) -> OptimConfig:
    return resolve_config(overrides=sets).config.optim


def test_warmup_then_decay_to_the_floor() -> None:
    o = _optim("optim.warmup_steps=10", "optim.min_lr_ratio=0.1", "optim.schedule=cosine")
    assert lr_factor(0, o, 100) == pytest.approx(0.1)
    assert lr_factor(9, o, 100) == pytest.approx(1.0)
    assert lr_factor(10, o, 100) == pytest.approx(1.0)
    assert lr_factor(55, o, 100) == pytest.approx(0.55)  # half way down the cosine: (1 + 0.1) / 2
    assert lr_factor(100, o, 100) == pytest.approx(0.1) and lr_factor(500, o, 100) == pytest.approx(0.1)
    lin = _optim("optim.warmup_steps=0", "optim.min_lr_ratio=0.0", "optim.schedule=linear")
    assert [round(lr_factor(s, lin, 10), 6) for s in (0, 5, 10)] == [1.0, 0.5, 0.0]
    const = _optim("optim.warmup_steps=4", "optim.schedule=constant")
    assert lr_factor(2, const, 10) == pytest.approx(0.75) and lr_factor(9, const, 10) == 1.0


def test_noam_peaks_at_warmup() -> None:
    o = _optim("optim.warmup_steps=100", "optim.schedule=noam")
    peak = max(range(1000), key=lambda s: lr_factor(s, o, 1000))
    assert peak == 99 and lr_factor(99, o, 1000) == pytest.approx(1.0)
    assert lr_factor(399, o, 1000) == pytest.approx(0.5)  # 1/sqrt decay: 4x the warmup -> half


@pytest.mark.torch
def test_precision_bf16_only_where_native(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from mw_env.trainer import runtime

    cpu = torch.device("cpu")
    monkeypatch.setattr(runtime, "_cpu_native_bf16", lambda: False)
    p = runtime.resolve_precision("auto", cpu)
    assert p.name == "fp32" and "no native bf16" in p.reason
    assert runtime.resolve_precision("bf16", cpu).name == "fp32"
    assert runtime.resolve_precision("fp16", cpu).name == "fp32"
    monkeypatch.setattr(runtime, "_cpu_native_bf16", lambda: True)
    p = runtime.resolve_precision("auto", cpu)
    assert p.name == "bf16" and p.dtype is torch.bfloat16 and "native bf16" in p.reason
    assert runtime.resolve_precision("fp32", cpu).name == "fp32"
