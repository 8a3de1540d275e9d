"""Trainer configuration: frozen dataclasses per component, parsed from YAML or TOML, with `--set`.

Precedence, lowest first: dataclass defaults < the active profile's trainer defaults < the config
file < `--set a.b=c`. Every resolved value remembers where it came from (`ResolvedConfig.sources`).
This module must not import torch: `mw-env train config` resolves configs from a Python without it.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mw_env.errors import InputError
from mw_env.trainspec.schema import (  # re-exported: the config's types are part of this module's API
    ARCHITECTURE_KEYS,
    DIST_BACKENDS,
    PRECISIONS,
    PROFILE_KEYS,
    SCHEDULES,
    SDPA_BACKENDS,
    SECTIONS,
    SOURCES,
    TOKENIZERS,
    TRACKING,
    DataConfig,
    DistConfig,
    ModelConfig,
    OptimConfig,
    ResolvedConfig,
    RuntimeConfig,
    TrainConfig,
    all_keys,
)
from mw_env.trainspec.validate import validate

CONFIGS_DIR = Path(__file__).resolve().parent / "configs"

__all__ = [
    "ARCHITECTURE_KEYS",
    "CONFIGS_DIR",
    "DIST_BACKENDS",
    "PRECISIONS",
    "PROFILE_KEYS",
    "SCHEDULES",
    "SDPA_BACKENDS",
    "SECTIONS",
    "SOURCES",
    "TOKENIZERS",
    "TRACKING",
    "DataConfig",
    "DistConfig",
    "ModelConfig",
    "OptimConfig",
    "ResolvedConfig",
    "RuntimeConfig",
    "TrainConfig",
    "all_keys",
    "architecture_diff",
    "config_from_dict",
    "find_config",
    "parse_set",
    "resolve_config",
    "shipped_configs",
]


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
    if "." not in key:  # a section name ("modle:"): suggest sections, not the keys inside them
        close = difflib.get_close_matches(key, SECTIONS, n=1, cutoff=0.5)
        hint = f"did you mean section {close[0]!r}? " if close else ""
        hint += f"(valid sections: {', '.join(SECTIONS)})"
        return InputError(f"{origin_label}: unknown config section {key!r}", hint=hint)
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
                hint=(
                    f"write it as a [{section}] table followed by 'key = value' lines"
                    if origin_label.lower().endswith(".toml")
                    else f"write it as '{section}:' followed by indented 'key: value' lines"
                )
                + " (see `mw-env train config`)",
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
            hint="e.g. a [runtime] table then 'max_steps = 100'"
            if suffix == ".toml"
            else "e.g. 'runtime:' then indented 'max_steps: 100'",
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
