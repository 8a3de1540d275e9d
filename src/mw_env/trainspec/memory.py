"""The memory one training process needs, from the config alone (torch-free): the host refuses what cannot fit.

    model state   parameters x 16 bytes: fp32 weights, their gradients, AdamW's two moments
                  (+ 4 under DDP: the gradient buckets)
    activations   what autograd keeps of one micro-batch for the backward pass, at the widest a batch can be:
                  rows are padded to the batch's longest, which is at most model.max_len

The activation constants are fitted to peak RSS measured on the CPU build of torch (fp32, the trainer's model
and loss, AdamW, two steps; tests/trainspec/test_memory.py measures configs it was not fitted on). Per layer
and per position of a [batch, width] micro-batch, in 4-byte values: 7.5 x d_model + 2.7 x d_ff, plus 12 x
d_model more when dropout is on (its masks and outputs); 3.3 x d_model outside the layers (embeddings, head,
loss), and for the word path (model.words) 6 x d_model per position and 1.5 per pair of positions of a row; 48
MiB of torch's own working memory. Attention keeps no [width x width] matrix with a fused kernel
(flash/efficient, and the CPU's flash kernel when dropout is off); the math kernel keeps about 3.4 per head
(scores, softmax, dropout).
bf16/fp16 on a GPU keep less: the figure is the fp32 upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from mw_env.trainspec.schema import TrainConfig
from mw_env.trainspec.summary import BYTE_VOCAB, parameter_counts
from mw_env.trainspec.synthetic import LABELS

STATE_BYTES = 16  # per parameter: weight, gradient, exp_avg, exp_avg_sq (fp32)
DDP_BYTES = 4  # per parameter: DDP's gradient buckets
VALUE = 4  # bytes of an fp32 activation
WORDS_POSITION = 6.0  # values per position x d_model of the word path (model.words)
WORDS_PAIR = 1.5  # values per (position, position) pair of a row: the word layout
WORKING = 48 << 20  # torch's own buffers and allocator slack in a training process (the fit's intercept)


@dataclass(frozen=True)
class MemoryNeed:
    parameters: int
    state: int  # bytes: weights, gradients, optimizer moments
    activations: int  # bytes: one micro-batch at full width, with torch's working memory
    batch: int
    width: int
    attention_matrix: bool  # the math kernel's [width x width] per head counted

    @property
    def total(self) -> int:
        return self.state + self.activations

    def what_to_lower(self, have: int | None = None) -> str:
        """The settings that shrink the part that matters: the model's when its state alone is more than
        `have` (or is the larger part), else the batch's; both when the smaller is a quarter or more."""
        model = "model.d_model, model.n_layers, model.d_ff or model.max_len (the position table is max_len x d_model)"
        batch = "optim.batch_size (raise optim.accumulation_steps to keep the rows per step) or model.max_len"
        if self.attention_matrix:
            batch += " (attention keeps max_len x max_len per head here; model.n_heads too)"
        if (have is not None and self.state > have) or self.activations < self.total / 4:
            return f"lower {model}"
        if self.state < self.total / 4:
            return f"lower {batch}"
        first, second = (model, batch) if self.state >= self.activations else (batch, model)
        return f"lower {first}; then {second}"


def math_attention(config: TrainConfig, *, gpu: bool) -> bool:
    """Whether attention runs the math kernel, which keeps [width x width] per head for the backward pass."""
    if config.runtime.sdpa_backend == "math":
        return True
    # A GPU runs flash or efficient (auto picks one; an explicit choice falls back to math only if refused);
    # the CPU's flash kernel takes no dropout.
    return not gpu and config.model.dropout > 0


def estimate(
    config: TrainConfig,
    *,
    gpu: bool = False,
    ddp: bool = False,
    vocab_size: int = BYTE_VOCAB,
    n_labels: int | None = None,
) -> MemoryNeed:
    m, o = config.model, config.optim
    labels = n_labels or len(config.data.labels or LABELS)
    params = sum(n for _, n in parameter_counts(config, vocab_size=vocab_size, n_labels=labels))
    state = params * (STATE_BYTES + (DDP_BYTES if ddp else 0))
    b, t, d = o.batch_size, m.max_len, m.d_model
    per_position = 7.5 * d + 2.7 * m.d_ff + (12 * d if m.dropout > 0 else 0.0)
    layers = m.n_layers * b * t * per_position
    attention = math_attention(config, gpu=gpu)
    if attention:
        layers += m.n_layers * 3.4 * b * m.n_heads * t * t
    outside = 3.3 * b * t * max(d, 64) + 4 * b * t * labels
    if config.word_features:
        # trainer/network.py WordFeatures: each position's n-gram and shape vectors, and the [width x width] word layout
        # pooled with one batched matmul (its float weights kept for the backward pass).
        outside += WORDS_POSITION * b * t * d + WORDS_PAIR * b * t * t
    activations = int((layers + outside) * VALUE) + WORKING
    return MemoryNeed(
        parameters=params,
        state=state,
        activations=activations,
        batch=b,
        width=t,
        attention_matrix=attention,
    )
