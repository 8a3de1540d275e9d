"""The torch step's indexes, each used the way it answers: a uv configuration generated for that one step.

Why a generated file: uv stops at an index that answers anything but 404 for a project (its
`IndexStatusCodeStrategy::Default`), except download.pytorch.org, whose 403s it treats as "not here" by host
name. AMD's indexes (repo.amd.com, rocm.nightlies.amd.com) answer 403 for every project they do not hold
(mudler/LocalAI#10997), so torch's own dependencies that the index lacks (setuptools, ROCm/TheRock#3332) stopped
the install with "No solution found". uv's documented switch is `ignore-error-codes = [403]` on an `[[index]]`
entry (docs.astral.sh/uv/concepts/indexes, "Ignoring error codes"), and that exists only in a configuration
file, so the torch step runs `uv pip install --config-file <venv>/mw-env-torch-uv.toml`:

- the torch index first, with `ignore-error-codes = [403]` when the source catalogue says it answers 403 for a
  project it does not hold; then the user's extra indexes; then the default index (the user's or PyPI), where
  torch's own dependencies resolve;
- `index-strategy = "first-index"` (and `--index-strategy first-index` on the command line, which beats a user's
  UV_INDEX_STRATEGY): a project found on the torch index (torch, the device packages) comes only from there, so
  PyPI's placeholders with the device packages' names never win (issue 17);
- `--config-file` replaces uv's discovery of uv.toml (project, user, system) and UV_CONFIG_FILE, so the file
  carries the user's configuration itself, merged as uv merges it (sources/uvconfig.py): their indexes after the
  torch index (with their names, which uv's UV_INDEX_<NAME>_USERNAME/_PASSWORD credentials follow, and every
  other key of the entry), their default index as the default, every other setting (keyring-provider,
  native-tls, allow-insecure-host, ...) as written. The variables that would put an index before the torch
  index (UV_INDEX, UV_EXTRA_INDEX_URL) are written into the file after it instead. The dry run names the files.

uv finds the strategy of an index by its URL (the first configured entry with that URL), so the torch index is
given only in the file, never also as `--index` (a command-line entry would come first and carry no codes).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mw_env.base.textsafe import redact
from mw_env.sources.uvconfig import NO_CONFIG, Table, Toml, UvConfig, key, table_text, value

if TYPE_CHECKING:
    from mw_env.provision.choose import ChoiceRequest, TorchChoice
    from mw_env.sources.wheelhouse import Sources

CONFIG_FILE = "mw-env-torch-uv.toml"
PYPI = "https://pypi.org/simple"
# Read into the generated file (or overruled by its command line) for the torch step: uv would otherwise apply
# them itself, before or instead of what the file says.
STEP_DROPS = (
    "UV_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_INDEX_URL",
    "UV_INDEX_STRATEGY",
    "UV_CONFIG_FILE",
    "UV_NO_CONFIG",
)


# Where a default index the extras step gets on its command line (or uv's own) comes from; any other default
# is the user's uv configuration's.
COMMAND_LINE_DEFAULTS = ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL / pip.conf", "uv's default")


@dataclass(frozen=True)
class StepIndex:
    """One index of the torch step, in the order uv asks them."""

    name: str
    url: str
    role: str  # "torch" | "extra" | "default"
    ignore_codes: tuple[int, ...] = ()
    origin: str = (
        ""  # where it came from: the source id, "UV_INDEX", "PIP_INDEX_URL", a uv.toml, "uv's default"
    )
    fields: tuple[
        tuple[str, Toml], ...
    ] = ()  # a user's entry's other keys (authenticate, format, ...), as read

    @property
    def behaviour(self) -> str:
        if self.role == "torch":
            said = (
                f"answers {'/'.join(map(str, self.ignore_codes))} for a project it does not hold: uv reads that "
                "as 'not here' and asks the next index"
                if self.ignore_codes
                else "answers 404 for a project it does not hold"
            )
            return f"torch and its GPU packages come only from here (first-index); it {said}"
        if self.role == "extra":
            return "the user's extra index, asked after the torch index"
        if self.origin not in COMMAND_LINE_DEFAULTS:  # a file of the user's (one or several merged)
            return "the user's default index (their uv configuration): torch's own dependencies resolve here"
        return "the default index: torch's own dependencies (setuptools, filelock, ...) resolve here"

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "url": redact(self.url),
            "role": self.role,
            "ignore_error_codes": list(self.ignore_codes),
            "origin": self.origin,
            "behaviour": self.behaviour,
        }


def _split(value: str | None) -> list[str]:
    return value.split() if value else []


def _named(entry: str, fallback: str) -> tuple[str, str]:
    """uv's `--index name=url` form (a name is letters, digits, -, _, .), else (fallback, entry)."""
    name, sep, url = entry.partition("=")
    if sep and name and "://" not in name and all(c.isalnum() or c in "-_." for c in name):
        return name, url
    return fallback, entry


