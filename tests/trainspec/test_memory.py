"""The memory estimate (trainspec/memory.py): the issue's settings that no machine holds, and the figure held
against the peak RSS that real training steps of small CPU configs reach (configs the constants were not
fitted on)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from mw_env.trainspec.config import find_config, resolve_config
from mw_env.trainspec.memory import estimate
from mw_env.trainspec.schema import ModelConfig, OptimConfig, RuntimeConfig, TrainConfig

GIB = 1 << 30


def _config(**model: object) -> TrainConfig:
    batch = int(model.pop("batch", 32))  # type: ignore[call-overload]
    return TrainConfig(
        model=replace(ModelConfig(), **model),  # type: ignore[arg-type]
        optim=replace(OptimConfig(), batch_size=batch),
        runtime=replace(RuntimeConfig(), device="cpu"),
    )


def test_the_issues_model_asks_hundreds_of_gib_and_names_the_model_settings() -> None:
    need = estimate(_config(d_model=65536, n_heads=1, max_len=1048576))
    # The position table alone is 2**20 x 2**16 fp32 values: 256 GiB, before gradients and AdamW's moments.
    assert need.parameters > 2**36 and need.state >= 4 * 256 * GIB
    # Its state alone is more than a machine has: the model's settings, not the batch's, are what to lower.
    lower = need.what_to_lower(24 * GIB)
    assert "model.d_model" in lower and "max_len" in lower and "batch_size" not in lower


def test_a_huge_batch_is_activations_and_names_the_batch() -> None:
    need = estimate(_config(max_len=1048576, batch=1048576))
    assert need.activations > need.state and need.total > 1024 * GIB
    assert "optim.batch_size" in need.what_to_lower()


def test_the_shipped_configs_are_small() -> None:
    smoke = resolve_config(path=find_config("smoke")).config
    assert estimate(smoke).total < 128 << 20


def test_attention_matrix_only_where_the_math_kernel_runs() -> None:
    cfg = _config(dropout=0.1, max_len=512)
    cpu, gpu = estimate(cfg), estimate(cfg, gpu=True)
    assert cpu.attention_matrix and not gpu.attention_matrix and cpu.activations > gpu.activations
    assert not estimate(_config(dropout=0.0)).attention_matrix  # the CPU's flash kernel (no dropout)
    math = replace(cfg, runtime=replace(cfg.runtime, sdpa_backend="math"))
    assert estimate(math, gpu=True).attention_matrix
    assert estimate(cfg, ddp=True).state == estimate(cfg).state // 16 * 20


MEASURE = r"""
import json, os, resource, sys
import torch, torch.nn.functional as F
from dataclasses import replace
from mw_env.trainer.model import build_model
from mw_env.trainspec.schema import ModelConfig, TrainConfig
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
torch.zeros(1)
for shape in json.loads(sys.argv[1]):
    read, write = os.pipe()
    if os.fork() == 0:  # each shape in its own child: ru_maxrss is a high-water mark; torch imported once
        d, layers, heads, ff, width, batch, dropout, words = shape
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        model_cfg = replace(ModelConfig(), d_model=d, n_layers=layers, n_heads=heads, d_ff=ff, dropout=dropout,
                            max_len=width, words=words)
        model = build_model(TrainConfig(model=model_cfg), vocab_size=260, n_labels=19)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        ids = torch.randint(4, 260, (batch, width))
        ids[:, ::6] = 4 + 32  # a space every sixth byte: words for the word path
        labels = torch.randint(0, 19, (batch, width))
        for _ in range(2):
            logits = model(ids, ids != 0)
            loss = F.cross_entropy(logits.view(-1, 19), labels.view(-1), label_smoothing=0.1)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        os.write(write, str((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024).encode())
        os._exit(0)
    os.close(write)
    print(os.read(read, 64).decode())
    os.wait()
"""

# (d_model, layers, heads, d_ff, width, batch, dropout, words): dropout on (math attention) with the word path,
# off without it.
SHAPES = [(80, 2, 2, 320, 224, 24, 0.1, "ngrams"), (112, 3, 4, 448, 128, 32, 0.0, "none")]


@pytest.mark.slow
def test_the_estimate_holds_against_measured_peak_rss() -> None:
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, json.dumps(SHAPES)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    for shape, measured in zip(SHAPES, map(int, out.stdout.split()), strict=True):
        d, layers, heads, ff, width, batch, dropout, words = shape
        cfg = _config(
            d_model=d,
            n_layers=layers,
            n_heads=heads,
            d_ff=ff,
            dropout=dropout,
            max_len=width,
            batch=batch,
            words=words,
        )
        need = estimate(cfg, n_labels=19)
        # Within a third either way: enough to refuse what cannot fit, without refusing what can.
        assert 0.75 <= need.total / measured <= 1.33, (shape, need, measured)
