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
- `--config-file` replaces uv's discovery of uv.toml (project, user, system) and UV_CONFIG_FILE, and the variables
  that would put an index before the torch index (UV_INDEX, UV_EXTRA_INDEX_URL) are written into the file after
  it instead: nothing of the user's configuration changes this step silently (the dry run names what it skips).

uv finds the strategy of an index by its URL (the first configured entry with that URL), so the torch index is
given only in the file, never also as `--index` (a command-line entry would come first and carry no codes).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mw_env.base.textsafe import redact

if TYPE_CHECKING:
    from mw_env.provision.choose import TorchChoice
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


@dataclass(frozen=True)
class StepIndex:
    """One index of the torch step, in the order uv asks them."""

    name: str
    url: str
    role: str  # "torch" | "extra" | "default"
    ignore_codes: tuple[int, ...] = ()
    origin: str = ""  # where it came from: the source id, "UV_INDEX", "PIP_INDEX_URL", "uv's default"

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
) -> tuple[StepIndex, ...]:
    """The torch step's indexes in uv's order. `unserved`: what the torch index answers for a project it does
    not hold (403: ignored; 404: uv's default already moves on). `extra_index_urls`/`default_index`: the pip
    settings bootstrap translates (wheelhouse.Sources); uv's own variables are read here."""
    out: list[StepIndex] = []
    if torch_index:
        codes = (unserved,) if unserved not in (404, 0) else ()
        out.append(StepIndex(torch_name, torch_index, "torch", codes, torch_name))
    extras = [("UV_INDEX", e) for e in _split(env.get("UV_INDEX"))]
    extras += [("UV_EXTRA_INDEX_URL", e) for e in _split(env.get("UV_EXTRA_INDEX_URL"))]
    extras += [("PIP_EXTRA_INDEX_URL / pip.conf", e) for e in extra_index_urls]
    seen = {torch_index}
    for i, (origin, entry) in enumerate(extras):
        name, url = _named(entry, f"extra-{i + 1}")
        if url not in seen:
            seen.add(url)
            out.append(StepIndex(name, url, "extra", (), origin))
    # The default index (always asked last): uv's own variable when set, else the pip setting bootstrap
    # translates, else PyPI, uv's own default.
    default = env.get("UV_DEFAULT_INDEX") or env.get("UV_INDEX_URL")
    origin = "UV_DEFAULT_INDEX" if env.get("UV_DEFAULT_INDEX") else "UV_INDEX_URL"
    if not default:
        default, origin = (
            (default_index, "PIP_INDEX_URL / pip.conf") if default_index else (PYPI, "uv's default")
        )
    out.append(StepIndex("default", default, "default", (), origin))
    return tuple(out)


def for_plan(
    chosen: TorchChoice | None,
    index_url: str | None,
    source: object,
    env: Mapping[str, str],
    sources: Sources,
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
    )


def _q(text: str) -> str:
    return json.dumps(text)  # a TOML basic string: JSON's escapes are TOML's


def config_text(indexes: Sequence[StepIndex]) -> str:
    """The uv.toml of the torch step (credentials in a URL stay in it: the file is written 0600)."""
    lines = [
        "# Written by mw-env bootstrap for its torch step only (uv pip install --config-file); see",
        "# docs/operator-guide.md, 'The torch step's indexes'. Regenerated on every run.",
        'index-strategy = "first-index"',
    ]
    for ix in indexes:
        lines += ["", "[[index]]", f"name = {_q(ix.name)}", f"url = {_q(ix.url)}"]
        if ix.ignore_codes:
            lines.append(f"ignore-error-codes = [{', '.join(map(str, ix.ignore_codes))}]")
        if ix.role == "default":
            lines.append("default = true")
    return "\n".join(lines) + "\n"


def step_env(env: Mapping[str, str]) -> dict[str, str]:
    """The torch step's environment: the variables the generated file replaces are dropped."""
    return {k: v for k, v in env.items() if k not in STEP_DROPS}


def config_notes(env: Mapping[str, str]) -> list[str]:
    """The dry run's note on the user's uv configuration the torch step does not read (none: no note)."""
    skipped = skipped_config(env)
    if not skipped:
        return []
    return [
        f"the torch step reads only its own uv configuration ({CONFIG_FILE} in the venv), not "
        f"{', '.join(skipped)}: its indexes are listed above; the extras step reads yours"
    ]


def skipped_config(env: Mapping[str, str], cwd: Path | None = None) -> list[str]:
    """The user's uv configuration the torch step does not read (the extras step still does)."""
    home = Path(env.get("HOME") or Path.home())
    found = [f"UV_CONFIG_FILE={env['UV_CONFIG_FILE']}"] if env.get("UV_CONFIG_FILE") else []
    xdg = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    dirs = [d for d in (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":") if d]
    here = Path(cwd or os.getcwd())
    for path in [
        xdg / "uv" / "uv.toml",
        *(Path(d) / "uv" / "uv.toml" for d in dirs),
        Path("/etc/uv/uv.toml"),
    ]:
        if path.is_file():
            found.append(str(path))
    if (here / "uv.toml").is_file():
        found.append(str(here / "uv.toml"))
    return found
