"""Everything about the network that knows the trainer's config: build it from a TrainConfig, the SDPA backend
around its attention, its parameter table. The network itself (TaggerNet, TransformerBlock, WordFeatures) is
trainer/network.py, a torch-only file that portable weights folders ship as their modeling file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TypedDict

import torch

from mw_env.trainer.network import TaggerNet
from mw_env.trainspec.config import TrainConfig


class NetInit(TypedDict):
    """TaggerNet's arguments beside the model section: what a portable folder's config.json calls `init`."""

    vocab_size: int
    n_labels: int
    words: bool


def net_init(config: TrainConfig, *, vocab_size: int, n_labels: int) -> NetInit:
    """The constructor's arguments for this config (the one place they are derived: training, checkpoints and
    portable folders all build the network from them)."""
    return {"vocab_size": vocab_size, "n_labels": n_labels, "words": config.word_features}


def build_model(config: TrainConfig, *, vocab_size: int, n_labels: int) -> TaggerNet:
    """Initialise the weights from runtime.seed alone, so every rank and every rerun start equal."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.runtime.seed)
        return TaggerNet(config.model, **net_init(config, vocab_size=vocab_size, n_labels=n_labels))


_BACKENDS = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}


@contextlib.contextmanager
def sdpa_context(backend: str) -> Iterator[None]:
    """Run attention with the named SDPA backend ("auto" = torch's choice).

    "flash"/"efficient" keep MATH as the fallback for inputs the fused kernel rejects (flash takes
    no padding mask); "math" is math only - the setting profiles use where fused kernels misbehave.
    """
    if backend == "auto":
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = [getattr(SDPBackend, _BACKENDS[backend])]
    if backend != "math":
        chosen.append(SDPBackend.MATH)
    with sdpa_kernel(chosen):
        yield
