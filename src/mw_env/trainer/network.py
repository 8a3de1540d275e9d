"""The address tagger's network, in one file that imports only torch and the standard library.

It is the modeling file of every portable weights folder (trainer/weights/: `modeling_mw_tagger.py` beside
`model.safetensors` and `config.json`, copied verbatim, as Hugging Face's custom-code models ship their
modeling_*.py), so the folder loads with torch alone: `from_config(json.load(...))` builds the network that
config.json describes, `load_state_dict(safetensors.torch.load_file(...))` gives it the weights. Nothing
here may import mw_env (tests/trainer/test_network.py checks it on the AST); what knows the trainer's config
(build_model, the SDPA backend choice, the parameter table) stays in trainer/model.py.

The network: a pre-LayerNorm transformer encoder with a per-token BIO classification head. Attention is
plain `F.scaled_dot_product_attention` (no nn.TransformerEncoder: its fused fast path does not export to
ONNX and ignores the SDPA backend choice); the caller picks the backend around the call, so the module
stays exportable.

Words as well as bytes (`WordFeatures`): a vector per word, computed inside the model from the byte ids alone.

The byte path sees "12345," as six unrelated ids; a user's address generalises through what a word *is*:
a digit string, a word ending in a comma, a street name never seen whose pieces ("-ton", "ville") were.
Each byte position inside a word contributes (fastText-style) the embeddings of

- its hashed character n-grams, lower-cased, with word-boundary marks: the trigram and 4-gram ending at
  it, and at the word's last byte the trigram and 4-gram that end with the end-of-word mark (so "st", "apt"
  and "po" are whole-word n-grams), hashed into `model.word_buckets` rows;
- its shape: the classes (lower, upper, digit, comma, period, '#', '-' or '/', other punctuation,
  non-ASCII) of the trigram ending at it, and at the last byte of the one ending with the end mark,
  exact (12^3 rows: no hashing), so "12345" and "67890" share all their shape rows;
- the word's length (capped at 16) and its first byte's class,

and the word's vector is their mean over its bytes, added to the embedding of every byte of the word
(separators and special tokens get none). Words are the byte tokenizer's: runs of bytes between spaces
and special ids. Everything is elementwise arithmetic, a cumulative sum, comparisons and one batched
matmul, so the module exports to ONNX unchanged: the export and its runtime helper feed the same
input_ids / attention_mask as before and carry the features in the weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

# The byte tokenizer's id layout (trainer/data/tokenize.py, which torch-free code imports, holds the same
# number; tests/trainer/test_network.py checks they agree): ids 0..3 are PAD, CLS, SEP, UNK, byte b is b + 4.
N_SPECIAL = 4

SPACE = ord(" ") + N_SPECIAL
# Marks inside the n-gram windows, below every byte id (bytes are >= N_SPECIAL): before the word's first
# byte (begin), further out (none), after its last byte (end).
BEGIN, NONE, END = 1, 2, 3
_BASE = 263  # > every byte id and mark: a window's digits are distinct in this base
N_CLASSES = 12  # 9 byte classes + the three marks (classes 9, 10, 11)
MAX_LEN_BUCKET = 16
_CLASS_MARK = {BEGIN: 9, NONE: 10, END: 11}
# Odd salts keep the four n-gram kinds apart in the hashed table.
_SALT = (0, 1_000_003, 2_000_029, 3_000_017)


def byte_classes() -> torch.Tensor:
    """Class of every id below 4 + 256 (specials and marks get their mark class, used only in windows)."""
    # Filled on the CPU, then moved to the device the build is under (a `with torch.device(...)` block):
    # under the meta device (ckpt/schema.py's shape check) 260 element fills would import torch's symbolic
    # shapes and sympy, seconds of CPU; one move imports nothing.
    classes = torch.full((N_SPECIAL + 256,), 7, dtype=torch.long, device="cpu")  # other ASCII punctuation
    for b in range(256):
        ch = chr(b)
        if b >= 128:
            cls = 8
        elif ch.islower():
            cls = 0
        elif ch.isupper():
            cls = 1
        elif ch.isdigit():
            cls = 2
        else:
            cls = {",": 3, ".": 4, "#": 5, "-": 6, "/": 6}.get(ch, 7)
        classes[b + N_SPECIAL] = cls
    for mark, cls in _CLASS_MARK.items():
        classes[mark] = cls
    classes[0] = _CLASS_MARK[NONE]
    return classes.to(torch.get_default_device())


def lower_table() -> torch.Tensor:
    """Id -> id of the lower-cased byte (ASCII letters only: UTF-8 continuation bytes stay as they are)."""
    table = torch.arange(N_SPECIAL + 256, dtype=torch.long, device="cpu")  # on the CPU: as byte_classes
    for b in range(ord("A"), ord("Z") + 1):
        table[b + N_SPECIAL] = b + 32 + N_SPECIAL
    return table.to(torch.get_default_device())


def word_layout(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(same [B, T, T]: position q is in position p's word; in_word [B, T]: p is a byte of a word)."""
    boundary = (input_ids < N_SPECIAL) | (input_ids == SPACE) | ~attention_mask
    in_word = ~boundary
    word_index = torch.cumsum(boundary.long(), dim=1)  # bytes after a boundary share its index
    same = (word_index[:, :, None] == word_index[:, None, :]) & in_word[:, :, None] & in_word[:, None, :]
    return same, in_word


