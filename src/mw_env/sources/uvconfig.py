"""The user's uv configuration, found and merged the way uv does, for the torch step's own configuration file.

Why: the torch step runs `uv pip install --config-file <venv>/mw-env-torch-uv.toml` (provision/torchindex.py),
and `--config-file` replaces every configuration file uv would discover. A user whose uv.toml names a company
mirror as the default index, a `keyring-provider`, `native-tls` or an `allow-insecure-host` would see the
torch step ignore all of it (and its dependencies asked of pypi.org) while the extras step honours it. So the
generated file starts from what uv would have read, merged by uv's documented rules
(docs.astral.sh/uv/concepts/configuration-files), checked against uv 0.13.9:

- `UV_NO_CONFIG`: nothing is read; `UV_CONFIG_FILE`: only that file;
- else the project's: `uv.toml`, or the `[tool.uv]` table of `pyproject.toml` (uv.toml wins in one folder; a
  pyproject.toml without the table is passed over), in the current folder or the nearest parent that has one;
  then the user's (`$XDG_CONFIG_HOME/uv/uv.toml`, `~/.config/uv/uv.toml`); then the first system file
  (`$XDG_CONFIG_DIRS/uv/uv.toml`, default /etc/xdg, then /etc/uv/uv.toml);
- merged: a scalar from the most specific file wins, arrays are joined (the project's entries first), tables
  merge key by key.

The project-only keys of a pyproject.toml (`sources`, `workspace`, ...) are left out: uv refuses them in a
uv.toml ("The `sources` field is not allowed in a `uv.toml` file"), which the generated file is.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from mw_env.base.errors import InputError

# uv 0.13.9 refuses each of these in a uv.toml (they belong to a project's pyproject.toml).
PROJECT_ONLY = frozenset(
    {
        "build-backend",
        "conflicts",
        "default-groups",
        "dependency-groups",
        "dev-dependencies",
        "environments",
        "managed",
        "package",
        "required-environments",
        "sources",
        "workspace",
    }
)
_FALSE = ("", "0", "false", "no", "off")

# What tomllib returns for a uv setting (its dates and times no uv setting takes: refused when read).
Toml: TypeAlias = "str | int | float | bool | list[Toml] | dict[str, Toml]"
Table: TypeAlias = "dict[str, Toml]"


@dataclass(frozen=True)
class UvConfig:
    """The merged settings (uv.toml keys, as read) and the files they came from, most specific first."""

    files: tuple[str, ...] = ()
    merged: str = "{}"  # the settings as JSON: the plan that carries them stays frozen and hashable

    @property
    def settings(self) -> Table:
        loaded = json.loads(self.merged)
        return loaded if isinstance(loaded, dict) else {}

    def get(self, key: str) -> Toml | None:
        return self.settings.get(key)


NO_CONFIG = UvConfig()


def discover(env: Mapping[str, str], cwd: Path | None = None) -> list[tuple[Path, Table]]:
    """(file, its settings) in uv's order of precedence, most specific first; each file read once. A
    pyproject.toml's settings are its [tool.uv] table without the project-only keys."""
    if env.get("UV_NO_CONFIG", "").strip().lower() not in _FALSE:
        return []
    if env.get("UV_CONFIG_FILE"):
        return [_uv_toml(Path(env["UV_CONFIG_FILE"]))]
    found: list[tuple[Path, Table]] = []
    here = Path(cwd or os.getcwd()).absolute()
    for folder in (here, *here.parents):
        if (folder / "uv.toml").is_file():
            found.append(_uv_toml(folder / "uv.toml"))
            break
        project = folder / "pyproject.toml"
        tool = _toml(project, "pyproject.toml").get("tool") if project.is_file() else None
        if isinstance(tool, dict) and "uv" in tool:
            table = tool["uv"]
            if not isinstance(table, dict):
                raise InputError(
                    f"{project}: [tool.uv] is not a table",
                    hint="write it as a [tool.uv] table, as uv expects",
                )
            found.append((project, {k: v for k, v in table.items() if k not in PROJECT_ONLY}))
            break
    home = Path(env.get("HOME") or Path.home())
    user = Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "uv" / "uv.toml"
    if user.is_file():
        found.append(_uv_toml(user))
    dirs = [d for d in (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":") if d]
    for system in [*(Path(d) / "uv" / "uv.toml" for d in dirs), Path("/etc/uv/uv.toml")]:
        if system.is_file():
            found.append(_uv_toml(system))
            break  # uv reads the first system file only
    return found


def load(env: Mapping[str, str], cwd: Path | None = None) -> UvConfig:
    """The user's uv configuration as uv would merge it; InputError naming a file that is not valid TOML."""
    merged: Table = {}
    files: list[str] = []
    for path, table in discover(env, cwd):
        try:
            json.dumps(table)
        except (TypeError, ValueError):
            raise InputError(
                f"{path}: a date or time value, which no uv setting takes and bootstrap cannot pass on",
                hint="uv's settings are strings, numbers, booleans, arrays and tables",
            ) from None
        merged = _merge(merged, table)
        files.append(str(path))
    return UvConfig(files=tuple(files), merged=json.dumps(merged))


def _uv_toml(path: Path) -> tuple[Path, Table]:
    return path, _toml(path, "uv configuration")


def _toml(path: Path, what: str) -> Table:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: tomli is the same parser, and a declared dependency there
        import tomli as tomllib

    from mw_env.base import userfile

    try:
        return tomllib.loads(userfile.read_text(path, what=what))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(
            f"{path}: not valid TOML ({exc})",
            hint="uv reads this file too and would stop at it: fix it, or set UV_NO_CONFIG=1 to skip uv's files",
        ) from None


def _merge(stronger: Table, weaker: Table) -> Table:
    """uv's rule: the stronger file's scalar wins, arrays join (stronger first), tables merge by key."""
    out = dict(stronger)
    for name, theirs in weaker.items():
        ours = out.get(name)
        if name not in out:
            out[name] = theirs
        elif isinstance(ours, list) and isinstance(theirs, list):
            out[name] = [*ours, *theirs]
        elif isinstance(ours, dict) and isinstance(theirs, dict):
            out[name] = _merge(ours, theirs)
    return out


# --- writing uv.toml text (tomllib only reads; the values are those tomllib returns) ---

_BARE = re.compile(r"[A-Za-z0-9_-]+")


def key(name: str) -> str:
    return name if _BARE.fullmatch(name) else json.dumps(name)


def value(v: object, where: str = "") -> str:
    """A TOML value: JSON's string escapes are TOML's basic-string escapes."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)  # Python's spellings of nan, inf and -inf are TOML's too
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(value(x, where) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{key(k)} = {value(x, where)}" for k, x in v.items()) + " }"
    raise InputError(
        f"uv configuration key {where or '?'}: a {type(v).__name__} value, which bootstrap cannot pass on",
        hint="uv's settings are strings, numbers, booleans, arrays and tables",
    )


def table_text(settings: Mapping[str, Toml], *, skip: frozenset[str] = frozenset()) -> list[str]:
    """Lines of a uv.toml holding `settings`: plain keys first, then each table as a [section]."""
    lines = [
        f"{key(k)} = {value(v, k)}" for k, v in settings.items() if k not in skip and not isinstance(v, dict)
    ]
    for name, table in settings.items():
        if name in skip or not isinstance(table, dict):
            continue
        lines += ["", f"[{key(name)}]"]
        lines += [f"{key(k)} = {value(v, f'{name}.{k}')}" for k, v in table.items()]
    return lines
