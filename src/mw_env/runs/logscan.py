"""Log lines that show a failure: the known messages of OOMs, GPU faults and collective failures (the
doctor's catalogue), and Python tracebacks, found by an incremental scanner (`watch` feeds it lines)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mw_env.checks.catalogue import Catalogue, Message

from mw_env.base.textsafe import safe


@dataclass(frozen=True)
class LogFinding:
    kind: str
    line_no: int  # 1-based, counted from where the scan started
    text: str


# The signatures of OOMs, GPU faults and collective failures are the doctor's catalogue of known messages
# (mw_env/checks/catalogue.yaml, each entry's `kind`): `train status`, `train watch` and `doctor --explain`
# classify a line the same way, from one list.
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:\s?")
RUN_HEADER = "=== mw-env train start "
_TRACEBACK = "Traceback (most recent call last):"
# Line prefixes of mw-env's one error family as the trainer prints it (finding kinds "error", "hint").
USER_ERROR_PREFIXES = ("error: ", "hint: ")
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
# torchrun's agent raises this when it is told to stop (SIGTERM/SIGINT, as `mw-env train stop` does);
# the ranks still checkpoint and finish, so it is a stop, not a crash.
# torchrun's own traceback when a worker failed: it only relays the failure, which the worker's own
# lines in the same log (its traceback, or its `error:`/`hint:`) and the exit record already show.
_CHILD_FAILED = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"
_STOP_EXCEPTION = re.compile(
    r"SignalException: Process \d+ got signal: (?:2|15|SIGINT|SIGTERM|Signals\.SIG(?:INT|TERM))\b"
)


def classify_line(line: str) -> str | None:
    """The anomaly kind a single log line shows (its catalogue entry's `kind`), or None."""
    msg = known_message(line)
    return msg.kind or None if msg is not None else None


def known_message(line: str) -> Message | None:
    """The catalogue entry that explains the line, exactly as `mw-env doctor --explain` picks it."""
    return _catalogue().first_match(line)


@lru_cache(maxsize=1)
def _catalogue() -> Catalogue:
    from mw_env.checks.catalogue import load_catalogue

    return load_catalogue()


@dataclass
class LogScanner:
    """Incremental scan of log lines (watch feeds it new lines as they arrive).

    A traceback whose final exception line already matched a specific kind (an OOM, a GPU fault)
    is that kind, not a second anomaly; a chained traceback ("During handling of ...") counts once.
    """

    line_no: int = 0
    findings: list[LogFinding] = field(default_factory=list)
    _in_traceback: bool = False
    _last_exception: int | None = None  # index in findings of the last traceback finding

    def feed(self, lines: Iterable[str]) -> list[LogFinding]:
        new_from = len(self.findings)
        raws = list(lines)
        cleaned = [_RANK_PREFIX.sub("", raw.rstrip("\r\n")) for raw in raws]
        # Only the lines a catalogue keyword occurs in can match (checks/screen.py): the rest of a long log
        # costs a substring search, not ~80 regexes per line.
        maybe = set(_catalogue().candidates([c.strip() for c in cleaned]))
        for i, (raw, line) in enumerate(zip(raws, cleaned, strict=True)):
            self.line_no += 1
            if raw.startswith(RUN_HEADER):
                continue  # mw-env's own line: its command line may quote anything
            stripped = line.strip()
            kind = classify_line(stripped) if i in maybe else None
            if kind:
                self.findings.append(LogFinding(kind, self.line_no, safe(stripped)))
            elif not self._in_traceback and line.startswith(USER_ERROR_PREFIXES):
                # The trainer's own `error:`/`hint:` report (bad input, a refused resume): not an
                # anomaly by itself, but what a dead run's status must quote instead of guessing.
                self.findings.append(LogFinding(line.split(":", 1)[0], self.line_no, safe(stripped)))
            if _TRACEBACK in line:
                self._in_traceback = True
                continue
            if stripped.startswith(_CHAINED):
                # The exception just reported was only the cause of the next one: keep the last.
                if self._last_exception is not None and self._last_exception < len(self.findings):
                    del self.findings[self._last_exception]
                    new_from = min(new_from, len(self.findings))
                self._last_exception = None
                continue
            if self._in_traceback and stripped and not line[:1].isspace():
                # First unindented line after the frames: the exception itself.
                self._in_traceback = False
                if (
                    kind is None
                    and not _STOP_EXCEPTION.search(stripped)
                    and not stripped.startswith(_CHILD_FAILED)
                ):
                    self.findings.append(LogFinding("traceback", self.line_no, safe(stripped)))
                    self._last_exception = len(self.findings) - 1
                else:
                    self._last_exception = None
            elif stripped and not self._in_traceback:
                self._last_exception = None
        return self.findings[new_from:]


def scan_log(lines: Iterable[str]) -> list[LogFinding]:
    scanner = LogScanner()
    scanner.feed(lines)
    return scanner.findings