def step_indexes(
    *,
    torch_index: str | None,
    torch_name: str,
    unserved: int,
    env: Mapping[str, str],
    extra_index_urls: Sequence[str] = (),
    default_index: str | None = None,
    user: UvConfig = NO_CONFIG,
) -> tuple[StepIndex, ...]:
    """The torch step's indexes in uv's order. `unserved`: what the torch index answers for a project it does
    not hold (403: ignored; 404: uv's default already moves on). `extra_index_urls`/`default_index`: the pip
    settings bootstrap translates (wheelhouse.Sources); uv's own variables are read here; `user`: the user's uv
    configuration (its indexes, named as the user named them).

    The order is the extras step's: what it passes on the command line (uv's variables, pip's settings) before
    the configuration's own; a default from the command line or a variable beats the configuration's."""
    taken = {str(e.get("name")) for _, e in _user_entries(user) if e.get("name")}

    def own(name: str) -> str:  # a generated name never takes one of the user's (their credentials follow it)
        return name if name not in taken else f"{name}-mw-env"

    out: list[StepIndex] = []
    if torch_index:
        codes = (unserved,) if unserved not in (404, 0) else ()
        out.append(StepIndex(own(torch_name), torch_index, "torch", codes, torch_name))
    extras = [("UV_INDEX", e) for e in _split(env.get("UV_INDEX"))]
    extras += [("UV_EXTRA_INDEX_URL", e) for e in _split(env.get("UV_EXTRA_INDEX_URL"))]
    extras += [("PIP_EXTRA_INDEX_URL / pip.conf", e) for e in extra_index_urls]
    seen = {torch_index}
    for i, (origin, entry) in enumerate(extras):
        name, url = _named(entry, f"extra-{i + 1}")
        if url not in seen:
            seen.add(url)
            out.append(StepIndex(own(name) if name == f"extra-{i + 1}" else name, url, "extra", (), origin))
    configured = _from_config(user, seen)
    out += [ix for ix in configured if ix.role == "extra"]
    # The default index (always asked last): uv's own variable when set, else the pip setting bootstrap
    # translates (the extras step's --default-index), else the user's uv configuration's, else PyPI.
    default = env.get("UV_DEFAULT_INDEX") or env.get("UV_INDEX_URL")
    origin = "UV_DEFAULT_INDEX" if env.get("UV_DEFAULT_INDEX") else "UV_INDEX_URL"
    if not default and default_index:
        default, origin = default_index, "PIP_INDEX_URL / pip.conf"
    theirs = [ix for ix in configured if ix.role == "default"]
    if not default and theirs:
        out.append(theirs[0])
    else:
        out.append(
            StepIndex(own("default"), default or PYPI, "default", (), origin if default else "uv's default")
        )
    return tuple(out)


def _user_entries(user: UvConfig) -> list[tuple[str, Table]]:
    """The user's [[index]] entries that have a URL, as (url, entry)."""
    entries = user.get("index")
    out: list[tuple[str, Table]] = []
    for e in entries if isinstance(entries, list) else []:
        url = e.get("url") if isinstance(e, dict) else None
        if isinstance(e, dict) and isinstance(url, str):
            out.append((url, e))
    return out


def _from_config(user: UvConfig, seen: set[str | None]) -> list[StepIndex]:
    """The user's configured indexes in uv's order: [[index]] entries, then `extra-index-url`; the default
    ([[index]] with default = true, else `index-url`, [pip]'s before the top level's) last."""
    origin = user.files[0] if len(user.files) == 1 else "uv configuration"
    found = user.get("pip")
    pip: Table = found if isinstance(found, dict) else {}
    out: list[StepIndex] = []
    for url, entry in _user_entries(user):
        if url in seen:
            continue  # the torch index (or one given again): its first entry rules, as in uv
        seen.add(url)
        raw = entry.get("ignore-error-codes")
        codes = tuple(int(c) for c in (raw if isinstance(raw, list) else []) if isinstance(c, int | str))
        rest = tuple(
            (k, v) for k, v in entry.items() if k not in ("name", "url", "default", "ignore-error-codes")
        )
        role = "default" if entry.get("default") is True else "extra"
        name = str(entry.get("name") or f"{'default' if role == 'default' else 'index'}-{len(out) + 1}")
        out.append(StepIndex(name, url, role, codes, origin, rest))
    legacy = [*_strings(pip.get("extra-index-url")), *_strings(user.get("extra-index-url"))]
    for i, url in enumerate(legacy):
        if url not in seen:
            seen.add(url)
            out.append(StepIndex(f"extra-index-url-{i + 1}", url, "extra", (), origin))
    for given in (pip.get("index-url"), user.get("index-url")):
        if isinstance(given, str):
            out.append(StepIndex("index-url", given, "default", (), origin))
    return out