def _shift(x: torch.Tensor, k: int, fill: int) -> torch.Tensor:
    """x moved k positions right (k > 0: the byte k before) or left (k < 0), `fill` where none is."""
    pad = torch.full_like(x[:, : abs(k)], fill)
    return torch.cat([pad, x[:, :-k]], dim=1) if k > 0 else torch.cat([x[:, -k:], pad], dim=1)


class WordFeatures(nn.Module):
    """input_ids [B, T], attention_mask [B, T] -> a word vector per position [B, T, d_model]."""

    def __init__(self, d_model: int, buckets: int) -> None:
        super().__init__()
        self.buckets = buckets
        self.register_buffer("lower", lower_table(), persistent=False)
        self.register_buffer("classes", byte_classes(), persistent=False)
        self.ngram_emb = nn.Embedding(buckets, d_model)
        self.shape_emb = nn.Embedding(N_CLASSES**3, d_model)
        self.length_emb = nn.Embedding(MAX_LEN_BUCKET + 1, d_model)
        self.first_emb = nn.Embedding(N_CLASSES, d_model)
        self.proj = nn.Linear(d_model, d_model)

    def windows(self, input_ids: torch.Tensor, same: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The 4 bytes ending at each position ([c-3, c-2, c-1, c], marks where the word has none) and
        whether each position is its word's last byte."""
        t = input_ids.shape[1]
        idx = torch.arange(t, device=input_ids.device)
        before = same & (idx[None, None, :] < idx[None, :, None])  # q in p's word, q < p
        pos = before.long().sum(-1)  # position of p inside its word
        length = same.long().sum(-1)
        low = self.lower[input_ids]
        window = [low]
        for k in (1, 2, 3):
            mark = torch.where(pos == k - 1, BEGIN, NONE)
            window.insert(0, torch.where(pos >= k, _shift(low, k, NONE), mark))
        last = (pos == length - 1) & (length > 0)
        return window, last

    def _hash(self, digits: list[torch.Tensor], salt: int) -> torch.Tensor:
        h = digits[0]
        for d in digits[1:]:
            h = h * _BASE + d
        return (h + salt) % self.buckets

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        same, in_word = word_layout(input_ids, attention_mask)
        (c3, c2, c1, c0), last = self.windows(input_ids, same)
        end = torch.full_like(c0, END)
        # One lookup per table (the four n-grams, the two shapes stacked), the end-of-word ones weighted
        # by "is the last byte": one gather and one scatter in the backward pass instead of six.
        grams = torch.stack(
            [
                self._hash([c2, c1, c0], _SALT[0]),
                self._hash([c3, c2, c1, c0], _SALT[1]),
                self._hash([c1, c0, end], _SALT[2]),
                self._hash([c2, c1, c0, end], _SALT[3]),
            ],
            dim=-1,
        )
        k2, k1, k0 = (self.classes[c] for c in (c2, c1, c0))
        shapes = torch.stack(
            [(k2 * N_CLASSES + k1) * N_CLASSES + k0, (k1 * N_CLASSES + k0) * N_CLASSES + _CLASS_MARK[END]],
            dim=-1,
        )
        lastf = last.to(self.ngram_emb.weight.dtype)[..., None, None]
        ones = torch.ones_like(lastf)
        gram_weight = torch.cat([ones, ones, lastf, lastf], dim=-2)  # [B, T, 4, 1]
        grams = (self.ngram_emb(grams) * gram_weight).sum(-2)
        shape = (self.shape_emb(shapes) * torch.cat([ones, lastf], dim=-2)).sum(-2)
        per_byte = grams + shape
        weights = same.to(per_byte.dtype)
        length = weights.sum(-1, keepdim=True)
        pooled = torch.bmm(weights, per_byte) / length.clamp(min=1.0)
        # The first byte of p's word: the one in p's word with no word byte before it (its class).
        first = (same & (torch.cumsum(same.long(), dim=2) == 1)).long()
        first_class = (first * self.classes[input_ids][:, None, :]).sum(-1)
        length_bucket = length[..., 0].long().clamp(max=MAX_LEN_BUCKET)
        word = pooled + self.length_emb(length_bucket) + self.first_emb(first_class)
        return self.proj(word) * in_word[..., None].to(word.dtype)


# -- attention over words (model.attend: words) -----------------------------------------------------------
# Each word's bytes pooled into one vector, the transformer blocks over word positions, each word's logits
# given back to its bytes. An address of ~55 bytes is ~10 words: the blocks' cost (attention and feed-forward
# alike) falls ~5x, and the words of a street name attend to each other directly instead of through their
# bytes. Within a word, order still counts: each byte's embedding (with the word path's vector, above) plus
# its position in the word goes through a GELU layer before the mean.
#
# Inputs and outputs stay the byte model's: `input_ids`/`attention_mask` [B, T] in, logits [B, T, labels]
# out, each byte of a word carrying its word's logits (separators, CLS/SEP and padding 0), so training,
# predict, evaluate, the export and its runtime helper read them as before (at each word's first byte).
# Words are the byte tokenizer's: runs of bytes between spaces and special ids (word_layout).
#
# The number of word slots: the batch's largest word count when running eagerly on a CPU; while tracing or
# exporting (no data-dependent shapes there) and on a GPU (reading the count would synchronise with the
# host), (T + 1) // 2, which no sequence of T ids exceeds. The extra slots are masked out: the same logits.
MAX_IN_WORD = 16  # positions inside a word with their own embedding (later bytes share the last)


def _static_shapes() -> bool:
    """Whether this forward is being traced (ONNX export, torch.compile): shapes may not depend on values."""
    return bool(torch.jit.is_tracing() or torch.onnx.is_in_onnx_export() or torch.compiler.is_compiling())


class WordPool(nn.Module):
    """Byte vectors [B, T, d] -> word vectors [B, W, d], the word mask [B, W], and a `scatter` that gives
    per-word outputs [B, W, k] back to the bytes [B, T, k]."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.in_word = nn.Embedding(MAX_IN_WORD, d_model)
        self.mix = nn.Linear(d_model, d_model)

    def forward(
        self, x: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(word vectors [B, W, d], word mask [B, W], each byte's word slot [B, T] or -1 outside words)."""
        same, in_word = word_layout(input_ids, attention_mask)
        t = input_ids.shape[1]
        idx = torch.arange(t, device=input_ids.device)
        before = same & (idx[None, None, :] < idx[None, :, None])
        pos = before.long().sum(-1)  # the byte's position inside its word
        first = in_word & (pos == 0)
        slot = torch.cumsum(first.long(), dim=1) - 1
        slot = torch.where(in_word, slot, torch.full_like(slot, -1))
        n_words = first.long().sum(1)
        # The exact count needs the host to read it: free on a CPU, a synchronisation on a GPU (which the
        # step loop keeps to one per step), where the bound is used instead.
        exact = input_ids.device.type == "cpu" and not _static_shapes()
        width = max(int(n_words.max()), 1) if exact else (t + 1) // 2
        slots = torch.arange(width, device=input_ids.device)
        assign = (slot[:, None, :] == slots[None, :, None]).to(x.dtype)  # [B, W, T]
        h = F.gelu(self.mix(x + self.in_word(pos.clamp(max=MAX_IN_WORD - 1))))
        words = torch.bmm(assign, h) / assign.sum(-1, keepdim=True).clamp(min=1.0)
        # Slot 0 is always attendable: a row with no word at all (an empty address) has no NaN softmax.
        mask = (slots[None, :] < n_words[:, None]) | (slots[None, :] == 0)
        return words, mask, slot

    @staticmethod
    def scatter(per_word: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
        """[B, W, k] -> [B, T, k]: each byte its word's row, 0 outside words."""
        index = slot.clamp(min=0)[..., None].expand(-1, -1, per_word.shape[-1])
        return per_word.gather(1, index) * (slot >= 0)[..., None].to(per_word.dtype)


class NetConfig(Protocol):
    """What the network reads of its config: trainspec's ModelConfig in training, a namespace built from a
    portable folder's config.json (`from_config`) elsewhere. A model key the network starts to read is
    named here too; the portable folder carries the whole model section, so the key reaches config.json and
    comes back from it with no other change."""

    @property
    def d_model(self) -> int: ...
    @property
    def n_layers(self) -> int: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def d_ff(self) -> int: ...
    @property
    def dropout(self) -> float: ...
    @property
    def max_len(self) -> int: ...
    @property
    def word_buckets(self) -> int: ...

    # Read with getattr(cfg, "attend", "bytes"): a portable folder written before the key is a byte model.


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

    words=True (TrainConfig.word_features) adds each word's vector (WordFeatures, above) to its bytes'
    embeddings; the inputs stay the same, so exports and their runtime need nothing more.
    """

    def __init__(self, cfg: NetConfig, *, vocab_size: int, n_labels: int, words: bool = False) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_len, cfg.d_model)
        self.words = WordFeatures(cfg.d_model, cfg.word_buckets) if words else None
        # model.attend: words: the blocks run over word positions (WordPool); pos_emb then counts words.
        self.pool = WordPool(cfg.d_model) if getattr(cfg, "attend", "bytes") == "words" else None
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
        slot = None
        if self.pool is None:
            pos = torch.arange(input_ids.shape[1], device=input_ids.device)
            x = self.tok_emb(input_ids) + self.pos_emb(pos)[None]
            if self.words is not None:
                x = x + self.words(input_ids, attention_mask)
        else:  # the bytes pooled per word; positions are then word positions
            x = self.tok_emb(input_ids)
            if self.words is not None:
                x = x + self.words(input_ids, attention_mask)
            x, attention_mask, slot = self.pool(x, input_ids, attention_mask)
            x = x + self.pos_emb(torch.arange(x.shape[1], device=input_ids.device))[None]
        x = self.drop(x)
        mask = attention_mask[:, None, None, :]
        for block in self.blocks:
            x = block(x, mask)
        logits = self.head(self.ln_f(x))
        return logits if slot is None else WordPool.scatter(logits, slot)


def from_config(config: Mapping[str, object]) -> TaggerNet:
    """The network a portable folder's config.json describes, randomly initialised: its `model` section (the
    training config's, every key) and `init` (the constructor's other arguments: vocab_size, n_labels,
    words). `model.load_state_dict(safetensors.torch.load_file(FOLDER / "model.safetensors"))` then gives it
    the trained weights."""
    model, init = config.get("model"), config.get("init")
    if not isinstance(model, Mapping) or not isinstance(init, Mapping):
        raise ValueError("config.json needs a `model` and an `init` object (an mw-env weights folder's)")
    return TaggerNet(SimpleNamespace(**model), **init)
