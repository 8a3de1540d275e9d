"""The trainer config's types: frozen dataclasses, one per section, and the allowed values (torch-free, a leaf:
config resolution and validation both import it).

Each setting is declared once, on its field (`setting(...)`): its range, the corpus kind it applies to, what
a change of it changes, its name in the corpus's order record and the profile key that sets it. validate's
ranges, advice's lists, ARCHITECTURE_KEYS, PROFILE_KEYS and the corpus's order record are derived from these
declarations (docs/training.md "To add a setting"; tests/trainer/test_settings_declared.py proves the order
and architecture declarations by changing each setting and reading the rows).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

T = TypeVar("T")

# The allowed values live in the types (validate derives its checks from them; tuples with get_args).
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

DECODE_MODES: tuple[DecodeChoice, ...] = get_args(DecodeChoice)
F1_MODES: tuple[F1Mode, ...] = get_args(F1Mode)

# Checkpoint files are named step-XXXXXXXXX.pt (nine digits): a longer run could not be listed or resumed.
MAX_STEPS = 999_999_999
# Seeds: the dropout seed of a step is seed * 1_000_003 + step * world + rank (runtime.step_seed), and
# torch.manual_seed takes at most 2**64 - 1; 2**40 leaves room for any step and world size.
MAX_SEED = 2**40
INT32_MAX = 2**31 - 1

# What changing a setting changes. "architecture": what the checkpoint's tensors mean, or which rows a step
# sees (the seeds): a resume with another value is refused (ARCHITECTURE_KEYS). "schedule": the learning rate
# of a step; a resume with another value is warned about (advice.resume_warnings).
Changes = Literal["architecture", "schedule"]


def setting(
    default: T,
    *,
    bounds: tuple[int, int] | str | None = None,
    applies: DataSource | None = None,
    changes: Changes | None = None,
    order: str | None = None,
    profile: str | None = None,
) -> T:
    """A config field and its declaration. `bounds`: an int's (lowest, highest), or a float's interval
    ("[0, 1)": a bracket includes its end, a parenthesis excludes it; NaN and infinities never pass), checked
    by validate. `applies`: the one corpus kind the setting does anything for (reports leave it out for the
    other). `order`: its name in the corpus's order record (part of every checkpoint, so a name once given
    stays): a resume with another value is a changed corpus. `profile`: the key of a profile's trainer
    defaults that sets it."""
    meta = {"bounds": bounds, "applies": applies, "changes": changes, "order": order, "profile": profile}
    return field(default=default, metadata={k: v for k, v in meta.items() if v is not None})


@dataclass(frozen=True)
class ModelConfig:
    d_model: int = setting(256, bounds=(1, 65_536), changes="architecture")
    n_layers: int = setting(4, bounds=(1, 1_024), changes="architecture")
    n_heads: int = setting(4, bounds=(1, 1_024), changes="architecture")
    d_ff: int = setting(1024, bounds=(1, 1_048_576), changes="architecture")
    dropout: float = setting(0.1, bounds="[0, 1)")
    # tokens per sequence (bytes for the byte tokenizer); longer rows are truncated
    max_len: int = setting(128, bounds=(8, 1_048_576), changes="architecture")
    # Words as well as bytes (trainer/network.py WordFeatures): "ngrams" adds a vector per word (hashed character n-grams,
    # shape, length) to its bytes; "auto" = ngrams with the byte tokenizer, none with SentencePiece (its
    # pieces are already word pieces). Checkpoints written before this key are models without it ("none").
    words: WordFeatureChoice = setting("auto", changes="architecture")
    # rows of the hashed n-gram table (x d_model parameters)
    word_buckets: int = setting(16384, bounds=(1, 16_777_216), changes="architecture")
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
    attend: AttendChoice = setting("bytes", changes="architecture")


@dataclass(frozen=True)
class WeightedSource:
    """One entry of data.sources: its shards and its share of the training rows (docs/training.md)."""

    files: tuple[str, ...] = ()  # JSONL / Parquet shards (globs allowed)
    weight: float = 1.0  # rows drawn in proportion to the weights; a small source is repeated
    name: str = ""  # shown in the data card; "" = its first glob


@dataclass(frozen=True)
class DataConfig:
    source: DataSource = setting("synthetic", changes="architecture")
    # JSONL / Parquet shards (globs allowed) with tokens + tags
    train_files: tuple[str, ...] = setting((), applies="files")
    # Instead of train_files: several globs, each with a weight (mixed row by row in those proportions).
    sources: tuple[WeightedSource, ...] = setting((), applies="files")
    # explicit validation shards; else val_fraction of train rows
    val_files: tuple[str, ...] = setting((), applies="files")
    val_fraction: float = setting(0.05, bounds="[0, 1)", applies="files", order="val_fraction")
    synthetic_rows: int = setting(20000, bounds=(1, 100_000_000), applies="synthetic")
    synthetic_val_rows: int = setting(500, bounds=(1, 10_000_000), applies="synthetic")
    countries: tuple[str, ...] = setting(("US", "GB", "DE", "FR", "NL", "AU", "CA"), applies="synthetic")
    # probability of each noise kind per synthetic row
    noise: float = setting(0.15, bounds="[0, 1]", applies="synthetic")
    # data generation and split seed (order is runtime.seed's)
    seed: int = setting(1234, bounds=(0, MAX_SEED), changes="architecture", order="data_seed")
    tokenizer: TokenizerKind = setting("byte", changes="architecture")
    spm_model: str | None = None  # SentencePiece .model file for tokenizer: sentencepiece
    # files: the list<string> column (JSONL: key) of words
    tokens_column: str = setting("tokens", applies="files", order="tokens_column")
    # files: the list<string> column (JSONL: key) of BIO tags, one per word
    tags_column: str = setting("tags", applies="files", order="tags_column")
    # files: the label set; empty = discovered from each shard's first 4,096 rows
    labels: tuple[str, ...] = setting((), applies="files")
    # a tag outside the label set: "error" | "ignore" (word kept, not a target)
    unknown_tags: UnknownTags = setting("error", applies="files")
    # files: rows shuffled together (a window); memory ~2 windows encoded per rank
    shuffle_rows: int = setting(65536, bounds=(1, 1 << 28), order="shuffle_rows")
    # steps of batches the background reader prepares ahead
    prefetch_steps: int = setting(4, bounds=(1, 1_024))
    # files: encoder processes per rank; -1 = cores per rank - 1 (LOCAL_WORLD_SIZE)
    workers: int = setting(-1, bounds=(-1, 256))
    # resume even though the shards or the data order changed
    allow_changed_corpus: bool = setting(False, applies="files")
    # files: full-file sha256 of each shard, once, in the background (data card)
    hash_shards: bool = setting(False, applies="files")

    def train_globs(self) -> list[tuple[str, tuple[str, ...]]]:
        """(the key that names them, the globs) of each training source: data.sources[i].files, or
        data.train_files as the one source."""
        if self.sources:
            return [(f"data.sources[{i}].files", s.files) for i, s in enumerate(self.sources)]
        return [("data.train_files", self.train_files)]

    def generator(self) -> dict[str, object]:
        """The synthetic corpus's settings as its identity records them (the data card, a resume's check)."""
        return {
            "seed": self.seed,
            "rows": self.synthetic_rows,
            "val_rows": self.synthetic_val_rows,
            "countries": list(self.countries),
            "noise": self.noise,
        }


@dataclass(frozen=True)
class OptimConfig:
    lr: float = setting(3e-4, bounds="(0, 10]", changes="schedule")
    weight_decay: float = setting(0.01, bounds="[0, 100]")
    beta1: float = setting(0.9, bounds="[0, 1)")
    beta2: float = setting(0.98, bounds="[0, 1)")
    eps: float = setting(1e-8, bounds="(0, 1]")
    batch_size: int = setting(32, bounds=(1, 1_048_576))  # rows per micro-batch per process
    accumulation_steps: int = setting(1, bounds=(1, 65_536))
    grad_clip: float = setting(1.0, bounds="[0, 1e9]")  # 0 = off
    label_smoothing: float = setting(0.1, bounds="[0, 1)")
    schedule: Schedule = setting("cosine", changes="schedule")  # after warmup
    warmup_steps: int = setting(100, bounds=(0, MAX_STEPS), changes="schedule")
    # floor of the decay, as a fraction of lr
    min_lr_ratio: float = setting(0.1, bounds="[0, 1]", changes="schedule")
    # AdamW's fused kernel (one pass over every parameter, where torch has one for the device: CPU and CUDA)
    # instead of its loop over the parameters: on a CPU the loop's update of the hashed n-gram table
    # (model.words) was a quarter of a step. A resumed run keeps the implementation its checkpoint used.
    fused: bool = True
    # More weight for rare labels: each labelled word's loss times (its label's count in the micro-batch) to
    # the power -label_balance, rescaled so the weights sum to the batch's labelled words (the loss keeps
    # its scale). 0 = off; 0.5 = inverse square root of the frequency; 1 = inverse frequency.
    label_balance: float = setting(0.0, bounds="[0, 1]")


@dataclass(frozen=True)
class RuntimeConfig:
    out_dir: str = "runs/train"
    max_steps: int = setting(1000, bounds=(1, MAX_STEPS), changes="schedule")
    seed: int = setting(0, bounds=(0, MAX_SEED), changes="architecture", order="runtime_seed")
    device: str = setting("auto", profile="device")  # auto | cpu | cuda | cuda:N
    # auto = bf16 where the device has native bf16, else fp32
    precision: PrecisionChoice = setting("auto", profile="precision")
    sdpa_backend: SdpaChoice = setting("auto", profile="sdpa_backend")
    compile: bool = setting(False, profile="compile")
    deterministic: bool = True
    threads: int = setting(0, bounds=(0, 4_096))  # torch intra-op threads; 0 = torch's default (an int32)
    log_every: int = setting(10, bounds=(1, MAX_STEPS))
    eval_every: int = setting(100, bounds=(1, MAX_STEPS))
    # per process, each evaluating its share of the split; 0 = the whole split
    eval_batches: int = setting(200, bounds=(0, INT32_MAX))
    eval_samples: int = setting(3, bounds=(0, 10_000))  # held-out addresses printed as tagged at each eval
    checkpoint_every: int = setting(100, bounds=(1, MAX_STEPS))
    keep_last: int = setting(3, bounds=(2, 100_000))  # >= 2: the newest may be mid-write
    # Portable weights (model.safetensors + config.json + tokenizer, loadable without mw-env) beside the run's
    # final checkpoint (the one at max_steps, an early stop or a stop), or beside every checkpoint, or none.
    portable_weights: PortableWeights = "final"
    # The report's figures (matplotlib PNGs and inline SVGs): false writes the report without them - its
    # tables, the histograms as tables - for sweeps and CI of many short runs, about a CPU second each.
    report_figures: bool = True
    # evaluations without improvement of entity F1; 0 = off
    early_stop_patience: int = setting(0, bounds=(0, INT32_MAX))
    # Which entity F1 the eval event's entity_f1, early stopping and the report use (both are logged):
    # "conlleval" (an I- that starts an entity counts as one) or "strict" (IOB2: only B- starts one).
    f1_mode: F1Mode = "conlleval"
    # F1 is in [0, 1], so a delta above 1 means "never good enough": stop after the patience (tests use it).
    early_stop_min_delta: float = setting(0.0, bounds="[0, 1e9]")
    # consecutive skipped (non-finite) steps before the run stops
    max_nonfinite: int = setting(5, bounds=(1, INT32_MAX))
    tracking: Tracking = "none"
    # MLflow only: a tracking URI (sqlite:///path/mlflow.db, http://server:5000, a folder). "" = the
    # MLFLOW_TRACKING_URI environment variable, else the run folder's own file store (<run>/mlruns).
    tracking_uri: str = ""


@dataclass(frozen=True)
class DistConfig:
    backend: DistBackend = "auto"  # auto = nccl (RCCL on ROCm) on GPUs, gloo on CPU
    timeout_s: int = setting(1800, bounds=(1, 30 * 86_400))  # the process group's; a month is already absurd


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


@dataclass(frozen=True)
class Setting:
    """One setting's declaration, as `setting(...)` gave it on its field."""

    key: str  # "optim.lr"
    bounds: tuple[int, int] | str | None = None
    applies: DataSource | None = None
    changes: Changes | None = None
    order: str | None = None
    profile: str | None = None


SETTINGS: tuple[Setting, ...] = tuple(
    Setting(f"{s}.{f.name}", **f.metadata) for s, cls in SECTIONS.items() for f in fields(cls)
)


def keys_that(changes: Changes) -> tuple[str, ...]:
    return tuple(s.key for s in SETTINGS if s.changes == changes)


# A resume with another value would silently train something else, so it is refused (other settings may
# change). optim.batch_size and optim.accumulation_steps may change: a resume keeps the run's global batch (its
# lanes and their rows a step, recorded in the checkpoint: trainer/data/lanes.py) and only re-cuts it.
ARCHITECTURE_KEYS = keys_that("architecture")
# Profile trainer defaults -> config keys.
PROFILE_KEYS = {s.profile: s.key for s in SETTINGS if s.profile}


def value_of(config: TrainConfig, key: str) -> Any:
    section, _, name = key.partition(".")
    return getattr(getattr(config, section), name)


def order_record(config: TrainConfig, kind: DataSource) -> dict[str, Any]:
    """The settings that decide which rows a step reads, by their order-record names (the corpus adds its layout)."""
    return {s.order: value_of(config, s.key) for s in SETTINGS if s.order and s.applies in (None, kind)}


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
    return [s.key for s in SETTINGS]
