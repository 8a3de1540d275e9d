"""The shipped profiles, already parsed: a JSON copy of each shipped YAML file's data, with its text.

Every command that selects a profile parses the five shipped YAML files; importing PyYAML and parsing them
cost a third of `mw-env detect`'s start-up. The data of a shipped file is fixed when the package is built,
so `shipped.json` (next to them) holds it as JSON, which the standard library reads with a module the CLI
has imported already. The copy is used only while the file's text is the text it was parsed from (kept in
the index: a string comparison, where a hash would import hashlib and OpenSSL, ~2 ms): a shipped YAML edited
in place (an editable install) is parsed as YAML again, so the index can be stale but never wrong. The typed
validation (schema.py) runs on the data either way.

Regenerate after editing a shipped profile: `python -m mw_env.profiles.index` (tests/test_profiles_loader.py
fails while it is stale).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

INDEX = Path(__file__).resolve().with_name("shipped.json")


@lru_cache(maxsize=1)
def _entries() -> dict[str, dict[str, object]]:
    try:
        data = json.loads(INDEX.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # no index (or a broken one): every file is parsed as YAML, as before
    return data if isinstance(data, dict) else {}


def cached(name: str, text: str) -> object | None:
    """The parsed data of shipped file `name` whose content is `text`, or None (parse the YAML)."""
    entry = _entries().get(name)
    if not isinstance(entry, dict) or entry.get("text") != text:
        return None
    return entry.get("data")


def build(folder: Path) -> dict[str, dict[str, object]]:
    """The index of every *.yaml in `folder`: data as the shipped loader reads it, and the text."""
    from mw_env.base.userfile import load_yaml, read_text

    out: dict[str, dict[str, object]] = {}
    for path in sorted(folder.glob("*.yaml")):
        text = read_text(path, what="profile")
        data = load_yaml(text, source=f"profile {path}", shipped=True)
        if json.loads(json.dumps(data)) != data:
            # A value JSON cannot say the same way (a date, a non-string key): that file stays YAML-only.
            continue
        out[path.name] = {"text": text, "data": data}
    return out


def write(folder: Path = INDEX.parent) -> Path:
    from mw_env.base.atomic import write_text_atomic

    write_text_atomic(INDEX, json.dumps(build(folder), indent=1) + "\n")
    return INDEX


if __name__ == "__main__":
    print(f"wrote {write()}")