def _strings(v: Toml | None) -> list[str]:
    return [x for x in (v if isinstance(v, list) else [v]) if isinstance(x, str)]


def for_plan(
    chosen: TorchChoice | None,
    index_url: str | None,
    source: object,
    env: Mapping[str, str],
    sources: Sources,
    user: UvConfig = NO_CONFIG,
) -> tuple[StepIndex, ...]:
    """The torch step's indexes for a plan: the chosen index (none when a wheelhouse holds torch; the
    requested one when nothing was chosen). A --torch-index is read as answering 404 unless it is the source's
    own URL, whose answer the profile states."""
    index = (chosen.location if chosen.origin == "index" else None) if chosen else index_url
    unserved = getattr(source, "unserved", 404) if index == getattr(source, "index_url", None) else 404
    return step_indexes(
        torch_index=index,
        torch_name=getattr(source, "id", None) or "torch",
        unserved=unserved,
        env=env,
        extra_index_urls=sources.extra_index_urls,
        default_index=sources.index_url,
        user=user,
    )


def step_config(
    chosen: TorchChoice | None, request: ChoiceRequest, torch: object
) -> tuple[tuple[StepIndex, ...], UvConfig]:
    """A plan's torch-step indexes, and the user's uv configuration the step's file carries (what uv would read
    from this folder, sources/uvconfig.py; config_notes names it)."""
    from mw_env.sources import uvconfig

    user = uvconfig.load(request.env)
    return for_plan(chosen, request.index_url, torch, request.env, request.sources, user), user


def _q(text: str) -> str:
    return json.dumps(text)  # a TOML basic string: JSON's escapes are TOML's


# The keys the generated file sets itself: the indexes (above), and the strategy that keeps torch on its index.
OWNED = frozenset({"index", "index-url", "extra-index-url", "index-strategy"})


def config_text(indexes: Sequence[StepIndex], user: UvConfig = NO_CONFIG) -> str:
    """The uv.toml of the torch step: the user's settings as uv would read them, the indexes in the step's order
    (credentials in a URL stay in it: the file is written 0600)."""
    lines = [
        "# Written by mw-env bootstrap for its torch step only (uv pip install --config-file); see",
        "# docs/operator-guide.md, 'The torch step's indexes'. Regenerated on every run.",
    ]
    if user.files:
        lines.append("# With the user's uv configuration, merged as uv merges it: " + ", ".join(user.files))
    lines.append('index-strategy = "first-index"')
    settings = user.settings
    pip = settings.get("pip")
    if isinstance(pip, dict):
        settings["pip"] = {k: v for k, v in pip.items() if k not in OWNED}
    lines += table_text(settings, skip=OWNED)
    for ix in indexes:
        lines += ["", "[[index]]", f"name = {_q(ix.name)}", f"url = {_q(ix.url)}"]
        if ix.ignore_codes:
            lines.append(f"ignore-error-codes = [{', '.join(map(str, ix.ignore_codes))}]")
        if ix.role == "default":
            lines.append("default = true")
        lines += [f"{key(k)} = {value(v, f'index {ix.name}: {k}')}" for k, v in ix.fields]
    return "\n".join(lines) + "\n"


def step_env(env: Mapping[str, str]) -> dict[str, str]:
    """The torch step's environment: the variables the generated file replaces are dropped."""
    return {k: v for k, v in env.items() if k not in STEP_DROPS}


def config_notes(user: UvConfig) -> list[str]:
    """The dry run's note on the user's uv configuration the torch step carries (none read: no note)."""
    if not user.files:
        return []
    return [
        f"the torch step's own uv configuration ({CONFIG_FILE} in the venv) carries yours, merged as uv merges "
        f"it: {', '.join(user.files)}; your indexes are asked after the torch index"
    ]
