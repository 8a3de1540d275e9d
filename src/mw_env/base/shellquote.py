"""Paths where a shell, or a list a tool splits on whitespace, reads them: the one quoting of everything mw-env
writes for a shell (the activate hook, mw-env.env, host commands, the `next:` line, a fix that names a command).

Issue 40: the activate hook embedded the venv path in double quotes, so `--venv 'venvs/v$(touch X)'` ran
`touch X` at every activation, a `$5` in the path dropped the torch pin and a `"` broke activate. Every such
value goes through `sh` (shlex.quote: one POSIX shell word, whatever the value holds).

Two places no shell quoting can help, and what is done about them:
- a whitespace-separated list of files: uv splits UV_CONSTRAINT and UV_OVERRIDE on spaces and has no escape
  for one (uv 0.13.10: `UV_CONSTRAINT='/a b/c.txt'` fails "File not found: a"); pip splits PIP_CONSTRAINT and
  pip.conf's `constraint` on whitespace. Both read a `file://` URL there (uv and pip fetch it, the URL's
  %20 decoded), so a path holding whitespace is written as its URL (`list_item`);
- a path no venv can live at (`venv_path_problem`): a control character (pyvenv.cfg, which uv and python read
  line by line, and every line-based file mw-env writes; a newline would start a new `key = value` line),
  a `:` (PATH, which activate prepends the venv's bin folder to, is split on it: `/a:b/bin` would put the
  relative folder `b/bin` on PATH), or text that is not valid UTF-8 (every file above is UTF-8). A UTF-8 path
  read under a non-UTF-8 locale with Python's UTF-8 mode off (`LC_ALL=C PYTHONUTF8=0`: `ü` arrives as two
  undecodable bytes) is refused up front naming the locale (issue 40: a traceback once torch was installed);
  uv reads paths as bytes and would manage, but every file mw-env writes is text.
"""

from __future__ import annotations

import os
import shlex
import unicodedata
from collections.abc import Iterable
from pathlib import Path


def sh(value: str | os.PathLike[str]) -> str:
    """`value` as one POSIX shell word (unchanged where nothing in it is special to a shell)."""
    return shlex.quote(os.fspath(value))


def sh_join(words: Iterable[str | os.PathLike[str]]) -> str:
    """A command line of shell words, each quoted by `sh`."""
    return " ".join(sh(w) for w in words)


def list_item(path: str | os.PathLike[str]) -> str:
    """A file path as an entry of a whitespace-separated list (UV_CONSTRAINT, UV_OVERRIDE, PIP_CONSTRAINT,
    pip.conf's `constraint`): the path itself, or its file:// URL where it holds whitespace."""
    text = os.fspath(path)
    if not any(ch.isspace() for ch in text):
        return text
    return Path(os.path.abspath(text)).as_uri()


def _locale_words() -> str:
    """`LC_ALL=C: ASCII` for the locale variable in force and its encoding."""
    import locale
    import sys

    name = next(
        (f"{v}={os.environ[v]}" for v in ("LC_ALL", "LC_CTYPE", "LANG") if os.environ.get(v)), "no LANG"
    )
    return f"{name}: {sys.getfilesystemencoding() or locale.getpreferredencoding(False)}"


def venv_path_problem(path: str | os.PathLike[str]) -> str | None:
    """Why a venv cannot live at `path` (a sentence naming the character), or None where it can."""
    text = os.fspath(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:  # the bytes as they are on disk: UTF-8 that this process's locale could not read?
            os.fsencode(text).decode("utf-8")
        except UnicodeError:
            return "it is not valid UTF-8 (pyvenv.cfg, the activate script and mw-env.env are UTF-8 text)"
        return (
            f"its non-ASCII characters cannot be read as text under this locale ({_locale_words()}, and "
            "Python's UTF-8 mode off): pyvenv.cfg, the activate script and mw-env.env could not be written with "
            "it (run with LC_ALL=C.UTF-8 or PYTHONUTF8=1, or pass an ASCII path)"
        )
    for ch in text:
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp") or ch in "\u0085":
            name = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab"}.get(
                ch, f"the control character U+{ord(ch):04X}"
            )
            return (
                f"it holds {name}: pyvenv.cfg, which python and uv read line by line, and the activate "
                "script cannot hold it safely"
            )
    if ":" in text:
        return (
            "it holds ':', which PATH uses to separate folders: activating the venv would put a wrong "
            "(relative) folder on PATH"
        )
    return None
