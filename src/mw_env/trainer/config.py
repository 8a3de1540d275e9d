"""Trainer configuration: frozen dataclasses per component, parsed from YAML or TOML, with `--set`.

Precedence, lowest first: dataclass defaults < the active profile's trainer defaults < the config
file < `--set a.b=c`. Every resolved value remembers where it came from (`ResolvedConfig.sources`).
This module must not import torch: `mw-env train config` resolves configs from a Python without it.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from mw_env.errors import InputError

CONFIGS_DIR = Path(__file__).resolve().parent / "configs"

SCHEDULES = ("cosine", "linear", "noam", "constant")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
SDPA_BACKENDS = ("auto", "math", "flash", "efficient")
TRACKING = ("none", "tensorboard", "mlflow")
TOKENIZERS = ("byte", "sentencepiece")
SOURCES = ("synthetic", "files")
DIST_BACKENDS = ("auto", "gloo", "nccl")


@dataclass(frozen=True)
class ModelConfig:
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 1024
    dropout: float = 0.1
    max_len: int = 128  # tokens per sequence (bytes for the byte tokenizer); longer rows are truncated


@dataclass(frozen=True)
class DataConfig:
    source: str = "synthetic"  # "synthetic" | "files"
    train_files: tuple[str, ...] = ()  # JSONL / Parquet shards (globs allowed) with tokens + tags
    val_files: tuple[str, ...] = ()  # explicit validation shards; else val_fraction of train rows
    val_fraction: float = 0.05
    synthetic_rows: int = 20000
    synthetic_val_rows: int = 500
    countries: tuple[str, ...] = ("US", "GB", "DE", "FR", "NL", "AU", "CA")
    noise: float = 0.15  # probability of each noise kind per synthetic row
    seed: int = 1234  # data generation and split seed (order is runtime.seed's)
    tokenizer: str = "byte"  # "byte" | "sentencepiece"
    spm_model: str | None = None  # SentencePiece .model file for tokenizer: sentencepiece


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
    schedule: str = "cosine"  # cosine | linear | noam | constant (after warmup)
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1  # floor of the decay, as a fraction of lr


@dataclass(frozen=True)
class RuntimeConfig:
    out_dir: str = "runs/train"
    max_steps: int = 1000
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    precision: str = "auto"  # auto = bf16 where the device has native bf16, else fp32
    sdpa_backend: str = "auto"
    compile: bool = False
    deterministic: bool = True
    threads: int = 0  # torch intra-op threads; 0 = torch's default
    log_every: int = 10
    eval_every: int = 100
    eval_batches: int = 0  # 0 = the whole validation split
    eval_samples: int = 3  # held-out addresses printed as tagged at each eval
    checkpoint_every: int = 100
    keep_last: int = 3
    early_stop_patience: int = 0  # evaluations without improvement of entity F1; 0 = off
    early_stop_min_delta: float = 0.0
    max_nonfinite: int = 5  # consecutive skipped (non-finite) steps before the run stops
    tracking: str = "none"  # none | tensorboard | mlflow


@dataclass(frozen=True)
class DistConfig:
    backend: str = "auto"  # auto = nccl (RCCL on ROCm) on GPUs, gloo on CPU
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
ARCHITECTURE_KEYS = (
    "model.d_model",
    "model.n_layers",
    "model.n_heads",
    "model.d_ff",
    "model.max_len",
    "data.source",
    "data.tokenizer",
    "data.seed",
    "optim.batch_size",
    "optim.accumulation_steps",
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "config_file": str(self.path) if self.path else None,
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


def shipped_configs() -> list[str]:
    return sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml"))


def find_config(name_or_path: str | Path) -> Path:
    """A config file path, or the name of a shipped config (`smoke`, `address-tagger`)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path.resolve()
    shipped = CONFIGS_DIR / f"{name_or_path}.yaml"
    if shipped.is_file():
        return shipped
    raise InputError(
        f"config {str(name_or_path)!r}: no such file and no shipped config of that name",
        hint=f"pass a YAML/TOML file or one of: {', '.join(shipped_configs())}",
    )


def _type_name(tp: Any) -> str:
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    if tp in names:
        return names[tp]
    origin = typing.get_origin(tp)
    if origin is tuple:
        return "a list of strings"
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if args:
        return f"{_type_name(args[0])} or null"
    return str(tp)


def _coerce(key: str, tp: Any, value: Any, origin_label: str) -> Any:
    """Check `value` against the field type; convert only lossless, unambiguous cases."""
    bad = InputError(
        f"{origin_label}: {key} must be {_type_name(tp)}, got {value!r} ({type(value).__name__})",
        hint=f"fix the value of {key}",
    )
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise bad
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string; TOML and users mean a number
            try:
                return float(value)
            except ValueError:
                raise bad from None
        raise bad
    if tp is str:
        if isinstance(value, str):
            return value
        raise bad
    if typing.get_origin(tp) is tuple:
        if isinstance(value, str):
            return (value,)
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise bad
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        if value is None:
            return None
        inner = next(a for a in typing.get_args(tp) if a is not type(None))
        return _coerce(key, inner, value, origin_label)
    raise bad


