"""Padded tensors: the Batch a step consumes, built from encoded rows (encode.py) by pad_flat."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mw_env.trainer.data.tokenize import IGNORE, PAD

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Batch:
    input_ids: torch.Tensor  # [B, T] long
    labels: torch.Tensor  # [B, T] long, -100 = ignored
    attention_mask: torch.Tensor  # [B, T] bool, True = a real token
    n_tokens: int = 0  # input tokens (counted on the host by the reader: no device sync)
    n_labelled: int = 0  # labelled positions (words)

    def to(self, device: Any, non_blocking: bool = False) -> Batch:
        return Batch(
            self.input_ids.to(device, non_blocking=non_blocking),
            self.labels.to(device, non_blocking=non_blocking),
            self.attention_mask.to(device, non_blocking=non_blocking),
            self.n_tokens,
            self.n_labelled,
        )

    def pin_memory(self) -> Batch:
        return Batch(
            self.input_ids.pin_memory(),
            self.labels.pin_memory(),
            self.attention_mask.pin_memory(),
            self.n_tokens,
            self.n_labelled,
        )


def pad_flat(ids: Any, labels: Any, lengths: Any) -> Batch:
    """Pad rows given as flat buffers (row k: the next lengths[k] entries) into one batch, vectorised."""
    import numpy as np
    import torch

    from mw_env.trainer.data.encode import _excl_cumsum

    n = len(lengths)
    width = int(lengths.max()) if n else 1
    row = np.repeat(np.arange(n), lengths)
    col = np.arange(len(ids), dtype=np.int64) - np.repeat(_excl_cumsum(lengths), lengths)
    out_ids = np.full((n, width), PAD, dtype=np.int64)
    out_labels = np.full((n, width), IGNORE, dtype=np.int64)
    out_ids[row, col] = ids
    out_labels[row, col] = labels
    t_ids, t_labels = torch.from_numpy(out_ids), torch.from_numpy(out_labels)
    return Batch(t_ids, t_labels, t_ids != PAD, int(lengths.sum()), int((labels != IGNORE).sum()))
