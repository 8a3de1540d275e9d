"""Find the few lines of a long log that can match a known message, without a regex call per line.

`Catalogue.scan` must tell, for every line, the first catalogue entry that matches it. Trying ~35
case-insensitive regexes on each of 200k log lines costs seconds; almost no line matches. So each pattern
is reduced to keywords: for every top-level alternative, its longest run of characters any match must
contain literally. Finding those keywords in the lower-cased text is plain substring search in C; a pattern
that yields no usable keyword sweeps the whole text once instead. Only the lines found this way are then
matched entry by entry, which keeps the per-line, first-entry-wins result exact.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

MIN_KEYWORD = 3  # shorter runs ("+", "ab") would flag most lines and buy nothing
# Escapes that stand for other characters (\x41, \u00e9, \N{...}, backreferences/octal) and the verbose flag
# would make the "literal" reading wrong: such patterns always take the regex sweep.
_UNREADABLE = re.compile(r"\\[xuUN0-9]|\(\?[a-zA-Z]*x")


def _split_top(pattern: str) -> list[str]:
    """The top-level alternatives of `pattern` (a `|` outside groups and classes)."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i = _class_end(pattern, i)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    parts.append(pattern[start:])
    return parts


def _class_end(pattern: str, i: int) -> int:
    """The index after the character class opening at `i`."""
    j = i + 1
    if j < len(pattern) and pattern[j] == "^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":  # a leading ] is a literal
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    return j + 1


def _group_end(pattern: str, i: int) -> int:
    """The index after the group opening at `i`."""
    depth, j = 0, i
    while j < len(pattern):
        c = pattern[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            j = _class_end(pattern, j)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return j


def literal_runs(alternative: str) -> list[str]:
    """Runs of characters every match of `alternative` contains in this order (lower-cased)."""
    runs: list[str] = []
    cur: list[str] = []

    def flush() -> None:
        if cur:
            runs.append("".join(cur).lower())
            cur.clear()

    i, n = 0, len(alternative)
    while i < n:
        c = alternative[i]
        if c == "\\":
            nxt = alternative[i + 1] if i + 1 < n else ""
            i += 2
            if not nxt or nxt.isalnum():  # \d \s \w \b ...: a class or an assertion
                flush()
                continue
            cur.append(nxt)  # an escaped punctuation mark is itself
        elif c == "[":
            flush()
            i = _class_end(alternative, i)
        elif c == "(":
            flush()
            i = _group_end(alternative, i)
        elif c in "*?":  # the previous character may be absent
            if cur:
                cur.pop()
            flush()
            i += 1
        elif c == "{":
            end = alternative.find("}", i)
            end = n - 1 if end < 0 else end
            if alternative[i + 1 : end].split(",")[0].strip() in ("", "0") and cur:
                cur.pop()
            flush()
            i = end + 1
        elif c in ".^$+)|":
            flush()
            i += 1
        else:
            cur.append(c)
            i += 1
    flush()
    return runs


@lru_cache(maxsize=512)
def keywords(pattern: str) -> tuple[str, ...] | None:
    """One keyword per top-level alternative, or None when some alternative has no usable one."""
    if _UNREADABLE.search(pattern):
        return None
    out = []
    for alt in _split_top(pattern):
        best = max(literal_runs(alt), key=len, default="")
        if len(best) < MIN_KEYWORD:
            return None
        out.append(best)
    return tuple(out)


def candidate_lines(lines: Sequence[str], patterns: Iterable[str]) -> list[int]:
    """Indexes of the lines some pattern may match (a superset of those it does), in order."""
    joined = "\n".join(lines)
    lowered = joined.lower()  # str.lower keeps every newline, so line numbers stay aligned
    starts = [0] + [m.end() for m in re.finditer("\n", lowered)]
    found: set[int] = set()
    sweep: list[str] = []
    for pattern in patterns:
        words = keywords(pattern)
        if words is None:
            sweep.append(pattern)
            continue
        for word in words:
            pos = lowered.find(word)
            while pos != -1:
                found.add(bisect.bisect_right(starts, pos) - 1)
                pos = lowered.find(word, pos + 1)
    if sweep:
        starts_orig = [0] + [m.end() for m in re.finditer("\n", joined)]
        for pattern in sweep:
            for m in re.compile(pattern, re.IGNORECASE | re.MULTILINE).finditer(joined):
                first = bisect.bisect_right(starts_orig, m.start()) - 1
                last = bisect.bisect_right(starts_orig, max(m.start(), m.end() - 1)) - 1
                found.update(range(first, last + 1))
    return sorted(found)
