"""Trainer configuration resolved: its types (schema.py) read from YAML or TOML, with `--set`.

Precedence, lowest first: dataclass defaults < the active profile's trainer defaults < the config
file < `--set a.b=c`. Every resolved value remembers where it came from (`ResolvedConfig.sources`).
This module must not import torch: `mw-env train config` resolves configs from a Python without it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mw_env.base import typed
from mw_env.base.errors import InputError
from mw_env.trainspec.configfile import CONFIGS_DIR, config_chain, shipped_configs
from mw_env.trainspec.schema import (
    ARCHITECTURE_KEYS,
    PROFILE_KEYS,
    SECTIONS,
    ResolvedConfig,
    TrainConfig,
    all_keys,
    value_of,
)
from mw_env.trainspec.validate import validate


def find_config(name_or_path: str | Path) -> Path:
    """A config file path, or the name of a shipped config (`smoke`, `address-tagger`)."""
    path = Path(name_or_path).expanduser()
    if path.is_file() or (path.exists() and not path.is_dir()):
        return path.resolve()  # a FIFO or a device is refused by the bounded reader, naming what it is
    shipped = CONFIGS_DIR / f"{name_or_path}.yaml"
    if shipped.is_file():
        return shipped
    if path.is_dir():
        raise InputError(
            f"config {str(name_or_path)!r} is a folder, not a config file",
            hint=f"pass a YAML/TOML file in it, or one of: {', '.join(shipped_configs())}",
        )
    raise InputError(
        f"config {str(name_or_path)!r}: no such file and no shipped config of that name",
        hint=f"pass a YAML/TOML file or one of: {', '.join(shipped_configs())}",
    )


_TYPES = typed.leaf_types(TrainConfig)  # "optim.lr" -> float: the dataclasses are the schema


def _reader(origin_label: str) -> typed.Reader:
    """A reader whose errors name `origin_label` (the file, `--set a.b=c`, the profile) and the dotted key."""

    def render(issue: typed.Issue) -> InputError:
        key = issue.key
        if issue.kind == "unknown":
            section, dot, _ = key.partition(".")
            if not dot:  # a section name ("modle:"): suggest sections, not the keys inside them
                close = difflib.get_close_matches(key, SECTIONS, n=1, cutoff=0.5)
                hint = f"did you mean section {close[0]!r}? " if close else ""
                hint += f"(valid sections: {', '.join(SECTIONS)})"
                return InputError(f"{origin_label}: unknown config section {key!r}", hint=hint)
            if issue.suggestions:
                hint = f"did you mean {', '.join(issue.suggestions)}?"
            elif dot and section in SECTIONS:
                hint = f"keys of {section}: {', '.join(typed.field_types(SECTIONS[section]))}"
            else:
                hint = f"valid sections: {', '.join(SECTIONS)}"
            return InputError(f"{origin_label}: unknown config key {key!r}", hint=hint)
        if issue.kind == "choice":
            return InputError(
                f"{origin_label}: {key} = {issue.value!r} is not allowed", hint=f"allowed: {issue.allowed}"
            )
        if key in SECTIONS:
            return InputError(
                f"{origin_label}: section {key!r} must be a mapping of keys, got {type(issue.value).__name__}",
                hint=(
                    f"write it as a [{key}] table followed by 'key = value' lines"
                    if origin_label.lower().endswith(".toml")
                    else f"write it as '{key}:' followed by indented 'key: value' lines"
                )
                + " (see `mw-env train config`)",
            )
        return InputError(f"{origin_label}: {key} {issue.problem}", hint=f"fix the value of {key}")

    # A single string where a list is expected is that one item: `--set data.train_files=a.jsonl`.
    return typed.Reader(render, policy=typed.Policy(text_as_list=True))


def _coerce(key: str, value: Any, origin_label: str) -> Any:
    """`value` for the dotted `key`, type-checked (InputError naming the origin, the key and the value)."""
    reader = _reader(origin_label)
    if key not in _TYPES:
        raise reader.unknown("", key, all_keys())
    return reader.coerce(_TYPES[key], value, key)


def parse_set(item: str) -> tuple[str, Any]:
    """`a.b=c` -> ("a.b", scalar): the value is read as a YAML scalar (1e-3, true, null, [a, b]).

    A value that is not valid YAML syntax stays the string it is (`--set data.spm_model=a:b[1]`); one that
    is YAML but unusable (`!!int x`, nesting thousands deep) is an InputError naming the key."""
    from mw_env.base import userfile

    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or "." not in key:
        raise InputError(f"--set {item!r}: expected section.key=value", hint="e.g. --set optim.lr=1e-3")
    if any("\udc80" <= ch <= "\udcff" for ch in raw):
        # Bytes the locale could not decode (LANG=C with Python's UTF-8 mode off): argv holds them as
        # surrogates, which YAML reports as "#xdcc3". Say what it is and how to run instead.
        import sys

        bad = next(ch for ch in raw if "\udc80" <= ch <= "\udcff")
        raise InputError(
            f"--set {key}: the value holds the byte {ord(bad) - 0xDC00:#04x}, which is not text in this locale "
            f"(encoding {sys.getfilesystemencoding()})",
            hint="run with a UTF-8 locale (LANG=C.UTF-8, or PYTHONUTF8=1), or use an ASCII value",
        )
    value = userfile.load_yaml(raw, source=f"--set {key}", syntax_fallback=raw) if raw.strip() else ""
    return key, value


def resolve_config(
    *,
    path: Path | None = None,
    overrides: Iterable[str] = (),
    profile_defaults: Mapping[str, Any] | None = None,
    profile_name: str | None = None,
) -> ResolvedConfig:
    """Defaults < profile < the file's bases (configfile.py) < the file < --set, type-checked and validated;
    with each value's source. `profile_defaults["config"]`, when given, is the shipped config a file of one's
    own builds on when it names no `base:` (the profile's default config)."""
    values: dict[str, Any] = {}
    sources = {key: "default" for key in all_keys()}
    layer: dict[str, int] = {}  # the layer that set each key: 0 profile, 1.. the files, then --set

    def put(key: str, value: Any, label: str, source: str, at: int) -> None:
        values[key] = _coerce(key, value, label)
        sources[key] = source
        layer[key] = at

    for pkey, ckey in PROFILE_KEYS.items():
        if profile_defaults and profile_defaults.get(pkey) is not None:
            label = f"profile:{profile_name}" if profile_name else "profile"
            put(ckey, profile_defaults[pkey], label, label, 0)
    default_base = (profile_defaults or {}).get("config")
    chain = config_chain(path, default_base=str(default_base) if default_base else None) if path else []
    for at, part in enumerate(chain, start=1):
        for key, value in _reader(str(part.path)).flatten(TrainConfig, part.sections).items():
            put(key, value, str(part.path), f"file:{part.path}", at)
    for item in overrides:
        key, value = parse_set(item)
        put(key, value, f"--set {item}", "--set", len(chain) + 1)
    _imply_files(values, sources, layer)

    config = typed.build(TrainConfig, values)
    validate(config)
    bases = tuple((str(p.path), p.role) for p in chain[:-1])
    return ResolvedConfig(config=config, sources=sources, path=path, bases=bases, profile=profile_name)


def _imply_files(values: dict[str, object], sources: dict[str, str], layer: dict[str, int]) -> None:
    """data.train_files or data.sources name files, so the corpus is files: a `source: synthetic` set below
    them (a shipped config's, the default) gives way, said in the provenance. Set together with them, or
    above them, it is a contradiction named with both keys (a run used to train on the synthetic corpus
    and exit 0, the files never read)."""
    named = [k for k in ("data.train_files", "data.sources") if values.get(k)]
    if not named or values.get("data.source", "synthetic") != "synthetic":
        return
    files_at = max(layer[k] for k in named)
    if layer.get("data.source", -1) < files_at:
        values["data.source"] = "files"
        sources["data.source"] = f"implied by {named[0]} ({sources[named[0]]})"
        return
    raise InputError(
        f"config: data.source is 'synthetic' ({sources['data.source']}) but {named[0]} names files "
        f"({sources[named[0]]}): the synthetic corpus is generated, the files would never be read",
        hint=f"to train on the files, drop data.source (files imply data.source=files) or set it to files; "
        f"to train on the synthetic corpus, drop {named[0]}",
    )


# data.shuffle_window (row groups per window) became data.shuffle_rows: a checkpoint that has it still loads,
# and its data order (which records the window) is then reported as changed by the resume's corpus check.
RETIRED = (("data", "shuffle_window"),)
# Keys added since, with the value that describes what an older checkpoint holds: a model written before
# `model.words` has no word path, whatever today's default is; one written before `model.decode` read its tags
# by argmax.
ADDED = ((("model", "words"), "none"), (("model", "decode"), "argmax"))


def config_from_dict(data: Mapping[str, Any]) -> TrainConfig:
    """Rebuild a TrainConfig from `to_dict()` output (a checkpoint's); unknown keys are an error."""
    # Sections this version does not know are passed over (an older mw-env reading a newer checkpoint);
    # unknown keys inside a known section are an error.
    known = {section: data[section] for section in SECTIONS if section in data}
    for section, key in RETIRED:  # keys older checkpoints hold that this version replaced
        if isinstance(known.get(section), Mapping) and key in known[section]:
            known[section] = {k: v for k, v in known[section].items() if k != key}
    for (section, key), value in ADDED:
        if isinstance(known.get(section), Mapping) and key not in known[section]:
            known[section] = {**known[section], key: value}
    flat = _reader("checkpoint config").flatten(TrainConfig, known)
    return typed.build(TrainConfig, {k: _coerce(k, v, "checkpoint config") for k, v in flat.items()})


def architecture_diff(old: TrainConfig, new: TrainConfig) -> dict[str, str]:
    """Each key of ARCHITECTURE_KEYS whose value differs, with the change in words: `key: old -> new`."""
    out = {}
    for key in ARCHITECTURE_KEYS:
        before, after = value_of(old, key), value_of(new, key)
        # model.words: "auto" and what it resolves to build the same model
        if old.word_features != new.word_features if key == "model.words" else before != after:
            out[key] = f"{key}: {before!r} -> {after!r}"
    return out
