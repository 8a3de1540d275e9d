"""The address tagger: a pre-LayerNorm transformer encoder with a per-token BIO classification head.

Attention is plain `F.scaled_dot_product_attention` (no nn.TransformerEncoder: its fused fast path
does not export to ONNX and ignores the SDPA backend choice). The backend is chosen by the caller
with `sdpa_context(name)`, so the module itself stays exportable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from mw_env.trainer.words import WordFeatures
from mw_env.trainspec.config import ModelConfig, TrainConfig


class TransformerBlock(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.dropout = dropout
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, d_ff)
        self.ff2 = nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2) for z in (q, k, v))
        # mask is [B, 1, 1, T]: every query may look at every real (non-padding) key.
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0
        )
        x = x + self.drop(self.proj(y.transpose(1, 2).reshape(b, t, c)))
        return x + self.drop(self.ff2(F.gelu(self.ff1(self.ln2(x)))))


class TaggerNet(nn.Module):
    """Token ids [B, T] + attention mask [B, T] (True = real token) -> label logits [B, T, n_labels].

    words=True (TrainConfig.word_features) adds each word's vector (trainer/words.py) to its bytes'
    embeddings; the inputs stay the same, so exports and their runtime need nothing more.
    """

    def __init__(self, cfg: ModelConfig, *, vocab_size: int, n_labels: int, words: bool = False) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_len, cfg.d_model)
        self.words = WordFeatures(cfg.d_model, cfg.word_buckets) if words else None
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout) for _ in range(cfg.n_layers)
        )
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, n_labels)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        # GPT-2 style: small normal weights, zero biases; LayerNorm keeps its ones/zeros.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        t = input_ids.shape[1]
        pos = torch.arange(t, device=input_ids.device)
        x = self.tok_emb(input_ids) + self.pos_emb(pos)[None]
        if self.words is not None:
            x = x + self.words(input_ids, attention_mask)
        x = self.drop(x)
        mask = attention_mask[:, None, None, :]
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))


def build_model(config: TrainConfig, *, vocab_size: int, n_labels: int) -> TaggerNet:
    """Initialise the weights from runtime.seed alone, so every rank and every rerun start equal."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.runtime.seed)
        return TaggerNet(config.model, vocab_size=vocab_size, n_labels=n_labels, words=config.word_features)


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


def parameter_table(model: TaggerNet) -> list[tuple[str, int]]:
    """(part, parameters) rows: embeddings, each block, the head; the sum is the model's total."""
    rows = [
        ("embeddings", sum(p.numel() for p in (*model.tok_emb.parameters(), *model.pos_emb.parameters())))
    ]
    if model.words is not None:
        rows.append(("word features", sum(p.numel() for p in model.words.parameters())))
    rows += [(f"block {i}", sum(p.numel() for p in b.parameters())) for i, b in enumerate(model.blocks)]
    rows.append(("head", sum(p.numel() for p in (*model.ln_f.parameters(), *model.head.parameters()))))
    return rows
