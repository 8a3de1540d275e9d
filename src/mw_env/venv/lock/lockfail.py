"""Why uv could not lock a venv, in uv's own words, whole and each sentence once; and what to run about it.

Issue 40: with a corporate mirror as an extra index (pip.conf `extra-index-url`) and pandas installed by pip
from PyPI, the lock failed and its hint was cut at "(123 more)": uv prints one hint per package, each
ending in the same three sentences about its index strategy, as captured from uv 0.13.10 against the
loopback indexes of tests/indexserver.py:

    × No solution found when resolving dependencies:
      ╰─▶ Because there is no version of pandas==2.2.3 and you require pandas==2.2.3, we can conclude that
          your requirements are unsatisfiable.

          hint: `pandas` was found on http://host/mirror/, but not at the requested version (pandas==2.2.3).
          A compatible version may be available on a subsequent index (e.g., http://host/pypi/). By default,
          uv will only consider versions that are published on the first index that contains a given
          package, to avoid dependency confusion attacks. If all indexes are equally trusted, use
          `--index-strategy unsafe-best-match` to consider all versions from all indexes, regardless of the
          order in which they were defined.

`cause` keeps every sentence of that and drops the repeats; `hint` says the one thing to run.
"""

from __future__ import annotations

import re
from pathlib import Path

from mw_env.base.shellquote import sh
from mw_env.base.textsafe import redact

# Where uv's report starts: "error: ..." (uv prints it so when not on a terminal) or its "×" marker.
_START = re.compile(r"^\s*(error:|×)", re.M)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(])")
BEST_MATCH = "unsafe-best-match"


def cause(output: str) -> str:
    """uv's report of a failed compile as one line: from its first error on, every sentence once (a sentence
    uv repeats for each package is said the first time only), nothing cut."""
    m = _START.search(output)
    text = output[m.start() :] if m else output
    words = " ".join(
        line.strip().lstrip("╰─▶").strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith(("Using Python", "warning: "))
    )
    seen: set[str] = set()
    kept = []
    for sentence in _SENTENCE.split(words):
        key = sentence.strip()
        if key and key not in seen:
            seen.add(key)
            kept.append(key)
    return redact(" ".join(kept))


def hint(output: str, venv: Path) -> str:
    """The one thing to run, in one sentence."""
    again = f"`mw-env lock --venv {sh(venv)}`"
    if BEST_MATCH in output:
        return (
            "a package the venv holds is on more than one index and uv asked only the first that has it: "
            f"`UV_INDEX_STRATEGY={BEST_MATCH} mw-env lock --venv {sh(venv)}` locks each version from the index "
            "that holds it, as pip (and uv with that strategy) installs (set it in uv's configuration to keep it)"
        )
    return (
        "uv needs each installed version from a reachable index, a wheelhouse (--find-links) or its cache "
        f"(--offline): a package installed from a file or URL that is gone cannot be locked; {again} again "
        "once it is reachable"
    )
