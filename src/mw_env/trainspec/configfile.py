"""Reading config files, and the chain of files one config is built from (`base:`).

A config of one's own builds on a shipped one: `base: address-tagger-cpu` (a shipped config's name, or a path
relative to the file that names it) at the top level of a YAML/TOML file takes every value from that config
first, and the file's own values win. A file that names no base builds on the profile's default config
(address-tagger-cpu on the cpu profile, address-tagger on a GPU), so a file with only a `data:` section trains
the shipped model instead of the built-in dataclass defaults; `base: null` builds on those defaults alone.
A shipped config is the foot of every chain: it builds on nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mw_env.base.errors import InputError
from mw_env.trainspec.schema import SECTIONS, ResolvedConfig

CONFIGS_DIR = Path(__file__).resolve().parent / "configs"
BASE_KEY = "base"
MAX_BASES = 8  # a chain deeper than this is a mistake (a loop through copies), not a design


def shipped_configs() -> list[str]:
    return sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml"))


def is_shipped(path: Path) -> bool:
    return Path(path).resolve().parent == CONFIGS_DIR


def read_config_file(path: Path) -> dict[str, object]:
    """The file's top-level mapping (sections, and `base` when present); InputError naming the file."""
    from mw_env.base import userfile

    suffix = path.suffix.lower()
    if suffix not in (".toml", ".yaml", ".yml"):
        raise InputError(f"{path}: unknown config format {suffix!r}", hint="use .yaml, .yml or .toml")
    # Bounded, non-blocking, UTF-8 checked: a FIFO, /dev/zero or a binary file is an error, not a hang.
    text = userfile.read_text(path, what="config")
    if suffix == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # Python 3.10: tomli is the same parser, and a declared dependency there
            import tomli as tomllib
        try:
            data: object = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(
                f"{path}: not valid TOML: {exc}", hint="fix the syntax at the line and column named"
            ) from None
        except (RecursionError, ValueError, OverflowError) as exc:  # nesting a parser cannot follow
            raise InputError(
                f"{path}: not valid TOML ({type(exc).__name__})", hint="flatten the structure"
            ) from None
        userfile.check_size(data, source=f"config {path}")
    else:
        data = userfile.load_yaml(text, source=f"config {path}")
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


@dataclass(frozen=True)
class ConfigFile:
    """One file of a chain: its path, its sections (without `base`), and why it is in the chain."""

    path: Path
    sections: dict[str, object]
    role: str  # "file" (the config named), "base" (named by `base:`), "profile default" (no `base:`)


def _find_base(value: object, named_in: Path) -> Path:
    """`base:`'s value as a file: a path relative to the file naming it, else a shipped config's name."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(
            f"{named_in}: base = {value!r} is not a config",
            hint=f"name a shipped config ({', '.join(shipped_configs())}) or a config file, e.g. "
            "base: address-tagger-cpu; `base: null` builds on the built-in defaults alone",
        )
    beside = (named_in.parent / Path(value).expanduser()).resolve()
    if beside.is_file():
        return beside
    shipped = CONFIGS_DIR / f"{value}.yaml"
    if shipped.is_file():
        return shipped
    raise InputError(
        f"{named_in}: base {value!r}: no such file (looked for {beside}) and no shipped config of that name",
        hint=f"name a shipped config ({', '.join(shipped_configs())}) or a file, relative to {named_in.resolve().parent}",
    )


def config_chain(path: Path, *, default_base: str | None = None) -> list[ConfigFile]:
    """The files `path` is built from, the foot of the chain first and `path` last.

    `default_base`: the shipped config a file of one's own builds on when it names no `base:` (the profile's
    default); None leaves such a file on the built-in defaults."""
    chain: list[ConfigFile] = []
    seen: list[Path] = []
    current, role = Path(path), "file"
    while True:
        if current.resolve() in seen:
            loop = " -> ".join(str(p) for p in [*seen, current.resolve()])
            raise InputError(f"config {path}: its bases name each other ({loop})", hint="break the loop")
        if len(seen) >= MAX_BASES:
            raise InputError(
                f"config {path}: more than {MAX_BASES} files deep through `base:`",
                hint="name a shipped config as the base",
            )
        seen.append(current.resolve())
        data = read_config_file(current)
        has_base = BASE_KEY in data
        base = data.pop(BASE_KEY, None)
        chain.append(ConfigFile(current, data, role))
        if is_shipped(current):
            break  # a shipped config is the foot: it builds on the built-in defaults
        if has_base and base is None:
            break  # `base: null`: the built-in defaults alone
        if has_base:
            current, role = _find_base(base, current), "base"
        elif default_base is not None:
            current, role = CONFIGS_DIR / f"{default_base}.yaml", "profile default"
            if not current.is_file():
                break
        else:
            break
    return chain[::-1]


def built_on(resolved: ResolvedConfig) -> str | None:
    """The sentence that says what a config file builds on (None for a shipped config or no file): the first
    line `mw-env train` and `train summary` print, so a file with only `data:` is never mistaken for a model of
    the built-in defaults, nor for one of the file's own."""
    path, bases, profile = resolved.path, resolved.bases, resolved.profile
    if path is None or is_shipped(path):
        return None
    name = Path(path).name
    if not bases:
        return f"config {name}: built on the built-in defaults (no base config), then the file's own values"
    foot, why = bases[0]
    shown = Path(foot).stem if is_shipped(Path(foot)) else foot
    through = "".join(f" and {Path(f).name}" for f, _ in bases[1:])
    if why == "profile default":
        whose = f"the {profile} profile's default config" if profile else "the profile's default config"
        lacking = Path(bases[1][0]).name if len(bases) > 1 else name
        return (
            f"config {name}: built on {shown}{through} ({whose}, as {lacking} names no `base:`), "
            "then the file's own values"
        )
    return f"config {name}: built on {shown}{through} (its `base:`), then the file's own values"
