"""Text from files, logs and the command line made safe to show: no terminal escapes, no secrets, bounded.

A log line may carry ESC sequences (a window title, a clear screen) or a 40 MB run of bytes; an index URL
may carry a password. Everything mw-env quotes from such a source goes through `safe()` (one line: control
characters shown escaped, capped in length) or `redact()` (credentials in URLs replaced by `***`).
"""

from __future__ import annotations

import math
import re
import unicodedata

# How much of a quoted line is shown; the rest is counted ("… (N more)").
LINE_LIMIT = 500
# Error messages and hints can list allowed values, so they get more room, but still a bound.
MESSAGE_LIMIT = 2000

# scheme://user:password@host or scheme://token@host: the userinfo part of a URL (RFC 3986 section 3.2.1).
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/\s:@]*)(?::(?P<pw>[^/\s@]*))?@")


# ?token=…, &sig=…, &X-Amz-Signature=…: query parameters that carry a secret (signed URLs of S3, GCS and
# Azure, token-gated indexes), and the same in a fragment (`#access_token=…`, OAuth's implicit flow). Matched by name, case-insensitively; a name that merely contains one of the
# words (`api_key`, `access_token`, `client_secret`) is a secret too. Better one harmless value hidden than
# one token shown.
_SECRET_PARAM = re.compile(
    r"(?P<name>[?&;#](?:x-amz-[a-z0-9-]*|x-goog-[a-z0-9-]*|[a-z0-9_.-]*"
    r"(?:token|sig|signature|key|password|passwd|pwd|secret|credential|auth|session)[a-z0-9_.-]*)=)"
    r"(?P<value>[^&#;\s'\"<>]+)",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """`text` with URL credentials hidden: `https://user:TOKEN@host` -> `https://user:***@host`, and
    `?token=SECRET` -> `?token=***` (and every other secret-bearing query parameter, see _SECRET_PARAM).

    A URL with only a user part (`https://TOKEN@host`, the usual form of a token) hides that part too.
    """
    if "=" in text and ("?" in text or "&" in text or ";" in text or "#" in text):
        text = _SECRET_PARAM.sub(lambda m: f"{m.group('name')}***", text)
    if "@" not in text or "://" not in text:
        return text

    def repl(m: re.Match[str]) -> str:
        if m.group("pw") is not None:
            return f"{m.group('scheme')}{m.group('user')}:***@"
        return f"{m.group('scheme')}***@"

    return _USERINFO.sub(repl, text)


def _unsafe(ch: str) -> bool:
    # Cc: C0/C1 controls incl. ESC, DEL and CSI (0x9b); Cf: format characters such as the bidi overrides
    # that reorder what a terminal shows; Zl/Zp: line and paragraph separators; Cs: lone surrogates
    # (from errors="surrogateescape").
    return unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs")


def safe(text: object, *, limit: int | None = LINE_LIMIT, newlines: bool = False) -> str:
    """One line (or, with `newlines=True`, lines) fit for a terminal: unsafe characters escaped as `\\x1b`,
    at most `limit` characters shown, then `… (N more)` counting the characters left out."""
    s = text if isinstance(text, str) else str(text)
    if limit is None:
        limit = len(s) * 10 + 10
    out: list[str] = []
    used = 0
    consumed = 0
    for ch in s:
        piece = ch if (newlines and ch == "\n") or not _unsafe(ch) else ch.encode("unicode_escape").decode()
        if used + len(piece) > limit:
            break
        out.append(piece)
        used += len(piece)
        consumed += 1
    rest = len(s) - consumed
    return "".join(out) + (f"… ({rest} more)" if rest else "")


def safe_message(text: object) -> str:
    """An error message or hint: credentials redacted, control characters escaped (lines kept), bounded."""
    return safe(redact(str(text)), limit=MESSAGE_LIMIT, newlines=True)


def bounded(data: object, *, limit: int = LINE_LIMIT) -> object:
    """`data` (JSON-like) with every string made `safe`: for JSON that re-emits what a run's files hold."""
    if isinstance(data, str):
        return safe(data, limit=limit)
    if isinstance(data, dict):
        return {
            safe(k, limit=limit) if isinstance(k, str) else k: bounded(v, limit=limit)
            for k, v in data.items()
        }
    if isinstance(data, (list, tuple)):
        return [bounded(v, limit=limit) for v in data]
    return data


def tolerant_streams() -> None:
    """stdout and stderr that never raise on a character the locale cannot encode.

    A locale that is not UTF-8 (`LANG=en_US.ISO-8859-1`, or C with Python's UTF-8 mode and locale coercion
    off) cannot encode the report's ✓, ✗ and …, nor a corpus word such as "Münch€n": print() then raised
    UnicodeEncodeError mid-report (a traceback, exit 1). Such a character is shown escaped (`\\u2717`)."""
    import contextlib
    import sys

    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if encoding != "utf8" and hasattr(stream, "reconfigure"):
            # A stream that cannot be reconfigured (a test's capture) keeps its own rules.
            with contextlib.suppress(AttributeError, ValueError, OSError):
                stream.reconfigure(errors="backslashreplace")


def duration(seconds: float | None) -> str:
    """A span of time for people: "95 s", "2 min 05 s", "1 h 02 min". "?" for a clock that is missing or not
    finite (a mangled metrics file)."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = round(seconds)
    if s < 120:
        return f"{s} s"
    h, m = divmod(s // 60, 60)
    return f"{h} h {m:02d} min" if h else f"{m} min {s % 60:02d} s"
