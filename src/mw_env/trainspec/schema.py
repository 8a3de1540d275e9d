"""The trainer config's types: frozen dataclasses, one per section, and the allowed values (torch-free, a leaf:
config resolution and validation both import it)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, get_args

# The allowed values live in the types; the tuples are derived from them (one source for the reader,
# validate() and the docs).
Schedule = Literal["cosine", "linear", "noam", "constant"]
PrecisionChoice = Literal["auto", "fp32", "bf16", "fp16"]
SdpaChoice = Literal["auto", "math", "flash", "efficient"]
Tracking = Literal["none", "tensorboard", "mlflow"]
TokenizerKind = Literal["byte", "sentencepiece"]
UnknownTags = Literal["error", "ignore"]
DataSource = Literal["synthetic", "files"]
DistBackend = Literal["auto", "gloo", "nccl"]
WordFeatureChoice = Literal["auto", "ngrams", "none"]
DecodeChoice = Literal["viterbi", "argmax"]
AttendChoice = Literal["bytes", "words"]
# How entity spans are read from BIO tags for entity F1 (mw_env.trainer.scoring says how each differs).
F1Mode = Literal["conlleval", "strict"]
# Which checkpoints also write a portable weights folder (trainer/weights/): the run's last one, every one, none.
PortableWeights = Literal["final", "every", "none"]

SCHEDULES: tuple[str, ...] = get_args(Schedule)
PRECISIONS: tuple[str, ...] = get_args(PrecisionChoice)
SDPA_BACKENDS: tuple[str, ...] = get_args(SdpaChoice)
TRACKING: tuple[str, ...] = get_args(Tracking)
TOKENIZERS: tuple[str, ...] = get_args(TokenizerKind)
UNKNOWN_TAGS: tuple[str, ...] = get_args(UnknownTags)
SOURCES: tuple[str, ...] = get_args(DataSource)
DIST_BACKENDS: tuple[str, ...] = get_args(DistBackend)
WORD_FEATURES: tuple[str, ...] = get_args(WordFeatureChoice)
DECODE_MODES: tuple[DecodeChoice, ...] = get_args(DecodeChoice)
ATTEND_CHOICES: tuple[str, ...] = get_args(AttendChoice)
F1_MODES: tuple[F1Mode, ...] = get_args(F1Mode)
PORTABLE_WEIGHTS: tuple[str, ...] = get_args(PortableWeights)


@dataclass(frozen=True)
class ModelConfig:
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 1024
    dropout: float = 0.1
    max_len: int = 128  # tokens per sequence (bytes for the byte tokenizer); longer rows are truncated
    # Words as well as bytes (trainer/network.py WordFeatures): "ngrams" adds a vector per word (hashed character n-grams,
    # shape, length) to its bytes; "auto" = ngrams with the byte tokenizer, none with SentencePiece (its
    # pieces are already word pieces). Checkpoints written before this key are models without it ("none").
    words: WordFeatureChoice = "auto"
    word_buckets: int = 16384  # rows of the hashed n-gram table (x d_model parameters)
    # Start from trained weights instead of random ones (a fine-tune): a portable weights folder or a run folder
    # (trainer/weights/initfrom.py). Read at step 0 only; a resume continues from its checkpoint.
    init_from: str = ""
    # How tags are read out of the per-word scores (trainer/decoding.py), in evaluation, `train evaluate`,
    # `train predict` and the export's runtime helper alike: "viterbi" = the best sequence with valid IOB2
    # transitions, "argmax" = each word's best label alone. Checkpoints written before this key: "argmax".
    decode: DecodeChoice = "viterbi"
    # What the transformer blocks attend over (trainer/model.py): "bytes" = every byte position; "words" =
    # each word's bytes pooled into one vector first, then the blocks over word positions (~6x fewer for
    # addresses). Checkpoints written before this key are byte models ("bytes", the default).
    attend: AttendChoice = "bytes"


@dataclass(frozen=True)
class WeightedSource:
    """One entry of data.sources: its shards and its share of the training rows (docs/training.md)."""

    files: tuple[str, ...] = ()  # JSONL / Parquet shards (globs allowed)
    weight: float = 1.0  # rows drawn in proportion to the weights; a small source is repeated
    name: str = ""  # shown in the data card; "" = its first glob


@dataclass(frozen=True)
class DataConfig:
    source: DataSource = "synthetic"
    train_files: tuple[str, ...] = ()  # JSONL / Parquet shards (globs allowed) with tokens + tags
    # Instead of train_files: several globs, each with a weight (mixed row by row in those proportions).
    sources: tuple[WeightedSource, ...] = ()
    val_files: tuple[str, ...] = ()  # explicit validation shards; else val_fraction of train rows
    val_fraction: float = 0.05
    synthetic_rows: int = 20000
    synthetic_val_rows: int = 500
    countries: tuple[str, ...] = ("US", "GB", "DE", "FR", "NL", "AU", "CA")
    noise: float = 0.15  # probability of each noise kind per synthetic row
    seed: int = 1234  # data generation and split seed (order is runtime.seed's)
    tokenizer: TokenizerKind = "byte"
    spm_model: str | None = None  # SentencePiece .model file for tokenizer: sentencepiece
    tokens_column: str = "tokens"  # files: the list<string> column (JSONL: key) of words
    tags_column: str = "tags"  # files: the list<string> column (JSONL: key) of BIO tags, one per word
    labels: tuple[
        str, ...
    ] = ()  # files: the label set; empty = discovered from each shard's first 4,096 rows
    unknown_tags: UnknownTags = (
        "error"  # a tag outside the label set: "error" | "ignore" (word kept, not a target)
    )
    shuffle_rows: int = 65536  # files: rows shuffled together (a window); memory ~2 windows encoded per rank
    prefetch_steps: int = 4  # steps of batches the background reader prepares ahead
    workers: int = -1  # files: encoder processes per rank; -1 = cores per rank - 1 (LOCAL_WORLD_SIZE)
    allow_changed_corpus: bool = False  # resume even though the shards or the data order changed
    hash_shards: bool = False  # files: full-file sha256 of each shard, once, in the background (data card)

    def train_globs(self) -> list[tuple[str, tuple[str, ...]]]:
        """(the key that names them, the globs) of each training source: data.sources[i].files, or
        data.train_files as the one source."""
        if self.sources:
            return [(f"data.sources[{i}].files", s.files) for i, s in enumerate(self.sources)]
        return [("data.train_files", self.train_files)]


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 3e-4
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.98
    eps: float = 1e-8
    batch_size: int = 32  # rows per micro-batch per process
    accumulation_steps: int = 1
    grad_clip: float = 1.0  # 0 = off
    label_smoothing: float = 0.1
    schedule: Schedule = "cosine"  # after warmup
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1  # floor of the decay, as a fraction of lr
    # AdamW's fused kernel (one pass over every parameter, where torch has one for the device: CPU and CUDA)
    # instead of its loop over the parameters: on a CPU the loop's update of the hashed n-gram table
    # (model.words) was a quarter of a step. A resumed run keeps the implementation its checkpoint used.
    fused: bool = True
    # More weight for rare labels: each labelled word's loss times (its label's count in the micro-batch) to
    # the power -label_balance, rescaled so the weights sum to the batch's labelled words (the loss keeps
    # its scale). 0 = off; 0.5 = inverse square root of the frequency; 1 = inverse frequency.
    label_balance: float = 0.0


@dataclass(frozen=True)
class RuntimeConfig:
    out_dir: str = "runs/train"
    max_steps: int = 1000
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    precision: PrecisionChoice = "auto"  # auto = bf16 where the device has native bf16, else fp32
    sdpa_backend: SdpaChoice = "auto"
    compile: bool = False
    deterministic: bool = True
    threads: int = 0  # torch intra-op threads; 0 = torch's default
    log_every: int = 10
    eval_every: int = 100
    eval_batches: int = 200  # per process, each evaluating its share of the split; 0 = the whole split
    eval_samples: int = 3  # held-out addresses printed as tagged at each eval
    checkpoint_every: int = 100
    keep_last: int = 3
    # Portable weights (model.safetensors + config.json + tokenizer, loadable without mw-env) beside the run's
    # final checkpoint (the one at max_steps, an early stop or a stop), or beside every checkpoint, or none.
    portable_weights: PortableWeights = "final"
    early_stop_patience: int = 0  # evaluations without improvement of entity F1; 0 = off
    # Which entity F1 the eval event's entity_f1, early stopping and the report use (both are logged):
    # "conlleval" (an I- that starts an entity counts as one) or "strict" (IOB2: only B- starts one).
    f1_mode: F1Mode = "conlleval"
    early_stop_min_delta: float = 0.0
    max_nonfinite: int = 5  # consecutive skipped (non-finite) steps before the run stops
    tracking: Tracking = "none"
    # MLflow only: a tracking URI (sqlite:///path/mlflow.db, http://server:5000, a folder). "" = the
    # MLFLOW_TRACKING_URI environment variable, else the run folder's own file store (<run>/mlruns).
    tracking_uri: str = ""


@dataclass(frozen=True)
class DistConfig:
    backend: DistBackend = "auto"  # auto = nccl (RCCL on ROCm) on GPUs, gloo on CPU
    timeout_s: int = 1800


@dataclass(frozen=True)
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    dist: DistConfig = field(default_factory=DistConfig)

    def to_dict(self) -> dict[str, Any]:
        return {name: _plain(dataclasses.asdict(getattr(self, name))) for name in SECTIONS}

    @property
    def word_features(self) -> bool:
        """Whether the model has the word path: model.words resolved against the tokenizer."""
        words = self.model.words
        return words == "ngrams" or (words == "auto" and self.data.tokenizer == "byte")

    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()


SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "data": DataConfig,
    "optim": OptimConfig,
    "runtime": RuntimeConfig,
    "dist": DistConfig,
}

# Keys that change what the checkpoint's tensors mean or which rows a step sees; a resume with a
# different value would silently train something else, so it is refused (other knobs may change).
# optim.batch_size and optim.accumulation_steps may change: a resume keeps the run's global batch (its lanes and
# their rows a step, recorded in the checkpoint: trainer/data/lanes.py) and only re-cuts it into micro-batches.
ARCHITECTURE_KEYS = (
    "model.d_model",
    "model.n_layers",
    "model.n_heads",
    "model.d_ff",
    "model.max_len",
    "model.words",
    "model.word_buckets",
    "model.attend",
    "data.source",
    "data.tokenizer",
    "data.seed",
    "runtime.seed",
)

# Profile trainer defaults -> config keys.
PROFILE_KEYS = {
    "device": "runtime.device",
    "precision": "runtime.precision",
    "sdpa_backend": "runtime.sdpa_backend",
    "compile": "runtime.compile",
}


@dataclass(frozen=True)
class ResolvedConfig:
    config: TrainConfig
    sources: dict[str, str]  # "section.key" -> "default" | "profile:<name>" | "file:<path>" | "--set"
    path: Path | None
    # The files the config file builds on (trainspec/configfile.py), the foot first: (path, role) with role
    # "base" (named by `base:`) or "profile default" (the file names no base).
    bases: tuple[tuple[str, str], ...] = ()
    profile: str | None = None  # the hardware profile whose defaults (and default config) it resolved with

    def to_dict(self) -> dict[str, Any]:
        return {
            "config_file": str(self.path) if self.path else None,
            "built_on": [{"file": f, "why": why} for f, why in self.bases],
            "config": self.config.to_dict(),
            "sources": dict(self.sources),
            "config_sha256": self.config.sha256(),
        }


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def all_keys() -> list[str]:
    return [f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in fields(cls)]
