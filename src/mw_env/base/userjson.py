"""The one way to parse JSON from a user or a run folder: duplicate keys refused, every refusal an InputError.

`json.loads` keeps the last of two equal keys without a word (`{"step": 1, "step": 2}` is `{"step": 2}`),
and valid JSON can still be refused by Python with an exception that is not a `JSONDecodeError`: nesting
past the recursion limit (`RecursionError`) and integers of more than 4300 digits (`ValueError`,
`sys.set_int_max_str_digits`). Both are bad input, so both become an `InputError` naming the source. So
is a `\ud800` escape without its other half: valid JSON, but not text (it cannot be written as UTF-8, so
it would fail later, far from the line it came from: in Arrow, in a report, in a path).

The fast path is the C scanner with an `object_pairs_hook` that only looks for repeats; only when it finds
one does a second, slow scan look up the lines of both keys for the message. Stdlib only: the trainer in
the venv uses it for JSONL corpus rows too.
"""

from __future__ import annotations

import json
import re
from typing import Any

from mw_env.base.errors import InputError


class DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class NotText(ValueError):
    def __init__(self, escape: str) -> None:
        super().__init__(escape)
        self.escape = escape


# A \uD800-\uDFFF escape: half of a surrogate pair. A pair is one character once parsed; a lone half is not
# text. Only a text holding such an escape is checked further (a search, not a walk of every value).
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _check_text(text: str | bytes, obj: object) -> None:
    raw = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    found = _SURROGATE.search(raw)
    if found is None:
        return
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise NotText(found.group(0)) from None


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKey(k)
        out[k] = v
    return out


def json_refusal(exc: BaseException) -> str:
    """Why Python refused a JSON text, in words (no traceback, no 5000-digit number quoted back)."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno}, column {exc.colno}"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, DuplicateKey):
        return f"the key {exc.key!r} appears twice"
    if isinstance(exc, NotText):
        return f"a {exc.escape} escape without the other half of its surrogate pair: not text"
    text = str(exc)
    if "int" in text and "digits" in text:
        return "a number with more than 4300 digits"
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:200]


def duplicate_lines(text: str, key: str) -> tuple[int, int] | None:
    """The 1-based lines of the first repeat of `key` inside one object (for the message only)."""
    stack: list[dict[str, int] | None] = []  # per open container: an object's keys and their lines
    i, n, line = 0, len(text), 1
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
        elif ch in "{[":
            stack.append({} if ch == "{" else None)
        elif ch in "}]":
            if stack:
                stack.pop()
        elif ch == '"':
            start, i = i, i + 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            j = i + 1
            while j < n and text[j] in " \t\r\n":
                j += 1
            keys = stack[-1] if stack else None
            if keys is not None and j < n and text[j] == ":":
                try:
                    name = json.loads(text[start : i + 1])
                except ValueError:
                    name = None
                if name == key and key in keys:
                    return keys[key], line
                if isinstance(name, str):
                    keys.setdefault(name, line)
        i += 1
    return None


def loads(text: str | bytes) -> Any:
    """`json.loads` that raises DuplicateKey for a repeated key and NotText for a lone surrogate escape; other
    refusals as json.loads raises them."""
    obj = json.loads(text, object_pairs_hook=_pairs)
    escaped = (b"\\u" in text) if isinstance(text, bytes) else ("\\u" in text)
    if escaped:
        _check_text(text, obj)
    return obj


def load_json(text: str, *, source: str, hint: str = "fix the JSON") -> Any:
    """Parse JSON from `source` (a file, a line); any refusal is an InputError naming it.

    A repeated key names both lines: `source: the key 'step' appears twice (lines 2 and 5)`."""
    try:
        return loads(text)
    except DuplicateKey as exc:
        lines = duplicate_lines(text, exc.key)
        where = f" (lines {lines[0]} and {lines[1]})" if lines else ""
        raise InputError(
            f"{source}: the key {exc.key!r} appears twice{where}",
            hint="keep one of them: JSON keys are unique",
        ) from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{source}: not valid JSON ({json_refusal(exc)})", hint=hint) from None