def _unknown(key: str, origin_label: str) -> InputError:
    close = difflib.get_close_matches(key, all_keys(), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"valid sections: {', '.join(SECTIONS)}"
    return InputError(f"{origin_label}: unknown config key {key!r}", hint=hint)


def _flatten(data: Mapping[str, Any], origin_label: str) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for section, body in data.items():
        if section not in SECTIONS:
            raise _unknown(str(section), origin_label)
        if body is None:
            continue
        if not isinstance(body, Mapping):
            raise InputError(
                f"{origin_label}: section {section!r} must be a mapping of keys, got {type(body).__name__}",
                hint=f"write it as '{section}:' followed by indented 'key: value' lines (see `mw-env train config`)",
            )
        for key, value in body.items():
            flat[f"{section}.{key}"] = value
    return flat


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(
            f"cannot read config {path}: {exc.strerror}", hint="check the path and its permissions"
        ) from None
    suffix = path.suffix.lower()
    if suffix == ".toml":
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            try:
                import tomli as tomllib  # type: ignore[no-redef]
            except ModuleNotFoundError:
                raise InputError(
                    f"{path}: TOML configs need Python >= 3.11 or the tomli package",
                    hint="pip install tomli, or write the config as YAML",
                ) from None
        try:
            data: Any = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(
                f"{path}: not valid TOML: {exc}", hint="fix the syntax at the line and column named"
            ) from None
    elif suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InputError(
                f"{path}: not valid YAML: {exc}", hint="fix the syntax at the line and column named"
            ) from None
    else:
        raise InputError(f"{path}: unknown config format {suffix!r}", hint="use .yaml, .yml or .toml")
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise InputError(
            f"{path}: the top level must be a mapping of sections ({', '.join(SECTIONS)})",
            hint="e.g. 'runtime:' then indented 'max_steps: 100'",
        )
    return dict(data)


def parse_set(item: str) -> tuple[str, Any]:
    """`a.b=c` -> ("a.b", scalar): the value is read as a YAML scalar (1e-3, true, null, [a, b])."""
    import yaml

    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or "." not in key:
        raise InputError(f"--set {item!r}: expected section.key=value", hint="e.g. --set optim.lr=1e-3")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def resolve_config(
    *,
    path: Path | None = None,
    overrides: Iterable[str] = (),
    profile_defaults: Mapping[str, Any] | None = None,
    profile_name: str | None = None,
) -> ResolvedConfig:
    """Defaults < profile < file < --set, type-checked and validated; with each value's source."""
    hints = {name: typing.get_type_hints(cls) for name, cls in SECTIONS.items()}
    values: dict[str, Any] = {}
    sources = {key: "default" for key in all_keys()}

    def put(key: str, value: Any, label: str, source: str) -> None:
        section, _, name = key.partition(".")
        if section not in hints or name not in hints[section]:
            raise _unknown(key, label)
        values[key] = _coerce(key, hints[section][name], value, label)
        sources[key] = source

    for pkey, ckey in PROFILE_KEYS.items():
        if profile_defaults and profile_defaults.get(pkey) is not None:
            label = f"profile:{profile_name}" if profile_name else "profile"
            put(ckey, profile_defaults[pkey], label, label)
    if path is not None:
        for key, value in _flatten(_read_file(path), str(path)).items():
            put(key, value, str(path), f"file:{path}")
    for item in overrides:
        key, value = parse_set(item)
        put(key, value, f"--set {item}", "--set")

    built = {}
    for section, cls in SECTIONS.items():
        kwargs = {k.partition(".")[2]: v for k, v in values.items() if k.startswith(section + ".")}
        built[section] = cls(**kwargs)
    config = TrainConfig(**built)
    from mw_env.trainer.validate import validate  # range and cross-field checks

    validate(config)
    return ResolvedConfig(config=config, sources=sources, path=path)


def config_from_dict(data: Mapping[str, Any]) -> TrainConfig:
    """Rebuild a TrainConfig from `to_dict()` output (a checkpoint's); unknown keys are an error."""
    hints = {name: typing.get_type_hints(cls) for name, cls in SECTIONS.items()}
    built = {}
    for section, cls in SECTIONS.items():
        body = dict(data.get(section) or {})
        kwargs = {}
        for key, value in body.items():
            if key not in hints[section]:
                raise _unknown(f"{section}.{key}", "checkpoint config")
            kwargs[key] = _coerce(f"{section}.{key}", hints[section][key], value, "checkpoint config")
        built[section] = cls(**kwargs)
    return TrainConfig(**built)


def architecture_diff(old: TrainConfig, new: TrainConfig) -> list[str]:
    """Keys in ARCHITECTURE_KEYS whose values differ: `key: old -> new`."""
    a, b = old.to_dict(), new.to_dict()
    out = []
    for key in ARCHITECTURE_KEYS:
        section, _, name = key.partition(".")
        if a[section][name] != b[section][name]:
            out.append(f"{key}: {a[section][name]!r} -> {b[section][name]!r}")
    return out
